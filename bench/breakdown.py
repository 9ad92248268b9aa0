"""Where a durable step's time goes: the whole harness against its parts and
against the floor (issue 11 item 2: "about 5x a minimal Trio+attrs+SQLite
loop that commits once per step").

One run of bench/steps.py's workload (R rounds of one model step with 3 tool
calls + 3 tool steps, scripted model, no-op tools; SQLite WAL NORMAL) in this
process, then its journal taken apart, each part timed alone (CPU time of
this process, best of --repeat):

- harness: the whole run, submit to answer (as bench/steps.py times it);
- core: ``step_many`` over the journal's rows from an empty state (the pure
  reducer, what replay runs);
- encode: ``encode_commit`` of every commit the core made (records and
  journal row to JSON);
- store: ``commit_many`` of every commit into a fresh store, minus encode
  (SQLite statements and transactions; the run may have put several commits
  in one transaction, which is not known here: one commit per transaction,
  an upper bound);
- shell: harness - core - encode - store (Trio scheduling, interpreters,
  the edge's cleaning, context building, waits, watchers);
- live commits: the wall time the run itself spent inside the store's
  transactions (encode + store as they ran there: ``workload.wrap_commits``;
  of the same run as the harness column). Higher than encode + store: a
  commit replayed alone runs on warm caches (round 14, docs/performance.md);
- floor: a minimal Trio + attrs + SQLite loop doing one ``attrs.evolve``, one
  ``json.dumps`` and one single-row INSERT committed per step, with a Trio
  checkpoint.

    python bench/breakdown.py                  # R=1000, best of 3
    python bench/breakdown.py --rounds 200 5000 --repeat 1

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402

from pidurable.core import step_many  # noqa: E402
from pidurable.core.effects import Commit  # noqa: E402
from pidurable.core.state import State  # noqa: E402
from pidurable.shell import journal  # noqa: E402
from pidurable.shell.storage import codec  # noqa: E402
from pidurable.shell.storage.base import encode_commit  # noqa: E402
from pidurable.shell.storage.sqlite import open_sqlite_storage  # noqa: E402


def cpu(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def harness_run(rounds: int, directory: Path) -> tuple[float, Path, float]:
    """CPU seconds of the run, its store, and the wall seconds inside its transactions."""
    db = directory / "run.db"
    times: dict[str, float] = {}
    committing = [0.0]

    def on_commit(seconds: float, batch: Any) -> None:
        committing[0] += seconds

    trio.run(lambda: workload.run_once(rounds, db, "NORMAL", times=times, on_commit=on_commit))
    return times["cpu_done"] - times["cpu_start"], db, committing[0]


def journal_events(db: Path) -> list[list[Any]]:
    storage = open_sqlite_storage(db, create=False)
    try:
        rows = list(storage.journal())
    finally:
        storage.close()
    return [[codec.event_from_data(d) for d in journal._event_datas(row)] for row in rows]


def commits_of(groups: list[list[Any]]) -> list[tuple[int, Any, list[Any]]]:
    """The commits of the journal's rows, each row's events stepped together
    (``step_many``, as the loop grouped them: docs/contract.md "The loop")."""
    state, out = State(), []
    for events in groups:
        result = step_many(state, events)
        state = result.state
        out.extend((e.seq, e.writes, events) for e in result.effects if isinstance(e, Commit))
    return out


def run_core(groups: list[list[Any]]) -> None:
    state = State()
    for events in groups:
        state = step_many(state, events).state


def run_store(commits: list[tuple[int, Any, list[Any]]], directory: Path, n: list[int]) -> None:
    n[0] += 1
    storage = open_sqlite_storage(directory / f"store-{n[0]}.db")
    try:
        for seq, writes, evs in commits:
            storage.commit_many([(seq, writes, evs)])
    finally:
        storage.close()


@attrs.frozen
class _Rec:
    seq: int
    text: str
    done: bool = False


def floor(steps: int, directory: Path) -> float:
    """CPU seconds for ``steps`` minimal durable steps."""
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (seq INTEGER PRIMARY KEY, body TEXT)")

    async def loop() -> float:
        rec = _Rec(seq=0, text="x" * 40)
        start = time.process_time()
        for i in range(steps):
            rec = attrs.evolve(rec, seq=i + 1)
            body = json.dumps({"seq": rec.seq, "text": rec.text})
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t (seq, body) VALUES (?, ?)", (rec.seq, body))
            conn.execute("COMMIT")
            await trio.lowlevel.checkpoint()
        return time.process_time() - start

    try:
        return trio.run(loop)
    finally:
        conn.close()


def measure(rounds: int, repeat: int) -> dict[str, float]:
    steps = workload.steps_of(rounds)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        runs = []
        for i in range(repeat):
            (d / f"r{i}").mkdir()
            cpu_s, _, commit_s = harness_run(rounds, d / f"r{i}")
            runs.append((cpu_s, commit_s))
        harness, live = min(runs)
        events = journal_events(d / "r0" / "run.db")
        commits = commits_of(events)
        core = cpu(lambda: run_core(events), repeat)
        encode = cpu(lambda: [encode_commit(s, w, e) for s, w, e in commits], repeat)
        counter = [0]
        store = cpu(lambda: run_store(commits, d, counter), repeat) - encode
        floors = []
        for i in range(repeat):
            (d / f"f{i}").mkdir()
            floors.append(floor(steps, d / f"f{i}"))
        fl = min(floors)
    ms = {k: v * 1000 / steps for k, v in
          {"harness": harness, "core": core, "encode": encode, "store": store, "floor": fl, "live": live}.items()}
    ms["shell"] = ms["harness"] - ms["core"] - ms["encode"] - ms["store"]
    ms["commits"] = len(commits)
    ms["steps"] = steps
    return ms


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, nargs="+", default=[1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print("## Where a durable step goes (CPU ms per durable step, best of %d)" % args.repeat)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}\n")
    print("| R | steps | commits | harness | core | encode | store | shell | floor | harness / floor | live commits |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in args.rounds:
        m = measure(r, args.repeat)
        print(f"| {r} | {m['steps']:.0f} | {m['commits']:.0f} | {m['harness']:.3f} | {m['core']:.3f} | {m['encode']:.3f} | "
              f"{m['store']:.3f} | {m['shell']:.3f} | {m['floor']:.3f} | {m['harness'] / m['floor']:.1f} | {m['live']:.3f} |")


if __name__ == "__main__":
    main()
