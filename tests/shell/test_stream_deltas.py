"""Streamed partials carry only what was appended (issue 11 item 3: a
770-character answer used to journal 38 KB of partials): each
``ModelStreamed`` holds the new text and the offset it extends; the core
assembles the partial the watchers see; a provider that rewrites its partial
(not an extension) sends the whole text again."""

from __future__ import annotations

import json

import trio
import trio.testing

from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, ModelRef, Registry, Settings
from pidurable.shell.providers.base import ModelReply, ModelRequest

AGENT = AgentConfig(model=ModelRef("scripted", "m"))
WORDS = [f"word{i:03d} " for i in range(60)]


class Streaming:
    """Streams an answer in many chunks with delays, partials observed as they land."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.seen: list[str | None] = []
        self.conv: object = None

    def resolve(self, ref: ModelRef) -> "Streaming":
        return self

    async def complete(self, request: ModelRequest, on_partial=None):  # type: ignore[no-untyped-def]
        for piece in self.pieces:
            on_partial(piece)
            await trio.sleep(0.05)
            if self.conv is not None:
                st = self.conv._rt.state  # type: ignore[attr-defined]
                self.seen.append(st.conversations[self.conv.id].live.partial)  # type: ignore[attr-defined]
        return ModelReply(text=self.pieces[-1])


async def _run(pieces: list[str]) -> tuple[list[dict[str, object]], Streaming, list[object]]:
    storage = MemoryStorage()
    model = Streaming(pieces)
    async with Harness.open(storage, models=model, registry=Registry(), settings=Settings(partial_interval_ms=20)) as h:
        conv = await h.root(agent=AGENT)
        model.conv = conv
        with trio.fail_after(60):
            assert (await (await conv.submit(Input("talk"))).wait()).status == "done"
        entries = await conv.transcript()
        streamed = [e for row in storage.journal() for e in json.loads(row.events) if e["type"] == "model_streamed"]
    return streamed, model, entries


async def test_each_partial_event_carries_only_the_appended_text(autojump_clock: trio.testing.MockClock) -> None:
    pieces = ["".join(WORDS[: i + 1]) for i in range(len(WORDS))]
    streamed, model, entries = await _run(pieces)
    assert len(streamed) > 10
    assert streamed[0].get("offset", 0) == 0
    assert all(e["offset"] > 0 for e in streamed[1:])
    # the journal holds each character of the answer about once, not once per partial
    assert sum(len(str(e["text"])) for e in streamed) <= len(pieces[-1])
    # what a watcher saw at every point was a prefix of the answer, growing
    shown = [p for p in model.seen if p]
    assert shown and all(pieces[-1].startswith(p) for p in shown)
    assert entries[-1].text == pieces[-1]


async def test_a_rewritten_partial_is_sent_whole(autojump_clock: trio.testing.MockClock) -> None:
    pieces = ["Thinking", "Thinking about it", "Answer: 4", "Answer: 42"]
    streamed, model, entries = await _run(pieces)
    rewrites = [e for e in streamed if e.get("offset", 0) == 0]
    assert len(rewrites) >= 2  # the first, and the one after the rewrite
    assert entries[-1].text == "Answer: 42"
