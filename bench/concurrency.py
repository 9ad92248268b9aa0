"""Many conversations at once: per-step cost and commit latency, trickle vs burst.

N conversations (10, 100, 1,000 by default) on one fresh SQLite store (WAL,
synchronous=NORMAL), scripted model, no-op tool. Each conversation gets one
input and does --tool-rounds rounds (default 3) of one model step with 3 tool
calls and 3 tool steps, then a final answer: 4T+1 durable steps each.

- trickle: the inputs are submitted one after another, each once the previous
  one is answered (one conversation live at a time);
- burst: all N inputs are submitted at once (N host tasks, each submit + wait),
  so all N conversations are live together.

The N conversations are created before the clock starts. Each (N, mode) runs
in a fresh child process; the printed values are medians of --repeat runs:
- ms/step: wall time from the first submit to the last answer / (N x (4T+1));
- CPU ms/step: the child's CPU time over the same span / steps (less
  disturbed than wall time on a busy machine);
- commits/s and p50 / p99 / max commit latency: the bench wraps the store's
  ``commit_many`` (one call = one transaction, which may hold several commits:
  the loop groups ready commits) on the instance and times every call; the
  shell's code is untouched;
- commits per transaction: the mean batch size;
- max live tasks: the most non-terminal tasks at any commit, tracked from the
  task records the commits write;
- peak RSS: the child's own peak (VmHWM).

    python bench/concurrency.py                    # 10 / 100 / 1,000, 3 repeats, ~6 min
    python bench/concurrency.py --quick            # 10 / 100, 1 repeat
    python bench/concurrency.py --conversations 1000 --modes burst --repeat 1

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import children  # noqa: E402
from workload import (  # noqa: E402
    AGENT,
    code_version,
    machine,
    mixed_versions,
    make_models,
    make_registry,
    peak_rss_mb,
    percentile,
    source_fingerprint,
    steps_of,
    wrap_commits,
)

from pidurable.shell import Harness, Input, open_sqlite_storage  # noqa: E402

MODES = ("trickle", "burst")


class CommitLog:
    """Every transaction's duration and size, and the live task count."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.commits = 0
        self.live: set[Any] = set()
        self.max_live = 0

    def __call__(self, seconds: float, batch: Sequence[Any]) -> None:
        self.seconds.append(seconds)
        self.commits += len(batch)
        for _, writes, _ in batch:
            for w in writes:
                task = getattr(w, "task", None)
                if task is None or not hasattr(task, "status"):
                    continue
                if str(task.status) == "terminal":
                    self.live.discard(task.id)
                else:
                    self.live.add(task.id)
        self.max_live = max(self.max_live, len(self.live))


async def run(n: int, mode: str, rounds: int, db: Path) -> dict[str, Any]:
    storage = open_sqlite_storage(db)
    log = CommitLog()
    async with Harness.open(storage, models=make_models(rounds), registry=make_registry()) as h:
        convs = [await h.create_conversation(agent=AGENT) for _ in range(n)]
        wrap_commits(storage, log)
        statuses: list[str] = []

        async def one(conv: Any) -> None:
            rec = await (await conv.submit(Input("go"))).wait()
            statuses.append(str(rec.status))

        cpu = time.process_time()
        t0 = time.perf_counter()
        if mode == "trickle":
            for conv in convs:
                await one(conv)
        else:
            async with trio.open_nursery() as nursery:
                for conv in convs:
                    nursery.start_soon(one, conv)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu
    bad = [s for s in statuses if s != "done"]
    assert len(statuses) == n and not bad, bad[:3]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "transactions": len(log.seconds),
        "commits": log.commits,
        "p50_s": percentile(log.seconds, 0.50),
        "p99_s": percentile(log.seconds, 0.99),
        "max_s": max(log.seconds),
        "max_live": log.max_live,
        "peak_rss_mb": peak_rss_mb(),
    }


def child(args: argparse.Namespace) -> None:
    source = source_fingerprint()  # what was just imported (the tree may change under a long run)
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as d:
        out = trio.run(run, args.child_n, args.child_mode, args.tool_rounds, Path(d) / "bench.sqlite")
    out["source"] = source
    children.report(out)


def spawn(n: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child-n", str(n), "--child-mode", mode, "--tool-rounds", str(args.tool_rounds)]
    out, why = children.run(cmd, args.timeout, why_lines=40)
    if out is None:
        raise SystemExit(f"{n} conversations, {mode}: failed\n{why}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--tool-rounds", type=int, default=3, help="tool rounds per conversation (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10 and 100 conversations, one repeat")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per child (s)")
    ap.add_argument("--child-n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-mode", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_n is not None:
        child(args)
        return
    if args.quick:
        args.conversations, args.repeat = [10, 100], 1

    t_all = time.perf_counter()
    rows: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for rep in range(args.repeat):
        for n in args.conversations:
            for mode in args.modes:
                res = spawn(n, mode, args)
                rows.setdefault((n, mode), []).append(res)
                ms = 1000 * res["wall_s"] / (n * steps_of(args.tool_rounds))
                print(f"# repeat {rep + 1}/{args.repeat} {n} {mode}: {ms:.3f} ms/step", file=sys.stderr, flush=True)

    def med(n: int, mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[(n, mode)])

    def ms_step(n: int, mode: str) -> float:
        return 1000 * med(n, mode, "wall_s") / (n * steps_of(args.tool_rounds))

    print(
        f"## Concurrency: N conversations x {args.tool_rounds} tool rounds ({steps_of(args.tool_rounds)} steps each), "
        f"SQLite WAL NORMAL, medians of {args.repeat}"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; {time.perf_counter() - t_all:.0f} s")
    print(f"pidurable: {code_version()}")
    warning = mixed_versions({r["source"] for runs in rows.values() for r in runs})
    if warning:
        print(warning)
    print()
    print(
        "| conversations | mode | steps | ms/step | CPU ms/step | burst / trickle | commits/s | commits per txn | "
        "p50 commit ms | p99 commit ms | max commit ms | max live tasks | peak RSS MB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.conversations:
        for mode in args.modes:
            ratio = "–"
            if mode == "burst" and (n, "trickle") in rows:
                ratio = f"{ms_step(n, 'burst') / ms_step(n, 'trickle'):.2f}"
            commits = med(n, mode, "commits")
            print(
                f"| {n:,} | {mode} | {n * steps_of(args.tool_rounds):,} | {ms_step(n, mode):.3f} | "
                f"{1000 * med(n, mode, 'cpu_s') / (n * steps_of(args.tool_rounds)):.3f} | {ratio} | "
                f"{commits / med(n, mode, 'wall_s'):,.0f} | {commits / med(n, mode, 'transactions'):.2f} | "
                f"{med(n, mode, 'p50_s') * 1000:.3f} | {med(n, mode, 'p99_s') * 1000:.3f} | "
                f"{med(n, mode, 'max_s') * 1000:.1f} | {med(n, mode, 'max_live'):,.0f} | {med(n, mode, 'peak_rss_mb'):.0f} |"
            )


if __name__ == "__main__":
    main()
