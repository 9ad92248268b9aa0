"""Issue 9 item 3 (the rest): ``after_tools`` (controls for the run),
``on_yield`` (continue the run), ``on_abort`` (replace an aborted call's
result) and the controls a tool result may carry (terminate / handoff /
add_tools), end to end through the shell (reference §3.7, §3.9, §3.10)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pidurable.shell import (
    AgentConfig,
    Control,
    Harness,
    HookReport,
    Input,
    MemoryStorage,
    ModelRef,
    Registry,
    ToolResult,
    define_extension,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "m"))


def _tool(name: str, result: Any = "ran", *, replay: str = "safe") -> Any:
    async def execute(call: Any, args: dict[str, Any]) -> Any:
        return result

    return define_tool(name, name, {"type": "object"}, execute, replay=replay)


async def _run(registry: Registry, replies: list[Any], agent: AgentConfig = AGENT, **open_kw: Any) -> tuple[Any, list[Any], ScriptedModels]:
    models = ScriptedModels(replies)
    async with Harness.open(MemoryStorage(), models=models, registry=registry, **open_kw) as h:
        conv = await h.root(agent=agent)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(30):
            result = await handle.wait()
        return result, await conv.transcript(), models


async def test_a_terminating_tool_result_ends_the_run(autojump_clock: trio.testing.MockClock) -> None:
    """Every call's result terminates: the run is answered by the tool-calling entry; the model is not asked again."""
    registry = Registry()
    registry.install(_tool("finish", ToolResult(text="bye", control=Control(terminate=True))))
    result, entries, models = await _run(registry, [reply(tool_calls=[tool_call("finish")]), reply(text="never")])
    assistant = [e for e in entries if e.kind == "assistant"]
    assert result.status == "done" and result.answer_entry_id == assistant[0].id
    assert len(assistant) == 1 and len(models.requests) == 1


