"""The HTTP adapters against a loopback server replaying recorded wire traffic.

``tests/shell/sse/*.http`` are HTTP responses as the OpenAI and Anthropic APIs
send them (status line, headers, SSE body); ``x-replay-cut`` marks a response
the server cuts off (``chunked``: the chunked body is never finished, the
client sees a broken stream; ``eof``: an un-framed body that just ends). The
server is a threaded ``http.server`` on 127.0.0.1:0, so nothing here reaches
the network and every test takes milliseconds. Tests run on the real clock
(no autojump: real sockets), every wait bounded by ``fail_after``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.context import Message
from pidurable.core.model import EntryKind, ModelRef, RetryPolicy, SubmissionStatus, ToolCall, Usage
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    MemoryStorage,
    Registry,
    Settings,
    ToolCallContext,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.providers import (
    Anthropic,
    ModelDeferredReply,
    ModelError,
    ModelReply,
    ModelRequest,
    Models,
    OpenAIChat,
    OpenAIResponses,
    ToolSpec,
)

SSE = Path(__file__).parent / "sse"
SECRET = "sk-test-SECRET"
WAIT = 10  # seconds, real time
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


# --- the loopback server ----------------------------------------------------------------


@attrs.frozen
class Transcript:
    """A recorded HTTP response: status, headers, body, how it ends."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    cut: str | None = None  # None | "chunked" | "eof"
    chunk_size: int | None = None  # None: one chunk per SSE event

    @classmethod
    def load(cls, name: str, **changes: Any) -> "Transcript":
        text = (SSE / name).read_text()
        head, _, body = text.partition("\n\n")
        status_line, *lines = head.splitlines()
        _, status, reason = status_line.split(" ", 2)
        headers = [tuple(s.strip() for s in line.split(":", 1)) for line in lines]
        cut = next((v for k, v in headers if k.lower() == "x-replay-cut"), None)
        kept = tuple((k, v) for k, v in headers if k.lower() != "x-replay-cut")
        t = cls(int(status), reason, kept, body.encode(), cut=cut)  # type: ignore[arg-type]
        return attrs.evolve(t, **changes)

    def with_headers(self, **headers: str) -> "Transcript":
        names = {k.replace("_", "-").lower(): v for k, v in headers.items()}
        kept = tuple((k, v) for k, v in self.headers if k.lower() not in names)
        return attrs.evolve(self, headers=kept + tuple(names.items()))

    def pieces(self) -> list[bytes]:
        if self.chunk_size:
            return [self.body[i : i + self.chunk_size] for i in range(0, len(self.body), self.chunk_size)]
        events = self.body.split(b"\n\n")
        return [e + b"\n\n" for e in events[:-1]] + ([events[-1]] if events[-1] else [])


@attrs.define
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Reply = Transcript | Callable[[BaseHTTPRequestHandler], None]


