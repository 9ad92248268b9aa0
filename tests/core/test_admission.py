"""Admission: an input is accepted in one commit, deduplicated by request id, or refused writing nothing."""

from __future__ import annotations

import pytest

from pidurable.core import State, step
from pidurable.core.effects import Accepted, Refusal, Refused
from pidurable.core.effects import (
    CallModel,
    Commit,
    PutAgent,
    PutConversation,
    PutDocument,
    PutEntry,
    PutInbox,
    PutLive,
    PutSubmission,
    PutTask,
    Respond,
)
from pidurable.core.events import AgentConfigurationRequested, RootRequested
from pidurable.core.model import (
    GENERATION,
    AgentConfig,
    ConversationId,
    CoreInvariantError,
    EntryKind,
    ModelRef,
    Submission,
    SubmissionId,
    SubmissionStatus,
    TaskStatus,
)
from pidurable.core.state import InboxItem

from .helpers import (
    MODEL,
    conv_state,
    ROOT,
    answer,
    generation,
    kinds,
    only,
    opened_state,
    put_entries,
    put_live,
    put_subs,
    put_tasks,
    respond,
    submit,
    the_commit,
    writes_of,
)


def busy_state(**kw: object) -> State:
    """The root conversation busy with a run (its generation awaiting the model)."""
    return step(opened_state(**kw), submit("first")).state


# --- idle admission ----------------------------------------------------------


def test_idle_input_without_scheduling_is_one_commit_with_entry_submission_pending_task_and_run() -> None:
    """On an idle conversation an input writes user entry, placed submission, a pending generation and live.run in one commit, then answers with the id."""
    state = opened_state(resume=False)
    st = step(state, submit("hi there", ticket=5))

    assert kinds(st) == [Commit, Respond]
    commit = the_commit(st)
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.USER and entry.text == "hi there" and entry.conversation_id == ROOT
    sub = only(put_subs(st).values())
    assert sub.status is SubmissionStatus.PLACED and sub.type == "input" and sub.entry_id == entry.id
    task = only(put_tasks(st).values())
    assert task.kind == GENERATION and task.status is TaskStatus.PENDING and task.phase == "prepare"
    live = put_live(st)
    assert live is not None and live.run is not None
    assert live.run.task_id == task.id and live.run.inputs == (sub.id,)
    assert {type(w) for w in commit.writes} == {PutEntry, PutSubmission, PutTask, PutDocument}  # pi.live: a revision
    assert respond(st) == Respond(ticket=5, reply=Accepted(value=sub.id))
    # the state agrees with the commit
    assert st.state.conversations[ROOT].busy
    assert st.state.submissions[sub.id] == sub
    assert st.state.next_seq == state.next_seq + 1


def test_idle_input_with_scheduling_prepares_in_the_same_step() -> None:
    """With scheduling on, the same step's pass prepares the new generation: Commit, then CallModel, then Respond."""
    st = step(opened_state(), submit("hi"))

    assert kinds(st) == [Commit, CallModel, Respond]
    task = only(put_tasks(st).values())
    assert task.status is TaskStatus.RUNNING and task.phase == "request"
    call = only(e for e in st.effects if isinstance(e, CallModel))
    assert call.task_id == task.id and call.model == MODEL
    assert respond(st).reply.value == only(put_subs(st))


def test_ids_are_allocated_from_the_state_counter() -> None:
    """Ids come from ``next_id`` in state: two admissions from equal states get equal ids, fresh ones increase."""
    state = opened_state(next_id=40)
    st = step(state, submit("a"))
    sub_id = only(put_subs(st))
    assert sub_id >= 40
    assert step(state, submit("a")).effects[0] == st.effects[0]
    assert st.state.next_id > max(sub_id, *put_tasks(st), *(e.id for e in put_entries(st)))


# --- request-id dedup --------------------------------------------------------


def test_same_request_id_with_existing_from_storage_returns_it_and_writes_nothing() -> None:
    """When the shell found the request id in storage, the existing submission id is returned and nothing is written."""
    state = opened_state()
    existing = Submission(
        id=SubmissionId(99), conversation_id=ConversationId(ROOT), type="input",
        status=SubmissionStatus.DONE, request_id="r1",
    )
    st = step(state, submit("again", request_id="r1", existing=existing, ticket=8))
    assert st.effects == (Respond(ticket=8, reply=Accepted(value=99)),)
    assert st.state == state


def test_same_request_id_while_unsettled_in_state_returns_it_and_writes_nothing() -> None:
    """A second submit with the request id of an unsettled submission in state returns that id with no commit."""
    first = step(opened_state(), submit("hi", request_id="r1"))
    sid = only(put_subs(first))
    st = step(first.state, submit("hi again", request_id="r1", ticket=9))
    assert st.effects == (Respond(ticket=9, reply=Accepted(value=sid)),)
    assert st.state == first.state


