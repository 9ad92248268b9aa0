"""Sizing the *projector* design for the 0.25 ms/step target of issue 11
(docs/performance.md, round 16): the live process journals each commit's
events and nothing else, and a second process - the pure core stepping the
journal - writes the record tables, on the machine's other core.

Not a store: nothing reads the projected tables back, and a crash is not
handled. It answers two questions: how fast the live process runs while a
projector reads its journal and writes next to it (they share the disk, the
caches and the memory bus), and whether one projector keeps up (how long it
takes, after the last answer, to write the last commit).

The live child runs bench/steps.py's workload (R rounds of one model step
with 3 tool calls + 3 tool steps, scripted model, no-op tools, SQLite WAL
NORMAL) with ``bench/variants.py``'s ``events-only`` write path; before it
submits, it starts the projector (this script, ``--project``), which polls
the journal (``seq > last``), steps each row's events with ``step_many``
(a fresh ``State`` at an ``Opened``, as replay does), encodes the commits'
writes as the store does (``rows.encode_commit_text``) and writes them into
a second SQLite file of the store's layout, one transaction per poll.
Each R is measured alongside ``store`` and ``events-only`` alone, interleaved.

    python bench/projector.py                    # R=1000 and 5000, 3 repeats
    python bench/projector.py --rounds 200 --repeat 1

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import children

HERE = Path(__file__).resolve().parent
MODES = ("store", "events-only", "projected")


def project(journal_db: Path, tables_db: Path, done: Path) -> dict[str, Any]:
    """The projector: until ``done`` exists and the journal has no new row."""
    import sqlite3

    from pidurable.core import State, step_many
    from pidurable.core.effects import Commit
    from pidurable.core.events import Opened
    from pidurable.shell.storage import codec, sqlite_writes
    from pidurable.shell.storage.rows import encode_commit_text
    from pidurable.shell.storage.sqlite import open_sqlite_storage

    tables = open_sqlite_storage(tables_db)
    out = tables.db.conn
    source = None
    while source is None:  # until the live process has made the store
        try:
            source = sqlite3.connect(f"file:{journal_db}?mode=ro", uri=True, isolation_level=None)
            source.execute("SELECT 1 FROM journal LIMIT 1").fetchall()
        except sqlite3.Error:
            if source is not None:
                source.close()
            source = None
            if done.exists():
                raise SystemExit("the live run ended before its store could be read") from None
            time.sleep(0.001)
    state, last, commits, polls, busy = State(), 0, 0, 0, 0.0
    finished_at = None
    while True:
        found = source.execute("SELECT seq, events FROM journal WHERE seq > ? ORDER BY seq", [last]).fetchall()
        if not found:
            if done.exists():
                if finished_at is None:  # one more look after the live run ended
                    finished_at = time.perf_counter()
                    continue
                break
            time.sleep(0.0005)
            continue
        t = time.process_time()
        rows: list[Any] = []
        for seq, text in found:
            events = [codec.event_from_data(d) for d in json.loads(text)]
            if events and isinstance(events[0], Opened):
                state = State()
            result = step_many(state, events)
            state = result.state
            for effect in result.effects:
                if isinstance(effect, Commit):
                    rows += encode_commit_text(effect.seq, effect.writes, ())[0]
                    commits += 1
            last = seq
        cur = out.cursor()
        cur.execute("BEGIN")
        sqlite_writes.write_all(cur, rows, [last, sqlite_writes.FORMAT, "[]", ""])
        cur.execute("COMMIT")
        busy += time.process_time() - t
        polls += 1
    tables.close()
    return {"commits": commits, "polls": polls, "cpu_s": busy, "last": last, "done_at": finished_at}


def live(mode: str, rounds: int, directory: Path) -> dict[str, Any]:
    import trio

    sys.path.insert(0, str(HERE))
    import variants
    from workload import run_once, source_fingerprint, steps_of

    variants._turn_off("store" if mode == "store" else "events-only")
    db, done = directory / "bench.sqlite", directory / "done"
    projector = None
    if mode == "projected":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--project", str(directory)]
        projector = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    times: dict[str, float] = {}
    try:
        seconds, _, commits = trio.run(lambda: run_once(rounds, db, "NORMAL", times=times))
    except BaseException:
        if projector is not None:  # (it would wait for the journal's end forever)
            projector.kill()
            projector.communicate()
        raise
    steps = steps_of(rounds)
    out: dict[str, Any] = {
        "ms": seconds / steps * 1e3,
        "cpu_ms": (times["cpu_done"] - times["cpu_start"]) / steps * 1e3,
        "commits": commits,
        "source": source_fingerprint(),
    }
    if projector is not None:
        done.touch()
        ended = time.perf_counter()
        stdout, stderr = projector.communicate(timeout=600)
        lag = time.perf_counter() - ended
        found, why = children.result_of(stdout, stderr, projector.returncode, 3)
        if found is None:
            raise SystemExit(f"projector failed: {why}")
        out.update(projected=found["commits"], lag_s=lag, projector_cpu_ms=found["cpu_s"] / steps * 1e3, polls=found["polls"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per child (s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--project", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.project:
        d = Path(args.project)
        children.report(project(d / "bench.sqlite", d / "tables.sqlite", d / "done"))
        return
    if args.child:
        children.report(live(args.child, args.rounds[0], Path(args.dir)))
        return
    if min(args.rounds) < 1 or args.repeat < 1:
        raise SystemExit("--rounds and --repeat must be at least 1")
    sys.path.insert(0, str(HERE))
    from workload import code_version, machine

    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for rounds in args.rounds:
            for mode in MODES:
                with tempfile.TemporaryDirectory(prefix=f"bench-projector-{mode}-") as d:
                    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--dir", d, "--rounds", str(rounds)]
                    out, why = children.run(cmd, args.timeout, why_lines=3)
                if out is None:
                    print(f"R={rounds} {mode}: failed: {why}", file=sys.stderr)
                    continue
                results.setdefault((rounds, mode), []).append(out)
    print(f"## The projector design: the live process journals events, a second process writes the tables ({args.repeat} runs)")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; load {os.getloadavg()[0]:.2f}")
    print(f"code: {code_version()}\n")
    print("| R | mode | ms/step median | min | max | live CPU ms/step | projector CPU ms/step | commits projected | catch-up after the answer (ms) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for rounds in args.rounds:
        for mode in MODES:
            runs = results.get((rounds, mode), [])
            if not runs:
                print(f"| {rounds} | {mode} | – | – | – | – | – | – | – |")
                continue
            ms = [r["ms"] for r in runs]
            extra = "– | – | –"
            if mode == "projected":
                extra = (
                    f"{statistics.median(r['projector_cpu_ms'] for r in runs):.3f} | "
                    f"{min(r['projected'] for r in runs)} of {runs[0]['commits']} | "
                    f"{statistics.median(r['lag_s'] for r in runs) * 1e3:.0f}"
                )
            print(
                f"| {rounds} | {mode} | {statistics.median(ms):.3f} | {min(ms):.3f} | {max(ms):.3f} | "
                f"{statistics.median(r['cpu_ms'] for r in runs):.3f} | {extra} |"
            )


if __name__ == "__main__":
    main()
