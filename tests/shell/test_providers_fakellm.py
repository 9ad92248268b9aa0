"""The HTTP adapters against a third-party fake provider: ``fakellm serve``.

fakellm (PyPI, a FastAPI app) answers ``/v1/chat/completions`` (OpenAI) and
``/v1/messages`` (Anthropic) from YAML rules, streaming SSE with tool calls.
One server process serves the module, on a free 127.0.0.1 port; each test uses
its own ``X-Fakellm-Conversation-Id`` so fakellm's per-conversation turn
counter and tool-result memory start fresh.

What fakellm does not do (so these tests do not check it): it sends no usage
chunk in an OpenAI stream, no ``Retry-After`` header, and it ignores a rule's
error ``status`` when the request streams (it answers 200 with echo text), so
the injected 429 is exercised with ``stream=False``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from pidurable.core.model import EntryKind, ModelRef, RetryPolicy, SubmissionStatus, ToolCall
from pidurable.core.context import Message
from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, Registry, Settings, ToolCallContext, define_tool
from pidurable.shell.providers import Anthropic, ModelError, ModelReply, ModelRequest, Models, OpenAIChat, ToolSpec

pytest.importorskip("fakellm")

WAIT = 20  # seconds, real time
CONFIG = """\
version: 1
rules:
  - name: weather-answer
    when:
      tool_result_contains: "sunny"
    respond:
      content: "It is sunny in Paris."
  - name: weather-tool
    when:
      messages_contain: "weather"
    respond:
      tool_calls:
        - name: get_weather
          arguments: {city: Paris}
  - name: rate-limited-first
    when:
      header.x-test-scenario: rate_limit
      turn: 1
    respond:
      status: 429
      error: "Rate limit exceeded (mock)"
  - name: rate-limited-then
    when:
      header.x-test-scenario: rate_limit
    respond:
      content: "Recovered after 429."
  - name: hello
    when:
      messages_contain: "hello"
    respond:
      content: "Hello from fakellm, friend."
"""
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``fakellm serve`` on a free loopback port; yields its root URL."""
    where = tmp_path_factory.mktemp("fakellm")
    config = where / "fakellm.yaml"
    config.write_text(CONFIG)
    port = free_port()
    script = Path(sys.executable).parent / "fakellm"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "fakellm.cli"]
    log = (where / "log.txt").open("w")
    proc = subprocess.Popen(
        [*cmd, "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=where,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"fakellm exited with {proc.returncode}: {(where / 'log.txt').read_text()}")
            try:
                if httpx.get(f"{url}/_fakellm/stats", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"fakellm did not answer within 30 s: {(where / 'log.txt').read_text()}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def adapter(api: str, url: str, **kw: Any) -> Any:
    headers = {"x-fakellm-conversation-id": f"pidurable-{uuid.uuid4().hex}", **kw.pop("headers", {})}
    if api == "openai":
        return OpenAIChat(f"{url}/v1", "sk-fake", headers=headers, **kw)
    return Anthropic(url, "sk-ant-fake", headers=headers, **kw)


def weather_registry() -> Registry:
    async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        return f"sunny in {args['city']}"

    registry = Registry()
    registry.install(define_tool("get_weather", WEATHER.description, WEATHER.parameters, execute, replay="safe"))
    return registry


APIS = ["openai", "anthropic"]


@pytest.mark.parametrize("api", APIS)
async def test_text_answer_streams(fakellm: str, api: str) -> None:
    """A rule's text comes back streamed word by word: growing partials, stop reason stop."""
    partials: list[str] = []
    request = ModelRequest(model=ModelRef(api, "fake-1"), messages=(Message(role="user", text="Say hello"),))
    with trio.fail_after(WAIT):
        out = await adapter(api, fakellm).complete(request, on_partial=partials.append)
    assert isinstance(out, ModelReply)
    assert out.text == "Hello from fakellm, friend." and out.stop_reason == "stop" and out.tool_calls == ()
    assert partials == ["Hello", "Hello from", "Hello from fakellm,", "Hello from fakellm, friend."]
    if api == "anthropic":  # fakellm sends usage in the Anthropic stream only
        assert out.usage is not None and out.usage.output_tokens > 0


@pytest.mark.parametrize("api", APIS)
async def test_tool_call_round_through_the_harness(fakellm: str, api: str) -> None:
    """fakellm asks for get_weather (arguments streamed in fragments); the tool runs; its result earns the answer."""
    models = Models({api: adapter(api, fakellm)})
    async with Harness.open(MemoryStorage(), models=models, registry=weather_registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef(api, "fake-1")))
        handle = await conv.submit(Input("What is the weather in Paris?"))
        with trio.fail_after(WAIT):
            settled = await handle.wait()
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    calls = [c for e in entries if e.kind == EntryKind.ASSISTANT for c in e.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    (result,) = [e for e in entries if e.kind == EntryKind.TOOL_RESULT]
    assert result.text == "sunny in Paris" and result.tool_call_id == calls[0].id
    assert entries[-1].kind == EntryKind.ASSISTANT and entries[-1].text == "It is sunny in Paris."


@pytest.mark.parametrize("api", APIS)
async def test_injected_429_is_retryable(fakellm: str, api: str) -> None:
    """fakellm's rule-injected 429 is a retryable ModelError; the next turn of the same conversation succeeds."""
    a = adapter(api, fakellm, headers={"x-test-scenario": "rate_limit"}, stream=False)
    request = ModelRequest(model=ModelRef(api, "fake-1"), messages=(Message(role="user", text="Hi"),))
    with trio.fail_after(WAIT):
        with pytest.raises(ModelError) as info:
            await a.complete(request)
        out = await a.complete(request)
    assert info.value.retryable and not info.value.overflow
    assert str(info.value).startswith("429 Too Many Requests: Rate limit exceeded (mock)")
    assert out.text == "Recovered after 429."


@pytest.mark.parametrize("api", APIS)
async def test_injected_429_ends_done_after_a_durable_retry(fakellm: str, api: str) -> None:
    """Through the harness: the 429 is recorded as an error entry, the run retries after the backoff and ends done."""
    models = Models({api: adapter(api, fakellm, headers={"x-test-scenario": "rate_limit"}, stream=False)})
    settings = Settings(retry=RetryPolicy(base_delay_ms=10))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef(api, "fake-1")))
        handle = await conv.submit(Input("Hi"))
        with trio.fail_after(WAIT):
            settled = await handle.wait()
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    assistants = [e for e in entries if e.kind == EntryKind.ASSISTANT]
    assert [e.stop_reason for e in assistants] == ["error", "stop"]
    assert "Rate limit exceeded (mock)" in assistants[0].text
    assert assistants[1].text == "Recovered after 429."


async def test_anthropic_tool_call_arguments_are_assembled(fakellm: str) -> None:
    """The Anthropic stream's input_json_delta fragments are joined into the call's arguments."""
    request = ModelRequest(
        model=ModelRef("anthropic", "fake-1"),
        messages=(Message(role="user", text="weather please"),),
        tools=(WEATHER,),
    )
    with trio.fail_after(WAIT):
        out = await adapter("anthropic", fakellm).complete(request)
    assert isinstance(out, ModelReply) and out.stop_reason == "tool_use"
    (call,) = out.tool_calls
    assert isinstance(call, ToolCall) and call.name == "get_weather" and call.arguments == {"city": "Paris"}
    assert call.id.startswith("toolu_")
