"""What each part of the write path costs inside the harness: bench/steps.py's
workload run with parts of the SQLite store turned off, and what one WAL
frame costs on this machine's file system.

Sizing only: a variant other than ``store`` is NOT durable (its store cannot
be reopened), it answers "how fast would a step be if this part cost
nothing?" - the question every design for the 0.25 ms/step target of issue
11 starts from (docs/performance.md, rounds 10 and 15).

Variants (each run in a fresh child process, interleaved: repeat 1 of every
variant, then repeat 2, ...; R rounds of one model step with 3 tool calls +
3 tool steps, scripted model, no-op tools, SQLite WAL NORMAL, a fresh store
in a temp dir):

- ``store``: the store as it is (what bench/steps.py measures);
- ``deferred``: the event-sourced store's write path (round 16): each
  transaction writes its commits' journal rows (the events, no digest);
  every ``--every`` commits (32) the records' last versions since the last
  batch are encoded and written (a document's revisions all), with the live
  ``State`` as a snapshot (storage/snapshot.py), in that transaction - the
  whole cost of the design, but nothing reads the records or the snapshot
  back yet (recovery from them is the design's next part);
- ``redo``: a write-behind store with a redo log (round 17): each
  transaction writes its commits' journal rows as now plus one ``redo`` row
  per commit holding the writes' text (made for the digest anyway); every
  ``--every`` commits each record's last version is written and the redo
  rows deleted, in that transaction - recovery would apply the redo rows
  left, with no core involved (not built: sizing only);
- ``journal-only``: every commit encoded as now (rows, events, the writes'
  digest), but only its journal row written - a store that materializes its
  records elsewhere, at no cost, from a redo log it already keeps;
- ``events-only``: the journal row of the events alone (no write encoded, no
  digest), one transaction per batch - event sourcing with free snapshots;
- ``no-store``: ``commit_many`` does nothing - the core, the shell and Trio.

``--frames`` adds a second table: microseconds per transaction that inserts
one ~300-byte row into each of N tables (N = 1, 2, 4, 7: a pidurable commit
dirties ~7 b-trees), in WAL NORMAL, with SQLite's own checkpoints
(``wal_autocheckpoint`` 1,000) or none (0), in the temp dir's file system
and in /dev/shm (tmpfs) when present: what a b-tree frame costs here and how
much of it is the file system.

    python bench/variants.py                         # R=1000, 5 repeats
    python bench/variants.py --rounds 5000 --repeat 3 --frames
    python bench/variants.py --paired --variants store,deferred --repeat 8

``--paired`` runs each variant at the same time as ``store``, each child
pinned to its own core (swapped every repeat), and prints the ratio of each
pair: on this shared 2-core machine a run's own time moves +-15-20% from
minute to minute, the ratio of two runs side by side far less (``store``
against ``store`` shows how much: round 16, docs/performance.md). Both run
slower side by side than alone (they share caches, memory bandwidth and the
disk): compare the ratios, not the times.

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attrs import fields as attrs_fields

import children

HERE = Path(__file__).resolve().parent
VARIANTS = ("store", "deferred", "redo", "journal-only", "events-only", "no-store")
#: ``deferred``: the commits a batch of records and a snapshot are written after (``--every``).
EVERY = 32


def _turn_off(variant: str, every: int = EVERY) -> None:
    """Patch this (child) process's store for ``variant`` (``every``: ``deferred``'s batch)."""
    from pidurable.shell.storage import spelt, sqlite, sqlite_writes

    if variant == "store":
        return
    if variant == "deferred":
        _deferred(sqlite, sqlite_writes, spelt, every)
        return
    if variant == "redo":
        _redo(sqlite, sqlite_writes, every)
        return
    if variant == "journal-only":
        write_all = sqlite_writes.write_all

        def journal_only(cur: Any, rows: list[Any], journal: list[Any]) -> None:
            write_all(cur, [], journal)

        sqlite_writes.write_all = journal_only
        return
    if variant == "events-only":

        def events_only(self: Any, batch: Any) -> None:
            cur = self.db.conn.cursor()
            cur.execute("BEGIN")
            cur.executemany(
                "INSERT INTO journal (seq, format, events, writes) VALUES (?, ?, ?, '')",
                [(seq, sqlite_writes.FORMAT, spelt.events_json(events, True)) for seq, _, events in batch],
            )
            cur.execute("COMMIT")

        sqlite.SqliteStorage.commit_many = events_only
        return
    if variant == "no-store":
        sqlite.SqliteStorage.commit_many = lambda self, batch: None
        return
    raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")


def _deferred(sqlite: Any, sqlite_writes: Any, spelt: Any, every: int) -> None:
    """The ``deferred`` variant: the loop hands the store each transaction's
    last state; the store journals events and keeps the records' last versions."""
    from pidurable.core.effects import PutDocument
    from pidurable.shell import loop
    from pidurable.shell.storage.rows import encode_commit_text
    from pidurable.shell.storage.snapshot import encode_state

    persist = loop.Loop._persist
    last: dict[str, Any] = {}

    async def handing(self: Any, commits: Any) -> Any:
        if commits:
            last["state"] = commits[-1][2]
        return await persist(self, commits)

    loop.Loop._persist = handing
    pending: dict[Any, tuple[int, Any]] = {}
    since = [0]

    def key(w: Any, seq: int, i: int) -> Any:
        if type(w) is PutDocument:
            return (seq, i)  # every revision is a row of its own
        record = getattr(w, attrs_fields(type(w))[0].name)
        return (type(w), getattr(record, "id", record))

    def deferred(self: Any, batch: Any) -> None:
        for seq, writes, _ in batch:
            for i, w in enumerate(writes):
                pending[key(w, seq, i)] = (seq, w)
        since[0] += len(batch)
        journal: list[Any] = []
        for seq, _, events in batch:
            journal += (seq, sqlite_writes.FORMAT, spelt.events_json(events, True), "")
        rows: list[Any] = []
        snapshot = None
        if since[0] >= every:
            by_seq: dict[int, list[Any]] = {}
            for seq, w in pending.values():
                by_seq.setdefault(seq, []).append(w)
            for seq in sorted(by_seq):
                rows += encode_commit_text(seq, by_seq[seq], ())[0]
            snapshot = encode_state(last["state"])
            pending.clear()
            since[0] = 0
        cur = self.db.conn.cursor()
        cur.execute("BEGIN")
        sqlite_writes.write_all(cur, rows, journal)
        if snapshot is not None:
            cur.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('snapshot', ?)", [snapshot])
        cur.execute("COMMIT")

    sqlite.SqliteStorage.commit_many = deferred


