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
from invariants import journal_history

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


async def test_a_retryable_summarizer_error_is_retried_after_a_durable_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 9 item 4: a 429 from the summarizer waits out the retry backoff
    (the deadline is stored in the summarize_retry checkpoint) and sends the
    same pinned request again as the next attempt; the summary is placed."""
    from pidurable.shell import RetryPolicy

    calls = {"summaries": 0}

    def answer(request: Any) -> Any:
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            calls["summaries"] += 1
            if calls["summaries"] == 1:
                return reply(error="429 Too Many Requests", retryable=True)
            return reply(text="second try summary")
        return reply(text="answer " + "x" * 200)

    settings = Settings(
        compaction=CompactionSettings(keep_recent_tokens=30), retry=RetryPolicy(base_delay_ms=500)
    )
    storage = MemoryStorage()
    async with Harness.open(storage, models=ScriptedModels(answer), registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            task = await h.wait_for_task(await conv.compact())
        transcript = await conv.transcript()
    assert task.outcome is not None and task.outcome.status == "completed"
    assert calls["summaries"] == 2
    assert "second try summary" in transcript[-1].text
    phases = [w for _, _, writes in journal_history(storage) for w in writes if w["type"] == "task"]
    retry = [w["task"]["checkpoint"] for w in phases if w["task"]["checkpoint"].get("phase") == "summarize_retry"]
    assert retry and retry[0]["attempt"] == 1 and retry[0]["until"] > 0


async def test_a_hook_summary_with_a_lone_surrogate_is_cleaned(autojump_clock: trio.testing.MockClock) -> None:
    """A before_compact summary is host text from outside: a lone surrogate
    is replaced at the edge (the store stays valid UTF-8), never stored raw."""

    async def summarize(ctx: Any, info: Any) -> dict[str, str]:
        return {"summary": "bad \ud800 summary"}

    transcript, _, task = await _compact({"before_compact": summarize}, [])
    marker = transcript[-1]
    assert marker.kind == EntryKind.COMPACTION and "bad \ufffd summary" in marker.text
    marker.text.encode("utf-8")
    assert task.outcome is not None and task.outcome.status == "completed"
