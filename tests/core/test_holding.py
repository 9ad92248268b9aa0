"""The state holds live conversations only (core/holding.py; issue 11).

Each row of ``HOLD`` holds a conversation; one with none is settled, joins
``State.settled`` and is evicted once more than ``keep_settled`` are settled;
``ConversationsLoaded`` brings one back; ``keep_settled`` None (an ``Opened``
journaled before this rule) holds every conversation.
"""

from __future__ import annotations

import attrs
import pytest

from pidurable.core import State, step
from pidurable.core.effects import Accepted, Commit, Refused, Respond
from pidurable.core.events import ConversationCreationRequested, InputSubmitted, Opened, RootRequested
from pidurable.core.draft import Tx
from pidurable.core.holding import HOLD, hold_reasons, is_settled, settle
from pidurable.core.index import build
from pidurable.core.loading_events import ConversationsLoaded
from pidurable.core.model import (
    GENERATION,
    AgentConfig,
    Conversation,
    ConversationId,
    ModelRef,
    Task,
    TaskId,
    TaskStatus,
)
from pidurable.core.state import ConvState, DocScope, DocumentState, InboxItem, InboxMode, Live, RunInfo

AGENT = AgentConfig(model=ModelRef("scripted", "m1"))


def opened(keep: int | None, *convs: ConvState, tasks: tuple[Task, ...] = (), documents: tuple[DocumentState, ...] = ()) -> State:
    ev = Opened(now=0, next_id=100, next_seq=1, conversations=convs, tasks=tasks, documents=documents, keep_settled=keep,
                resume=False)
    return step(State(), ev).state


def conv(cid: int, *, owner: int | None = None, **kw: object) -> ConvState:
    return ConvState(conversation=Conversation(id=ConversationId(cid), owner_task_id=None if owner is None else TaskId(owner)), **kw)  # type: ignore[arg-type]


def task(tid: int, cid: int, owner: int | None = None) -> Task:
    return Task(id=TaskId(tid), conversation_id=ConversationId(cid), kind=GENERATION, status=TaskStatus.PENDING,
                owner=None if owner is None else TaskId(owner))


def reply(effects: tuple[object, ...]) -> object:
    return next(e.reply for e in effects if isinstance(e, Respond))


def check_index(st: State) -> None:
    owners = {c.id: c.conversation.owner_task_id for c in st.conversations.values()}
    assert st.index.as_dict() == build(st.tasks.values(), owners).as_dict()


@pytest.mark.parametrize(
    ("name", "held"),
    [
        ("busy", conv(2, live=Live(run=RunInfo(task_id=TaskId(50), inputs=())))),
        ("queued input", conv(2, inbox=(InboxItem(submission_id=TaskId(7), mode=InboxMode.FOLLOW_UP, content="x"),))),  # type: ignore[arg-type]
        ("live task in it", conv(2)),
        ("owned by a live task", conv(2, owner=50)),
    ],
)
def test_each_hold_row_holds_and_without_one_a_conversation_is_settled(name: str, held: ConvState) -> None:
    tasks = (task(50, 1),) if name != "live task in it" else (task(50, 2),)
    st = opened(0, conv(1), held, tasks=tasks)
    assert name in [n for n, _ in HOLD]
    assert hold_reasons(st, st.conversations[ConversationId(2)]) == [name]
    assert is_settled(st, conv(3))


def test_open_evicts_settled_conversations_beyond_keep() -> None:
    st = opened(1, conv(1), conv(2), conv(3), tasks=(task(50, 1),))
    # 1 holds a live task; 2 and 3 are settled, only the newest one (by id at open) is kept
    assert sorted(st.conversations) == [1, 3] and st.settled == (3,)
    check_index(st)


