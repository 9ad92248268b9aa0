"""Open is O(live); settled conversations are read on demand (issue 11).

``Harness.open`` reads only live work (``Storage.load_live``); a host call
naming a conversation the core does not hold is preceded by
``ConversationsLoaded`` (shell/loading.py, core/holding.py). What a host sees
is unchanged: answers, documents, forks, refusals of unknown ids; the journal
still replays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidurable.core.model import AgentConfig, ConversationId, ModelRef
from pidurable.shell import (
    Harness,
    Input,
    InvalidInput,
    JsonlStorage,
    MemoryStorage,
    NotFound,
    Registry,
    define_doc,
    open_jsonl_storage,
    open_sqlite_storage,
)
from pidurable.shell import loading
from pidurable.shell.conversation import Conversation
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply

import invariants

AGENT = AgentConfig(model=ModelRef("scripted", "m"))
NOTES = define_doc("notes", {"type": "object"}, {"items": []})


def echo(request: Any) -> Any:
    last = [m for m in request.messages if m.role == "user"][-1].text
    return reply(text=f"{last}? ({len(request.messages)} messages)")


@pytest.fixture(params=["memory", "sqlite", "jsonl"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStorage()
    if request.param == "sqlite":
        return open_sqlite_storage(tmp_path / "s.sqlite")
    return open_jsonl_storage(tmp_path / "j")


def reopen(storage: Any) -> Any:
    if isinstance(storage, JsonlStorage):
        return open_jsonl_storage(storage.dir)
    return storage if isinstance(storage, MemoryStorage) else open_sqlite_storage(storage.path)


def registry() -> Registry:
    r = Registry()
    r.install(NOTES)
    return r


async def ask(conv: Any, text: str) -> None:
    assert (await (await conv.submit(Input(text))).wait()).status == "done"


async def test_open_holds_nothing_settled_and_a_settled_conversation_answers_as_before(storage: Any) -> None:
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        root = await h.root(agent=AGENT)
        await ask(root, "one")
        other = await h.create_conversation(agent=AGENT)
        await ask(other, "two")
        await other.update_document(NOTES, lambda n: {"items": [*n["items"], "kept"]})
    storage = reopen(storage)
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        st = h.runtime.state
        assert st.conversations == {} and st.documents == {}  # nothing live: nothing read
        other = await h.conversation(other.id)
        assert other is not None
        await ask(other, "three")  # loaded on demand; the request sees the whole context
        assert [e.text for e in await other.transcript()][-1] == "three? (3 messages)"
        # the document came back with it: the update sees the stored value
        assert await other.update_document(NOTES, lambda n: {"items": [*n["items"], "more"]}) == {"items": ["kept", "more"]}
        root = await h.root()
        assert root.id == 1 and [e.text for e in await root.transcript()][-1] == "one? (1 messages)"
    storage = reopen(storage)
    result = check(storage.journal())
    assert result.ok and result.commits == result.total
    tags = [e["type"] for row in storage.journal() for e in json.loads(row.events)]
    assert "conversations_loaded" in tags
    invariants.journal_invariants(storage)
    invariants.replay_is_deterministic(storage)
    storage.close()


async def test_unknown_ids_are_refused_exactly_as_before(storage: Any) -> None:
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        await h.root(agent=AGENT)
    storage = reopen(storage)
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        ghost = Conversation(ConversationId(999), h.runtime)
        with pytest.raises(NotFound):
            await ghost.submit(Input("hello?"))
        with pytest.raises(NotFound):
            await ghost.configure(instructions="x")
        with pytest.raises(InvalidInput):
            await ghost.update_document(NOTES, lambda n: n)
        assert await h.conversation(999) is None
        assert 999 not in h.runtime.state.conversations
    storage.close()


async def test_a_fork_of_a_settled_conversation_after_reopen(storage: Any) -> None:
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        root = await h.root(agent=AGENT)
        await ask(root, "one")
        await root.update_document(NOTES, lambda n: {"items": ["a"]})
        at = (await root.transcript())[-1].id
    storage = reopen(storage)
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        root = await h.root()
        assert h.runtime.state.conversations.keys() == {1}  # loaded for root()
        fork = await root.fork(at=at, documents={"notes": "current"})
        assert await fork.document(NOTES) == {"items": ["a"]}
        await ask(fork, "two")
        assert [e.text for e in await fork.transcript() if e.kind == "user"] == ["one", "two"]
    storage = reopen(storage)
    assert check(storage.journal()).ok
    invariants.fork_sees_parent_up_to_its_point(storage)
    storage.close()


async def test_conversations_settling_in_a_life_are_evicted_and_come_back(
    storage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``KEEP_SETTLED`` 0 every conversation leaves the state the step
    it settles in; each later call loads it again (one read, journaled)."""
    monkeypatch.setattr("pidurable.shell.harness.KEEP_SETTLED", 0)
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        convs = [await h.create_conversation(agent=AGENT) for _ in range(3)]
        for c in convs:
            await ask(c, f"hi {c.id}")
        await h.wait_idle()
        assert h.runtime.state.conversations == {} and h.runtime.state.settled == ()
        for c in convs:
            await ask(c, "again")
            await c.configure(instructions="short")
        assert (await convs[0].agent()).instructions == "short"
        assert h.runtime.state.conversations == {}
    storage = reopen(storage)
    assert check(storage.journal()).ok
    invariants.journal_invariants(storage)
    storage.close()