class Loopback:
    """Routes ``(method, path)`` to a queue of replies (the last one repeats)
    and records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Reply]] = {}
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"app": self})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, method: str, path: str, *replies: Reply) -> None:
        with self.lock:
            self.routes[(method, path)] = list(replies)

    def seen(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method) and (path is None or r.path == path)]

    def take(self, method: str, path: str) -> Reply | None:
        with self.lock:
            queue = self.routes.get((method, path))
            if not queue:
                return None
            return queue.pop(0) if len(queue) > 1 else queue[0]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-response is what several tests do


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    app: Loopback

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self.app.lock:
            self.app.requests.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        reply = self.app.take(self.command, self.path)
        if reply is None:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
        elif isinstance(reply, Transcript):
            send_transcript(self, reply)
        else:
            reply(self)

    do_GET = do_POST = _serve


def send_transcript(h: BaseHTTPRequestHandler, t: Transcript) -> None:
    h.send_response(t.status, t.reason)
    for k, v in t.headers:
        h.send_header(k, v)
    streaming = any(k.lower() == "content-type" and "event-stream" in v for k, v in t.headers)
    if t.cut == "eof":
        h.send_header("connection", "close")
        h.end_headers()
        h.wfile.write(t.body)
        h.wfile.flush()
        h.close_connection = True
        return
    if not streaming:
        h.send_header("content-length", str(len(t.body)))
        h.end_headers()
        h.wfile.write(t.body)
        return
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    for piece in t.pieces():
        write_chunk(h, piece)
    if t.cut == "chunked":
        h.close_connection = True  # the terminating 0-chunk never comes
        return
    h.wfile.write(b"0\r\n\r\n")
    h.wfile.flush()


def write_chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def json_reply(payload: Any, status: int = 200) -> Transcript:
    return Transcript(status, "OK" if status == 200 else "Error", (("content-type", "application/json"),), json.dumps(payload).encode())


@pytest.fixture
def server() -> Iterator[Loopback]:
    s = Loopback()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def openai(server: Loopback, *replies: Reply, **kw: Any) -> OpenAIChat:
    if replies:
        server.script("POST", "/v1/chat/completions", *replies)
    return OpenAIChat(f"{server.url}/v1", SECRET, **kw)


def anthropic(server: Loopback, *replies: Reply, **kw: Any) -> Anthropic:
    if replies:
        server.script("POST", "/v1/messages", *replies)
    return Anthropic(server.url, SECRET, **kw)


def request(*messages: Message, tools: tuple[ToolSpec, ...] = (WEATHER,), model: str = "m-1") -> ModelRequest:
    if not messages:
        messages = (Message(role="system", text="Be brief."), Message(role="user", text="Hi"))
    return ModelRequest(model=ModelRef("p", model), messages=messages, tools=tools)


async def call(adapter: Any, req: ModelRequest | None = None) -> tuple[ModelReply, list[str]]:
    partials: list[str] = []
    with trio.fail_after(WAIT):
        out = await adapter.complete(req or request(), on_partial=partials.append)
    assert isinstance(out, ModelReply)
    return out, partials


async def fails(adapter: Any, req: ModelRequest | None = None) -> ModelError:
    with trio.fail_after(WAIT), pytest.raises(ModelError) as info:
        await adapter.complete(req or request(), on_partial=lambda _: None)
    assert SECRET not in str(info.value)
    return info.value


# --- OpenAI chat completions: replies ----------------------------------------------------


async def test_openai_streams_text_with_partials_and_usage(server: Loopback) -> None:
    """Text deltas are assembled, reported as growing partials, and the usage chunk becomes Usage."""
    out, partials = await call(openai(server, Transcript.load("openai_text.http")))
    assert out.text == "Hello, world! How can I help?"
    assert out.stop_reason == "stop" and out.tool_calls == ()
    assert out.usage == Usage(input_tokens=42, output_tokens=9)
    assert partials[0] == "Hello" and partials[-1] == out.text
    assert all(b.startswith(a) for a, b in zip(partials, partials[1:]))


async def test_openai_request_shape(server: Loopback) -> None:
    """The request carries model, mapped messages, function tools, stream options and the Bearer key only in a header."""
    adapter = openai(server, Transcript.load("openai_text.http"))
    call_ = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
    await call(
        adapter,
        request(
            Message(role="system", text="Be brief."),
            Message(role="user", text="Weather?"),
            Message(role="assistant", text="", tool_calls=(call_,)),
            Message(role="tool", text="sunny", tool_call_id="call_1", tool_name="get_weather"),
            Message(role="assistant", text="Sunny."),
        ),
    )
    (seen,) = server.seen("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert seen.body == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters},
            }
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert SECRET not in json.dumps(seen.body)


async def test_openai_parallel_tool_calls_from_fragments(server: Loopback) -> None:
    """Parallel tool calls are assembled by index from argument fragments, even when TCP chunks split SSE lines."""
    out, partials = await call(openai(server, Transcript.load("openai_tools.http", chunk_size=7)))
    assert out.stop_reason == "tool_use" and out.text == "" and partials == []
    assert out.tool_calls == (
        ToolCall(id="call_Kq3m8ZbT1vXwYc2dLp9sRf4A", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_Vn6hJ2gW5kQeTr8yUa1oPs7D", name="get_weather", arguments={"city": "Tokyo", "unit": "celsius"}),
    )
    assert out.usage == Usage(input_tokens=88, output_tokens=47)


async def test_openai_accepts_a_json_answer(server: Loopback) -> None:
    """stream=False (or a server ignoring stream) gets one JSON completion, parsed the same way."""
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
    }
    adapter = openai(server, json_reply(completion), stream=False)
    out, _ = await call(adapter)
    assert out.tool_calls == (ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"}),)
    assert out.usage == Usage(input_tokens=5, output_tokens=6) and out.stop_reason == "tool_use"
    assert "stream" not in server.seen()[0].body


DEEP = b"[" * 100_000 + b"]" * 100_000  # past json.loads's stack: RecursionError, not ValueError


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_sse_data_nested_past_the_parsers_stack_is_a_malformed_reply(server: Loopback, api: str) -> None:
    """An event whose data is JSON nested 100,000 deep, streamed in chunks:
    a non-retryable malformed-stream error (it escaped as RecursionError)."""
    body = b"data: " + DEEP + b"\n\n"
    stream = Transcript(200, "OK", (("content-type", "text/event-stream"),), body, chunk_size=65_536)
    err = await fails((openai if api == "openai" else anthropic)(server, stream))
    assert not err.retryable and "Malformed" in str(err) and "SSE data" in str(err)


async def test_a_json_body_nested_past_the_parsers_stack_is_a_malformed_reply(server: Loopback) -> None:
    deep = Transcript(200, "OK", (("content-type", "application/json"),), DEEP)
    err = await fails(openai(server, deep, stream=False))
    assert not err.retryable and "Malformed" in str(err) and "response body" in str(err)


async def test_an_error_body_nested_past_the_parsers_stack_is_shown_as_text(server: Loopback) -> None:
    """A 500 whose body is that deep is still a retryable 500 (its text shortened)."""
    err = await fails(openai(server, Transcript(500, "Internal Server Error", (("content-type", "application/json"),), DEEP)))
    assert err.retryable and str(err).startswith("500 ")


# --- Anthropic messages: replies ---------------------------------------------------------


async def test_anthropic_streams_text_with_usage(server: Loopback) -> None:
    """message_start/content_block_delta/message_delta become text, partials and usage (cache reads count as input)."""
    out, partials = await call(anthropic(server, Transcript.load("anthropic_text.http")))
    assert out.text == "Hello! How can I help you today?"
    assert out.stop_reason == "stop"
    assert out.usage == Usage(input_tokens=30, output_tokens=15)
    assert partials == ["Hello", "Hello! How can", out.text]


async def test_anthropic_tool_use_with_input_json_delta(server: Loopback) -> None:
    """tool_use blocks are assembled from input_json_delta fragments, after the text block."""
    out, partials = await call(anthropic(server, Transcript.load("anthropic_tools.http", chunk_size=11)))
    assert out.text == "Let me check the weather."
    assert out.stop_reason == "tool_use"
    assert out.tool_calls == (
        ToolCall(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_01A09q90qw90lq917835lq9", name="get_weather", arguments={"city": "Tokyo", "unit": "celsius"}),
    )
    assert out.usage == Usage(input_tokens=472, output_tokens=89)
    assert partials[-1] == out.text


async def test_anthropic_request_shape(server: Loopback) -> None:
    """Top-level system, content blocks, consecutive tool results merged into one user message, input_schema tools, and the auth headers."""
    adapter = anthropic(server, Transcript.load("anthropic_text.http"), max_tokens=1000)
    calls = (
        ToolCall(id="t1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="t2", name="get_weather", arguments={"city": "Tokyo"}),
    )
    await call(
        adapter,
        request(
            Message(role="system", text="Be brief."),
            Message(role="user", text="Weather?"),
            Message(role="assistant", text="Checking.", tool_calls=calls),
            Message(role="tool", text="sunny", tool_call_id="t1"),
            Message(role="tool", text="boom", tool_call_id="t2", is_error=True),
            Message(role="system", text="Answer in English."),
        ),
    )
    (seen,) = server.seen("POST", "/v1/messages")
    assert seen.headers["x-api-key"] == SECRET and seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "m-1",
        "max_tokens": 1000,
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Tokyo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": True},
                ],
            },
        ],
        "tools": [{"name": "get_weather", "description": WEATHER.description, "input_schema": WEATHER.parameters}],
        "stream": True,
    }


# --- error classification ----------------------------------------------------------------

ERRORS = [
    # (transcript, retryable, retry_after_ms, overflow, text in the message)
    ("openai_429.http", True, 7000, False, "429 Too Many Requests: Rate limit reached"),
    ("openai_429_ms.http", True, 250, False, "rate_limit_exceeded"),
    ("openai_500.http", True, None, False, "500 Internal Server Error"),
    ("openai_400.http", False, None, False, "400 Bad Request: Invalid value for 'tool_choice'"),
    ("openai_context_length.http", False, None, True, "maximum context length is 128000 tokens"),
    ("openai_quota.http", False, None, False, "exceeded your current quota"),
    ("openai_cut_chunked.http", True, None, False, "Connection closed by the provider mid-response"),
    ("openai_cut_eof.http", True, None, False, "stream ended early"),
    ("openai_malformed.http", False, None, False, "Malformed OpenAI SSE data"),
    ("openai_bad_tool_args.http", False, None, False, "invalid JSON arguments for tool 'get_weather'"),
    ("openai_stream_error.http", True, None, False, "server_error"),
    ("anthropic_429.http", True, 3000, False, "429 Too Many Requests: This request would exceed the rate limit"),
    ("anthropic_529.http", True, None, False, "529 Error: Overloaded (overloaded_error)"),
    ("anthropic_500.http", True, None, False, "500 Internal Server Error"),
    ("anthropic_400.http", False, None, False, "invalid_request_error"),
    ("anthropic_context_length.http", False, None, True, "prompt is too long"),
    ("anthropic_billing.http", False, None, False, "credit balance is too low"),
    ("anthropic_cut_chunked.http", True, None, False, "Connection closed by the provider mid-response"),
    ("anthropic_cut_eof.http", True, None, False, "stream ended early"),
    ("anthropic_malformed.http", False, None, False, "Malformed Anthropic SSE data"),
    ("anthropic_bad_tool_args.http", False, None, False, "invalid JSON arguments for tool 'get_weather'"),
    ("anthropic_error_event.http", True, None, False, "overloaded_error: Overloaded"),
]


@pytest.mark.parametrize(("name", "retryable", "after", "overflow", "text"), ERRORS, ids=[e[0][:-5] for e in ERRORS])
async def test_error_classification(
    server: Loopback, name: str, retryable: bool, after: int | None, overflow: bool, text: str
) -> None:
    """Each recorded failure becomes a ModelError with the right retryable / Retry-After / overflow, and a clear message."""
    make = openai if name.startswith("openai") else anthropic
    err = await fails(make(server, Transcript.load(name)))
    assert (err.retryable, err.retry_after_ms, err.overflow) == (retryable, after, overflow), str(err)
    assert text in str(err)


async def test_error_text_never_shows_the_key(server: Loopback) -> None:
    """A provider echoing the key in an error body gets it masked before the text can be stored."""
    err = await fails(openai(server, Transcript.load("openai_401.http")))
    assert not err.retryable and "Incorrect API key provided: ***" in str(err)


async def test_connection_refused_is_retryable() -> None:
    """Nothing listening on the port: a retryable connection error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = await fails(OpenAIChat(f"http://127.0.0.1:{port}/v1", SECRET))
    assert err.retryable and "Connection error" in str(err)


