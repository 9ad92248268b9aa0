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

import children

HERE = Path(__file__).resolve().parent
VARIANTS = ("store", "journal-only", "events-only", "no-store")


def _turn_off(variant: str) -> None:
    """Patch this (child) process's store for ``variant``."""
    from pidurable.shell.storage import spelt, sqlite, sqlite_writes

    if variant == "store":
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


def child(variant: str, rounds: int, directory: Path) -> dict[str, Any]:
    import trio

    sys.path.insert(0, str(HERE))
    from workload import run_once, source_fingerprint, steps_of

    _turn_off(variant)
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


def spawn(variant: str, rounds: int, timeout: float) -> tuple[dict[str, Any] | None, str]:
    with tempfile.TemporaryDirectory(prefix=f"bench-variant-{variant}-") as d:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--dir", d, "--rounds", str(rounds)]
        return children.run(cmd, timeout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant; median, min and max are printed")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list (default: %(default)s)")
    ap.add_argument("--frames", action="store_true", help="also the per-b-tree transaction table")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per child (s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        children.report(child(args.child, args.rounds, Path(args.dir)))
        return
    if args.rounds < 1 or args.repeat < 1:
        raise SystemExit("--rounds and --repeat must be at least 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    sys.path.insert(0, str(HERE))
    from workload import code_version, machine, mixed_versions

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        for variant in variants:
            out, why = spawn(variant, args.rounds, args.timeout)
            if out is None:
                print(f"{variant}: failed: {why}", file=sys.stderr)
                continue
            results[variant].append(out)
    print(f"## The write path's parts, turned off one by one (R={args.rounds}, {args.repeat} interleaved runs each)")
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
