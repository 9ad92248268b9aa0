"""Provider error classification and request/response mapping, without a server."""

from __future__ import annotations

import email.utils
import json

import httpx
import pytest

from pidurable.core.context import Message
from pidurable.core.model import ModelRef, ToolCall, Usage
from pidurable.shell.providers import Anthropic, ModelError, ModelRequest, Models, OpenAIChat, OpenAIResponses
from pidurable.shell.providers.anthropic import MessageAccumulator, anthropic_messages
from pidurable.core.bounds import MAX_INT64
from pidurable.shell.providers.classify import (
    classify,
    classify_exception,
    ended_early,
    error_detail,
    retry_after_ms,
    stream_error,
)
from pidurable.shell.providers.openai import ChatAccumulator
from pidurable.shell.providers.responses import response_input, response_reply

# --- Retry-After --------------------------------------------------------------------------


def test_retry_after_forms() -> None:
    """retry-after-ms wins; Retry-After is delta-seconds (also fractional) or an HTTP date; junk is ignored."""
    now = 1_800_000_000.0
    assert retry_after_ms({"Retry-After": "7"}) == 7000
    assert retry_after_ms({"retry-after": "1.5"}) == 1500
    assert retry_after_ms({"retry-after-ms": "250", "retry-after": "9"}) == 250
    assert retry_after_ms({"retry-after": email.utils.formatdate(now + 30, usegmt=True)}, now=now) == 30000
    assert retry_after_ms({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0
    assert retry_after_ms({"retry-after": "soon"}) is None
    assert retry_after_ms({}) is None and retry_after_ms(None) is None


@pytest.mark.parametrize("raw", ["inf", "-inf", "1e400", "nan", "Infinity"])
def test_a_retry_after_that_is_not_a_finite_number_is_no_hint(raw: str) -> None:
    """float() reads these, but they give no wait: None (int(inf) raised
    OverflowError out of the classifier); a finite retry-after beside an
    infinite retry-after-ms still counts."""
    assert retry_after_ms({"Retry-After": raw}) is None
    assert retry_after_ms({"retry-after-ms": raw}) is None
    assert retry_after_ms({"retry-after-ms": raw, "retry-after": "3"}) == 3000
    err = classify(429, {"retry-after": raw}, "slow down")
    assert err.retryable and err.retry_after_ms is None


def test_a_huge_retry_after_is_capped_at_64_bits() -> None:
    """A finite but huge hint is kept as the longest 64-bit wait (the retry policy caps the wait anyway)."""
    assert retry_after_ms({"Retry-After": "1e300"}) == MAX_INT64 == 2**63 - 1
    assert retry_after_ms({"retry-after-ms": "1e30"}) == MAX_INT64


# --- statuses and texts -------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529])
def test_transient_statuses_are_retryable(status: int) -> None:
    """408/409/425/429 and every 5xx are retryable, with the server's Retry-After."""
    err = classify(status, {"retry-after": "2"}, '{"error": {"message": "try later"}}')
    assert err.retryable and not err.overflow and err.retry_after_ms == 2000
    assert str(err).startswith(f"{status} ") and "try later" in str(err)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 402])
def test_client_errors_are_not_retryable(status: int) -> None:
    """400/401/403/404/422 (and other 4xx) fail the run at once; no Retry-After is kept."""
    err = classify(status, {"retry-after": "2"}, "nope")
    assert not err.retryable and not err.overflow and err.retry_after_ms is None


