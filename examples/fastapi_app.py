"""A FastAPI app on ``pidurable.aio``: durable agent conversations over HTTP.

Run it (FastAPI and an ASGI server such as uvicorn installed)::

    PIDURABLE_DB=agent.sqlite PIDURABLE_MODEL=openai:gpt-4o-mini OPENAI_API_KEY=... \\
        uvicorn examples.fastapi_app:app

The lifespan opens one harness on a SQLite file for the app's lifetime
(Trio runs in guest mode inside uvicorn's asyncio loop); each endpoint awaits
the harness like any asyncio library. Kill the server mid-run and start it
again: recovery resumes the run, and a client retrying its POST with the
same ``request_id`` gets the same submission back, settled once the run ends.

- ``POST /conversations/{id}/submissions`` ``{"content", "request_id"?,
  "when_busy"?}`` -> the submission record, once durably accepted
- ``GET /submissions/{id}?wait=SECONDS`` -> the record, after waiting up to
  SECONDS for it to settle (the timeout cancels the wait, never the run)
- ``GET /conversations/{id}/transcript`` -> the entries, oldest first
- ``GET /conversations/{id}/events[?until_idle=true]`` -> Server-Sent Events,
  one ``view`` per committed view (the first is the current one); with
  ``until_idle`` the stream ends at the first idle view (scripts, tests)

Errors are JSON ``{"error": {"code", "message"}}``: bad input 400, unknown ids
404, a busy conversation with ``when_busy="reject"`` 409.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

import pidurable.aio
from pidurable.shell import (
    AgentConfig,
    ConversationBusy,
    ConversationView,
    Input,
    InvalidInput,
    ModelRef,
    NotFound,
    Registry,
    open_sqlite_storage,
)
from pidurable.shell.providers import Models, ModelsProtocol
from pidurable.shell.storage.codec import converter


class SubmitBody(BaseModel):
    content: str
    request_id: str | None = None
    when_busy: str = "follow_up"


#: Host errors -> HTTP status and error code.
ERRORS: dict[type[Exception], tuple[int, str]] = {
    InvalidInput: (400, "invalid_input"),
    NotFound: (404, "not_found"),
    ConversationBusy: (409, "busy"),
}


def create_app(
    db: str | os.PathLike[str],
    *,
    models: ModelsProtocol | None,
    registry: Registry | None = None,
    agent: AgentConfig | None = None,
    env: object = None,
) -> FastAPI:
    """The app on the store ``db``; the root conversation is created with
    ``agent`` on first start."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        storage = open_sqlite_storage(db)
        async with pidurable.aio.Harness.open(
            storage, models=models, registry=registry if registry is not None else Registry(), env=env
        ) as harness:
            await harness.root(agent=agent)
            app.state.harness = harness
            yield

    app = FastAPI(title="pidurable example", lifespan=lifespan)

    for error, (status, code) in ERRORS.items():
        app.add_exception_handler(error, _error_response(status, code))

    def harness_of(request: Request) -> pidurable.aio.Harness:
        harness: pidurable.aio.Harness = request.app.state.harness
        return harness

    async def conversation(request: Request, cid: int) -> pidurable.aio.Conversation:
        conv = await harness_of(request).conversation(cid)
        if conv is None:
            raise NotFound(f"Conversation {cid} does not exist")
        return conv

    @app.post("/conversations/{cid}/submissions")
    async def submit(cid: int, body: SubmitBody, request: Request) -> Any:
        conv = await conversation(request, cid)
        handle = await conv.submit(Input(body.content, request_id=body.request_id, when_busy=body.when_busy))
        return converter.unstructure(await handle.record())

    @app.get("/submissions/{sid}")
    async def submission(sid: int, request: Request, wait: float = 0) -> Any:
        handle = await harness_of(request).submission(sid)
        if handle is None:
            raise NotFound(f"Submission {sid} does not exist")
        if wait > 0:
            try:
                async with asyncio.timeout(wait):  # cancels the wait only: the run goes on
                    return converter.unstructure(await handle.wait())
            except TimeoutError:
                pass
        return converter.unstructure(await handle.record())

    @app.get("/conversations/{cid}/transcript")
    async def transcript(cid: int, request: Request) -> Any:
        conv = await conversation(request, cid)
        return [converter.unstructure(entry) for entry in await conv.transcript()]

    @app.get("/conversations/{cid}/events")
    async def events(cid: int, request: Request, until_idle: bool = False) -> StreamingResponse:
        conv = await conversation(request, cid)

        async def stream() -> AsyncIterator[str]:
            async with conv.watch(interval_ms=50) as views:
                async for view in views:
                    yield f"event: view\ndata: {json.dumps(view_json(view))}\n\n"
                    if until_idle and view.idle:
                        break

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


def view_json(view: ConversationView) -> dict[str, Any]:
    """What a client renders: the newest entries, the live partial answer and
    tools, whether the agent is idle."""
    live = view.live
    return {
        "seq": view.seq,
        "idle": view.idle,
        "entries": [converter.unstructure(entry) for entry in view.entries],
        "live": None
        if live is None
        else {
            "partial": live.partial,
            "tools": [{"call_id": t.call_id, "name": t.name, "status": str(t.status), "output": t.output} for t in live.tools or ()],
        },
    }


def _error_response(status: int, code: str) -> Any:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": str(exc)}}, status_code=status)

    return handle


def _app_from_environment() -> FastAPI:
    provider, _, model_id = os.environ.get("PIDURABLE_MODEL", "openai:gpt-4o-mini").partition(":")
    return create_app(
        os.environ.get("PIDURABLE_DB", "agent.sqlite"),
        models=Models.from_env(),
        agent=AgentConfig(model=ModelRef(provider, model_id)),
    )


#: ``uvicorn examples.fastapi_app:app`` (nothing is opened before the lifespan starts).
app = _app_from_environment()
