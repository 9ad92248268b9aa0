"""``pidurable worker``: one of many processes serving a PostgreSQL store.

Runs a :class:`pidurable.shell.worker.Worker` with the agent from ``--app
module:factory`` (the factory returns a ``pidurable.shell.serve.Setup``: the
models, tools, env and settings every tree this worker claims runs with).
It claims up to ``--concurrency`` conversation trees with work, renews their
leases, and releases them when they are idle; SIGINT or SIGTERM stops it and
releases every tree it holds (still wanted), so another worker takes them at
once. A killed worker's trees are taken over once their leases expire
(docs/scale-out.md).
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

import trio

from .agent import usage_error
from .common import Subparsers

if TYPE_CHECKING:  # the postgres extra and the serve setup are imported when the command runs
    from ..serve.setup import Setup
    from ..storage.postgres_tree import LeaseSettings


async def _run(args: argparse.Namespace, setup: Setup, leases: LeaseSettings) -> int:
    from ..worker import Worker

    worker = Worker(
        args.dsn,
        registry=setup.registry,
        models=setup.models,
        env=setup.env,
        settings=setup.settings,
        schema=args.schema,
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        leases=leases,
    )
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert worker.store is not None
            print(
                f"pidurable: worker {worker.worker_id} on {worker.store.name}: up to {args.concurrency} trees, "
                f"lease {leases.duration:g} s (renewed every {leases.renew_interval:g} s)",
                flush=True,
            )
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
    s = worker.statistics()
    print(
        f"pidurable: worker stopped ({s.claimed} claimed, {s.released} released, {s.handed_back} handed back, "
        f"{s.lost} lost, {s.failed} failed)",
        flush=True,
    )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise usage_error("pidurable worker needs the postgres extra: pip install 'pidurable[postgres]'") from None
    if args.concurrency < 1:
        raise usage_error(f"--concurrency must be at least 1, not {args.concurrency}")
    from ..serve.setup import load_setup
    from ..storage.postgres_tree import LeaseSettings

    try:  # the flags first: a bad one never runs the host's factory
        leases = LeaseSettings(duration=args.lease_seconds, renew_interval=args.renew_seconds, poll_interval=args.poll_seconds)
    except ValueError as e:
        raise usage_error(str(e)) from None
    setup = load_setup(args.app)
    return trio.run(_run, args, setup, leases)


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "worker",
        parents=[common],
        help="serve a PostgreSQL store as one of many workers (leased conversation trees)",
        description="Claim conversation trees with work in the PostgreSQL store at --dsn and run them with the agent "
        "of --app, alongside any number of other workers (docs/scale-out.md). Needs the postgres extra.",
    )
    p.add_argument("--dsn", required=True, help="the PostgreSQL connection string (libpq: 'host=... dbname=...' or a URL)")
    p.add_argument("--app", metavar="MODULE:FACTORY", required=True, help="FACTORY() in MODULE returns a pidurable.shell.serve.Setup")
    p.add_argument("--schema", default="pidurable", help="the store's PostgreSQL schema (default pidurable)")
    p.add_argument("--concurrency", type=int, default=16, help="at most this many trees at once (default 16)")
    p.add_argument("--worker-id", help="this worker's name in leases and pins (default host:pid)")
    p.add_argument("--lease-seconds", type=float, default=10.0, help="lease duration (default 10)")
    p.add_argument("--renew-seconds", type=float, default=3.0, help="renew interval, at most half the lease (default 3)")
    p.add_argument("--poll-seconds", type=float, default=5.0, help="look for work this often without a notification (default 5)")
    p.set_defaults(func=cmd_worker)
