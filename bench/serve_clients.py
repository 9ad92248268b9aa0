"""Many SSE clients of one busy conversation: the server's memory and the lag.

``pidurable serve``'s app (shell/serve) on Hypercorn's Trio worker, on
loopback, with a scripted model streaming long answers (``big N``: N
characters in 40 chunks) on a SQLite store. C clients follow the
conversation's events (``GET /api/conversations/1/events``) with httpx in the
same process; S of them stall (connected, never reading: their sockets fill
up) and one pauses 200 ms after every view. R answers are streamed.

    python bench/serve_clients.py --clients 50 --stalled 5 --rounds 20 --size 20000

Prints the views the hub published and how many each kind of client got, the
lag of the fast clients (from the harness's commit of a view to a client
parsing it: median and p99), and the process's Python memory (tracemalloc)
and RSS after the first answer and after the last: a server that buffered
per client would grow with rounds x stalled clients. Measured and printed,
never asserted (tests/serve/test_events.py asserts a bound).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from workload import code_version  # noqa: E402

from pidurable.shell import Harness, Input, Settings, open_sqlite_storage  # noqa: E402
from pidurable.shell.serve import ServeOptions, open_app, serve  # noqa: E402
from tests.serve.scripted_app import AGENT, setup  # noqa: E402

TOKEN = "bench-token-0123456789"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def follow(client: httpx.AsyncClient, got: list[int], lags: list[float] | None, stop: trio.Event, commits: dict[int, float], pause: float) -> None:
    async with client.stream("GET", "/api/conversations/1/events") as r:
        data = ""
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
            elif not line and data:
                view = json.loads(data) if data.startswith('{"seq"') else None
                data = ""
                if view is None:
                    continue
                got.append(view["seq"])
                if lags is not None and view["seq"] in commits:
                    lags.append(time.perf_counter() - commits[view["seq"]])
                if stop.is_set():
                    return
                if pause:
                    await trio.sleep(pause)


async def run(args: argparse.Namespace, db: Path) -> None:
    s = setup()
    storage = open_sqlite_storage(str(db))
    commits: dict[int, float] = {}
    async with Harness.open(storage, models=s.models, registry=s.registry, settings=Settings(partial_interval_ms=args.partial_ms)) as harness:
        conv = await harness.root(agent=AGENT)
        loop = harness.runtime
        original = loop.watches.committed

        def committed(seq: int, writes: Any) -> None:  # when each commit is durable
            commits[seq] = time.perf_counter()
            original(seq, writes)

        loop.watches.committed = committed  # type: ignore[method-assign]
        async with open_app(harness, ServeOptions(token=TOKEN, agent=AGENT, view_interval_ms=args.interval_ms)) as app:
            async with trio.open_nursery() as nursery:
                url = (await nursery.start(partial(serve, app, host="127.0.0.1", port=0)))[0]
                headers = {"Authorization": f"Bearer {TOKEN}"}
                limits = httpx.Limits(max_connections=args.clients + args.stalled + 10)
                async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as client:
                    stalled = [await client.send(client.build_request("GET", "/api/conversations/1/events"), stream=True) for _ in range(args.stalled)]
                    stop = trio.Event()
                    fast = [[] for _ in range(args.clients)]  # type: list[list[int]]
                    slow: list[int] = []
                    lags: list[float] = []
                    async with trio.open_nursery() as clients:
                        for i in range(args.clients):
                            clients.start_soon(follow, client, fast[i], lags if i < 5 else None, stop, commits, 0.0)
                        clients.start_soon(follow, client, slow, None, stop, commits, 0.2)
                        memory = []
                        tracemalloc.start()
                        for k in range(args.rounds):
                            sub = await conv.submit(Input(f"big {args.size}"))
                            await sub.wait()
                            if k in (0, args.rounds - 1):
                                gc.collect()
                                memory.append((tracemalloc.get_traced_memory()[0] / 1e6, rss_mb()))
                        tracemalloc.stop()
                        stop.set()
                        await (await conv.submit(Input("quick end"))).wait()
                    for r in stalled:
                        await r.aclose()
                    hub_views = max(max(f) for f in fast)
                nursery.cancel_scope.cancel()
    counts = [len(f) for f in fast]
    print(f"pidurable serve with {args.clients} SSE clients (+{args.stalled} stalled, 1 pausing 200 ms), {args.rounds} answers of {args.size} chars; {code_version()}")
    print(f"  commits: {max(commits)}   views per fast client: median {statistics.median(counts):.0f} (min {min(counts)}, max {max(counts)})   pausing client: {len(slow)}   newest seq seen: {hub_views}")
    if lags:
        lags.sort()
        print(f"  lag commit -> client: median {statistics.median(lags) * 1000:.1f} ms, p99 {lags[int(len(lags) * 0.99) - 1] * 1000:.1f} ms")
    (py0, rss0), (py1, rss1) = memory[0], memory[-1]
    print(f"  Python memory (tracemalloc): {py0:.1f} MB after answer 1, {py1:.1f} MB after answer {args.rounds} (+{py1 - py0:.1f} MB)")
    print(f"  max RSS: {rss0:.0f} MB after answer 1, {rss1:.0f} MB after answer {args.rounds}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--stalled", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--size", type=int, default=20000, help="characters per streamed answer")
    ap.add_argument("--partial-ms", type=int, default=20, help="Settings(partial_interval_ms)")
    ap.add_argument("--interval-ms", type=int, default=50, help="ServeOptions(view_interval_ms)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trio.run(run, args, Path(d) / "serve.sqlite")


if __name__ == "__main__":
    main()