def _redo(sqlite: Any, sqlite_writes: Any, every: int) -> None:
    """The ``redo`` variant: a write-behind store with a redo log. Each
    transaction writes its commits' journal rows as now and, per commit, one
    ``redo`` row holding the writes' text (already made for the digest); the
    rows themselves are kept in memory and every ``every`` commits each
    record's last version (a document's revisions all) is written and the
    redo rows before it deleted, in that transaction. Recovery would apply
    the redo rows left (no core involved); not built: sizing only."""
    from pidurable.shell.storage.codec import writes_digest
    from pidurable.shell.storage.rows import encode_commit_text

    pending: dict[Any, Any] = {}
    since = [0]
    made = [False]

    def redo(self: Any, batch: Any) -> None:
        cur = self.db.conn.cursor()
        if not made[0]:
            cur.execute("CREATE TABLE IF NOT EXISTS redo (seq INTEGER PRIMARY KEY, writes TEXT NOT NULL)")
            made[0] = True
        journal: list[Any] = []
        redo_rows: list[Any] = []
        for seq, writes, events in batch:
            commit_rows, events_text, writes_text = encode_commit_text(seq, writes, events)
            for i, row in enumerate(commit_rows):
                pending[(seq, i) if row[0] == "document_revisions" else (row[0], row[1])] = row
            journal += (seq, sqlite_writes.FORMAT, events_text, writes_digest(writes_text))
            redo_rows.append((seq, writes_text))
        since[0] += len(batch)
        rows: list[Any] = []
        if since[0] >= every:
            rows = list(pending.values())
            pending.clear()
            since[0] = 0
        cur.execute("BEGIN")
        sqlite_writes.write_all(cur, rows, journal)
        if rows:
            cur.execute("DELETE FROM redo")
        else:
            cur.executemany("INSERT INTO redo (seq, writes) VALUES (?, ?)", redo_rows)
        cur.execute("COMMIT")

    sqlite.SqliteStorage.commit_many = redo