def test_request_id_is_scoped_to_its_conversation() -> None:
    """The same request id in a different conversation is a new submission."""
    state = opened_state(conversations=[conv_state(1), conv_state(2)])
    first = step(state, submit("hi", cid=1, request_id="r1"))
    st = step(first.state, submit("hi", cid=2, request_id="r1"))
    new_sub = only(put_subs(st).values())
    assert new_sub.conversation_id == 2 and new_sub.id != only(put_subs(first))
    assert respond(st).reply.value == new_sub.id


def test_same_request_id_for_a_write_is_refused_as_invalid() -> None:
    """A request id that already names a passive write is refused as invalid, writing nothing."""
    state = opened_state()
    existing = Submission(
        id=SubmissionId(50), conversation_id=ConversationId(ROOT), type="write",
        status=SubmissionStatus.DONE, request_id="r1",
    )
    st = step(state, submit("x", request_id="r1", existing=existing))
    assert respond(st).reply.kind == "invalid" and len(st.effects) == 1 and st.state == state


def test_dedup_comes_before_the_busy_check() -> None:
    """A duplicate request id on a busy conversation returns the existing id even with ``when_busy='reject'``."""
    first = step(opened_state(), submit("hi", request_id="r1"))
    st = step(first.state, submit("hi", request_id="r1", when_busy="reject", ticket=3))
    assert st.effects == (Respond(ticket=3, reply=Accepted(value=only(put_subs(first)))),)


# --- refusals ----------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "   ", "\n\t "])
def test_empty_content_is_invalid_and_writes_nothing(content: str) -> None:
    """Empty or whitespace-only content is refused as ``invalid`` with no commit and no state change."""
    state = opened_state()
    st = step(state, submit(content, ticket=4))
    assert len(st.effects) == 1
    r = respond(st)
    assert r.ticket == 4 and r.reply.kind == "invalid" and isinstance(r.reply, Refused) and r.reply.message
    assert st.state == state


def test_unknown_when_busy_is_invalid() -> None:
    """A ``when_busy`` outside follow_up/steer/reject is refused as invalid, writing nothing."""
    state = opened_state()
    st = step(state, submit("hi", when_busy="later"))
    assert respond(st).reply.kind == "invalid" and st.state == state and len(st.effects) == 1


def test_unknown_conversation_is_not_found() -> None:
    """Input for a conversation that does not exist is refused as ``not_found`` with no commit."""
    state = opened_state()
    st = step(state, submit("hi", cid=77, ticket=6))
    assert st.effects == (Respond(ticket=6, reply=Refused(kind=Refusal.NOT_FOUND, message=respond(st).reply.message)),)
    assert "77" in respond(st).reply.message
    assert st.state == state


def test_busy_with_reject_is_refused_busy_and_writes_nothing() -> None:
    """On a busy conversation ``when_busy='reject'`` answers ``busy`` and stores nothing."""
    state = busy_state()
    st = step(state, submit("more", when_busy="reject", ticket=7))
    assert len(st.effects) == 1
    r = respond(st)
    assert r.ticket == 7 and r.reply.kind == "busy" and isinstance(r.reply, Refused)
    assert st.state == state


def test_events_before_opened_are_a_core_bug() -> None:
    """Feeding an input before the store was opened raises CoreInvariantError."""
    with pytest.raises(CoreInvariantError):
        step(State(), submit("hi"))


# --- busy admission ----------------------------------------------------------


@pytest.mark.parametrize("when_busy", ["follow_up", "steer"])
def test_busy_input_is_queued_with_an_inbox_item(when_busy: str) -> None:
    """On a busy conversation an input becomes a queued submission plus an inbox item, in one commit, with no entry and no task."""
    state = busy_state()
    st = step(state, submit("later please", when_busy=when_busy, ticket=11))

    assert kinds(st) == [Commit, Respond]
    sub = only(put_subs(st).values())
    assert sub.status is SubmissionStatus.QUEUED and sub.entry_id is None
    inbox = only(writes_of(st, PutInbox))
    assert inbox.items == (InboxItem(submission_id=sub.id, mode=when_busy, content="later please"),)
    assert not put_entries(st) and not put_tasks(st) and put_live(st) is None
    assert respond(st) == Respond(ticket=11, reply=Accepted(value=sub.id))
    # the running run is untouched
    assert st.state.conversations[ROOT].live == state.conversations[ROOT].live


