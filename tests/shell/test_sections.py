"""Issue 9 item 1: system sections, recorded.

Extensions contribute prompt sections; an agent selects extensions (their
tools, sections and hooks); every change of the rendered sections or the
offered tools is a positional system entry, and a request re-sent after a
crash offers what was recorded, not what the registry holds now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.model import EntryKind
from pidurable.shell import (
    AgentConfig,
    Harness,
    HookReport,
    Input,
    MemoryStorage,
    ModelRef,
    Registry,
    define_extension,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell import section
from pidurable.shell.providers import ScriptedModels, reply, tool_call

MODEL = ModelRef("scripted", "m")


async def _noop(call: Any, args: dict[str, Any]) -> str:
    return "ran"


def _tool(name: str) -> Any:
    return define_tool(name, name, {"type": "object"}, _noop, replay="safe")


async def settle(conv: Any, text: str) -> Any:
    handle = await conv.submit(Input(text))
    with trio.fail_after(10):
        return await handle.wait()


def systems(entries: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in entries if e.kind == EntryKind.SYSTEM]


async def test_sections_are_rendered_recorded_and_sent(autojump_clock: trio.testing.MockClock) -> None:
    """Two extensions' sections and the instructions form the system prompt
    (tagged, extension order, instructions last); the first request records a
    baseline entry; a change of a section's text records only that change."""
    state = {"mood": "calm"}

    def mood(prompt: Any) -> str:
        assert prompt.conversation_id == 1 and prompt.agent.model == MODEL
        return f"Be {state['mood']}."

    async def rules(prompt: Any) -> str:
        return "No swearing."

    registry = Registry()
    registry.install(define_extension("style", sections=[section("mood", mood)], tools=[_tool("paint")]))
    registry.install(define_extension("policy", sections=[section("rules", rules, tag=False)]))
    models = ScriptedModels(lambda req: reply(text="ok"))
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL, instructions="Answer briefly."))
        assert (await settle(conv, "one")).status == "done"
        state["mood"] = "cheerful"
        assert (await settle(conv, "two")).status == "done"
        assert (await settle(conv, "three")).status == "done"  # nothing changed: no new entry
        entries = await conv.transcript()
        context = await conv.context()
    first, second, third = models.requests
    expected = "<mood>\nBe calm.\n</mood>\n\nNo swearing.\n\n<instructions>\nAnswer briefly.\n</instructions>"
    assert first.messages[0].role == "system" and first.messages[0].text == expected
    assert second.messages[0].text == expected.replace("calm", "cheerful")
    assert third.messages[0].text == second.messages[0].text
    assert [t.name for t in first.tools] == ["paint"]
    recorded = systems(entries)
    assert recorded[0]["order"] == ["mood", "rules", "instructions"] and recorded[0]["tools_added"] == ["paint"]
    assert recorded[1] == {"sections": {"mood": "<mood>\nBe cheerful.\n</mood>"}}
    assert len(recorded) == 2
    assert context[0].role == "system" and context[0].text == second.messages[0].text


