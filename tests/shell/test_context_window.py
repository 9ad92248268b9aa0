"""A model's context window reaches the core through the journaled agent
(issue 9 item 4): the adapters take ``context_window``, the harness records
it with the agent at root/configure/create, and a ``keep_recent_tokens`` that
does not fit the window is refused where both are known."""

from __future__ import annotations

import pytest

from pidurable.shell import (
    AgentConfig,
    CompactionSettings,
    Harness,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    Settings,
)
from pidurable.shell.providers import ScriptedModels, reply
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