async def test_read_timeout_is_retryable(server: Loopback) -> None:
    """A server that stops sending mid-stream trips the read timeout: retryable."""
    release = threading.Event()

    def stall(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        write_chunk(h, b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n')
        release.wait(5)
        h.close_connection = True

    try:
        err = await fails(openai(server, stall, timeout=0.3))
    finally:
        release.set()
    assert err.retryable and "timed out" in str(err)


def test_repr_hides_the_key() -> None:
    """repr() of every adapter shows the base URL, never the key."""
    for adapter in (
        OpenAIChat("http://h/v1", SECRET),
        Anthropic("http://h", SECRET),
        OpenAIResponses("http://h/v1", SECRET),
        Models({"openai": OpenAIChat("http://h/v1", SECRET)}),
    ):
        assert SECRET not in repr(adapter)
        assert SECRET not in repr(vars(adapter))


# --- end to end through the harness ------------------------------------------------------


def weather_registry() -> Registry:
    async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        return {"Paris": "sunny", "Tokyo": "rainy"}.get(args["city"], "unknown")

    registry = Registry()
    registry.install(define_tool("get_weather", WEATHER.description, WEATHER.parameters, execute, replay="safe"))
    return registry


async def ask(conv: Any, text: str) -> Any:
    handle = await conv.submit(Input(text))
    with trio.fail_after(WAIT):
        return await handle.wait()


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_harness_tool_round_and_answer(server: Loopback, api: str) -> None:
    """A streamed tool round (two parallel calls) then a streamed answer, through the harness; the tool results go back to the provider."""
    if api == "openai":
        adapter: Any = openai(server, Transcript.load("openai_tools.http"), Transcript.load("openai_weather_answer.http"))
        path = "/v1/chat/completions"
    else:
        adapter = anthropic(server, Transcript.load("anthropic_tools.http"), Transcript.load("anthropic_weather_answer.http"))
        path = "/v1/messages"
    models = Models({api: adapter})
    async with Harness.open(MemoryStorage(), models=models, registry=weather_registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef(api, "gpt-x")))
        settled = await ask(conv, "Weather in Paris and Tokyo?")
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    kinds = [e.kind for e in entries]
    assert kinds[0] == EntryKind.USER and kinds[-1] == EntryKind.ASSISTANT
    assert entries[-1].text == "It is sunny in Paris and rainy in Tokyo."
    results = {e.tool_call_id: e.text for e in entries if e.kind == EntryKind.TOOL_RESULT}
    first, second = server.seen("POST", path)
    assert first.body["model"] == "gpt-x"
    if api == "openai":
        assert results == {"call_Kq3m8ZbT1vXwYc2dLp9sRf4A": "sunny", "call_Vn6hJ2gW5kQeTr8yUa1oPs7D": "rainy"}
        sent = {m["tool_call_id"]: m["content"] for m in second.body["messages"] if m["role"] == "tool"}
    else:
        assert results == {"toolu_01T1x1fJ34qAmk2tNTrN7Up6": "sunny", "toolu_01A09q90qw90lq917835lq9": "rainy"}
        sent = {
            b["tool_use_id"]: b["content"]
            for m in second.body["messages"]
            for b in m["content"]
            if b["type"] == "tool_result"
        }
    assert sent == results


async def test_harness_retries_a_429_durably_and_keeps_the_key_out_of_the_store(server: Loopback, tmp_path: Path) -> None:
    """429 then 200: the run records the error, retries after the backoff, ends done; the key is in no byte of the SQLite files."""
    db = tmp_path / "store.sqlite"
    adapter = openai(
        server,
        Transcript.load("openai_429.http").with_headers(retry_after="0.01"),
        Transcript.load("openai_text.http"),
    )
    settings = Settings(retry=RetryPolicy(base_delay_ms=10))
    async with Harness.open(open_sqlite_storage(db), models=Models({"openai": adapter}), registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "gpt-x")))
        settled = await ask(conv, "Hello?")
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    assistants = [e for e in entries if e.kind == EntryKind.ASSISTANT]
    assert [e.stop_reason for e in assistants] == ["error", "stop"]
    assert assistants[0].is_error and assistants[0].text.startswith("429 Too Many Requests: Rate limit reached")
    assert assistants[-1].text == "Hello, world! How can I help?"
    assert len(server.seen("POST", "/v1/chat/completions")) == 2
    files = [p for p in tmp_path.iterdir() if p.name.startswith("store.sqlite")]
    blob = b"".join(p.read_bytes() for p in files)
    assert b"Hello, world! How can I help?" in blob  # the grep does look at the stored data
    assert SECRET.encode() not in blob


