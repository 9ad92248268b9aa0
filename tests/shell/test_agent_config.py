"""Issue 7, item 6: the agent does what its configuration says.

``AgentConfig.tools`` is an exact filter (offered in its order; a call to
any other tool gets "Tool X is not available" and never runs),
``instructions`` reach the model as a tagged system section on every
request, ``cwd`` is where tools run, and a sub-agent's child conversation
gets the agent of ``define_subagent_tool(agent=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from pidurable.core.model import EntryKind
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    LocalEnv,
    MemoryStorage,
    ModelRef,
    Registry,
    coding_tools,
    define_subagent_tool,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

WAIT = 10
MODEL = ModelRef("scripted", "demo")


async def settle(conv: Any, text: str) -> Any:
    handle = await conv.submit(Input(text))
    with trio.fail_after(WAIT):
        return await handle.wait()


def offered(request: Any) -> list[str]:
    return [t.name for t in request.tools]


async def test_tools_filter_offers_exactly_those_tools_in_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Only the filtered tools are offered, in the filter's order; a call to
    another installed tool is answered "Tool write is not available" and
    never runs (the file is not written)."""
    registry = Registry()
    registry.install(coding_tools())
    models = ScriptedModels(
        [
            reply(tool_calls=[tool_call("write", path="x.txt", content="no"), tool_call("read", path="a.txt")]),
            reply(text="done"),
        ]
    )
    (tmp_path / "a.txt").write_text("A")
    agent = AgentConfig(model=MODEL, tools=("edit", "read"))
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=agent)
        assert (await settle(conv, "go")).status == "done"
        entries = await conv.transcript()
    assert [offered(r) for r in models.requests] == [["edit", "read"], ["edit", "read"]]
    results = {e.tool_name: e for e in entries if e.kind == EntryKind.TOOL_RESULT}
    assert results["write"].is_error and results["write"].text == "<harness>\n[error] Tool write is not available\n</harness>"
    assert results["read"].text == "A" and not results["read"].is_error
    assert not (tmp_path / "x.txt").exists()


async def test_filter_applies_with_before_tool_hooks_and_to_reconfigured_agents(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The filter also holds on the hook path (calls prepared in the ``call``
    phase), and ``configure(tools=...)`` changes what the next run offers."""
    from pidurable.shell import define_extension

    ran: list[str] = []

    async def noop(call: Any, args: dict[str, Any]) -> str:
        ran.append("noop")
        return "ran"

    async def passthrough(ctx: Any, call: Any) -> None:
        return None

    registry = Registry()
    registry.install(define_tool("noop", "noop", {"type": "object"}, noop, replay="safe"))
    registry.install(define_extension("hooks", hooks={"before_tool": passthrough}))
    models = ScriptedModels([reply(tool_calls=[tool_call("noop")]), reply(text="a"), reply(tool_calls=[tool_call("noop")]), reply(text="b")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL, tools=()))
        assert (await settle(conv, "one")).status == "done"
        assert ran == [] and offered(models.requests[0]) == []
        await conv.configure(tools=["noop"])  # a list is accepted and stored as a tuple
        assert (await conv.agent()).tools == ("noop",)
        assert (await settle(conv, "two")).status == "done"
        assert ran == ["noop"] and offered(models.requests[2]) == ["noop"]
        first = [e for e in await conv.transcript() if e.kind == EntryKind.TOOL_RESULT][0]
        assert first.text == "<harness>\n[error] Tool noop is not available\n</harness>"


async def test_instructions_are_the_system_prompt_of_every_request(autojump_clock: trio.testing.MockClock) -> None:
    """Instructions reach the model first, as the tagged section, on every
    request of a run (the tool round's second request too)."""
    registry = Registry()

    async def ping(call: Any, args: dict[str, Any]) -> str:
        return "pong"

    registry.install(define_tool("ping", "ping", {"type": "object"}, ping, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("ping")]), reply(text="ok")])
    agent = AgentConfig(model=MODEL, instructions="Answer in French.")
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=agent)
        assert (await settle(conv, "hi")).status == "done"
    assert len(models.requests) == 2
    for request in models.requests:
        first = request.messages[0]
        assert first.role == "system"
        assert first.text == "<instructions>\nAnswer in French.\n</instructions>"
        assert [m.role for m in request.messages].count("system") == 1


async def test_tools_run_in_the_conversation_cwd(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """With ``LocalEnv(root)`` and a conversation cwd ``sub``, ``read``
    resolves paths inside ``root/sub``; a cwd outside the root is an error
    result, never a read outside."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("inside sub")
    (tmp_path / "f.txt").write_text("at root")
    registry = Registry()
    registry.install(coding_tools())
    models = ScriptedModels([reply(tool_calls=[tool_call("read", path="f.txt")]), reply(text="ok")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL, cwd="sub"))
        assert (await settle(conv, "read it")).status == "done"
        result = [e for e in await conv.transcript() if e.kind == EntryKind.TOOL_RESULT][0]
        assert result.text == "inside sub"
        outside = await h.create_conversation(agent=AgentConfig(model=MODEL, cwd=str(tmp_path.parent)))
        rec = await settle(outside, "read outside")  # the same script: read f.txt, then answer
        assert rec.status == "done"
        results = [e for e in await outside.transcript() if e.kind == EntryKind.TOOL_RESULT]
        assert results and results[0].is_error and "at root" not in results[0].text


async def test_subagent_child_gets_its_own_agent_and_tool_filter(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The child conversation of ``define_subagent_tool(agent=...)`` has that
    agent: its own instructions and tool filter (the model is inherited when
    not given); a child call outside its filter never runs."""
    (tmp_path / "a.txt").write_text("A")
    registry = Registry()
    registry.install(coding_tools())
    registry.install(
        define_subagent_tool(
            "research", "delegate", agent=AgentConfig(tools=("read",), instructions="You only read.")
        )
    )

    def script(request: Any) -> Any:
        child = any(m.role == "system" and "You only read." in m.text for m in request.messages)
        n = sum(1 for m in request.messages if m.role == "assistant")
        if not child:
            return [reply(tool_calls=[tool_call("research", prompt="look")]), reply(text="parent done")][n]
        return [
            reply(tool_calls=[tool_call("write", path="w.txt", content="x"), tool_call("read", path="a.txt")]),
            reply(text="child saw A"),
        ][n]

    models = ScriptedModels(script)
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL))
        assert (await settle(conv, "delegate")).status == "done"
        child = (await h.conversations())[-1]
        assert child.id != conv.id
        child_agent = await child.agent()
        assert child_agent.tools == ("read",) and child_agent.model == MODEL
        results = {e.tool_name: e for e in await child.transcript() if e.kind == EntryKind.TOOL_RESULT}
        assert results["write"].text == "<harness>\n[error] Tool write is not available\n</harness>"
        assert results["read"].text == "A"
    child_requests = [r for r in models.requests if r.conversation_id == child.id]
    assert child_requests and all(offered(r) == ["read"] for r in child_requests)
    assert not (tmp_path / "w.txt").exists()