async def test_agent_extension_selection_picks_tools_and_sections(autojump_clock: trio.testing.MockClock) -> None:
    """``AgentConfig(extensions=...)`` offers only the selected extensions'
    tools and sections; a call to a tool of another extension is not available."""
    registry = Registry()
    registry.install(define_extension("a", sections=[section("alpha", lambda p: "A")], tools=[_tool("ta")]))
    registry.install(define_extension("b", sections=[section("beta", lambda p: "B")], tools=[_tool("tb")]))
    models = ScriptedModels([reply(tool_calls=[tool_call("ta"), tool_call("tb")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL, extensions=["b"]))
        assert (await conv.agent()).extensions == ("b",)
        assert (await settle(conv, "go")).status == "done"
        results = {e.tool_name: e.text for e in await conv.transcript() if e.kind == EntryKind.TOOL_RESULT}
    assert [t.name for t in models.requests[0].tools] == ["tb"]
    assert models.requests[0].messages[0].text == "<beta>\nB\n</beta>"
    assert results == {"ta": "<harness>\n[error] Tool ta is not available\n</harness>", "tb": "ran"}


async def test_a_raising_section_keeps_its_shown_text_and_is_reported(autojump_clock: trio.testing.MockClock) -> None:
    """A renderer that raises is reported (on_report) and its section keeps
    the text the model was shown; the run goes on."""
    calls = {"n": 0}

    def flaky(prompt: Any) -> str:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("renderer broke")
        return "Stable."

    reports: list[HookReport] = []
    registry = Registry()
    registry.install(define_extension("x", sections=[section("state", flaky)]))
    models = ScriptedModels(lambda req: reply(text="ok"))
    async with Harness.open(MemoryStorage(), models=models, registry=registry, on_report=reports.append) as h:
        conv = await h.root(agent=AgentConfig(model=MODEL))
        assert (await settle(conv, "one")).status == "done"
        assert (await settle(conv, "two")).status == "done"
    assert models.requests[1].messages[0].text == "<state>\nStable.\n</state>"
    assert [(r.hook, r.extension, r.handled) for r in reports] == [("section:state", "x", "kept the shown text")]


def test_bad_sections_are_refused_at_definition() -> None:
    with pytest.raises(ValueError):
        section("Bad Key", lambda p: "x")
    with pytest.raises(ValueError):
        section("instructions", lambda p: "x")
    with pytest.raises(ValueError):
        define_extension("dup", sections=[section("a", lambda p: "1"), section("a", lambda p: "2")])
    with pytest.raises(TypeError):
        define_extension("raw", sections=["not a section"])


async def test_a_resent_request_offers_the_recorded_tools(tmp_path: Path) -> None:
    """The tool set a request offers is the recorded one: after a crash, a
    re-sent request offers what the model was shown even if the registry
    now holds another tool."""
    db = tmp_path / "s.sqlite"
    gate = trio.Event()

    class Stall:
        def __init__(self) -> None:
            self.requests: list[Any] = []

        def resolve(self, ref: ModelRef) -> Any:
            return self

        async def complete(self, request: Any, on_partial: Any = None) -> Any:
            self.requests.append(request)
            await gate.wait()

    registry = Registry()
    registry.install(define_extension("e", sections=[section("s", lambda p: "S")], tools=[_tool("old")]))
    stall = Stall()
    with trio.move_on_after(5):
        async with Harness.open(open_sqlite_storage(db), models=stall, registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=MODEL))
            await conv.submit(Input("go"))
            with trio.fail_after(5):
                while not stall.requests:
                    await trio.sleep(0.01)
    # a new process: the extension now offers another tool too
    registry = Registry()
    registry.install(define_extension("e", sections=[section("s", lambda p: "S")], tools=[_tool("old"), _tool("new")]))
    models = ScriptedModels(lambda req: reply(text="done"))
    async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
        with trio.fail_after(10):
            await h.wait_idle()
    assert [t.name for t in stall.requests[0].tools] == ["old"]
    assert [t.name for t in models.requests[0].tools] == ["old"]  # the re-sent request: as recorded


async def test_hooks_follow_the_agents_extension_selection(autojump_clock: trio.testing.MockClock) -> None:
    """Only the selected extensions' hooks run for an agent (issue 9: tools
    and hooks are per agent, no longer global)."""
    ran: list[str] = []

    def hook(name: str) -> Any:
        async def before_tool(ctx: Any, call: Any) -> None:
            ran.append(name)

        return before_tool

    registry = Registry()
    registry.install(define_extension("a", tools=[_tool("ta")], hooks={"before_tool": hook("a")}))
    registry.install(define_extension("b", hooks={"before_tool": hook("b")}))
    models = ScriptedModels(lambda req: reply(tool_calls=[tool_call("ta")]) if req.turn % 2 == 0 else reply(text="ok"))
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        only_a = await h.create_conversation(agent=AgentConfig(model=MODEL, extensions=["a"]))
        every = await h.create_conversation(agent=AgentConfig(model=MODEL))
        assert (await settle(only_a, "go")).status == "done"
        assert ran == ["a"]
        assert (await settle(every, "go")).status == "done"
    assert ran == ["a", "a", "b"]