@pytest.mark.parametrize(
    "text",
    [
        '{"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}',
        '{"error": {"message": "Billing hard limit has been reached"}}',
        '{"error": {"message": "x", "type": "insufficient_quota"}}',
    ],
)
def test_quota_and_billing_are_not_retryable_even_as_429(text: str) -> None:
    """Waiting does not fix an empty account: not retryable although the status is 429."""
    assert not classify(429, {"retry-after": "1"}, text).retryable


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (400, '{"error": {"message": "too long", "code": "context_length_exceeded"}}'),
        (400, "This model's maximum context length is 8192 tokens"),
        (400, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9 tokens > 8 maximum"}}'),
        (400, '{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}'),
        (413, "request has too many tokens"),
        (None, "input is too long for requested model"),
        (429, "token limit exceeded"),
    ],
)
def test_context_overflow(status: int | None, text: str) -> None:
    """Overflow texts set overflow=True and are never retryable (the core compacts instead)."""
    err = classify(status, {}, text)
    assert err.overflow and not err.retryable


@pytest.mark.parametrize(
    ("text", "retryable"),
    [
        ("overloaded_error: Overloaded", True),
        ("rate_limit_error: slow down", True),
        ("api_error: Internal server error", True),
        ("server_error: The server had an error", True),
        ("Upstream request timed out", True),
        ("503 Service Unavailable", True),
        ("invalid_request_error: bad tool schema", False),
        ("authentication_error: invalid x-api-key", False),
        ("", False),
    ],
)
def test_status_less_errors_are_classified_by_text(text: str, retryable: bool) -> None:
    """Errors inside a stream or a job (no HTTP status) are retryable when the text names a transient failure."""
    assert classify(None, None, text).retryable is retryable


def test_error_detail_shapes() -> None:
    """The message is taken from the OpenAI and Anthropic JSON shapes; other bodies are kept, shortened."""
    assert error_detail('{"error": {"message": "Bad thing", "type": "invalid_request_error", "code": null}}') == (
        "Bad thing (invalid_request_error)"
    )
    assert error_detail('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}') == (
        "Overloaded (overloaded_error)"
    )
    assert error_detail('{"error": "plain string"}') == "plain string"
    assert error_detail("<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
    assert len(error_detail("x" * 5000)) <= 600


def test_stream_error_events() -> None:
    """An Anthropic error event and an OpenAI error chunk name their type in the message."""
    err = stream_error({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert str(err) == "overloaded_error: Overloaded" and err.retryable
    err = stream_error({"error": {"message": "Bad", "type": "invalid_request_error"}})
    assert not err.retryable and "invalid_request_error: Bad" == str(err)
    assert ended_early("OpenAI").retryable


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (httpx.ReadTimeout("read timed out"), True),
        (httpx.ConnectTimeout("connect timed out"), True),
        (httpx.ConnectError("[Errno 111] Connection refused"), True),
        (httpx.ReadError("[Errno 104] Connection reset by peer"), True),
        (httpx.RemoteProtocolError("peer closed connection without sending complete message body"), True),
        (httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' protocol."), False),
        (httpx.LocalProtocolError("bad header"), False),
        (httpx.DecodingError("bad gzip"), False),
    ],
)
def test_transport_exceptions(exc: Exception, retryable: bool) -> None:
    """Timeouts, resets and a stream cut mid-event are retryable; a bad URL is not."""
    err = classify_exception(exc)
    assert isinstance(err, ModelError) and err.retryable is retryable and not err.overflow


# --- stream folding edge cases ---------------------------------------------------------


def test_chat_accumulator_edge_cases() -> None:
    """A call without an id gets a deterministic one, empty arguments are {}, and calls win over a 'stop' finish."""
    acc = ChatAccumulator(turn=3)
    acc.feed({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "ls", "arguments": ""}}]}}]})
    acc.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out = acc.reply()
    assert out.tool_calls == (ToolCall(id="call_3_0", name="ls", arguments={}),) and out.stop_reason == "tool_use"


def test_chat_accumulator_rejects_non_object_arguments() -> None:
    acc = ChatAccumulator()
    acc.feed({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "ls", "arguments": "[1]"}}]}}]})
    with pytest.raises(ModelError, match="non-object arguments for tool 'ls'"):
        acc.reply()


