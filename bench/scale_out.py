"""Scale-out on PostgreSQL (issue 13 item 6): throughput with 1, 2, 3
workers, takeover latency after a kill, commit latency against SQLite.

The workload is tests/pg/worker_app.py's: each conversation's run is one
tool round (a replay-safe ``lookup`` and a replay-unsafe ``book`` in
parallel) and an answer, from a scripted model; no pauses
(``PIDURABLE_WORKER_DELAY=0``) unless said.

- throughput: N ``pidurable worker`` processes (--concurrency 50) on a fresh
  schema; a client creates C conversations and submits one input to each;
  from the first submit to the last settlement. Printed: commits/s (journal
  rows landed, each a durable step's transaction), conversations/s.
- takeover: one worker holds T trees whose tool bodies sleep for a minute;
  a second worker idles; the first is SIGKILLed; per tree, the time from the
  kill to the second worker's claim (the database clock on both ends); K
  such kills (the kill lands anywhere in the renewal cycle).
  Lease 2 s, renewal every 0.5 s, polling every 0.5 s: a takeover waits out
  what is left of the lease, then the next look.
- commit latency: the same C conversations run in this process, once by a
  Worker on PostgreSQL (fenced commits, each in a worker thread) and once by
  a Harness on SQLite (WAL, synchronous=NORMAL, inline); every commit batch
  timed around the store call.

    python bench/scale_out.py                  # C=300, T=20, K=5
    python bench/scale_out.py --conversations 1000 --workers 1 2 3
    PIDURABLE_PG_DSN='host=... dbname=...' python bench/scale_out.py   # an existing server

The server: a throwaway one as the tests start it (tests/pg_server.py),
unless PIDURABLE_PG_DSN names one. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

ROOT = Path(__file__).resolve().parent.parent
APP_DIR = ROOT / "tests" / "pg"
sys.path[:0] = [str(ROOT / "tests"), str(APP_DIR)]

import pg_server  # noqa: E402
import worker_app  # noqa: E402

from pidurable.shell import Harness, Input  # noqa: E402
from pidurable.shell.storage import open_sqlite_storage  # noqa: E402
from pidurable.shell.storage.postgres import PostgresStorage  # noqa: E402
from pidurable.shell.storage.postgres_tree import LeaseSettings  # noqa: E402
from pidurable.shell.storage.sqlite import SqliteStorage  # noqa: E402
from pidurable.shell.worker import Client, Worker  # noqa: E402

_schemas = iter(range(1, 10_000))


def _schema() -> str:
    return f"bench{os.getpid()}_{next(_schemas)}"


def _sql(dsn: str, schema: str, sql: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}".encode())
        return conn.execute(sql.encode()).fetchall()


def _worker(
    dsn: str, schema: str, name: str, delay: float, lease: float = 2.0, log: Path | None = None, tool_delay: float | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PIDURABLE_WORKER_DELAY": str(delay), "PIDURABLE_WORKER_TOOL_DELAY": "" if tool_delay is None else str(tool_delay)}
    cmd = [
        sys.executable, "-m", "pidurable.shell.cli", "worker", "--dsn", dsn, "--app", "worker_app:setup",
        "--schema", schema, "--worker-id", name, "--concurrency", "50", "--lease-seconds", str(lease),
        "--renew-seconds", str(lease / 4), "--poll-seconds", "0.5",
    ]  # fmt: skip
    out = open(log, "wb") if log else subprocess.DEVNULL
    return subprocess.Popen(cmd, cwd=APP_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


async def _wait_started(dsn: str, schema: str, names: list[str]) -> None:
    with trio.fail_after(60):
        while True:
            rows = _sql(dsn, "public", "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s)" % (
                "ARRAY[" + ",".join(f"'pidurable {n} listen'" for n in names) + "]"))
            if rows[0][0] == len(names):
                return
            await trio.sleep(0.1)


async def throughput(dsn: str, workers: int, conversations: int) -> dict[str, float]:
    schema = _schema()
    client = Client(dsn, schema=schema)
    names = [f"t{workers}-{i}" for i in range(workers)]
    procs = [_worker(dsn, schema, n, 0.0, log=Path(tempfile.gettempdir()) / f"pidurable-bench-{n}.log") for n in names]
    try:
        await _wait_started(dsn, schema, names)
        cids = [await client.create_conversation(worker_app.AGENT) for _ in range(conversations)]
        before = _sql(dsn, schema, "SELECT count(*) FROM journal")[0][0]
        t0 = time.perf_counter()
        subs = [await client.submit(cid, Input("go")) for cid in cids]
        for s in subs:
            await s.wait(poll=0.02)
        elapsed = time.perf_counter() - t0
        commits = _sql(dsn, schema, "SELECT count(*) FROM journal")[0][0] - before
    finally:
        _stop(procs)
        client.close()
    return {"seconds": elapsed, "commits/s": commits / elapsed, "conversations/s": conversations / elapsed, "commits": commits}


async def takeover(dsn: str, trees: int) -> list[float]:
    schema = _schema()
    client = Client(dsn, schema=schema)
    first = _worker(dsn, schema, "doomed", 0.0, tool_delay=60.0)
    second: subprocess.Popen[bytes] | None = None
    try:
        await _wait_started(dsn, schema, ["doomed"])
        cids = [await client.create_conversation(worker_app.AGENT) for _ in range(trees)]
        for cid in cids:
            await client.submit(cid, Input("go"))
        with trio.fail_after(60):  # every tree is inside its minute-long tool bodies
            while _sql(dsn, schema, "SELECT count(*) FROM tasks WHERE status = 'running' AND kind = 'pi.tool'")[0][0] < 2 * trees:
                await trio.sleep(0.05)
        second = _worker(dsn, schema, "heir", 0.0)
        await _wait_started(dsn, schema, ["heir"])
        first.send_signal(signal.SIGKILL)
        first.wait()
        (killed_at,) = _sql(dsn, schema, "SELECT clock_timestamp()")[0]
        with trio.fail_after(60):
            while _sql(dsn, schema, "SELECT count(*) FROM leases WHERE owner = 'heir'")[0][0] < trees:
                await trio.sleep(0.02)
        rows = _sql(dsn, schema, "SELECT claimed_at FROM leases WHERE owner = 'heir'")
        return sorted((claimed - killed_at).total_seconds() for (claimed,) in rows)
    finally:
        _stop([first] + ([second] if second else []))
        client.close()


def _timed(cls: Any, name: str, samples: list[float]) -> Any:
    orig = getattr(cls, name)

    def timed(self: Any, *args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return orig(self, *args, **kw)
        finally:
            samples.append(time.perf_counter() - t)

    setattr(cls, name, timed)
    return orig


async def commit_latency(dsn: str, conversations: int) -> dict[str, list[float]]:
    os.environ["PIDURABLE_WORKER_DELAY"] = "0"
    out: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    # PostgreSQL: one in-process worker, fenced commits timed
    schema = _schema()
    orig = _timed(PostgresStorage, "commit_fenced", out["postgres"])
    try:
        s = worker_app.setup()
        worker = Worker(dsn, registry=s.registry, models=s.models, schema=schema, worker_id="lat", concurrency=50,
                        leases=LeaseSettings(duration=5, renew_interval=1, poll_interval=0.5))  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with Client(dsn, schema=schema) as client:
                cids = [await client.create_conversation(worker_app.AGENT) for _ in range(conversations)]
                out["postgres"].clear()
                subs = [await client.submit(cid, Input("go")) for cid in cids]
                for sub in subs:
                    await sub.wait(poll=0.02)
            nursery.cancel_scope.cancel()
    finally:
        PostgresStorage.commit_fenced = orig  # type: ignore[method-assign]
    # SQLite: one harness, the same conversations, commits timed
    orig = _timed(SqliteStorage, "commit_many", out["sqlite"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            s = worker_app.setup()
            async with Harness.open(open_sqlite_storage(Path(tmp) / "s.sqlite"), models=s.models, registry=s.registry) as h:
                convs = [await h.create_conversation(agent=worker_app.AGENT) for _ in range(conversations)]
                out["sqlite"].clear()
                handles = [await c.submit(Input("go")) for c in convs]
                for handle in handles:
                    await handle.wait()
    finally:
        SqliteStorage.commit_many = orig  # type: ignore[method-assign]
    return out


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def main(args: argparse.Namespace) -> None:
    given = os.environ.get("PIDURABLE_PG_DSN")
    started = None if given else pg_server._start()
    dsn = given or started[0]  # type: ignore[index]
    try:
        print(f"scale_out: {args.conversations} conversations (one tool round + answer each), cpus={os.cpu_count()}")
        for n in args.workers:
            r = await throughput(dsn, n, args.conversations)
            print(f"  {n} worker(s): {r['seconds']:.2f} s, {r['commits/s']:.0f} commits/s, {r['conversations/s']:.1f} conversations/s ({r['commits']} commits)")
        if args.trees:
            lat = []
            for _ in range(args.kills):
                lat += await takeover(dsn, args.trees)
            print(f"  takeover after SIGKILL ({args.kills} kills x {args.trees} trees, lease 2 s, poll 0.5 s): p50 {_pct(lat, 50):.2f} s, p99 {_pct(lat, 99):.2f} s, max {max(lat):.2f} s")
        if args.latency:
            c = await commit_latency(dsn, args.conversations)
            for name, xs in c.items():
                ms = [x * 1000 for x in xs]
                print(f"  commit latency {name:8s}: p50 {_pct(ms, 50):.2f} ms, p99 {_pct(ms, 99):.2f} ms ({len(ms)} commit batches)")
    finally:
        if started is not None:
            _, bindir, data, user = started
            pg_server._run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trees", type=int, default=20, help="trees held by the killed worker (0: skip the takeover)")
    parser.add_argument("--kills", type=int, default=5, help="takeover trials (a fresh pair of workers each)")
    parser.add_argument("--no-latency", dest="latency", action="store_false")
    trio.run(main, parser.parse_args())
