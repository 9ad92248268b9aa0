"""Compaction through the host API (issue 9 item 4): ``conv.compact()`` runs a
``pi.compaction`` task whose summary becomes the start of the context, the
transcript keeps everything, and bad input is refused."""

from __future__ import annotations

import pytest
import trio

from pidurable.core.compaction import SUMMARY_PREFIX, SUMMARY_SYSTEM_PROMPT
from pidurable.core.model import EntryKind, OutcomeStatus, SubmissionStatus
from pidurable.shell import (
    AgentConfig,
    CompactionSettings,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    Settings,
)
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.providers.base import ModelRequest

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
SETTINGS = Settings(compaction=CompactionSettings(keep_recent_tokens=30))


def summarizing(summary: str = "SUMMARY: fixed the port") -> tuple[ScriptedModels, list[ModelRequest]]:
    """A model that answers turns with long text and summarization requests with ``summary``."""
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> object:
        seen.append(request)
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text=summary)
        return reply(text=f"answer {len(seen)} " + "x" * 200)

    return ScriptedModels(answer), seen


async def test_manual_compaction_places_a_summary_and_the_context_starts_there() -> None:
    """After three long turns, ``compact()`` summarizes the old ones; ``context()`` is the summary plus the kept entries, and the next request sees the same."""
    models, seen = summarizing()
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=SETTINGS) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            task_id = await conv.compact(instructions="the port")
            task = await h.wait_for_task(task_id)
            assert task.outcome is not None and task.outcome.status == OutcomeStatus.COMPLETED
            summarize = seen[-1]
            assert summarize.tools == ()
            assert "<conversation>" in summarize.messages[1].text
            assert "Additional focus: the port" in summarize.messages[1].text
            context = await conv.context()
            assert context[0].role == "user" and context[0].text.startswith(SUMMARY_PREFIX)
            assert "SUMMARY: fixed the port" in context[0].text
            transcript = await conv.transcript()
            marker = transcript[-1]
            assert marker.kind == EntryKind.COMPACTION and marker.data is not None
            assert marker.data["reason"] == "manual"
            kept = [e for e in transcript if e.id >= marker.data["head"] and e.kind != EntryKind.COMPACTION]
            assert len(context) == 1 + len(kept)
            sub = (await conv.submit(Input("next"))).id
            assert (await (await h.submission(sub)).wait()).status == SubmissionStatus.DONE  # type: ignore[union-attr]
        assert [m.text for m in seen[-1].messages][: len(context)] == [m.text for m in context]
        assert len(await conv.transcript()) == len(transcript) + 2


async def test_compact_with_nothing_to_compact_places_nothing() -> None:
    """On a short conversation ``compact()`` completes with an empty result and no entry."""
    models, _ = summarizing()
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            await (await conv.submit(Input("hi"))).wait()
            task = await h.wait_for_task(await conv.compact())
        assert task.outcome is not None and task.outcome.status == OutcomeStatus.COMPLETED
        assert task.outcome.result == {}
        assert [e.kind for e in await conv.transcript()] == [EntryKind.USER, EntryKind.ASSISTANT]


@pytest.mark.parametrize(
    ("summary", "message"),
    [("", "Summarization produced no text"), ("   ", "Summarization produced no text")],
)
async def test_an_empty_summary_fails_with_the_reference_text(summary: str, message: str) -> None:
    """A summary with no text fails the task ``model_error`` and places nothing."""
    models, _ = summarizing(summary)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=SETTINGS) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            before = len(await conv.transcript())
            task = await h.wait_for_task(await conv.compact())
        assert task.outcome is not None and task.outcome.status == OutcomeStatus.FAILED
        assert task.outcome.error == {"message": message, "detail": {"reason": "model_error"}}
        assert len(await conv.transcript()) == before


async def test_keep_recent_tokens_must_be_positive() -> None:
    """``keep_recent_tokens <= 0`` is refused with ``InvalidInput``."""
    models, _ = summarizing()
    with pytest.raises(InvalidInput):
        async with Harness.open(
            MemoryStorage(), models=models, registry=Registry(), env=None,
            settings=Settings(compaction=CompactionSettings(keep_recent_tokens=0)),
        ):
            pass


async def test_summarizer_calls_count_in_pi_usage_models() -> None:
    """A summarization request is a model call: pi.usage.models counts it (and its reported tokens) like a turn."""
    from pidurable.core.model import Usage

    def answer(request: ModelRequest) -> object:
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text="SUMMARY", usage=Usage(input_tokens=70, output_tokens=7))
        return reply(text="answer " + "x" * 200)

    async with Harness.open(MemoryStorage(), models=ScriptedModels(answer), registry=Registry(), env=None, settings=SETTINGS) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                await (await conv.submit(Input(f"question {i} " + "q" * 100))).wait()
            before = (await conv.usage()).models["scripted:demo"]
            task = await h.wait_for_task(await conv.compact())
            assert task.outcome is not None and task.outcome.status == OutcomeStatus.COMPLETED
            after = (await conv.usage()).models["scripted:demo"]
        assert after.calls == before.calls + 1
        assert after.input_tokens == before.input_tokens + 70 and after.output_tokens == before.output_tokens + 7
