"""A served agent for the serve tests: a scripted model that streams its
answers in chunks with delays, and a ``count`` tool that reports output as it
runs (``pidurable serve --app scripted_app:setup`` serves it too)."""

from __future__ import annotations

from typing import Any

import trio

from pidurable.core.model import Usage
from pidurable.shell import AgentConfig, ModelRef, Registry, define_tool
from pidurable.shell.providers import ScriptedModels, ScriptedReply, reply, tool_call
from pidurable.shell.providers.base import ModelRequest
from pidurable.shell.serve import Setup

#: Seconds between the tool's output lines, and between streamed chunks.
STEP = 0.25


def script(request: ModelRequest) -> ScriptedReply:
    """``count``/``work`` in the prompt: a tool round first; after a tool
    round, or for anything else, an answer streamed in chunks."""
    last = request.messages[-1]
    usage = Usage(input_tokens=40 * len(request.messages) + 120, output_tokens=36)
    if last.role == "tool":
        return reply(text=f"The counter finished: {' '.join(last.text.split()[:6])}. Anything else?", stream=8, delay=8 * STEP, usage=usage)
    text = (last.text or "").strip()
    lowered = text.lower()
    if "count" in lowered or "work" in lowered:
        n = 16 if "long" in lowered else 6
        return reply(text="Let me run the counter.", tool_calls=[tool_call("count", n=n)], usage=usage)
    if lowered.startswith("big"):  # a long answer streamed fast (many large views: tests/serve/test_events.py)
        size = int(lowered.split()[1]) if len(lowered.split()) > 1 and lowered.split()[1].isdigit() else 50_000
        words = ("durable " * (size // 8 + 1))[:size]
        return reply(text=words, stream=40, delay=40 * 0.02, usage=usage)
    if lowered.startswith("quick"):
        return reply(text=f"Quick answer to: {text}", usage=usage)
    answer = (
        f"You said \u201c{text}\u201d. Here is a streamed answer: durable agents keep every step in the store, "
        "so a crash resumes where it stopped and nothing is done twice."
    )
    return reply(text=answer, stream=10, delay=10 * STEP, usage=usage)


async def count(call: Any, args: dict[str, Any]) -> str:
    n = int(args["n"])
    for i in range(1, n + 1):
        call.report_output(f"step {i} of {n}\n")
        await trio.sleep(STEP)
    return f"counted to {n}"


def registry() -> Registry:
    reg = Registry()
    reg.install(
        define_tool(
            "count",
            "Count slowly, printing each step",
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]},
            count,
            replay="safe",
        )
    )
    return reg


AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


def setup() -> Setup:
    return Setup(models=ScriptedModels(script, keep_requests=10), registry=registry(), agent=AGENT)
