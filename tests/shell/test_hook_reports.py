"""Issue 9 item 3 (part): a hook that raises is reported to the host's
``on_report`` sink (default: the ``pidurable`` logger at WARNING) with the
hook, its extension, the task and the error, and handled as the reference
says; never swallowed silently."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

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
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "m"))


async def _noop(call: Any, args: dict[str, Any]) -> str:
    return "ran"


def _registry(**hooks: Any) -> Registry:
    registry = Registry()
    registry.install(define_tool("noop", "noop", {"type": "object"}, _noop, replay="safe"))
    registry.install(define_extension("audit", hooks=hooks))
    return registry


async def _run(registry: Registry, **open_kw: Any) -> list[Any]:
    models = ScriptedModels([reply(tool_calls=[tool_call("noop")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry, **open_kw) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(10):
            assert (await handle.wait()).status == "done"
        return await conv.transcript()


async def test_raising_observers_are_reported_to_the_sink_and_skipped(autojump_clock: trio.testing.MockClock) -> None:
    """after_tool and before_request raise: each is reported with hook,
    extension, task and error; the call and the request go on."""
    reports: list[HookReport] = []

    async def bad_after(ctx: Any, call: Any, result: Any) -> None:
        raise RuntimeError("after broke")

    async def bad_before_request(ctx: Any, messages: Any) -> None:
        raise ValueError("request broke")

    entries = await _run(_registry(after_tool=bad_after, before_request=bad_before_request), on_report=reports.append)
    assert [e.text for e in entries if e.kind == "tool_result"] == ["ran"]
    hooks = sorted({(r.hook, r.extension, r.handled) for r in reports})
    assert hooks == [("after_tool", "audit", "skipped"), ("before_request", "audit", "skipped")]
    assert any("RuntimeError: after broke" == r.error and r.task_id > 0 for r in reports)


async def test_a_blocking_before_tool_is_reported_too(autojump_clock: trio.testing.MockClock) -> None:
    """A raising before_tool blocks the call (the reference) and is reported."""
    reports: list[HookReport] = []

    async def veto(ctx: Any, call: Any) -> None:
        raise PermissionError("not today")

    entries = await _run(_registry(before_tool=veto), on_report=reports.append)
    assert [e.text for e in entries if e.kind == "tool_result"] == ["<harness>\n[error] Tool call blocked: not today\n</harness>"]
    assert [(r.hook, r.handled) for r in reports] == [("before_tool", "blocked the call")]


async def test_the_default_sink_is_the_pidurable_logger(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def bad_after(ctx: Any, call: Any, result: Any) -> None:
        raise RuntimeError("after broke")

    with caplog.at_level(logging.WARNING, logger="pidurable"):
        await _run(_registry(after_tool=bad_after))
    assert any("after_tool hook of extension audit raised" in r.getMessage() for r in caplog.records)


async def test_a_sink_that_raises_is_logged_not_swallowed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def bad_after(ctx: Any, call: Any, result: Any) -> None:
        raise RuntimeError("after broke")

    def broken_sink(report: HookReport) -> None:
        raise KeyError("sink broke")

    with caplog.at_level(logging.WARNING, logger="pidurable"):
        await _run(_registry(after_tool=bad_after), on_report=broken_sink)
    messages = [r.getMessage() for r in caplog.records]
    assert any("on_report sink raised" in m for m in messages)
    assert any("after_tool hook of extension audit raised" in m for m in messages)


async def test_after_response_observes_every_complete_message(autojump_clock: trio.testing.MockClock) -> None:
    """after_response sees the tool round and the answer (in order); one
    that raises is reported and the run goes on."""
    seen: list[str] = []
    reports: list[HookReport] = []

    async def watch(ctx: Any, reply: Any) -> None:
        seen.append(reply.text or ",".join(c.name for c in reply.tool_calls))

    async def broken(ctx: Any, reply: Any) -> None:
        raise RuntimeError("observer broke")

    registry = _registry(after_response=watch)
    registry.install(define_extension("second", hooks={"after_response": broken}))
    await _run(registry, on_report=reports.append)
    assert seen == ["noop", "done"]
    assert [(r.hook, r.extension) for r in reports] == [("after_response", "second")] * 2


async def test_a_sink_that_is_not_a_function_is_refused_at_open() -> None:
    from pidurable.shell import InvalidInput

    with pytest.raises(InvalidInput, match="on_report"):
        async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry(), on_report="log"):  # type: ignore[arg-type]
            pass