async def test_load_live_reads_live_work_only_and_narrows_to_trees() -> None:
    storage = MemoryStorage()
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry(), resume=False) as h:
        a = await h.create_conversation(agent=AGENT)
        b = await h.create_conversation(agent=AGENT)
        settled = await h.create_conversation(agent=AGENT)
        await a.submit(Input("queued in a"))  # scheduling is off: a pending run in a
        await b.submit(Input("queued in b"))
    loaded = storage.load_live()
    assert {c.id for c in loaded.conversations} == {a.id, b.id}
    assert {t.conversation_id for t in loaded.tasks} == {a.id, b.id}
    storage.close()
    only_a = storage.load_live(roots=[a.id])
    assert {c.id for c in only_a.conversations} == {a.id}
    assert {t.conversation_id for t in only_a.tasks} == {a.id}
    assert {s.conversation_id for s in only_a.submissions} == {a.id}
    assert only_a.next_id == loaded.next_id and only_a.next_seq == loaded.next_seq
    storage.close()
    convs, _ = storage.load_conversations([settled.id, ConversationId(999)])
    assert [c.id for c in convs] == [settled.id]


def test_every_host_event_naming_a_conversation_is_in_the_table() -> None:
    """An event type with a ``conversation_id`` field must be in TARGETS
    (or name only live work): a new one cannot skip loading silently."""
    import attrs

    from pidurable.core.events import EVENT_TYPES

    named = {cl for cl in EVENT_TYPES if "conversation_id" in {f.name for f in attrs.fields(cl)}}
    assert named <= set(loading.TARGETS)


def test_kept_settled_conversations_cover_a_batch() -> None:
    """What a batch loads before its first step stays held until its events
    are stepped: KEEP_SETTLED is at least the loop's batch."""
    from pidurable.shell.loop import MAX_BATCH

    assert loading.KEEP_SETTLED >= MAX_BATCH


async def test_a_burst_naming_many_settled_conversations_reads_them_together() -> None:
    """Many submits at once to conversations the core does not hold: the loop
    reads each batch's conversations in one ``ConversationsLoaded``."""
    import trio

    storage = MemoryStorage()
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        convs = [await h.create_conversation(agent=AGENT) for _ in range(20)]
    async with Harness.open(storage, models=ScriptedModels(echo), registry=registry()) as h:
        assert h.runtime.state.conversations == {}
        async with trio.open_nursery() as nursery:
            for c in convs:
                nursery.start_soon(ask, Conversation(c.id, h.runtime), "hi")
    loads = [e for row in storage.journal() for e in json.loads(row.events) if e["type"] == "conversations_loaded"]
    assert sum(len(e["conversations"]) for e in loads) == 20 and len(loads) < 20
    assert check(storage.journal()).ok
