"""Reducer cost per durable step with 0, 10 and 100 watchers of the busy conversation.

Workload: the peers' (bench/workload.py, as bench/bench_steps.py): R rounds of one model step returning 3 tool
calls, then 3 tool steps, then a final answer (R=200 -> 801 durable steps), on
a fresh SQLite file (WAL, synchronous=NORMAL), scripted model, trivial tools.
Each watcher is a task doing ``async with conv.watch() as views: async for
view in views`` and touching the view (its entry count and live progress),
as a host's UI would; all of them run on the same Trio thread as the reducer,
so whatever they cost shows up here.

    python bench/watchers.py --rounds 200 --watchers 0 10 100 100@100 --repeat 3

``N@MS`` is N watchers that each take at most one view per MS milliseconds
(``conv.watch(interval_ms=MS)``), the setting for many UI watchers.

Prints, per durable step (median of repeats, run interleaved): the wall
time and the process CPU time (the reducer, the tools, the model and the
watchers, all on one thread; CPU time is what to compare on a loaded
machine), the CPU time spent inside the reducer itself (``reducer cpu``:
stepping, committing, acting, and telling the watches which conversations a
commit touched - ``Loop.handle_batch``); and how many views the watchers
received in all (a watcher skips to the newest view, so this is below watchers x commits
when the reducer outpaces them). Measured, printed and compared - never
asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import AGENT, make_models, make_registry, steps_of  # noqa: E402

from pidurable.shell import Harness, Input, open_sqlite_storage


async def run_once(
    rounds: int, watchers: int, db: Path, interval_ms: int = 0
) -> tuple[float, float, float, int, int]:
    registry = make_registry()
    storage = open_sqlite_storage(db)
    received = [0]

    async def watch(conv, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        async with conv.watch(interval_ms=interval_ms) as views:
            task_status.started()
            async for view in views:
                received[0] += 1
                _ = (len(view.entries), view.live.partial if view.live else None, view.idle)

    async with Harness.open(storage, models=make_models(rounds), registry=registry) as h:
        conv = await h.root(agent=AGENT)
        loop = h.runtime
        inner = loop.handle_batch
        reducer = [0.0]

        async def timed(events):  # type: ignore[no-untyped-def]
            t = time.thread_time()
            try:
                await inner(events)
            finally:
                reducer[0] += time.thread_time() - t

        loop.handle_batch = timed  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            for _ in range(watchers):
                await nursery.start(watch, conv)
            t0, c0 = time.perf_counter(), time.process_time()
            reducer[0] = 0.0
            sub = await conv.submit(Input("go"))
            rec = await sub.wait()
            t1, c1 = time.perf_counter(), time.process_time()
            in_reducer = reducer[0]
            assert rec.status == "done", rec
            commits = h.runtime.state.next_seq - 1
            nursery.cancel_scope.cancel()
    return t1 - t0, c1 - c0, in_reducer, commits, received[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--watchers", nargs="+", default=["0", "10", "100", "100@100"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    steps = steps_of(args.rounds)
    print(f"pidurable reducer with watchers: {args.rounds} rounds = {steps} durable steps, SQLite WAL NORMAL")
    print(
        f"{'watchers':>9} {'commits':>8} {'wall ms/step':>12} {'cpu ms/step':>11} {'vs 0':>6} "
        f"{'reducer cpu':>11} {'vs 0':>6} {'views':>8} {'views/watcher':>14}"
    )
    specs = [(spec, *_parse(spec)) for spec in args.watchers]
    runs: dict[str, list[tuple[float, float, float, int, int]]] = {spec: [] for spec, _, _ in specs}
    for _ in range(args.repeat):  # interleaved, so a change of machine load hits every row alike
        for spec, n, interval in specs:
            with tempfile.TemporaryDirectory() as d:
                gc.collect()
                runs[spec].append(trio.run(run_once, args.rounds, n, Path(d) / "bench.sqlite", interval))
    base_cpu = base_reducer = None
    for spec, n, _ in specs:
        wall, cpu, reducer, commits, views = (statistics.median(col) for col in zip(*runs[spec]))
        wall_ms, cpu_ms, red_ms = (x / steps * 1000 for x in (wall, cpu, reducer))
        base_cpu = cpu_ms if base_cpu is None else base_cpu
        base_reducer = red_ms if base_reducer is None else base_reducer
        per = views / n if n else 0
        print(
            f"{spec:>9} {commits:>8.0f} {wall_ms:>12.3f} {cpu_ms:>11.3f} {cpu_ms / base_cpu:>6.2f} "
            f"{red_ms:>11.3f} {red_ms / base_reducer:>6.2f} {views:>8.0f} {per:>14.1f}"
        )


def _parse(spec: str) -> tuple[int, int]:
    n, _, every = spec.partition("@")
    return int(n), int(every or 0)


if __name__ == "__main__":
    main()
