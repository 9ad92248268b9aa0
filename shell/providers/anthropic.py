"""``Anthropic``: the Anthropic Messages API over httpx with SSE streaming.

Theory of operation
-------------------
One :meth:`Anthropic.complete` is one ``POST {base_url}/v1/messages`` with
``stream: true``. The request carries the system messages as the top-level
``system`` (joined in order), the conversation as content blocks (assistant
``text`` + ``tool_use`` blocks; tool results as ``tool_result`` blocks in a
user message, consecutive results merged into one message, as the API wants)
and the tools with ``input_schema``. Headers: ``x-api-key`` and
``anthropic-version``.

The typed SSE events are folded by :class:`MessageAccumulator`:
``message_start`` (input usage), ``content_block_start`` (a text block, or a
``tool_use`` block with id and name), ``content_block_delta`` (``text_delta``
appended and reported through ``on_partial``; ``input_json_delta`` fragments
gathered and parsed when the stream is complete), ``message_delta`` (stop
reason, output usage), ``message_stop`` (the end), ``ping`` (ignored) and
``error`` (classified by its type/message: ``overloaded_error`` is
retryable). Other block kinds (thinking, ...) are skipped.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from pidurable.core.context import Message
from pidurable.core.model import ToolCall, Usage

from .base import ModelError, ModelReply, ModelRequest, OnPartial, ToolSpec
from .classify import ended_early, malformed, stream_error
from .openai import DEFAULT_TIMEOUT, HTTPAdapter, is_event_stream, parse_arguments

ANTHROPIC_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "refusal": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
}


def anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` in the Messages API shape."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})

    for m in messages:
        if m.role == "system":
            if m.text:
                system.append(m.text)
        elif m.role == "assistant":
            if m.text:
                add("assistant", {"type": "text", "text": m.text})
            for c in m.tool_calls:
                add("assistant", {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
        elif m.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.text}
            if m.is_error:
                block["is_error"] = True
            add("user", block)
        elif m.text:  # user
            add("user", {"type": "text", "text": m.text})
    return "\n\n".join(system), out


def anthropic_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


class MessageAccumulator:
    """Folds Messages API stream events (or one JSON message) into a reply."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.stop: str | None = None
        self.done = False

    @property
    def text(self) -> str:
        return "".join(b["text"] for _, b in sorted(self.blocks.items()) if b["type"] == "text")

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if usage.get("input_tokens") is not None:
            self.input_tokens = sum(
                int(usage.get(k) or 0)
                for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
        if usage.get("output_tokens") is not None:
            self.output_tokens = int(usage["output_tokens"])

    def _start(self, index: int, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text":
            self.blocks[index] = {"type": "text", "text": block.get("text") or ""}
        elif kind == "tool_use":
            given = block.get("input")
            self.blocks[index] = {
                "type": "tool_use",
                "id": block.get("id") or f"toolu_{index}",
                "name": block.get("name") or "",
                "json": [],
                "input": given if isinstance(given, dict) else {},
            }
        else:
            self.blocks[index] = {"type": str(kind)}

    def feed(self, data: dict[str, Any]) -> bool:
        """Fold one event; True when the text grew."""
        kind = data.get("type")
        if kind == "message_start":
            self._usage((data.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            self._start(int(data.get("index", len(self.blocks))), data.get("content_block") or {})
        elif kind == "content_block_delta":
            block = self.blocks.get(int(data.get("index", -1)))
            delta = data.get("delta") or {}
            if block is None:
                raise ModelError(f"Anthropic stream: a delta for unknown content block {data.get('index')}")
            if delta.get("type") == "text_delta" and block["type"] == "text":
                block["text"] += delta.get("text") or ""
                return bool(delta.get("text"))
            if delta.get("type") == "input_json_delta" and block["type"] == "tool_use":
                block["json"].append(delta.get("partial_json") or "")
        elif kind == "message_delta":
            stop = (data.get("delta") or {}).get("stop_reason")
            if stop:
                self.stop = stop
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error(data)
        return False

    def feed_message(self, message: dict[str, Any]) -> None:
        """A whole (non-streamed) message."""
        for i, block in enumerate(message.get("content") or ()):
            self._start(i, block)
            if block.get("type") == "text":
                self.blocks[i]["text"] = block.get("text") or ""
        self.stop = message.get("stop_reason")
        self._usage(message.get("usage"))
        self.done = True

    def reply(self) -> ModelReply:
        calls = []
        for _, b in sorted(self.blocks.items()):
            if b["type"] != "tool_use":
                continue
            raw = "".join(b["json"])
            args = parse_arguments(raw, b["name"], b["id"], "length" if self.stop == "max_tokens" else None) if raw else b["input"]
            calls.append(ToolCall(id=b["id"], name=b["name"], arguments=args))
        stop = ANTHROPIC_STOP.get(self.stop or "end_turn", "stop")
        if calls:
            stop = "tool_use"
        elif stop == "tool_use":
            stop = "stop"
        usage = None
        if self.input_tokens is not None or self.output_tokens is not None:
            usage = Usage(input_tokens=self.input_tokens or 0, output_tokens=self.output_tokens or 0)
        return ModelReply(text=self.text, tool_calls=tuple(calls), stop_reason=stop, usage=usage)


class Anthropic(HTTPAdapter):
    """Anthropic Messages API (``POST {base_url}/v1/messages``). ``base_url``
    is the host root (a trailing ``/v1`` is accepted and dropped)."""

    label = "Anthropic"

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com",
        api_key: str = "",
        *,
        version: str = "2023-06-01",
        max_tokens: int = 4096,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        stream: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        base = base[: -len("/v1")] if base.endswith("/v1") else base
        super().__init__(base, api_key, timeout=timeout, headers=headers, client=client, context_window=context_window)
        self.version = version
        self.max_tokens = max_tokens
        self.stream = stream
        self.extra_body = dict(extra_body or {})

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        key = self._key.reveal()
        if key:
            headers["x-api-key"] = key
        return headers

    def body(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = anthropic_messages(request.messages)
        body: dict[str, Any] = {"model": request.model.model_id, "max_tokens": self.max_tokens, "messages": messages}
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
        if self.stream:
            body["stream"] = True
        body.update(self.extra_body)
        return body

    async def complete(self, request: ModelRequest, on_partial: OnPartial | None = None) -> ModelReply:
        acc = MessageAccumulator()
        async with self.open("POST", f"{self.base_url}/v1/messages", self.body(request), stream=self.stream) as resp:
            if not is_event_stream(resp):
                data = await self.read_json(resp)
                if not isinstance(data, dict):
                    raise malformed("Anthropic response body", json.dumps(data), "not an object")
                if data.get("type") == "error" or data.get("error"):
                    raise stream_error(data)
                acc.feed_message(data)
                return acc.reply()
            async with contextlib.aclosing(self.events(resp)) as events:
                async for _, data in events:
                    if data == "[DONE]":
                        break
                    if not isinstance(data, dict):
                        raise malformed("Anthropic SSE data", json.dumps(data), "not an object")
                    if acc.feed(data) and on_partial is not None:
                        on_partial(acc.text)
                    if acc.done:
                        break
        if not acc.done and acc.stop is None:
            raise ended_early("Anthropic")
        return acc.reply()
