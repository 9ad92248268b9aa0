"""Streaming partials, deferred polling and their interaction with aborts."""

from __future__ import annotations

import trio
import trio.testing

from pidurable.core.model import RetryPolicy
from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, ModelRef, Registry, Settings
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.providers.base import ModelError, ModelReply, ModelRequest

AGENT = AgentConfig(model=ModelRef("scripted", "m"))


class CutStream:
    """Streams a few pieces, then fails (a connection cut): retryable once."""

    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, ref: ModelRef) -> "CutStream":
        return self

    async def complete(self, request: ModelRequest, on_partial=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            for text in ("The answer", "The answer is"):
                on_partial(text)
                await trio.sleep(0.2)
            raise ModelError("connection reset mid-stream", retryable=True)
        return ModelReply(text="The answer is 42.")


async def test_text_streamed_before_a_failure_is_kept_as_an_aborted_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stream that breaks after committing a partial keeps that partial in the
    transcript (stop reason aborted) before the error entry, then retries."""
    storage = MemoryStorage()
    settings = Settings(partial_interval_ms=50, retry=RetryPolicy(base_delay_ms=10))
    async with Harness.open(storage, models=CutStream(), registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("question"))
        with trio.fail_after(30):
            assert (await sub.wait()).status == "done"
        entries = [(e.kind, e.stop_reason, e.text) for e in await conv.transcript()]
    assert entries == [
        ("user", None, "question"),
        ("assistant", "aborted", "The answer is"),
        ("assistant", "error", "connection reset mid-stream"),
        ("assistant", "stop", "The answer is 42."),
    ]


async def test_aborting_a_polling_generation_cancels_the_deferred_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A generation waiting on a deferred response is aborted: the provider is
    told to cancel that handle, and the input ends unanswered/aborted."""
    models = ScriptedModels([reply(text="late", deferred=100, poll_after_ms=1000)])
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("slow question"))
        with trio.fail_after(60):
            while not models.polls:
                await trio.sleep(0.1)
            await conv.abort()
            record = await sub.wait()
            while not models.cancelled:
                await trio.sleep(0.01)
    assert (record.status, record.reason) == ("unanswered", "aborted")
    assert models.deferred_created == 1
    assert models.cancelled[0]["k"] == 0


async def test_usage_is_summed_per_model_and_over_conversations() -> None:
    """Each model reply adds its tokens to the conversation's pi.usage; the
    harness total sums every conversation (a sub-conversation included)."""
    from pidurable.core.model import Usage

    models = ScriptedModels(lambda request: reply(text="ok", usage=Usage(input_tokens=10, output_tokens=3)))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        root = await h.root(agent=AGENT)
        other = await h.create_conversation(agent=AgentConfig(model=ModelRef("scripted", "other")))
        for conv, n in ((root, 2), (other, 1)):
            for i in range(n):
                assert (await (await conv.submit(Input(f"q{i}"))).wait()).status == "done"
        mine = await root.usage()
        total = await h.usage()
    assert mine.models["scripted:m"].input_tokens == 20 and mine.models["scripted:m"].calls == 2
    assert total.models["scripted:m"].output_tokens == 6
    assert total.models["scripted:other"].input_tokens == 10


async def test_a_poll_request_carries_the_original_context(autojump_clock: trio.testing.MockClock) -> None:
    """Polling a deferred answer sends the same context as the request that
    created it (a function script answers from the last user message)."""

    def script(request: ModelRequest) -> object:
        last = [m.text for m in request.messages if m.role == "user"][-1]
        return reply(text=f"answer to {last} (turn {request.turn})", deferred=1)

    models = ScriptedModels(script)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(60):
            for text in ("hello", "second"):
                assert (await (await conv.submit(Input(text))).wait()).status == "done"
        answers = [e.text for e in await conv.transcript() if e.kind == "assistant"]
    assert answers == ["answer to hello (turn 0)", "answer to second (turn 1)"]
    assert len(models.polls) == 2 and models.deferred_created == 2