async def test_an_infinite_retry_after_is_no_hint_and_the_run_still_retries(server: Loopback) -> None:
    """A 429 whose Retry-After reads as infinity (float("1e400")) used to
    raise OverflowError out of the classifier and fault the run; now the
    policy's backoff applies and the retry answers."""
    adapter = openai(
        server,
        Transcript.load("openai_429.http").with_headers(retry_after="1e400"),
        Transcript.load("openai_text.http"),
    )
    settings = Settings(retry=RetryPolicy(base_delay_ms=10))
    async with Harness.open(MemoryStorage(), models=Models({"openai": adapter}), registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "gpt-x")))
        settled = await ask(conv, "Hello?")
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    assert [e.stop_reason for e in entries if e.kind == EntryKind.ASSISTANT] == ["error", "stop"]
    assert len(server.seen("POST", "/v1/chat/completions")) == 2


async def test_unknown_model_is_unanswered_no_model(server: Loopback) -> None:
    """A provider:model the Models map does not know settles the submission unanswered/no_model, with no request sent."""
    models = Models({"openai": openai(server)})
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("nope", "gpt-x")))
        settled = await ask(conv, "Hello?")
    assert settled.status == SubmissionStatus.UNANSWERED and settled.reason == "no_model", settled
    assert server.seen() == []


