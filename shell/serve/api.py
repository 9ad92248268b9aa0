"""The JSON API's handlers: each turns one request into one library call.

Every handler reads its input in two steps - the body against its schema
(schema.py), then the library's own checks (``conv.submit`` and the rest
raise ``InvalidInput``) - and answers with records as the store holds them
(wire.py). Library errors map to statuses in app.py (``InvalidInput`` 400,
``NotFound`` 404, ``ConversationBusy`` 409). Handlers hold no state of their
own except a cache of conversation titles (the first user message, which
never changes once written).
"""

from __future__ import annotations

import math
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from pidurable.core.model import ConversationId

from ..conversation import Conversation
from ..host_input import check_id
from ..errors import InvalidInput, NotFound
from ..harness import Harness
from ..submissions import Input, Write
from .hub import Hubs
from ..strict_json import loads_strict
from .schema import MAX_ID, check_body
from .wire import conversation_json, dumps, record, task_row, title_of, usage_json

#: The longest ``?wait=`` a submission read may ask for, in seconds.
MAX_WAIT = 60.0


class ApiError(Exception):
    """A refusal with its HTTP status and error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def json_response(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status_code=status, media_type="application/json")


def _number(raw: str, what: str) -> int:
    """A record id from a path or query: a decimal the store can hold."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_ID:
        raise NotFound(f"No {what} {raw}")
    return int(raw)


class Api:
    def __init__(self, harness: Harness, hubs: Hubs, *, agent: Any, max_body: int) -> None:
        self.harness, self.hubs = harness, hubs
        self.agent, self.max_body = agent, max_body
        self._titles: dict[int, str] = {}

    # --- reading requests ---------------------------------------------------------
    async def body(self, request: Request, kind: str) -> dict[str, Any]:
        """The JSON body, at most ``max_body`` bytes (else 413), checked
        against the request schema ``kind`` (else 400). No body means ``{}``."""
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.max_body:
            raise ApiError(413, "too_large", f"The body is larger than {self.max_body} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise ApiError(413, "too_large", f"The body is larger than {self.max_body} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            return check_body(kind, {})
        try:
            value = loads_strict(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput("The body is not UTF-8") from None
        except (ValueError, RecursionError) as e:
            raise InvalidInput(f"The body is not JSON: {e}") from None
        return check_body(kind, value)

    async def conversation(self, request: Request) -> Conversation:
        cid = _number(request.path_params["id"], "conversation")
        conv = await self.harness.conversation(cid)
        if conv is None:
            raise NotFound(f"No conversation {cid}")
        return conv

    def _query_number(self, request: Request, name: str) -> int | None:
        raw = request.query_params.get(name)
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_ID:
            raise InvalidInput(f"{name} must be a whole number between 0 and {MAX_ID}, not {raw!r}")
        return int(raw)

    async def summary(self, conv: Conversation, *, full: bool = False) -> dict[str, Any]:
        storage = self.harness.runtime.storage
        rec = storage.conversation(ConversationId(conv.id))
        if rec is None:
            raise NotFound(f"No conversation {conv.id}")
        title = self._titles.get(conv.id)
        if title is None:
            title = title_of(await conv.transcript())
            if title is not None:
                self._titles[conv.id] = title
        out = conversation_json(rec, idle=await conv.idle(), title=title, root=conv.id == 1)
        if full:
            out["agent"] = record(await conv.agent())
            out["usage"] = usage_json(await conv.usage())
        return out

    # --- conversations --------------------------------------------------------------
    async def list_conversations(self, request: Request) -> Response:
        convs = await self.harness.conversations()
        return json_response([await self.summary(c) for c in convs])

    async def create_conversation(self, request: Request) -> Response:
        await self.body(request, "create")
        conv = await self.harness.create_conversation(agent=self.agent)
        return json_response(await self.summary(conv, full=True), 201)

    async def get_conversation(self, request: Request) -> Response:
        return json_response(await self.summary(await self.conversation(request), full=True))

    async def transcript(self, request: Request) -> Response:
        conv = await self.conversation(request)
        after = self._query_number(request, "after")
        entries = await conv.transcript()
        if after is not None:
            entries = [e for e in entries if e.id > after]
        return Response("[" + ",".join(dumps(record(e)) for e in entries) + "]", media_type="application/json")

    async def submit(self, request: Request) -> Response:
        conv = await self.conversation(request)
        body = await self.body(request, "submit")
        request_id = check_id(body.get("request_id"), "request_id")
        kind = body.get("kind", "input")
        item: Input | Write
        if kind == "write":
            if "when_busy" in body:
                raise InvalidInput("when_busy applies to inputs; a write is placed at the next boundary")
            item = Write(body["content"], request_id=request_id, kind=body.get("entry_kind", "user"), data=body.get("data"))
        else:
            if "entry_kind" in body or "data" in body:
                raise InvalidInput("entry_kind and data apply to writes (kind: write)")
            item = Input(body["content"], request_id=request_id, when_busy=body.get("when_busy", "follow_up"))
        storage = self.harness.runtime.storage
        existing = storage.submission_by_request(ConversationId(conv.id), request_id) if request_id else None
        handle = await conv.submit(item)
        return json_response(record(await handle.record()), 200 if existing is not None else 201)

    async def abort(self, request: Request) -> Response:
        conv = await self.conversation(request)
        body = await self.body(request, "abort")
        await conv.abort(background=body.get("background", False))
        return json_response(await self.summary(conv, full=True))

    async def compact(self, request: Request) -> Response:
        conv = await self.conversation(request)
        body = await self.body(request, "compact")
        task_id = await conv.compact(body.get("instructions"))
        return json_response({"task_id": task_id}, 202)

    async def fork(self, request: Request) -> Response:
        conv = await self.conversation(request)
        body = await self.body(request, "fork")
        child = await conv.fork(at=body["at"], documents=body.get("documents"))
        return json_response(await self.summary(child, full=True), 201)

    async def events(self, request: Request) -> Response:
        conv = await self.conversation(request)
        hubs = self.hubs

        async def stream() -> Any:
            async with hubs.follow(conv) as hub:
                async for frame in hub.frames():
                    yield frame

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    # --- submissions, tasks, usage ----------------------------------------------------
    async def submission(self, request: Request) -> Response:
        sid = _number(request.path_params["id"], "submission")
        raw = request.query_params.get("wait")
        wait = 0.0
        if raw is not None:
            try:
                wait = float(raw)
            except ValueError:
                wait = math.nan
            if not 0 <= wait <= MAX_WAIT:
                raise InvalidInput(f"wait must be a number of seconds between 0 and {MAX_WAIT:g}, not {raw!r}")
        handle = await self.harness.submission(sid)
        if handle is None:
            raise NotFound(f"No submission {sid}")
        rec = None
        if wait:
            with trio.move_on_after(wait):
                rec = await handle.wait()
        return json_response(record(rec if rec is not None else await handle.record()))

    async def inspect(self, request: Request) -> Response:
        only = self._query_number(request, "conversation")
        why = {i.task_id: i for i in await self.harness.inspect()}
        tasks = await self.harness.tasks(conversation_id=only, live_only=True)
        return json_response({"tasks": [task_row(t, why.get(t.id)) for t in sorted(tasks, key=lambda t: t.id)]})

    async def usage(self, request: Request) -> Response:
        return json_response(usage_json(await self.harness.usage()))


__all__ = ["Api", "ApiError", "json_response"]
