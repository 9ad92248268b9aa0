"""``OpenAIChat``: the OpenAI Chat Completions API (and compatible servers)
over httpx with SSE streaming; also the HTTP plumbing the other adapters share.

Theory of operation
-------------------
One :meth:`OpenAIChat.complete` is one ``POST {base_url}/chat/completions``
with ``stream: true`` and ``stream_options.include_usage``. The SSE chunks are
folded by :class:`ChatAccumulator`: text deltas are appended (and reported
through ``on_partial(text_so_far)``), tool-call deltas are gathered by their
``index`` (id, function name, argument fragments) and parsed as JSON only when
the stream is complete, ``finish_reason`` becomes the stop reason and the
trailing usage chunk becomes :class:`Usage`. ``data: [DONE]`` (or, leniently,
a ``finish_reason``) ends the stream; a stream that closes before either is a
retryable "stream ended early". A JSON (non-stream) answer is accepted too, so
``stream=False`` and servers that ignore ``stream`` work.

Every failure leaves as a :class:`ModelError` classified by
:mod:`.classify`; nothing else escapes (a trio cancellation passes through and
closes the HTTP stream on its way out).

Keys: the API key is kept in a :class:`Secret` and only ever written into
request headers; ``repr()`` shows the base URL only, and error texts have the
key masked before they leave the adapter (they are stored in the journal).

Clients: an adapter given ``client=`` uses it. Otherwise it makes its own
``httpx.AsyncClient`` per Trio run (a connection pool belongs to one event
loop), so one adapter object can serve several ``trio.run`` calls.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import trio
from httpx_sse import EventSource

from pidurable.core.context import Message
from pidurable.core.model import ToolCall, Usage

from .base import ModelError, ModelReply, ModelRequest, OnPartial, ToolSpec, check_window
from ..strict_json import loads_strict
from .classify import classify, classify_exception, ended_early, malformed, stream_error

#: read = the longest silence between two chunks of a stream
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=15.0)

OPENAI_STOP = {"stop": "stop", "length": "length", "tool_calls": "tool_use", "function_call": "tool_use"}


class Secret:
    """A string that does not show itself in ``repr``/``str``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


class HTTPAdapter:
    """Shared plumbing: base URL, key, timeouts, the client, error mapping."""

    #: names the provider in error texts
    label = "HTTP"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        context_window: int | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: The model's context window in tokens, or None (unknown): with a known
        #: window the harness records it with the agent and threshold compaction
        #: runs; without one only overflow compaction does (docs/context.md).
        self.context_window = check_window(context_window)
        self._key = Secret(api_key or "")
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.headers: dict[str, str] = dict(headers or {})
        self._given = client
        self._owned: tuple[object, httpx.AsyncClient] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    # --- the client -----------------------------------------------------------------
    def client(self) -> httpx.AsyncClient:
        if self._given is not None:
            return self._given
        try:
            loop: object = trio.lowlevel.current_trio_token()
        except RuntimeError:
            loop = None
        if self._owned is None or self._owned[0] is not loop:
            self._owned = (loop, httpx.AsyncClient(timeout=self.timeout))
        return self._owned[1]

    async def aclose(self) -> None:
        """Close the adapter's own client (a given ``client`` is the caller's)."""
        if self._owned is not None:
            owned, self._owned = self._owned[1], None
            await owned.aclose()

    # --- requests -------------------------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def redact(self, text: str) -> str:
        key = self._key.reveal()
        return text.replace(key, "***") if len(key) >= 4 else text

    def error(self, e: ModelError) -> ModelError:
        """``e`` with the key masked out of its text."""
        text = self.redact(str(e))
        if text == str(e):
            return e
        return ModelError(text, retryable=e.retryable, retry_after_ms=e.retry_after_ms, overflow=e.overflow)

    @contextlib.asynccontextmanager
    async def open(self, method: str, url: str, body: Any = None, *, stream: bool = False) -> AsyncIterator[httpx.Response]:
        """Send a request; yield the response once its status is 2xx. An
        error status, a transport failure (also one raised while the caller
        reads the body) and a ``ModelError`` leave as a classified, redacted
        ``ModelError``."""
        headers = {**self.headers, **self.auth_headers()}
        if stream:
            headers.setdefault("accept", "text/event-stream")
        try:
            async with self.client().stream(method, url, json=body, headers=headers, timeout=self.timeout) as resp:
                if resp.status_code >= 400:
                    raw = await resp.aread()
                    raise classify(resp.status_code, resp.headers, raw.decode("utf-8", errors="replace"))
                yield resp
        except ModelError as e:
            raise self.error(e) from None
        except httpx.HTTPError as e:
            raise self.error(classify_exception(e)) from None

    async def read_json(self, resp: httpx.Response) -> Any:
        raw = (await resp.aread()).decode("utf-8", errors="replace")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:  # (nested past the parser's stack)
            raise malformed(f"{self.label} response body", raw, e) from None

    async def events(self, resp: httpx.Response) -> AsyncGenerator[tuple[str, Any], None]:
        """The stream's ``(event name, data)`` pairs; ``data`` is the parsed
        JSON, or the raw string for the ``[DONE]`` sentinel."""
        async with contextlib.aclosing(EventSource(resp).aiter_sse()) as sses:
            async for sse in sses:
                data = sse.data
                if not data.strip():
                    continue
                if data.strip() == "[DONE]":
                    yield sse.event, "[DONE]"
                    continue
                try:
                    parsed = json.loads(data)
                except (ValueError, RecursionError) as e:
                    raise malformed(f"{self.label} SSE data", data, e) from None
                yield sse.event, parsed