async def test_abort_mid_stream_closes_the_http_stream(server: Loopback) -> None:
    """Aborting the conversation while the provider streams closes the connection: the server notices within a second."""
    started = threading.Event()
    gone: list[float] = []

    def endless(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + 20
        try:
            n = 0
            while time.monotonic() < deadline:
                chunk = {"choices": [{"index": 0, "delta": {"content": f"word{n} "}, "finish_reason": None}]}
                write_chunk(h, f"data: {json.dumps(chunk)}\n\n".encode())
                n += 1
                started.set()
                time.sleep(0.02)
        except OSError:  # BrokenPipe / ConnectionReset: the client hung up
            gone.append(time.monotonic())
        h.close_connection = True

    models = Models({"openai": openai(server, endless)})
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "gpt-x")))
        handle = await conv.submit(Input("Talk forever"))
        with trio.fail_after(WAIT):
            while not started.is_set():
                await trio.sleep(0.01)
            await trio.sleep(0.2)  # some partials are committed
            t0 = time.monotonic()
            await conv.abort()
            settled = await handle.wait()
            while not gone:
                await trio.sleep(0.01)
        entries = await conv.transcript()
    assert gone[0] - t0 < 1.0
    assert settled.status == SubmissionStatus.UNANSWERED and settled.reason == "aborted", settled
    aborted = [e for e in entries if e.kind == EntryKind.ASSISTANT]
    assert aborted and aborted[-1].stop_reason == "aborted" and aborted[-1].text.startswith("word0 ")