def test_a_settled_conversation_is_evicted_and_an_event_naming_it_needs_it_loaded() -> None:
    st = opened(0)
    root = step(st, RootRequested(now=1, ticket=1, agent=AGENT))
    assert isinstance(reply(root.effects), Accepted) and any(isinstance(e, Commit) for e in root.effects)
    st = root.state
    assert st.conversations == {} and st.settled == ()  # created, settled, evicted (keep 0)
    # without the load the core cannot tell "settled" from "does not exist": the shell loads first
    refused = step(st, InputSubmitted(now=2, ticket=2, conversation_id=ConversationId(1), content="hi"))
    assert isinstance(reply(refused.effects), Refused)
    loaded = step(st, ConversationsLoaded(now=2, conversations=(conv(1, agent=AGENT),)))
    assert not loaded.effects and loaded.state.settled == (1,)  # no write; not evicted by its own step
    sub = step(loaded.state, InputSubmitted(now=2, ticket=2, conversation_id=ConversationId(1), content="hi"))
    assert isinstance(reply(sub.effects), Accepted)
    assert 1 in sub.state.conversations and sub.state.settled == ()  # busy now: held, not settled
    check_index(sub.state)


def test_a_loaded_conversation_the_next_event_leaves_alone_is_evicted_after_it() -> None:
    st = step(opened(0), ConversationsLoaded(now=1, conversations=(conv(7),))).state
    assert 7 in st.conversations
    after = step(st, ConversationCreationRequested(now=2, ticket=1, agent=AGENT)).state
    assert 7 not in after.conversations and after.settled == ()


def test_keep_settled_keeps_the_newest_settled_ones() -> None:
    st = opened(2)
    for n in range(3):
        st = step(st, ConversationCreationRequested(now=n, ticket=n, agent=AGENT)).state
    created = sorted(st.conversations)
    assert len(created) == 2 and st.settled == tuple(created)  # the first one was evicted
    st = step(st, ConversationsLoaded(now=9, conversations=(conv(2),))).state  # reloading the evicted one
    assert st.settled == (*created, 2)
    st = step(st, ConversationCreationRequested(now=9, ticket=9, agent=AGENT)).state
    assert len(st.settled) == 2 and created[0] not in st.conversations


def test_loading_a_held_conversation_keeps_the_held_copy() -> None:
    st = opened(4, conv(1, agent=AGENT))
    again = step(st, ConversationsLoaded(now=1, conversations=(conv(1),))).state
    assert again.conversations[ConversationId(1)].agent == AGENT and again.settled == st.settled


def test_documents_leave_with_their_conversation_and_come_back_with_it() -> None:
    doc = DocumentState(id=40, scope=DocScope.CONVERSATION, owner=2, kind="notes", version=1, value={"a": 1})
    st = opened(0, conv(2), documents=(doc,))
    assert st.conversations == {} and st.documents == {}
    back = step(st, ConversationsLoaded(now=1, conversations=(conv(2),), documents=(doc,))).state
    assert back.documents == {doc.key: doc}


def test_an_owned_conversation_is_held_while_its_owner_lives_and_leaves_the_index_when_evicted() -> None:
    st = opened(0, conv(1), conv(2, owner=50), tasks=(task(50, 1),))
    assert sorted(st.conversations) == [1, 2] and dict(st.index.owned_conversations) == {50: frozenset({2})}
    check_index(st)
    # the owner's end is a change of both conversations: the end-of-step pass evicts them
    tx = Tx(st, 1)
    tx.put_task(attrs.evolve(st.tasks[TaskId(50)], status=TaskStatus.TERMINAL))
    settle(tx)
    out = tx.finish().state
    assert out.conversations == {} and dict(out.index.owned_conversations) == {}
    check_index(out)


def test_without_keep_settled_every_conversation_stays_held() -> None:
    """An ``Opened`` journaled before on-demand loading (no keep_settled)
    replays as it was recorded: nothing is evicted."""
    st = opened(None, conv(1), conv(2))
    for n in range(3):
        st = step(st, ConversationCreationRequested(now=n, ticket=n, agent=AGENT)).state
    assert len(st.conversations) == 5 and st.settled == () and st.keep_settled is None


def test_a_load_refreshes_the_held_conversations_its_batch_names() -> None:
    """The batch that loads 3 also names held 1: 1 and 3 become the newest
    settled ones, so when a new one settles the oldest, 2, is evicted, not 1."""
    st = opened(3, conv(1), conv(2))
    assert st.settled == (1, 2)
    st = step(st, ConversationsLoaded(now=1, conversations=(conv(3),), refreshed=(ConversationId(1),))).state
    assert st.settled == (2, 3, 1)
    st = step(st, ConversationCreationRequested(now=2, ticket=1, agent=AGENT)).state
    assert st.settled == (3, 1, 100) and 2 not in st.conversations
