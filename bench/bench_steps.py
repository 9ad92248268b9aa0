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
import tempfile
import time
from pathlib import Path

import trio

from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, define_tool, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply, tool_call


def make_models(rounds: int, marks: list[float]) -> ScriptedModels:
    calls = [tool_call("t", i=0), tool_call("t", i=1), tool_call("t", i=2)]
    tool_round = reply(tool_calls=calls)
    final = reply(text="done")

    def script(request):  # type: ignore[no-untyped-def]
        # O(1): each round adds assistant + 3 results to the context.
        k = (len(request.messages) - 1) // 4
        marks.append(time.perf_counter())
        return tool_round if k < rounds else final

    return ScriptedModels(script)


async def tool(ctx, args):  # type: ignore[no-untyped-def]
    return "ok"


async def run_once(rounds: int, db: Path, synchronous: str) -> tuple[float, list[float], int]:
    registry = Registry()
    registry.install(define_tool("t", "trivial", {"type": "object"}, tool, replay="safe"))
    marks: list[float] = []
    models = make_models(rounds, marks)
    storage = open_sqlite_storage(db, synchronous=synchronous)
    async with Harness.open(storage, models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "bench")))
        t0 = time.perf_counter()
        sub = await conv.submit(Input("go"))
        rec = await sub.wait()
        t1 = time.perf_counter()
        assert rec.status == "done", rec
        commits = h.runtime.state.next_seq - 1
    return t1 - t0, marks, commits


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