# --- deferred: the Responses API in background mode --------------------------------------


class ResponsesServer:
    """A background-mode Responses endpoint: jobs stay in_progress until released."""

    def __init__(self, server: Loopback, output: list[dict[str, Any]], status: str = "completed", error: Any = None) -> None:
        self.server = server
        self.released = threading.Event()
        self.output = output
        self.final_status = status
        self.error = error
        server.script("POST", "/v1/responses", self.create)
        server.script("GET", "/v1/responses/resp_68a1b2c3", self.get)

    def create(self, h: BaseHTTPRequestHandler) -> None:
        send_transcript(h, json_reply({"id": "resp_68a1b2c3", "object": "response", "status": "queued", "background": True, "output": []}))

    def get(self, h: BaseHTTPRequestHandler) -> None:
        if not self.released.is_set():
            body = {"id": "resp_68a1b2c3", "object": "response", "status": "in_progress", "output": []}
        else:
            body = {
                "id": "resp_68a1b2c3",
                "object": "response",
                "status": self.final_status,
                "output": self.output,
                "error": self.error,
                "usage": {"input_tokens": 31, "output_tokens": 7, "total_tokens": 38},
            }
        send_transcript(h, json_reply(body))

    @property
    def creates(self) -> int:
        return len(self.server.seen("POST", "/v1/responses"))

    @property
    def polls(self) -> int:
        return len(self.server.seen("GET", "/v1/responses/resp_68a1b2c3"))


ANSWER = [
    {
        "id": "msg_68a1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Deferred hello.", "annotations": []}],
    }
]


