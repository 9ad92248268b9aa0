"""A model's context window reaches the core through the journaled agent
(issue 9 item 4): the adapters take ``context_window``, the harness records
it with the agent at root/configure/create, and a ``keep_recent_tokens`` that
does not fit the window is refused where both are known."""

from __future__ import annotations

import pytest
import trio

from pidurable.core.compaction import SUMMARY_PREFIX, SUMMARY_SYSTEM_PROMPT
from pidurable.core.model import EntryKind, SubmissionStatus

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
from pidurable.shell.providers.anthropic import Anthropic
from pidurable.shell.providers.openai import OpenAIChat
from pidurable.shell.providers.responses import OpenAIResponses

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


def test_adapters_take_a_context_window_and_refuse_a_bad_one() -> None:
    """Every adapter keeps ``context_window`` (default None) and refuses a non-positive or non-int one."""
    for make in (OpenAIChat, Anthropic, OpenAIResponses):
        assert make("http://x", "k").context_window is None
        assert make("http://x", "k", context_window=8192).context_window == 8192
        for bad in (0, -1, True, 1.5, "8k"):
            with pytest.raises(ValueError):
                make("http://x", "k", context_window=bad)
    assert ScriptedModels([reply(text="hi")], context_window=4096).context_window == 4096
    with pytest.raises(ValueError):
        ScriptedModels([reply(text="hi")], context_window=0)


async def test_the_window_of_the_agents_model_is_recorded_with_the_agent() -> None:
    """root(), configure() and create_conversation() record the adapter's window in pi.agent; a window the host gives wins."""
    models = ScriptedModels([reply(text="hi")], context_window=50_000)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None) as h:
        conv = await h.root(agent=AGENT)
        assert (await conv.agent()).context_window == 50_000
        await conv.configure(context_window=None, instructions="brief")
        assert (await conv.agent()).context_window == 50_000
        await conv.configure(context_window=30_000)
        assert (await conv.agent()).context_window == 30_000
        other = await h.create_conversation(agent=AGENT)
        assert (await other.agent()).context_window == 50_000


async def test_without_a_window_nothing_is_recorded() -> None:
    """An adapter without a window leaves the agent as given (schema-1 bytes kept)."""
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry(), env=None) as h:
        conv = await h.root(agent=AGENT)
        assert (await conv.agent()).context_window is None


async def test_keep_recent_tokens_must_fit_the_window() -> None:
    """keep_recent_tokens >= the window is InvalidInput at root() and at update_settings()."""
    settings = Settings(compaction=CompactionSettings(keep_recent_tokens=20_000))
    models = ScriptedModels([reply(text="hi")], context_window=16_000)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=settings) as h:
        with pytest.raises(InvalidInput, match="keep_recent_tokens"):
            await h.root(agent=AGENT)
    settings = Settings(compaction=CompactionSettings(keep_recent_tokens=1_000))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=settings) as h:
        conv = await h.root(agent=AGENT)
        assert (await conv.agent()).context_window == 16_000
        with pytest.raises(InvalidInput, match="context_window"):
            await h.update_settings(Settings(compaction=CompactionSettings(keep_recent_tokens=16_000)))
        with pytest.raises(InvalidInput, match="context_window"):
            await conv.configure(context_window=0)


def _thresholds_model(answer_chars: int) -> tuple[ScriptedModels, list[ModelRequest]]:
    """A 1000-token model: turns answered with ``answer_chars`` characters, summarization requests with a fixed summary."""
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> object:
        seen.append(request)
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text="SUMMARY: the story so far")
        return reply(text="a" * answer_chars)

    return ScriptedModels(answer, context_window=1000), seen


def _summarized(requests: list[ModelRequest]) -> list[int]:
    return [i for i, r in enumerate(requests) if r.messages and r.messages[0].text == SUMMARY_SYSTEM_PROMPT]


async def test_above_the_blocking_threshold_the_turn_compacts_before_its_request() -> None:
    """window 1000, reserve 200: the third turn (about 1100 tokens) waits on a blocking threshold compaction, then its request starts with the summary."""
    settings = Settings(compaction=CompactionSettings(reserve_tokens=200, background_tokens=0, keep_recent_tokens=30))
    models, seen = _thresholds_model(2000)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=settings) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(3):
                sub = await (await conv.submit(Input(f"question {i} " + "q" * 90))).wait()
                assert sub.status == SubmissionStatus.DONE
        (s,) = _summarized(seen)
        assert s == 2  # after two turns, before the third request
        assert seen[3].messages[0].text.startswith(SUMMARY_PREFIX)
        marker = [e for e in await conv.transcript() if e.kind == EntryKind.COMPACTION]
        assert len(marker) == 1 and marker[0].data is not None and marker[0].data["reason"] == "threshold"


async def test_above_the_background_threshold_a_background_summary_is_placed_at_a_boundary() -> None:
    """window 1000, reserve 200, background 300: above 500 tokens a background compaction runs beside the turn; its summary is placed as a write and later requests start with it."""
    settings = Settings(compaction=CompactionSettings(reserve_tokens=200, background_tokens=300, keep_recent_tokens=30))
    models, seen = _thresholds_model(600)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=settings) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            for i in range(4):
                sub = await (await conv.submit(Input(f"question {i} " + "q" * 90))).wait()
                assert sub.status == SubmissionStatus.DONE
            (bg,) = [t for t in await h.tasks(conv.id) if t.kind == "pi.compaction"]
            assert bg.background and bg.owner is None and bg.input == {"reason": "threshold"}
            done = await h.wait_for_task(bg.id)
            assert done.outcome is not None and done.outcome.result is not None
            write = await h.submission(done.outcome.result["submission_id"])
            assert write is not None
            placed = await write.wait()
            assert placed.status == SubmissionStatus.DONE and placed.request_id == f"compaction:{bg.id}"
            marker = [e for e in await conv.transcript() if e.kind == EntryKind.COMPACTION]
            assert len(marker) == 1 and marker[0].data is not None and marker[0].data["reason"] == "threshold"
            assert len(_summarized(seen)) == 1
            await (await conv.submit(Input("next"))).wait()
        assert seen[-1].messages[0].text.startswith(SUMMARY_PREFIX)