def child(variant: str, rounds: int, directory: Path, every: int = EVERY) -> dict[str, Any]:
    import trio

    sys.path.insert(0, str(HERE))
    from workload import run_once, source_fingerprint, steps_of

    _turn_off(variant, every)
    times: dict[str, float] = {}
    seconds, _, commits = trio.run(lambda: run_once(rounds, directory / "bench.sqlite", "NORMAL", times=times))
    steps = steps_of(rounds)
    return {
        "ms": seconds / steps * 1e3,
        "cpu_ms": (times["cpu_done"] - times["cpu_start"]) / steps * 1e3,
        "commits": commits,
        "source": source_fingerprint(),
    }


def frames(directory: str, tables: int, autocheckpoint: int, transactions: int = 2000) -> float:
    """Microseconds per transaction inserting one row into each of ``tables``
    tables, in a fresh WAL NORMAL database under ``directory``."""
    import sqlite3

    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        conn = sqlite3.connect(os.path.join(scratch, "frames.db"), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
            for i in range(tables):
                conn.execute(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, v TEXT)")
            statements = [f"INSERT INTO t{i} (id, v) VALUES (?, ?)" for i in range(tables)]
            cur, value = conn.cursor(), "x" * 300
            start = time.perf_counter()
            for row in range(transactions):
                cur.execute("BEGIN")
                for sql in statements:
                    cur.execute(sql, (row, value))
                cur.execute("COMMIT")
            return (time.perf_counter() - start) / transactions * 1e6
        finally:
            conn.close()


def frames_table(repeat: int) -> None:
    places = [("temp dir", tempfile.gettempdir())]
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        places.append(("/dev/shm", "/dev/shm"))
    counts = (1, 2, 4, 7)
    print("\n## One transaction of N single-row b-trees (us, best of %d)\n" % repeat)
    print("| file system | wal_autocheckpoint | " + " | ".join(f"N={n}" for n in counts) + " | us per b-tree |")
    print("|---|---:|" + "---:|" * (len(counts) + 1))
    for label, place in places:
        fs = _fs_type(place)
        for autocheckpoint in (1000, 0):
            cells = [min(frames(place, n, autocheckpoint) for _ in range(repeat)) for n in counts]
            slope = (cells[-1] - cells[0]) / (counts[-1] - counts[0])
            row = " | ".join(f"{c:.1f}" for c in cells)
            print(f"| {label} ({fs}) | {autocheckpoint} | {row} | {slope:.1f} |")


def _fs_type(path: str) -> str:
    """The file system type of ``path`` (/proc/mounts' longest prefix), or '?'."""
    best, kind = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
                if len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def _command(variant: str, directory: str, rounds: int, every: int) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--dir", directory, "--rounds", str(rounds)]
    return cmd + ["--every", str(every)]


def spawn(variant: str, rounds: int, timeout: float, every: int) -> tuple[dict[str, Any] | None, str]:
    with tempfile.TemporaryDirectory(prefix=f"bench-variant-{variant}-") as d:
        return children.run(_command(variant, d, rounds, every), timeout)


def paired(variants: list[str], args: argparse.Namespace) -> None:
    """``--paired``: each variant run at the same time as ``store`` (each
    child pinned to one of two cores, swapped every repeat), the ratio of
    the two per pair; ``store`` against ``store`` is the noise of the method."""
    from workload import code_version, machine

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--paired needs two cores")
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    base: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.repeat):
        for variant in variants:
            cores = (0, 1) if i % 2 == 0 else (1, 0)
            with tempfile.TemporaryDirectory(prefix="bench-variant-a-") as a, tempfile.TemporaryDirectory(
                prefix=f"bench-variant-{variant}-"
            ) as b:
                (ra, why_a), (rb, why_b) = children.run_pair(
                    _command("store", a, args.rounds, args.every),
                    _command(variant, b, args.rounds, args.every),
                    args.timeout,
                    cores,
                )
            if ra is None or rb is None:
                print(f"{variant}: failed: {why_a or why_b}", file=sys.stderr)
                continue
            ratios[variant].append(rb["ms"] / ra["ms"])
            base[variant].append(ra["ms"])
    print(
        f"## Each variant against `store`, run at the same time on two cores (R={args.rounds}, "
        f"{args.repeat} pairs each; deferred, redo: a batch every {args.every} commits)"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; load {os.getloadavg()[0]:.2f}")
    print(f"code: {code_version()}\n")
    print("| variant | x store, median of pairs | min | max | store ms/step alongside (median) |")
    print("|---|---:|---:|---:|---:|")
    for variant in variants:
        r = ratios[variant]
        if not r:
            print(f"| {variant} | – | – | – | – |")
            continue
        print(
            f"| {variant} | {statistics.median(r):.3f} | {min(r):.3f} | {max(r):.3f} | "
            f"{statistics.median(base[variant]):.3f} |"
        )
    if "store" in variants:
        print("\n(`store` against `store`: how far apart two identical runs land by this method.)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant; median, min and max are printed")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list (default: %(default)s)")
    ap.add_argument("--frames", action="store_true", help="also the per-b-tree transaction table")
    ap.add_argument("--paired", action="store_true", help="each variant at the same time as store, on two cores: the ratio")
    ap.add_argument("--every", type=int, default=EVERY, help="deferred, redo: commits per batch of records (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per child (s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.every < 1:
        raise SystemExit("--every must be at least 1")
    if args.child:
        children.report(child(args.child, args.rounds, Path(args.dir), args.every))
        return
    if args.rounds < 1 or args.repeat < 1:
        raise SystemExit("--rounds and --repeat must be at least 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    sys.path.insert(0, str(HERE))
    if args.paired:
        paired(variants, args)
        return
    from workload import code_version, machine, mixed_versions

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        for variant in variants:
            out, why = spawn(variant, args.rounds, args.timeout, args.every)
            if out is None:
                print(f"{variant}: failed: {why}", file=sys.stderr)
                continue
            results[variant].append(out)
    print(
        f"## The write path's parts, turned off one by one (R={args.rounds}, {args.repeat} interleaved runs each; "
        f"deferred, redo: a batch every {args.every} commits)"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; load {os.getloadavg()[0]:.2f}")
    print(f"code: {code_version()}\n")
    print("| variant | durable | ms/step median | min | max | CPU ms/step median | commits | x store |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    base = statistics.median(r["ms"] for r in results["store"]) if results.get("store") else None
    for variant in variants:
        runs = results[variant]
        if not runs:
            print(f"| {variant} | | – | – | – | – | – | – |")
            continue
        ms = [r["ms"] for r in runs]
        median = statistics.median(ms)
        ratio = f"{median / base:.2f}" if base else "–"
        print(
            f"| {variant} | {'yes' if variant == 'store' else 'no'} | {median:.3f} | {min(ms):.3f} | {max(ms):.3f} | "
            f"{statistics.median(r['cpu_ms'] for r in runs):.3f} | {runs[0]['commits']} | {ratio} |"
        )
    warning = mixed_versions({r["source"] for runs in results.values() for r in runs})
    if warning:
        print("\n" + warning)
    if args.frames:
        frames_table(3)


if __name__ == "__main__":
    main()
