"""Machine instructions per durable step, counted by callgrind: the whole
harness, or the pure core alone.

Where bench/bytecodes.py counts Python bytecodes, this counts what the CPU
executes, work in C included (SQLite, the JSON encoder, dicts, attrs'
``object.__setattr__``). ``valgrind --tool=callgrind`` runs a child python
twice, once for R=A rounds of bench/steps.py's workload and once for R=B;
the difference over ``4 (B - A)`` steps is the marginal count per durable
step (start-up, imports, opening and closing cancel out). Counts do not
depend on the machine's load: two runs of the same code agree within ~0.1%
(Trio's scheduler is randomized; ``PYTHONHASHSEED=0`` fixes the rest), so two
checkouts can be compared exactly - run this script with each one's python.

Parts (``--part``):

- ``harness`` (default): the whole run on SQLite WAL NORMAL, submit to answer;
- ``memory``: the same on ``MemoryStorage`` (records still encoded): the
  difference from ``harness`` is SQLite's own work;
- ``core``: ``step`` over the journal of a run (recorded once, outside
  callgrind, then replayed from an empty state in the child).

Needs valgrind (``apt install valgrind``); slow: about 0.1 s of machine time
per durable step under callgrind, so R=100 -> 300 takes 2-3 minutes.

    python bench/instructions.py                          # harness, R=100 -> 300
    python bench/instructions.py --part core --rounds 200 1000
    python bench/instructions.py --rounds 5000 5200       # per step late in a long run
    python bench/instructions.py --quick                  # R=20 -> 60

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402

PARTS = ("harness", "memory", "core")


def child(part: str, rounds: int, events_file: str | None) -> None:
    """What runs under callgrind: one run (or one replay) of ``rounds``."""
    import trio

    with tempfile.TemporaryDirectory() as d:
        if part == "core":
            from pidurable.core import step
            from pidurable.core.state import State

            assert events_file is not None
            with open(events_file, "rb") as f:
                # the events up to the one answering round ``rounds``'s model call
                events = pickle.load(f)[: int(os.environ["PIDURABLE_BENCH_EVENTS"])]
            state = State()
            for ev in events:
                state = step(state, ev).state
            return
        if part == "memory":
            from pidurable.shell import MemoryStorage

            workload.open_storage = lambda kind, db, synchronous="NORMAL": MemoryStorage()  # type: ignore[assignment]
        trio.run(workload.run_once, rounds, Path(d) / "s.db", "NORMAL")


def record_events(rounds: int, directory: Path) -> tuple[Path, list[int]]:
    """The journal's events of one run of ``rounds`` (pickled), and the index
    just past each model call's answer (to cut a replay at R rounds)."""
    import trio

    from breakdown import journal_events  # the journal's events, as breakdown.py's core column replays them

    db = directory / "journal.db"
    trio.run(workload.run_once, rounds, db, "NORMAL")
    events = journal_events(db)
    answers = [i + 1 for i, ev in enumerate(events) if type(ev).__name__ == "ModelResponded"]
    path = directory / "events.pkl"
    with open(path, "wb") as f:
        pickle.dump(events, f)
    return path, answers


def callgrind(args: list[str], env: dict[str, str]) -> int:
    """Instructions callgrind collected for ``python <this> --child ...``."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = re.search(r"Collected\s*:\s*([\d,]+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=PARTS, default="harness")
    p.add_argument("--rounds", type=int, nargs=2, default=[100, 300], metavar=("A", "B"))
    p.add_argument("--quick", action="store_true", help="R=20 -> 60")
    p.add_argument("--child", nargs=2, metavar=("PART", "R"), help=argparse.SUPPRESS)
    p.add_argument("--events", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.events)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/instructions.py needs valgrind (apt install valgrind)")
    a, b = (20, 60) if args.quick else args.rounds
    if not 0 < a < b:
        p.error("--rounds A B needs 0 < A < B")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    counts = []
    with tempfile.TemporaryDirectory() as d:
        extra: list[str] = []
        answers: list[int] = []
        if args.part == "core":
            events, answers = record_events(b, Path(d))
            extra = ["--events", str(events)]
        for rounds in (a, b):
            if args.part == "core":
                # the replay stops at the event that answers round R's tool results
                env["PIDURABLE_BENCH_EVENTS"] = str(answers[rounds] if rounds < len(answers) else 10**9)
            counts.append(callgrind(["--child", args.part, str(rounds), *extra], env))
    steps = 4 * (b - a)
    print(f"## Machine instructions per durable step (callgrind; part {args.part}; R={a} -> R={b}: {steps} steps)\n")
    print(f"pidurable at {workload.ROOT}\n")
    print("| part | R=A total | R=B total | instructions per durable step |")
    print("|---|---:|---:|---:|")
    print(f"| {args.part} | {counts[0]:,} | {counts[1]:,} | {(counts[1] - counts[0]) // steps:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
