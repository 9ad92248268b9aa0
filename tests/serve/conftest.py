"""Shared by the serve tests: a harness served by the app, reached with httpx
through the ASGI transport (``api``) or over loopback TCP from Hypercorn
(``live``: streaming responses need a real server; httpx's ASGI transport
buffers a response whole)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")

from pidurable.shell import Harness, MemoryStorage, open_sqlite_storage  # noqa: E402
from pidurable.shell.serve import ServeOptions, open_app, serve  # noqa: E402

from .scripted_app import AGENT, setup  # noqa: E402

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[tuple[Harness, httpx.AsyncClient, Any]]:
    """A harness (the scripted app, in memory) and an httpx client of its app."""
    s = setup()
    async with Harness.open(MemoryStorage(), models=s.models, registry=s.registry, env=None) as harness:
        await harness.root(agent=AGENT)
        async with open_app(harness, ServeOptions(token=TOKEN, agent=AGENT, **options)) as app:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://pidurable.test", headers=AUTH) as client:
                yield harness, client, app


@asynccontextmanager
async def live(settings: Any = None, **options: Any) -> AsyncIterator[tuple[Harness, httpx.AsyncClient, str]]:
    """The same over loopback TCP: Hypercorn's Trio worker on a free port."""
    s = setup()
    async with Harness.open(MemoryStorage(), models=s.models, registry=s.registry, env=None, settings=settings) as harness:
        await harness.root(agent=AGENT)
        async with open_app(harness, ServeOptions(token=TOKEN, agent=AGENT, **options)) as app:
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(partial(serve, app, host="127.0.0.1", port=0))
                limits = httpx.Limits(max_connections=200)
                async with httpx.AsyncClient(base_url=urls[0], headers=AUTH, timeout=30, limits=limits) as client:
                    yield harness, client, urls[0]
                nursery.cancel_scope.cancel()


class ServerThread:
    """The scripted app on a SQLite store, served by Hypercorn on a free
    loopback port from a thread of its own (for clients that are not Trio:
    Playwright, schemathesis). ``with ServerThread(db) as url: ...``"""

    def __init__(self, db: Any, **options: Any) -> None:
        self.db, self.options = db, options
        self.url = ""
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._token: Any = None
        self._stop: trio.Event | None = None

    def __enter__(self) -> str:
        self.thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the server did not start"
        if self.error is not None:
            raise self.error
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self.thread.join(20)

    async def _main(self) -> None:
        try:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            s = setup()
            storage = open_sqlite_storage(str(self.db))
            async with Harness.open(storage, models=s.models, registry=s.registry, env=None) as harness:
                await harness.root(agent=AGENT)
                async with open_app(harness, ServeOptions(token=TOKEN, agent=AGENT, **self.options)) as app:
                    async with trio.open_nursery() as nursery:
                        start = partial(serve, app, host="127.0.0.1", port=0, shutdown_trigger=self._stop.wait)
                        self.url = (await nursery.start(start))[0]
                        self.ready.set()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            self.error = e
            self.ready.set()


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` of a Server-Sent Events response, as they arrive."""
    event, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif not line and data:
            yield event, json.loads(data)
            event, data = "message", ""