def is_event_stream(resp: httpx.Response) -> bool:
    return "text/event-stream" in resp.headers.get("content-type", "")


def parse_arguments(raw: str, name: str, call_id: str, stop: str | None = None) -> dict[str, Any]:
    """Tool-call arguments as a dict; invalid JSON is a clear ModelError."""
    if not raw.strip():
        return {}
    try:
        value = loads_strict(raw)
    except (ValueError, RecursionError) as e:
        cut = " (the output was cut at the token limit)" if stop == "length" else ""
        raise ModelError(
            f"The model returned invalid JSON arguments for tool {name!r} (call {call_id}){cut}: {e}; "
            f"arguments: {raw[:200]!r}",
            retryable=False,
        ) from None
    if not isinstance(value, dict):
        raise ModelError(
            f"The model returned non-object arguments for tool {name!r} (call {call_id}): {raw[:200]!r}",
            retryable=False,
        )
    return value


# --- OpenAI chat completions --------------------------------------------------------


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or (None if m.tool_calls else "")}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in m.tool_calls
                ]
            out.append(msg)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text})
        else:  # system | user
            out.append({"role": m.role, "content": m.text})
    return out


def chat_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


class ChatAccumulator:
    """Folds chat-completion chunks into one reply."""

    def __init__(self, turn: int = 0) -> None:
        self.turn = turn
        self.text = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.done = False

    def feed(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk; True when the text grew."""
        grew = False
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
            )
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text += content
                grew = True
            for tc in delta.get("tool_calls") or ():
                self._tool_delta(tc)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return grew

    def _tool_delta(self, tc: dict[str, Any]) -> None:
        index = tc.get("index")
        if not isinstance(index, int):
            known = [i for i, c in self.calls.items() if tc.get("id") and c["id"] == tc.get("id")]
            index = known[0] if known else (len(self.calls) if tc.get("id") or not self.calls else max(self.calls))
        slot = self.calls.setdefault(index, {"id": None, "name": "", "args": []})
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        if fn.get("name"):
            slot["name"] = fn["name"]
        args = fn.get("arguments")
        if isinstance(args, str):
            slot["args"].append(args)
        elif isinstance(args, dict):  # some servers send the object itself
            slot["args"] = [json.dumps(args)]

    def reply(self) -> ModelReply:
        calls = []
        for i in sorted(self.calls):
            slot = self.calls[i]
            call_id = slot["id"] or f"call_{self.turn}_{i}"
            if not slot["name"]:
                raise ModelError(f"The model sent a tool call without a name (call {call_id})", retryable=False)
            calls.append(
                ToolCall(id=call_id, name=slot["name"], arguments=parse_arguments("".join(slot["args"]), slot["name"], call_id, self.finish))
            )
        stop = OPENAI_STOP.get(self.finish or "stop", "stop")
        if calls:
            stop = "tool_use"
        elif stop == "tool_use":
            stop = "stop"
        return ModelReply(text=self.text, tool_calls=tuple(calls), stop_reason=stop, usage=self.usage)


class OpenAIChat(HTTPAdapter):
    """OpenAI Chat Completions (``POST {base_url}/chat/completions``), also
    for compatible servers (llama.cpp, vLLM, fakellm, ...). ``base_url``
    includes the version, e.g. ``https://api.openai.com/v1``.

    ``extra_body`` is merged into every request (``temperature``,
    ``max_tokens``, ...); ``stream=False`` asks for one JSON answer."""

    label = "OpenAI"

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        api_key: str = "",
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        stream: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout=timeout, headers=headers, client=client, context_window=context_window)
        self.stream = stream
        self.extra_body = dict(extra_body or {})

    def auth_headers(self) -> dict[str, str]:
        key = self._key.reveal()
        return {"authorization": f"Bearer {key}"} if key else {}

    def body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model.model_id, "messages": chat_messages(request.messages)}
        if request.tools:
            body["tools"] = chat_tools(request.tools)
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    async def complete(self, request: ModelRequest, on_partial: OnPartial | None = None) -> ModelReply:
        acc = ChatAccumulator(turn=request.turn)
        async with self.open("POST", f"{self.base_url}/chat/completions", self.body(request), stream=self.stream) as resp:
            if not is_event_stream(resp):
                data = await self.read_json(resp)
                if not isinstance(data, dict):
                    raise malformed("OpenAI response body", json.dumps(data), "not an object")
                if data.get("error"):
                    raise stream_error(data)
                acc.feed(data)
                return acc.reply()
            async with contextlib.aclosing(self.events(resp)) as events:
                async for _, data in events:
                    if data == "[DONE]":
                        acc.done = True
                        break
                    if not isinstance(data, dict):
                        raise malformed("OpenAI SSE data", json.dumps(data), "not an object")
                    if data.get("error"):
                        raise stream_error(data)
                    if acc.feed(data) and on_partial is not None:
                        on_partial(acc.text)
        if not acc.done and acc.finish is None:
            raise ended_early("OpenAI")
        return acc.reply()