async def test_responses_create_poll_and_answer(server: Loopback) -> None:
    """create -> deferred handle; poll while in_progress -> deferred; completed -> reply with text, calls and usage."""
    jobs = ResponsesServer(
        server,
        ANSWER + [{"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather", "arguments": '{"city":"Rome"}', "status": "completed"}],
    )
    adapter = OpenAIResponses(f"{server.url}/v1", SECRET, poll_interval_ms=20)
    req = request()
    with trio.fail_after(WAIT):
        first = await adapter.complete(req)
        assert first == ModelDeferredReply(handle={"id": "resp_68a1b2c3"}, poll_after_ms=20)
        again = await adapter.poll(req, first.handle)
        assert isinstance(again, ModelDeferredReply) and again.handle == {"id": "resp_68a1b2c3"}
        jobs.released.set()
        done = await adapter.poll(req, again.handle)
    assert isinstance(done, ModelReply)
    assert done.text == "Deferred hello." and done.stop_reason == "tool_use"
    assert done.tool_calls == (ToolCall(id="call_9", name="get_weather", arguments={"city": "Rome"}),)
    assert done.usage == Usage(input_tokens=31, output_tokens=7)
    (create,) = server.seen("POST", "/v1/responses")
    assert create.body["background"] is True and create.body["store"] is True
    assert create.body["input"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert create.body["tools"][0] == {"type": "function", "name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters}
    assert create.headers["authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize(
    ("error", "retryable", "overflow"),
    [
        ({"code": "server_error", "message": "The server had an error processing your request."}, True, False),
        ({"code": "invalid_prompt", "message": "Invalid prompt: flagged."}, False, False),
        ({"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model."}, False, True),
    ],
)
async def test_responses_failed_job_is_a_model_error(server: Loopback, error: Any, retryable: bool, overflow: bool) -> None:
    """A failed background job raises a ModelError classified by its error code and message."""
    jobs = ResponsesServer(server, [], status="failed", error=error)
    jobs.released.set()
    adapter = OpenAIResponses(f"{server.url}/v1", SECRET, poll_interval_ms=20)
    with trio.fail_after(WAIT), pytest.raises(ModelError) as info:
        await adapter.poll(request(), {"id": "resp_68a1b2c3"})
    assert (info.value.retryable, info.value.overflow) == (retryable, overflow)
    assert error["message"] in str(info.value)


async def test_responses_poll_survives_transient_errors(server: Loopback) -> None:
    """A 503 on a poll keeps the job (deferred again, error counted in the handle); a 404 ends it."""
    server.script(
        "GET",
        "/v1/responses/resp_x",
        Transcript.load("openai_500.http"),
        Transcript.load("openai_500.http"),
        json_reply({"error": {"message": "No response found with id 'resp_x'.", "type": "invalid_request_error"}}, 404),
    )
    adapter = OpenAIResponses(f"{server.url}/v1", SECRET, poll_interval_ms=20, max_poll_errors=5)
    with trio.fail_after(WAIT):
        one = await adapter.poll(request(), {"id": "resp_x"})
        assert one == ModelDeferredReply(handle={"id": "resp_x", "poll_errors": 1}, poll_after_ms=20)
        two = await adapter.poll(request(), one.handle)
        assert isinstance(two, ModelDeferredReply) and two.handle["poll_errors"] == 2
        with pytest.raises(ModelError) as info:
            await adapter.poll(request(), two.handle)
    assert not info.value.retryable and "404" in str(info.value)


async def test_deferred_answer_survives_close_and_reopen(server: Loopback, tmp_path: Path) -> None:
    """Close the harness while it polls (the handle is stored), reopen: the job is polled, never created again, and the answer arrives."""
    jobs = ResponsesServer(server, ANSWER)
    models = Models({"openai": OpenAIResponses(f"{server.url}/v1", SECRET, poll_interval_ms=20)})
    db = tmp_path / "store.sqlite"
    async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "gpt-x")))
        handle = await conv.submit(Input("Hello later"))
        with trio.fail_after(WAIT):
            while jobs.polls < 2:
                await trio.sleep(0.01)
    assert jobs.creates == 1
    jobs.released.set()
    async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry()) as h:
        sub = await h.submission(handle.id)
        assert sub is not None
        with trio.fail_after(WAIT):
            settled = await sub.wait()
        conv = await h.root()
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    assert entries[-1].kind == EntryKind.ASSISTANT and entries[-1].text == "Deferred hello."
    assert jobs.creates == 1
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("store.sqlite"))
    assert b"resp_68a1b2c3" in blob and SECRET.encode() not in blob
