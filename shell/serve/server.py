"""Serving the app: Hypercorn's Trio worker, on the harness's own Trio run.

``serve(app, host=..., port=...)`` binds and serves until cancelled (or until
``shutdown_trigger`` returns); started with ``nursery.start`` it reports the
addresses it listens on (``http://127.0.0.1:8765``; port 0 picks a free one).
A host is checked here too: an address that is not loopback is served only
because the caller asked for it (``pidurable serve --host``), never by default.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import Framework

#: Where ``pidurable serve`` listens unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def is_loopback(host: str) -> bool:
    """``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


async def serve(
    app: Framework,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over HTTP/1.1 (and h2c) until cancelled or
    ``shutdown_trigger`` returns; ``task_status`` gets the bound URLs."""
    config = Config()
    config.bind = [bind_address(host, port)]
    config.accesslog = None
    config.errorlog = logging.getLogger("pidurable.serve")
    config.graceful_timeout = 2.0
    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)
