"""Issue 9 item 3 (part): ``before_compact`` hooks decide a compaction
before any model call - decline it, or supply the summary - and one that
raises is reported while the next decides."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pidurable.core.compaction import SUMMARY_SYSTEM_PROMPT
from pidurable.core.model import EntryKind
from pidurable.shell import (
    AgentConfig,
    CompactionSettings,
    Harness,
    HookReport,
    Input,
    MemoryStorage,
    ModelRef,
    Registry,
    Settings,
    define_extension,
)
from pidurable.shell.providers import ScriptedModels, reply

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
SETTINGS = Settings(compaction=CompactionSettings(keep_recent_tokens=30))


def _models() -> tuple[ScriptedModels, list[Any]]:
    seen: list[Any] = []

    def answer(request: Any) -> Any:
        seen.append(request)
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text="model summary")
        return reply(text="answer " + "x" * 200)

    return ScriptedModels(answer), seen


async def _compact(hooks: dict[str, Any], reports: list[HookReport]) -> tuple[list[Any], list[Any], Any]:
    models, seen = _models()
    registry = Registry()
    registry.install(define_extension("policy", hooks=hooks))
    async with Harness.open(
        MemoryStorage(), models=models, registry=registry, settings=SETTINGS, on_report=reports.append
    ) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            task = await h.wait_for_task(await conv.compact(instructions="keep the port"))
        return await conv.transcript(), seen, task


async def test_a_hook_summary_is_placed_without_a_model_call(autojump_clock: trio.testing.MockClock) -> None:
    infos: list[Any] = []

    async def summarize(ctx: Any, info: Any) -> dict[str, str]:
        infos.append(info)
        return {"summary": "hook summary"}

    transcript, seen, task = await _compact({"before_compact": summarize}, [])
    assert not any(r.messages and r.messages[0].text == SUMMARY_SYSTEM_PROMPT for r in seen)
    marker = transcript[-1]
    assert marker.kind == EntryKind.COMPACTION and "hook summary" in marker.text
    assert marker.data is not None and marker.data["summarized_by"] == "before_compact"
    [info] = infos
    assert info.reason == "manual" and info.instructions == "keep the port"
    assert info.first_kept == marker.data["head"] and all(e.id < info.first_kept for e in info.entries)
    assert task.outcome is not None and task.outcome.status == "completed"


async def test_a_declining_hook_compacts_nothing(autojump_clock: trio.testing.MockClock) -> None:
    async def decline(ctx: Any, info: Any) -> dict[str, bool]:
        return {"decline": True}

    transcript, seen, task = await _compact({"before_compact": decline}, [])
    assert not any(e.kind == EntryKind.COMPACTION for e in transcript)
    assert task.outcome is not None and task.outcome.result == {}


async def test_a_raising_hook_is_reported_and_the_model_summarizes(autojump_clock: trio.testing.MockClock) -> None:
    reports: list[HookReport] = []

    async def broken(ctx: Any, info: Any) -> None:
        raise RuntimeError("policy down")

    transcript, seen, _ = await _compact({"before_compact": broken}, reports)
    assert [(r.hook, r.handled) for r in reports] == [("before_compact", "skipped")]
    assert transcript[-1].kind == EntryKind.COMPACTION and "model summary" in transcript[-1].text


async def test_a_deferred_summary_fails_the_compaction(autojump_clock: trio.testing.MockClock) -> None:
    """A provider that defers a summarization request (summaries are not
    polled) fails the compaction with a reason instead of leaving it stuck
    (found by the stateful fuzzer as a liveness failure)."""

    def answer(request: Any) -> Any:
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text="later", deferred=1)
        return reply(text="answer " + "x" * 200)

    async with Harness.open(MemoryStorage(), models=ScriptedModels(answer), registry=Registry(), settings=SETTINGS) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            task = await h.wait_for_task(await conv.compact())
    assert task.outcome is not None and task.outcome.status == "failed"
    assert "deferred" in str(task.outcome.error)
