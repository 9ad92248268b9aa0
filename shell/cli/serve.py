"""``pidurable serve``: a store's agent over HTTP, with a live page.

Opens the store (creating it if needed), the harness (recovery, then
scheduling), and serves the app of :mod:`pidurable.shell.serve` with
Hypercorn's Trio worker on the same Trio run. The agent comes from
``--app module:factory`` (the host's own tools and models) or from the flags
``run`` takes (``--model``, ``--tools``, ``--cwd``; keys from the
environment). Every ``/api`` request needs the bearer token: read from
``--token-file`` (created with a fresh token, mode 0600, if missing) or
generated and printed. It listens on loopback unless ``--host`` says
otherwise. Ctrl-C (or SIGTERM) stops serving and closes the harness
cleanly; anything in flight is recovered by the next open.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import trio

from pidurable.core.model import AgentConfig

from ..env import LocalEnv
from ..harness import Harness
from ..storage import open_sqlite_storage
from .agent import TOOL_CHOICES, _models, _registry, parse_model, usage_error
from .common import Subparsers


def _token(args: argparse.Namespace) -> tuple[str, str]:
    """The token, and how it was obtained (for the start banner)."""
    if not args.token_file:
        return secrets.token_urlsafe(24), "generated"
    path = Path(args.token_file)
    if path.exists():
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise usage_error(f"--token-file {path}: cannot read it ({e})") from None
        if len(token) < 8:
            raise usage_error(f"--token-file {path}: the token must be at least 8 characters")
        return token, f"read from {path}"
    token = secrets.token_urlsafe(24)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
    except OSError as e:
        raise usage_error(f"--token-file {path}: cannot create it ({e})") from None
    return token, f"new, written to {path}"


def _setup(args: argparse.Namespace, serve: Any) -> Any:
    if args.app:
        if args.model or args.cwd or args.tools != "read":
            raise usage_error("--app sets the models and tools: do not combine it with --model, --tools or --cwd")
        return serve.load_setup(args.app)
    ref = parse_model(args.model) if args.model else None
    cwd = Path(args.cwd or ".").resolve()
    if not cwd.is_dir():
        raise usage_error(f"--cwd {args.cwd} is not a directory")
    return serve.Setup(
        models=_models(args, ref),
        registry=_registry(args),
        env=LocalEnv(cwd),
        agent=AgentConfig(model=ref, cwd=str(cwd)),
    )


async def _serve(args: argparse.Namespace, serve: Any, setup: Any, token: str, how: str) -> int:
    storage = open_sqlite_storage(args.db)
    options = serve.ServeOptions(token=token, agent=setup.agent, cors_origins=tuple(args.cors_origin or ()))
    async with Harness.open(storage, models=setup.models, registry=setup.registry, env=setup.env, settings=setup.settings) as harness:
        if not await harness.conversations():
            await harness.root(agent=setup.agent)
        async with serve.open_app(harness, options) as app, trio.open_nursery() as nursery:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                stop = trio.Event()

                async def on_signal() -> None:
                    async for _ in signals:
                        stop.set()
                        return

                nursery.start_soon(on_signal)
                urls = await nursery.start(lambda task_status: serve.serve(app, host=args.host, port=args.port, shutdown_trigger=stop.wait, task_status=task_status))
                url = urls[0] if urls else f"http://{args.host}:{args.port}"
                print(f"pidurable: serving {args.db} at {url}/", flush=True)
                if how == "generated":
                    print(f"  open {url}/#token={token}", flush=True)
                    print(f"  API token (Authorization: Bearer ...): {token}", flush=True)
                else:
                    print(f"  API token {how}", flush=True)
                if not serve.is_loopback(args.host):
                    print(f"  warning: listening on {args.host}, reachable from other machines (the token still guards the API)", file=sys.stderr, flush=True)
                await stop.wait()
                nursery.cancel_scope.cancel()
    print("pidurable: stopped", flush=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .. import serve
    except ImportError as e:  # the optional extra is not installed
        raise usage_error(f"pidurable serve needs the serve extra: pip install 'pidurable[serve]' (missing: {e.name})") from None
    if not 0 <= args.port <= 65535:
        raise usage_error(f"--port must be 0..65535, not {args.port}")
    setup = _setup(args, serve)
    token, how = _token(args)
    return trio.run(_serve, args, serve, setup, token, how)


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common],
        help="serve a store over HTTP: a JSON API, a live page, Server-Sent Events",
        description="Serve the store's agent over HTTP (docs/serve.md): the JSON API under /api (bearer token), "
        "its OpenAPI document at /api/openapi.json, and a live page at /. Needs the serve extra.",
    )
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store (created if missing)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--token-file", metavar="FILE", help="read the API token from FILE (created with a new token if missing)")
    p.add_argument("--app", metavar="MODULE:FACTORY", help="the agent: FACTORY() in MODULE returns a pidurable.shell.serve.Setup")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="the model of new conversations (keys from the environment)")
    p.add_argument("--tools", choices=TOOL_CHOICES, default="read", help="tools the model gets (default read; as for run)")
    p.add_argument("--cwd", metavar="DIR", help="the working directory of the tools (default .)")
    p.add_argument("--base-url", metavar="URL", help="provider base URL (default from the environment)")
    p.add_argument("--api-key", metavar="KEY", help="provider API key (default from the environment)")
    p.add_argument("--cors-origin", metavar="ORIGIN", action="append", help="allow browser calls from ORIGIN (repeatable; CORS is off by default)")
    p.set_defaults(func=cmd_serve)
