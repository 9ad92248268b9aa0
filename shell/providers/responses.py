"""``OpenAIResponses``: the OpenAI Responses API in background mode, as a
deferred provider.

Theory of operation
-------------------
``complete`` sends ``POST {base_url}/responses`` with ``background: true``
(and ``store: true``, which background mode requires). The server answers at
once with a response id and status ``queued``/``in_progress``; the adapter
returns ``ModelDeferredReply(handle={"id": id}, poll_after_ms=...)``. The core
commits the handle before it polls, so a restarted process polls the same job
and never creates a second one.

``poll(request, handle)`` sends ``GET {base_url}/responses/{id}``:

* ``queued``/``in_progress`` -> deferred again (the core polls strictly later);
* ``completed`` (or ``incomplete``) -> a :class:`ModelReply` from the output
  items (``message`` text parts, ``function_call`` items, usage);
* ``failed`` -> a :class:`ModelError` classified by the job's error code and
  message (``server_error`` and ``rate_limit_exceeded`` are retryable: the
  core's retry then creates a new job); ``cancelled`` -> not retryable.

A transient failure of the poll request itself (a 5xx, a reset connection)
does not abandon the job: the adapter answers "deferred" with the same id and
a count of consecutive poll errors in the handle, and gives up (raising the
error) after ``max_poll_errors`` in a row.

``background=False`` sends an ordinary (blocking) request and never defers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from pidurable.core.context import Message
from pidurable.core.model import ToolCall, Usage

from .base import ModelDeferredReply, ModelError, ModelReply, ModelRequest, OnPartial, ToolSpec
from .classify import malformed, stream_error
from .openai import DEFAULT_TIMEOUT, HTTPAdapter, parse_arguments

PENDING = frozenset({"queued", "in_progress"})


def response_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            if m.text:
                out.append({"role": "assistant", "content": m.text})
            for c in m.tool_calls:
                out.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)})
        elif m.role == "tool":
            out.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.text})
        else:  # system | user
            out.append({"role": m.role, "content": m.text})
    return out


def response_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]


def response_reply(data: dict[str, Any]) -> ModelReply:
    """A finished response object as a reply."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for item in data.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    text.append(part.get("text") or part.get("refusal") or "")
        elif item.get("type") == "function_call":
            call_id = item.get("call_id") or item.get("id") or f"call_{len(calls)}"
            name = item.get("name") or ""
            calls.append(ToolCall(id=call_id, name=name, arguments=parse_arguments(item.get("arguments") or "", name, call_id)))
    usage = data.get("usage")
    reason = (data.get("incomplete_details") or {}).get("reason")
    stop = "tool_use" if calls else ("length" if reason == "max_output_tokens" else "stop")
    return ModelReply(
        text="".join(text),
        tool_calls=tuple(calls),
        stop_reason=stop,
        usage=Usage(input_tokens=int(usage.get("input_tokens") or 0), output_tokens=int(usage.get("output_tokens") or 0))
        if isinstance(usage, dict)
        else None,
    )


class OpenAIResponses(HTTPAdapter):
    """OpenAI Responses API; deferred (background) by default."""

    label = "OpenAI Responses"

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        api_key: str = "",
        background: bool = True,
        *,
        poll_interval_ms: int = 2000,
        max_poll_errors: int = 5,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        extra_body: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout=timeout, headers=headers, client=client, context_window=context_window)
        self.background = background
        self.poll_interval_ms = poll_interval_ms
        self.max_poll_errors = max_poll_errors
        self.extra_body = dict(extra_body or {})

    def auth_headers(self) -> dict[str, str]:
        key = self._key.reveal()
        return {"authorization": f"Bearer {key}"} if key else {}

    def body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model.model_id, "input": response_input(request.messages)}
        if request.tools:
            body["tools"] = response_tools(request.tools)
        if self.background:
            body["background"] = True
            body["store"] = True
        body.update(self.extra_body)
        return body

    async def complete(
        self, request: ModelRequest, on_partial: OnPartial | None = None
    ) -> ModelReply | ModelDeferredReply:
        async with self.open("POST", f"{self.base_url}/responses", self.body(request)) as resp:
            data = await self.read_json(resp)
            return self._outcome(data)

    async def poll(self, request: ModelRequest, handle: Any) -> ModelReply | ModelDeferredReply:
        if not isinstance(handle, dict) or not isinstance(handle.get("id"), str):
            raise ModelError(f"Not an OpenAI Responses handle: {handle!r}")
        try:
            async with self.open("GET", f"{self.base_url}/responses/{handle['id']}") as resp:
                data = await self.read_json(resp)
        except ModelError as e:
            errors = int(handle.get("poll_errors", 0)) + 1
            if e.retryable and not e.overflow and errors < self.max_poll_errors:
                wait = max(self.poll_interval_ms, e.retry_after_ms or 0)
                return ModelDeferredReply(handle={"id": handle["id"], "poll_errors": errors}, poll_after_ms=wait)
            raise
        return self._outcome(data)

    async def cancel(self, handle: Any) -> None:
        """Ask the server to stop a background job (best effort; the core does
        not call this yet)."""
        async with self.open("POST", f"{self.base_url}/responses/{handle['id']}/cancel") as resp:
            await resp.aread()

    def _outcome(self, data: Any) -> ModelReply | ModelDeferredReply:
        if not isinstance(data, dict):
            raise malformed("OpenAI Responses body", json.dumps(data), "not an object")
        status = data.get("status")
        rid = data.get("id")
        if status in PENDING:
            if not isinstance(rid, str):
                raise malformed("OpenAI Responses body", json.dumps(data), "a pending response without an id")
            return ModelDeferredReply(handle={"id": rid}, poll_after_ms=self.poll_interval_ms)
        if status in ("completed", "incomplete"):
            return response_reply(data)
        if status == "failed":
            raise self.error(stream_error(data.get("error") or {"message": f"Response {rid} failed"}))
        if status == "cancelled":
            raise ModelError(f"OpenAI response {rid} was cancelled", retryable=False)
        raise malformed("OpenAI Responses body", json.dumps(data), f"unknown status {status!r}")
