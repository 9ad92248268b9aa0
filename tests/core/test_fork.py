"""core/fork.py: every row of its two tables (the fork point, the documents'
policies), the built-in documents a fork starts with, totality, determinism."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidurable.core import step
from pidurable.core.effects import Accepted, PutAgent, PutContext, PutConversation, PutDocument, PutLive, PutUsage, Refused, RevisionAction
from pidurable.core.events import DocumentUpdateRequested
from pidurable.core.fork import DOCUMENTS, POINTS, DocAction, Verdict, policy_for
from pidurable.core.fork_events import ForkPoint, ForkRequested, PointStatus
from pidurable.core.model import AgentConfig, ConversationId, EntryId, ModelRef
from pidurable.core.state import DocHistory, DocScope, DocumentChange, DocumentState, ForkPolicy, State

from .helpers import ROOT, opened_state, respond, writes_of


def doc(kind: str, value: Any, *, history: DocHistory = DocHistory.REWINDABLE, fork: ForkPolicy = ForkPolicy.AS_OF) -> DocumentChange:
    return DocumentChange(scope=DocScope.CONVERSATION, owner=ROOT, kind=kind, version=1, history=history, fork=fork, ops=(["r", value],))


def with_docs(*changes: DocumentChange) -> State:
    state = opened_state()
    for i, c in enumerate(changes):
        state = step(state, DocumentUpdateRequested(now=1, ticket=100 + i, change=c)).state
    return state


def past(kind: str, value: Any, version: int = 1) -> DocumentState:
    return DocumentState(id=50, scope=DocScope.CONVERSATION, owner=ROOT, kind=kind, version=version, value=value)


def fork(state: State, point: ForkPoint | None, **kw: Any) -> Any:
    return step(state, ForkRequested(now=9, ticket=1, conversation_id=ConversationId(ROOT), at=EntryId(7), point=point, **kw))


VISIBLE = ForkPoint(status=PointStatus.VISIBLE, seq=3)


def test_a_visible_point_forks_in_one_commit_with_fresh_built_ins() -> None:
    """(visible) -> fork: the record names parent and point, the agent is
    the parent's, live and inbox empty, usage not written (zero), the
    context starts at the parent's range start at the point; answered with
    the new id."""
    agent = AgentConfig(model=ModelRef("p", "m"), instructions="be brief")
    state = attrs.evolve(opened_state(), conversations={
        ROOT: attrs.evolve(opened_state().conversations[ROOT], agent=agent)})
    out = fork(state, attrs.evolve(VISIBLE, head=EntryId(5)))
    (conv,) = writes_of(out, PutConversation)
    assert (conv.conversation.parent_id, conv.conversation.fork_at) == (ROOT, 7)
    new = conv.conversation.id
    assert writes_of(out, PutAgent)[0].agent == agent
    assert writes_of(out, PutLive)[0].live.run is None and writes_of(out, PutUsage) == []
    assert writes_of(out, PutContext)[0].context.head == 5
    reply = respond(out).reply
    assert isinstance(reply, Accepted) and reply.value == new
    assert out.state.conversations[new].inbox == () and not out.state.conversations[new].busy
    assert POINTS[PointStatus.VISIBLE][0] is Verdict.FORK


@pytest.mark.parametrize("status", [s for s in PointStatus if s is not PointStatus.VISIBLE])
def test_points_that_are_not_visible_entries_are_refused(status: PointStatus) -> None:
    """(not_visible | not_an_entry | unknown) -> refuse: InvalidInput, nothing written."""
    out = fork(opened_state(), ForkPoint(status=status))
    assert not any(writes_of(out, t) for t in (PutConversation, PutAgent)) and out.state.next_id == opened_state().next_id
    reply = respond(out).reply
    assert isinstance(reply, Refused) and reply.kind == "invalid" and "7" in reply.message
    assert POINTS[status][0] is Verdict.REFUSE


def test_an_unknown_parent_is_not_found() -> None:
    out = step(opened_state(), ForkRequested(now=9, ticket=1, conversation_id=ConversationId(999), at=EntryId(7), point=VISIBLE))
    reply = respond(out).reply
    assert isinstance(reply, Refused) and reply.kind == "not_found"


def test_as_of_rewindable_copies_the_past_value_and_skips_what_did_not_exist() -> None:
    """(as_of, rewindable) -> as_of: a base of the value as of the point, at
    its stored version; a document absent then is not copied."""
    state = with_docs(doc("todo", {"items": ["a", "b"]}), doc("plan", {"steps": 3}))
    out = fork(state, attrs.evolve(VISIBLE, as_of=(past("todo", {"items": ["a"]}, version=1),)))
    (w,) = writes_of(out, PutDocument)
    new = writes_of(out, PutConversation)[0].conversation.id
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {"items": ["a"]} and w.revision.owner == new
    assert out.state.documents[(DocScope.CONVERSATION, new, "todo")].value == {"items": ["a"]}
    assert (DocScope.CONVERSATION, new, "plan") not in out.state.documents
    assert DOCUMENTS[(ForkPolicy.AS_OF, DocHistory.REWINDABLE)] is DocAction.AS_OF


def test_current_copies_the_value_now_whatever_the_history() -> None:
    """(current, rewindable | latest) -> current."""
    state = with_docs(doc("cart", [1, 2], history=DocHistory.LATEST, fork=ForkPolicy.CURRENT), doc("todo", {"n": 1}))
    out = fork(state, VISIBLE, policies={"todo": ForkPolicy.CURRENT})
    values = {w.revision.kind: w.revision.value for w in writes_of(out, PutDocument)}
    assert values == {"cart": [1, 2], "todo": {"n": 1}}
    for history in DocHistory:
        assert DOCUMENTS[(ForkPolicy.CURRENT, history)] is DocAction.CURRENT


def test_initial_copies_nothing() -> None:
    """(initial, any) -> skip: the fork has no document (initial on use)."""
    state = with_docs(doc("todo", {"n": 1}), doc("cart", [1], history=DocHistory.LATEST, fork=ForkPolicy.INITIAL))
    out = fork(state, VISIBLE, policy=ForkPolicy.INITIAL)
    assert writes_of(out, PutDocument) == [] and isinstance(respond(out).reply, Accepted)
    for history in DocHistory:
        assert DOCUMENTS[(ForkPolicy.INITIAL, history)] is DocAction.SKIP


def test_as_of_on_a_latest_document_refuses_the_fork() -> None:
    """(as_of, latest) -> refuse: no past value is kept; nothing is written."""
    state = with_docs(doc("cart", [1], history=DocHistory.LATEST, fork=ForkPolicy.CURRENT))
    out = fork(state, VISIBLE, policy=ForkPolicy.AS_OF)
    reply = respond(out).reply
    assert isinstance(reply, Refused) and "cart" in reply.message and "latest" in reply.message
    assert writes_of(out, PutConversation) == [] and out.state.next_id == state.next_id
    assert DOCUMENTS[(ForkPolicy.AS_OF, DocHistory.LATEST)] is DocAction.REFUSE


def test_policy_in_force_per_kind_then_blanket_then_stored() -> None:
    d = DocumentState(id=3, scope=DocScope.CONVERSATION, owner=ROOT, kind="k", version=1, fork=ForkPolicy.CURRENT)
    assert policy_for(d, None, {}) is ForkPolicy.CURRENT
    assert policy_for(d, ForkPolicy.INITIAL, {}) is ForkPolicy.INITIAL
    assert policy_for(d, ForkPolicy.INITIAL, {"k": ForkPolicy.AS_OF}) is ForkPolicy.AS_OF


@given(st.sampled_from(list(ForkPolicy)), st.sampled_from(list(DocHistory)))
def test_the_document_table_is_total(policy: ForkPolicy, history: DocHistory) -> None:
    assert DOCUMENTS[(policy, history)] in DocAction


@given(st.sampled_from(list(PointStatus)))
def test_the_point_table_is_total(status: PointStatus) -> None:
    assert POINTS[status][0] in Verdict


def test_a_fork_step_is_deterministic_and_leaves_its_input_alone() -> None:
    state = with_docs(doc("todo", {"n": 1}))
    before = attrs.evolve(state)
    point = attrs.evolve(VISIBLE, as_of=(past("todo", {"n": 0}),))
    assert fork(state, point) == fork(state, point)
    assert state == before


def test_stepping_without_the_point_is_a_bug() -> None:
    from pidurable.core.model import CoreInvariantError

    with pytest.raises(CoreInvariantError):
        fork(opened_state(), None)
