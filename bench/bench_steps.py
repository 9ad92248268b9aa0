"""Harness overhead per durable step, on the peers' workload.

Workload (as ../shared/bench-peers/peer_bench.py): R rounds of one model step
returning 3 tool calls, then 3 tool steps, then a final answer step
(R=200 -> 801 durable steps). Fresh SQLite file (WAL, synchronous=NORMAL),
scripted model and trivial tools, so what is measured is the harness: the
reducer, the commits, the effect round trips, context building.

    python bench/bench_steps.py --rounds 200 1000 --repeat 3

Prints ms per durable step (median of repeats) and, to show that cost does
not grow with history, the ms per step of the first and last 10% of rounds.
Measured, printed and compared - never asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
from pathlib import Path

import trio

# the workload lives in workload.py (shared with steps.py, recovery.py, concurrency.py)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import make_models, run_once, tool  # noqa: F401  (names kept for importers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL")
    args = ap.parse_args()
    print(f"pidurable step overhead, SQLite WAL synchronous={args.synchronous}, scripted model, trivial tools")
    print(f"{'rounds':>7} {'steps':>6} {'commits':>8} {'total s':>8} {'ms/step':>8} {'first10%':>9} {'last10%':>8} {'size MB':>8}")
    for rounds in args.rounds:
        steps = rounds * 4 + 1
        totals, firsts, lasts, sizes, commits = [], [], [], [], 0
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                db = Path(d) / "bench.sqlite"
                gc.collect()
                total, marks, commits = trio.run(run_once, rounds, db, args.synchronous)
                totals.append(total)
                tenth = max(1, rounds // 10)
                # each mark is one model call; a round = 4 steps
                firsts.append((marks[tenth] - marks[0]) / (tenth * 4))
                lasts.append((marks[-1] - marks[-1 - tenth]) / (tenth * 4))
                sizes.append(sum(p.stat().st_size for p in Path(d).iterdir()) / 1e6)
        med = statistics.median(totals)
        print(
            f"{rounds:>7} {steps:>6} {commits:>8} {med:>8.3f} {med / steps * 1000:>8.3f} "
            f"{statistics.median(firsts) * 1000:>9.3f} {statistics.median(lasts) * 1000:>8.3f} "
            f"{statistics.median(sizes):>8.2f}"
        )


if __name__ == "__main__":
    main()