def test_idle_input_with_a_queue_goes_behind_it_and_a_final_boundary_places_both() -> None:
    """Idle with queued items, a new input queues behind them and the same commit places the queue in id order and starts a run."""
    # a conversation left idle with a queued follow-up (its run failed, leaving the inbox alone)
    idle = opened_state(
        conversations=[conv_state(inbox=(InboxItem(submission_id=SubmissionId(5), mode="follow_up", content="q"),))],
        submissions=[
            Submission(id=SubmissionId(5), conversation_id=ConversationId(ROOT), type="input",
                       status=SubmissionStatus.QUEUED),
        ],
        resume=False,
    )
    st = step(idle, submit("new", when_busy="steer"))

    assert kinds(st) == [Commit, Respond]
    subs = put_subs(st)
    new_id = respond(st).reply.value
    assert new_id is not None and new_id > 5
    # one-at-a-time modes: the first steer and the first follow-up are selected at a final boundary
    assert subs[5].status is SubmissionStatus.PLACED
    assert subs[new_id].status is SubmissionStatus.PLACED
    assert [e.text for e in put_entries(st)] == ["q", "new"]  # id order: the queue goes first
    live = put_live(st)
    assert live is not None and live.run is not None and live.run.inputs == (5, new_id)
    assert writes_of(st, PutInbox)[-1].items == ()


def test_idle_reject_input_with_a_queue_still_queues_behind_it() -> None:
    """``reject`` only refuses on a busy conversation: idle with a queue, the input queues and the boundary places the follow-up first."""
    idle = opened_state(
        conversations=[conv_state(inbox=(InboxItem(submission_id=SubmissionId(5), mode="follow_up", content="q"),))],
        submissions=[
            Submission(id=SubmissionId(5), conversation_id=ConversationId(ROOT), type="input",
                       status=SubmissionStatus.QUEUED),
        ],
        resume=False,
    )
    st = step(idle, submit("new", when_busy="reject"))
    new_id = respond(st).reply.value
    assert isinstance(respond(st).reply, Accepted) and new_id is not None
    subs = put_subs(st)
    # the queued follow-up is placed; the new input (a follow-up now) waits for the next final boundary
    assert subs[5].status is SubmissionStatus.PLACED
    assert subs[new_id].status is SubmissionStatus.QUEUED
    assert [i.submission_id for i in writes_of(st, PutInbox)[-1].items] == [new_id]


# --- root and agent ----------------------------------------------------------


def test_root_creation_is_idempotent() -> None:
    """The first RootRequested creates conversation 1 with its documents; later ones write nothing and ignore their agent."""
    state = opened_state(conversations=[])
    agent = AgentConfig(model=ModelRef("p", "m"))
    first = step(state, RootRequested(now=1, ticket=1, agent=agent))
    assert kinds(first) == [Commit, Respond]
    assert only(writes_of(first, PutConversation)).conversation.id == ROOT
    assert only(writes_of(first, PutAgent)).agent == agent
    assert only(writes_of(first, PutLive)).live.run is None
    assert only(writes_of(first, PutInbox)).items == ()
    assert respond(first).reply.value == ROOT
    assert first.state.conversations[ROOT].agent == agent

    second = step(first.state, RootRequested(now=2, ticket=2, agent=AgentConfig()))
    assert second.effects == (Respond(ticket=2, reply=Accepted(value=ROOT)),)
    assert second.state == first.state


def test_agent_configured_replaces_pi_agent() -> None:
    """``AgentConfigurationRequested`` stores the new agent document and answers with the conversation id."""
    state = opened_state()
    agent = AgentConfig(model=ModelRef("x", "y"), tool_execution="sequential")
    st = step(state, AgentConfigurationRequested(now=1, ticket=3, conversation_id=ConversationId(ROOT), agent=agent))
    assert only(writes_of(st, PutAgent)).agent == agent
    assert st.state.conversations[ROOT].agent == agent
    assert respond(st).reply.value == ROOT


def test_agent_configured_refuses_bad_tool_execution_and_unknown_conversation() -> None:
    """A bad ``tool_execution`` is invalid and an unknown conversation is not_found; neither writes."""
    state = opened_state()
    bad = step(state, AgentConfigurationRequested(now=1, ticket=1, conversation_id=ConversationId(ROOT),
                                      agent=AgentConfig(tool_execution="sideways")))
    assert bad.effects[0] == Respond(ticket=1, reply=Refused(kind=Refusal.INVALID, message=respond(bad).reply.message))
    missing = step(state, AgentConfigurationRequested(now=1, ticket=2, conversation_id=ConversationId(9), agent=AgentConfig()))
    assert respond(missing).reply.kind == "not_found"
    assert bad.state == state and missing.state == state


def test_answered_run_makes_the_conversation_accept_idle_input_again() -> None:
    """After a run answers, a new input is admitted as placed (not queued)."""
    first = step(opened_state(), submit("one"))
    gen = generation(first.state)
    done = step(first.state, answer(gen.id))
    st = step(done.state, submit("two"))
    assert only(put_subs(st).values()).status is SubmissionStatus.PLACED