def test_chat_accumulator_length_cut_tool_call() -> None:
    """Arguments cut at the token limit say so."""
    acc = ChatAccumulator()
    acc.feed({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "w", "arguments": '{"a": "b'}}]}}]})
    acc.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    with pytest.raises(ModelError, match="cut at the token limit"):
        acc.reply()


def test_message_accumulator_skips_thinking_and_uses_start_input() -> None:
    """Thinking blocks are skipped; a tool_use block without deltas keeps its start input."""
    acc = MessageAccumulator()
    acc.feed({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}})
    acc.feed({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
    acc.feed({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}})
    acc.feed({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "ls", "input": {"p": "."}}})
    acc.feed({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}})
    out = acc.reply()
    assert out.text == "" and out.tool_calls == (ToolCall(id="t", name="ls", arguments={"p": "."}),)
    assert out.usage == Usage(input_tokens=3, output_tokens=4)


def test_message_accumulator_max_tokens_is_length() -> None:
    acc = MessageAccumulator()
    acc.feed_message({"content": [{"type": "text", "text": "cut"}], "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 2}})
    assert acc.reply().stop_reason == "length"


# --- request mapping --------------------------------------------------------------------


def test_anthropic_mapping_drops_empty_blocks_and_merges_roles() -> None:
    """Empty texts are not sent; a user message after tool results joins their user message."""
    system, messages = anthropic_messages(
        (
            Message(role="user", text="a"),
            Message(role="assistant", text="", tool_calls=(ToolCall(id="t", name="ls", arguments={}),)),
            Message(role="tool", text="out", tool_call_id="t"),
            Message(role="user", text="b"),
            Message(role="assistant", text=""),
        )
    )
    assert system == ""
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "out"}, {"type": "text", "text": "b"}],
        },
    ]


def test_responses_mapping_and_reply() -> None:
    """Responses input items: messages, function_call and function_call_output; incomplete by token limit is 'length'."""
    call = ToolCall(id="call_1", name="ls", arguments={"p": "."})
    assert response_input(
        (
            Message(role="user", text="a"),
            Message(role="assistant", text="on it", tool_calls=(call,)),
            Message(role="tool", text="x", tool_call_id="call_1"),
        )
    ) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "on it"},
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": json.dumps({"p": "."})},
        {"type": "function_call_output", "call_id": "call_1", "output": "x"},
    ]
    out = response_reply(
        {
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "summary": []}, {"type": "message", "content": [{"type": "output_text", "text": "par"}]}],
        }
    )
    assert out.text == "par" and out.stop_reason == "length" and out.usage is None


def test_anthropic_base_url_and_models_from_env() -> None:
    """A trailing /v1 on the Anthropic base URL is dropped; Models.from_env builds both adapters from the environment."""
    assert Anthropic("http://h:1/v1/", "k").base_url == "http://h:1"
    models = Models.from_env({"OPENAI_API_KEY": "sk-1", "OPENAI_BASE_URL": "http://o/v1", "ANTHROPIC_API_KEY": "a-1"})
    openai = models.resolve(ModelRef("openai", "gpt-x"))
    anthropic = models.resolve(ModelRef("anthropic", "claude"))
    assert isinstance(openai, OpenAIChat) and openai.base_url == "http://o/v1"
    assert isinstance(anthropic, Anthropic) and anthropic.base_url == "https://api.anthropic.com"
    assert models.resolve(ModelRef("other", "x")) is None
    assert Models.from_env({}).providers == {}


def test_bodies_merge_extra_body() -> None:
    """extra_body reaches the request (temperature, max_tokens, ...)."""
    req = ModelRequest(model=ModelRef("openai", "m"), messages=(Message(role="user", text="hi"),))
    assert OpenAIChat("http://h/v1", "k", extra_body={"temperature": 0}).body(req)["temperature"] == 0
    assert Anthropic("http://h", "k", extra_body={"temperature": 0}).body(req)["temperature"] == 0
    body = OpenAIResponses("http://h/v1", "k", background=False).body(req)
    assert "background" not in body and body["input"] == [{"role": "user", "content": "hi"}]