async def test_handoff_resets_the_context_for_the_next_turn(autojump_clock: trio.testing.MockClock) -> None:
    """A handoff ends the run and the next request starts from the reset marker with its text."""
    registry = Registry()
    registry.install(_tool("handoff", ToolResult(text="ok", control=Control(handoff="Plan: step 2 next"))))
    models = ScriptedModels([reply(tool_calls=[tool_call("handoff")]), reply(text="fresh answer")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(30):
            assert (await (await conv.submit(Input("first"))).wait()).status == "done"
            assert (await (await conv.submit(Input("second"))).wait()).status == "done"
        entries = await conv.transcript()
    assert [e.kind for e in entries if e.kind == "reset"] == ["reset"]
    texts = [m.text for m in models.requests[-1].messages if m.role == "user"]
    assert texts[0] == "Plan: step 2 next" and texts[-1] == "second"
    assert all("first" != t for t in texts)


async def test_add_tools_offers_a_tool_from_the_next_request(autojump_clock: trio.testing.MockClock) -> None:
    registry = Registry()
    registry.install(_tool("unlock", ToolResult(text="unlocked", control=Control(add_tools=("secret",)))))
    registry.install(_tool("secret"))
    agent = AgentConfig(model=ModelRef("scripted", "m"), tools=("unlock",))
    _, _, models = await _run(registry, [reply(tool_calls=[tool_call("unlock")]), reply(text="done")], agent)
    assert [t.name for t in models.requests[0].tools] == ["unlock"]
    assert [t.name for t in models.requests[1].tools] == ["unlock", "secret"]


async def test_after_tools_sees_the_results_and_may_terminate(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[list[str]] = []

    async def after_tools(ctx: Any, results: Any) -> Control:
        seen.append([e.text for e in results])
        return Control(terminate=True)

    registry = Registry()
    registry.install(_tool("a", "A"))
    registry.install(_tool("b", "B"))
    registry.install(define_extension("stop", hooks={"after_tools": after_tools}))
    result, entries, models = await _run(registry, [reply(tool_calls=[tool_call("a"), tool_call("b")]), reply(text="x")])
    assert seen == [["A", "B"]] and result.status == "done" and len(models.requests) == 1


async def test_a_raising_after_tools_is_reported_and_the_run_goes_on(autojump_clock: trio.testing.MockClock) -> None:
    reports: list[HookReport] = []

    async def after_tools(ctx: Any, results: Any) -> Any:
        raise RuntimeError("observer broke")

    async def wrong(ctx: Any, results: Any) -> Any:
        return {"terminate": True}  # not a Control: reported, skipped

    registry = Registry()
    registry.install(_tool("a"))
    registry.install(define_extension("one", hooks={"after_tools": after_tools}))
    registry.install(define_extension("two", hooks={"after_tools": wrong}))
    result, entries, _ = await _run(registry, [reply(tool_calls=[tool_call("a")]), reply(text="final")], on_report=reports.append)
    assert result.status == "done" and entries[-1].text == "final"
    assert [(r.hook, r.extension, r.handled) for r in reports] == [
        ("after_tools", "one", "skipped"),
        ("after_tools", "two", "skipped"),
    ]


async def test_on_yield_continues_the_run_once(autojump_clock: trio.testing.MockClock) -> None:
    """True continues with "Continue."; a text continues with that text; the input is answered by the last answer."""
    asked: list[str] = []

    async def on_yield(ctx: Any, answer: Any) -> Any:
        asked.append(answer.text)
        return {"draft": "Now polish it.", "polished": True}.get(answer.text)

    registry = Registry()
    registry.install(define_extension("coach", hooks={"on_yield": on_yield}))
    result, entries, models = await _run(registry, [reply(text="draft"), reply(text="polished"), reply(text="final")])
    users = [e.text for e in entries if e.kind == "user"]
    assert users == ["go", "Now polish it.", "Continue."]
    assert asked == ["draft", "polished", "final"]
    assert result.status == "done" and result.answer_entry_id == entries[-1].id and entries[-1].text == "final"


async def test_on_abort_replaces_an_aborted_result(autojump_clock: trio.testing.MockClock) -> None:
    started = trio.Event()

    async def slow(call: Any, args: dict[str, Any]) -> str:
        started.set()
        await trio.sleep(3600)
        return "never"

    async def on_abort(ctx: Any, call: Any, result: Any) -> Any:
        (aborted,) = result.diagnostics  # what the handler built: no partial output, "Tool slow was aborted"
        assert result.text == "" and result.is_error and (aborted.severity, aborted.code) == ("error", "aborted")
        return ToolResult(text=f"{call.name} stopped by the user; nothing was written. ({aborted.message})")

    registry = Registry()
    registry.install(define_tool("slow", "slow", {"type": "object"}, slow, replay="unsafe"))
    registry.install(define_extension("polite", hooks={"on_abort": on_abort}))
    models = ScriptedModels([reply(tool_calls=[tool_call("slow")]), reply(text="after")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(30):
            await started.wait()
            (tool,) = [t for t in await h.tasks(live_only=True) if t.kind == "pi.tool"]
            await h.abort_task(tool.id)
            assert (await handle.wait()).status == "done"
        entries = await conv.transcript()
    (result,) = [e for e in entries if e.kind == "tool_result"]
    assert result.text == "slow stopped by the user; nothing was written. (Tool slow was aborted)"
    assert result.is_error and result.data == {"code": "aborted"}  # a replacement is a whole result: no diagnostics kept


async def test_a_bad_control_fails_the_call_clearly(autojump_clock: trio.testing.MockClock) -> None:
    """A control that is not one (bad field types, a lone surrogate in a handoff) never reaches the reducer raw."""
    registry = Registry()
    registry.install(_tool("bad", ToolResult(text="x", control=Control(terminate="yes"))))  # type: ignore[arg-type]
    registry.install(_tool("odd", ToolResult(text="y", control=Control(handoff="half \ud800 way"))))
    result, entries, _ = await _run(
        registry, [reply(tool_calls=[tool_call("bad")]), reply(tool_calls=[tool_call("odd")]), reply(text="z")]
    )
    results = [e for e in entries if e.kind == "tool_result"]
    assert results[0].is_error and "Control.terminate" in results[0].text
    assert result.status == "done"
    marker = [e for e in entries if e.kind == "reset"]
    assert [m.text for m in marker] == ["half \ufffd way"]
