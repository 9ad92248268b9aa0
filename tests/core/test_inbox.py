"""The inbox: queued submissions, passive writes, queue modes and the boundaries that place them."""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core import State, step
from pidurable.core.effects import Accepted, Refusal, Refused
from pidurable.core.effects import CallModel, Commit, PutInbox, Respond, RunTool
from pidurable.core.events import Opened, SettingsChanged, SubmissionAbortRequested, WriteSubmitted
from pidurable.core.model import (
    ConversationId,
    EntryKind,
    Settings,
    Submission,
    SubmissionId,
    SubmissionStatus,
    TaskId,
    ToolInfo,
)
from pidurable.core.state import InboxItem

from .helpers import Driver as BaseDriver
from .helpers import (
    ROOT,
    Store,
    answer,
    calls,
    effects_of,
    finished,
    generation,
    kinds,
    model_failed,
    only,
    opened_event,
    prepared,
    put_entries,
    put_live,
    put_subs,
    put_tasks,
    respond,
    submit,
    tools,
    writes_of,
)

CATALOG = (ToolInfo(name="t"),)


# --- helpers -------------------------------------------------------------------------


def opened(settings: Settings | None = None, **kw: Any) -> State:
    """The state after opening a store holding the root conversation (and the tool ``t``)."""
    ev: Opened = opened_event(catalog=CATALOG, **kw)
    if settings is not None:
        ev = attrs.evolve(ev, settings=settings)
    return step(State(), ev).state


class Driver(BaseDriver):
    sid = BaseDriver.value  # the submission id a host event was answered with

    def write(self, content: str, *, cid: int = ROOT, **kw: Any) -> WriteSubmitted:
        return WriteSubmitted(now=15, ticket=_ticket(), conversation_id=ConversationId(cid), content=content, **kw)

    @property
    def inbox(self) -> list[int]:
        return [i.submission_id for i in self.state.conversations[ROOT].inbox]

    @property
    def run_inputs(self) -> tuple[int, ...] | None:
        run = self.state.conversations[ROOT].live.run
        return None if run is None else run.inputs

    def gen(self) -> int:
        return generation(self.state).id


_counter = iter(range(50_000, 10**9))


def _ticket() -> int:
    return next(_counter)


def busy(settings: Settings | None = None, store: bool = False) -> tuple[Driver, int]:
    """A driver whose root conversation is busy answering ``first`` (its generation awaits the model)."""
    state = opened(settings)
    d = Driver(state, Store(state) if store else None)
    first = d.sid(submit("first"))
    return d, first


def in_tool_round(settings: Settings | None = None) -> tuple[Driver, int, int]:
    """A busy driver whose run is in a tool round with tool ``t`` executing; returns driver, first input, tool id."""
    d, first = busy(settings)
    d(calls(d.gen(), "t"))
    tool = only(tools(d.state)).id
    assert kinds(d(prepared(tool))) == [Commit, RunTool]
    return d, first, tool


def abort_sub(sid: int, *, known: Submission | None = None, cid: int | None = None) -> SubmissionAbortRequested:
    return SubmissionAbortRequested(
        now=70,
        ticket=_ticket(),
        submission_id=SubmissionId(sid),
        conversation_id=None if cid is None else ConversationId(cid),
        known=known,
    )


# --- follow-ups ----------------------------------------------------------------------


def test_follow_up_while_busy_is_queued_then_placed_by_the_answer_and_starts_its_own_run() -> None:
    """A follow-up submitted while busy stays queued (no entry) until the answer's final boundary places it and starts a new run for it alone."""
    d, first = busy()
    st = d(submit("second"))
    second = respond(st).reply.value
    assert put_subs(st)[second].status is SubmissionStatus.QUEUED and put_subs(st)[second].entry_id is None
    assert not put_entries(st) and not put_tasks(st)
    assert d.inbox == [second] and d.run_inputs == (first,)

    g1 = d.gen()
    st = d(answer(g1, "answer one"))
    subs = put_subs(st)
    assert subs[first].status is SubmissionStatus.DONE
    assert subs[second].status is SubmissionStatus.PLACED
    answer_entry, user_entry = put_entries(st)
    assert answer_entry.kind is EntryKind.ASSISTANT and answer_entry.text == "answer one"
    assert user_entry.kind is EntryKind.USER and user_entry.text == "second"
    assert subs[second].entry_id == user_entry.id and subs[first].answer_entry_id == answer_entry.id
    assert d.inbox == [] and d.run_inputs == (second,)
    g2 = d.gen()
    assert g2 != g1
    assert only(effects_of(st, CallModel)).task_id == g2

    st = d(answer(g2, "answer two"))
    assert put_subs(st)[second].status is SubmissionStatus.DONE
    assert d.run_inputs is None and dict(d.state.tasks) == {} and d.state.submissions == {}


def test_one_at_a_time_places_one_follow_up_per_run() -> None:
    """With the default mode, two queued follow-ups are answered by two successive runs, in id order."""
    d, first = busy()
    a = d.sid(submit("a"))
    b = d.sid(submit("b"))
    d(answer(d.gen()))
    assert d.run_inputs == (a,) and d.inbox == [b]
    d(answer(d.gen()))
    assert d.run_inputs == (b,) and d.inbox == []
    d(answer(d.gen()))
    assert d.run_inputs is None


def test_follow_up_mode_all_from_the_opened_settings_places_every_follow_up_in_one_run() -> None:
    """``follow_up_mode="all"`` given at open places every queued follow-up at the final boundary into one successor run."""
    d, first = busy(Settings(follow_up_mode="all"))
    a = d.sid(submit("a"))
    b = d.sid(submit("b"))
    st = d(answer(d.gen()))
    assert d.run_inputs == (a, b) and d.inbox == []
    assert [e.text for e in put_entries(st)[1:]] == ["a", "b"]
    st = d(answer(d.gen(), "both"))
    subs = put_subs(st)
    assert subs[a].status is subs[b].status is SubmissionStatus.DONE
    assert subs[a].answer_entry_id == subs[b].answer_entry_id
    assert d.run_inputs is None


def test_follow_up_mode_is_read_when_the_boundary_runs() -> None:
    """A SettingsChanged to ``follow_up_mode="all"`` while the follow-ups wait takes effect at the next boundary, and back again."""
    d, first = busy()
    a = d.sid(submit("a"))
    b = d.sid(submit("b"))
    st = d(SettingsChanged(now=12, settings=Settings(follow_up_mode="all")))
    assert st.effects == ()  # settings are not stored
    d(answer(d.gen()))
    assert d.run_inputs == (a, b)

    c = d.sid(submit("c"))
    e = d.sid(submit("e"))
    d(SettingsChanged(now=13, settings=Settings()))
    d(answer(d.gen()))
    assert d.run_inputs == (c,) and d.inbox == [e]


# --- steering ------------------------------------------------------------------------


def test_steer_is_placed_at_the_post_tools_boundary_and_answered_with_the_run() -> None:
    """A steer joins ``live.run.inputs`` when the tool round ends (the follow-up does not), and both inputs of the run share its answer."""
    d, first, tool = in_tool_round()
    follow = d.sid(submit("later"))
    steer = d.sid(submit("also check B", when_busy="steer"))
    g1 = d.gen()

    st = d(finished(tool))
    subs = put_subs(st)
    assert subs[steer].status is SubmissionStatus.PLACED and follow not in subs
    steer_entry = only(e for e in put_entries(st) if e.kind is EntryKind.USER)
    assert steer_entry.text == "also check B" and subs[steer].entry_id == steer_entry.id
    g2 = d.gen()
    assert g2 != g1 and d.run_inputs == (first, steer) and d.inbox == [follow]
    # the successor's request sees the steer
    assert only(effects_of(st, CallModel)).cutoff >= steer_entry.id

    st = d(answer(g2, "answered both"))
    subs = put_subs(st)
    assert subs[first].status is subs[steer].status is SubmissionStatus.DONE
    assert subs[first].answer_entry_id == subs[steer].answer_entry_id
    assert subs[follow].status is SubmissionStatus.PLACED and d.run_inputs == (follow,)


def test_one_steer_per_post_tools_boundary_by_default() -> None:
    """Two steers: only the first is placed at the post-tools boundary; the second waits for the next boundary."""
    d, first, tool = in_tool_round()
    s1 = d.sid(submit("s1", when_busy="steer"))
    s2 = d.sid(submit("s2", when_busy="steer"))
    d(finished(tool))
    assert d.run_inputs == (first, s1) and d.inbox == [s2]
    # the answer's final boundary places the remaining steer as a new run
    d(answer(d.gen()))
    assert d.run_inputs == (s2,) and d.inbox == []


def test_steering_mode_all_places_every_steer_at_post_tools() -> None:
    """With ``steering_mode="all"`` every queued steer joins the running run at the post-tools boundary, in id order."""
    d, first, tool = in_tool_round(Settings(steering_mode="all"))
    s1 = d.sid(submit("s1", when_busy="steer"))
    s2 = d.sid(submit("s2", when_busy="steer"))
    st = d(finished(tool))
    assert d.run_inputs == (first, s1, s2) and d.inbox == []
    assert [e.text for e in put_entries(st) if e.kind is EntryKind.USER] == ["s1", "s2"]


# --- passive writes ------------------------------------------------------------------


def test_idle_write_appends_its_entry_and_is_done_at_once_without_a_task() -> None:
    """On an idle conversation a Write appends its entry (kind and data kept) and settles done in one commit, starting nothing."""
    d = Driver(opened())
    st = d(d.write("note to self", kind="memo", data={"k": 1}))
    assert kinds(st) == [Commit, Respond]
    entry = only(put_entries(st))
    assert (entry.kind, entry.text, entry.data) == ("memo", "note to self", {"k": 1})
    sub = only(put_subs(st).values())
    assert sub.type == "write" and sub.status is SubmissionStatus.DONE and sub.entry_id == entry.id
    assert respond(st).reply.value == sub.id
    assert not put_tasks(st) and put_live(st) is None
    assert dict(d.state.tasks) == {} and d.state.submissions == {} and d.run_inputs is None


def test_busy_write_is_queued_and_placed_first_at_the_final_boundary() -> None:
    """A write queued while busy is appended before an older queued follow-up at the final boundary, and only the follow-up starts a run."""
    d, first = busy()
    follow = d.sid(submit("follow"))
    st = d(d.write("fyi"))
    write = respond(st).reply.value
    assert put_subs(st)[write].status is SubmissionStatus.QUEUED and not put_entries(st)
    assert only(writes_of(st, PutInbox)).items[-1] == InboxItem(
        submission_id=SubmissionId(write), mode="write", content="fyi", kind="user"
    )
    assert follow < write and d.inbox == [follow, write]

    st = d(answer(d.gen(), "ans"))
    assert [e.text for e in put_entries(st)] == ["ans", "fyi", "follow"]
    subs = put_subs(st)
    assert subs[write].status is SubmissionStatus.DONE and subs[write].entry_id == put_entries(st)[1].id
    assert subs[follow].status is SubmissionStatus.PLACED
    assert d.run_inputs == (follow,) and d.inbox == []


def test_queued_writes_alone_never_start_a_run() -> None:
    """When the only queued items are writes, the final boundary appends them and the conversation goes idle."""
    d, first = busy()
    w1 = d.sid(d.write("w1"))
    w2 = d.sid(d.write("w2", kind="system"))
    st = d(answer(d.gen()))
    subs = put_subs(st)
    assert subs[w1].status is subs[w2].status is SubmissionStatus.DONE
    assert [(e.kind, e.text) for e in put_entries(st)[1:]] == [("user", "w1"), ("system", "w2")]
    assert d.run_inputs is None and dict(d.state.tasks) == {} and not effects_of(st, CallModel)


def test_writes_are_placed_at_the_post_tools_boundary_and_the_run_goes_on() -> None:
    """Queued writes are appended when a tool round ends; the run continues with its inputs unchanged and follow-ups stay queued."""
    d, first, tool = in_tool_round()
    follow = d.sid(submit("follow"))
    write = d.sid(d.write("note"))
    st = d(finished(tool))
    assert put_subs(st)[write].status is SubmissionStatus.DONE
    assert d.run_inputs == (first,) and d.inbox == [follow]
    assert any(e.text == "note" for e in put_entries(st))


def test_write_request_id_is_deduplicated_and_a_type_mismatch_is_refused() -> None:
    """A repeated write request id returns the same submission without a second inbox item; an input reusing it (and vice versa) is refused."""
    d, first = busy()
    w = d.sid(d.write("w", request_id="r-w"))
    state = d.state
    again = d(d.write("w again", request_id="r-w"))
    assert kinds(again) == [Respond] and respond(again).reply.value == w and d.state == state
    assert d.inbox == [w]

    clash = d(submit("input", request_id="r-w"))
    assert respond(clash).reply.kind == "invalid"
    assert "already identifies a submission of type write" in respond(clash).reply.message
    assert d.state == state

    stored = Submission(id=SubmissionId(3), conversation_id=ConversationId(ROOT), type="input",
                        status=SubmissionStatus.DONE, request_id="r-i")
    clash = d(d.write("w", request_id="r-i", existing=stored))
    assert kinds(clash) == [Respond] and respond(clash).reply.kind == "invalid"
    assert "already identifies a submission of type input" in respond(clash).reply.message
    stored_write = attrs.evolve(stored, id=SubmissionId(4), type="write", request_id="r-s")
    found = d(d.write("w", request_id="r-s", existing=stored_write))
    assert found.effects == (Respond(ticket=found.effects[0].ticket, reply=Accepted(value=4)),)


# --- idle with a queue ---------------------------------------------------------------


def test_idle_with_a_queue_a_new_input_goes_behind_it_and_the_boundary_places_in_id_order() -> None:
    """After a failed run leaves items queued, a new steer queues behind them and one final boundary places write, follow-up and steer in that order."""
    d, first = busy()
    follow = d.sid(submit("follow"))
    write = d.sid(d.write("note"))
    d(model_failed(d.gen()))
    assert d.run_inputs is None and d.inbox == [follow, write]  # a failure leaves the inbox alone

    st = d(submit("steer now", when_busy="steer"))
    steer = respond(st).reply.value
    assert [e.text for e in put_entries(st)] == ["note", "follow", "steer now"]
    subs = put_subs(st)
    assert subs[write].status is SubmissionStatus.DONE
    assert subs[follow].status is subs[steer].status is SubmissionStatus.PLACED
    assert d.run_inputs == (follow, steer) and d.inbox == []


def test_idle_write_behind_a_queued_follow_up_starts_the_follow_ups_run() -> None:
    """An idle write behind a queued follow-up is appended first by the boundary it triggers, which also places the follow-up and starts its run."""
    d, first = busy()
    follow = d.sid(submit("follow"))
    d(model_failed(d.gen()))
    st = d(d.write("late note"))
    write = respond(st).reply.value
    assert [e.text for e in put_entries(st)] == ["late note", "follow"]
    assert put_subs(st)[write].status is SubmissionStatus.DONE
    assert d.run_inputs == (follow,)


# --- abort_submission ----------------------------------------------------------------


def test_abort_submission_withdraws_a_queued_input_and_keeps_the_rest_in_order() -> None:
    """Aborting the middle queued item settles it unanswered/aborted, removes only its inbox item, and it is never placed."""
    d, first = busy(Settings(follow_up_mode="all"))
    a = d.sid(submit("a"))
    b = d.sid(submit("b"))
    c = d.sid(submit("c"))
    st = d(abort_sub(b))
    r = respond(st)
    assert (r.reply.value, r.reply.data) == (b, "aborted")
    sub = only(put_subs(st).values())
    assert sub.id == b and sub.status is SubmissionStatus.UNANSWERED and sub.reason == "aborted"
    assert [i.submission_id for i in only(writes_of(st, PutInbox)).items] == [a, c]
    assert d.inbox == [a, c] and b not in d.state.submissions

    st = d(answer(d.gen()))
    assert d.run_inputs == (a, c)
    assert [e.text for e in put_entries(st)[1:]] == ["a", "c"]


def test_abort_submission_answers_already_placed_settled_and_not_found() -> None:
    """A placed input answers already_placed, a settled one settled, an unknown id or another conversation's not_found; none writes."""
    d, first = busy()
    queued = d.sid(submit("q"))
    state = d.state

    st = d(abort_sub(first))
    assert kinds(st) == [Respond] and respond(st).reply.data == "already_placed" and respond(st).reply.value == first

    settled = Submission(id=SubmissionId(40), conversation_id=ConversationId(ROOT), type="input",
                         status=SubmissionStatus.DONE)
    st = d(abort_sub(40, known=settled))
    assert kinds(st) == [Respond] and respond(st).reply.data == "settled"

    st = d(abort_sub(9999))
    assert kinds(st) == [Respond] and respond(st).reply.data == "not_found" and respond(st).reply.value is None

    st = d(abort_sub(queued, cid=77))
    assert kinds(st) == [Respond] and respond(st).reply.data == "not_found"
    assert d.state == state and d.inbox == [queued]

    withdrawn = d(abort_sub(queued, cid=ROOT))
    assert respond(withdrawn).reply.data == "aborted"
    again = d(abort_sub(queued, known=put_subs(withdrawn)[queued]))
    assert kinds(again) == [Respond] and respond(again).reply.data == "settled"


def test_abort_submission_of_a_queued_write_withdraws_it() -> None:
    """A queued write can be withdrawn too: unanswered/aborted and never appended."""
    d, first = busy()
    w = d.sid(d.write("never"))
    assert respond(d(abort_sub(w))).reply.data == "aborted"
    st = d(answer(d.gen()))
    assert [e.text for e in put_entries(st)] == ["done"]
    assert d.inbox == []


# --- durability ----------------------------------------------------------------------


def test_the_queue_survives_a_crash_and_is_placed_after_reopen() -> None:
    """Queued follow-up, write and steer are rebuilt from stored records after a crash and placed by the next boundaries exactly once."""
    d, first = busy(store=True)
    follow = d.sid(submit("follow"))
    write = d.sid(d.write("note"))
    steer = d.sid(submit("steer", when_busy="steer"))
    g1 = d.gen()
    store = d.store
    assert store is not None

    # crash: a new process opens the same records
    reopened = step(State(), store.opened(now=100, catalog=CATALOG))
    r = Driver(reopened.state, store)
    store.apply(reopened)
    assert [i.submission_id for i in r.state.conversations[ROOT].inbox] == [follow, write, steer]
    assert {s.id: s.status for s in store.submissions()} == {
        first: SubmissionStatus.PLACED,
        follow: SubmissionStatus.QUEUED,
        write: SubmissionStatus.QUEUED,
        steer: SubmissionStatus.QUEUED,
    }
    # the interrupted request is re-sent, then the answer places the queue
    assert only(effects_of(reopened, CallModel)).task_id == g1
    st = r(answer(g1, "first answer", now=110))
    assert [e.text for e in put_entries(st)] == ["first answer", "note", "follow", "steer"]
    assert r.run_inputs == (follow, steer)
    r(answer(r.gen(), "second answer", now=120))

    entries = store.entries()
    assert [e.text for e in entries if e.kind == EntryKind.USER] == ["first", "note", "follow", "steer"]
    assert all(s.settled for s in store.submissions())
    assert {s.id: s.status for s in store.submissions()}[write] is SubmissionStatus.DONE
    assert dict(r.state.tasks) == {} and r.state.conversations[ROOT].inbox == ()


def test_a_withdrawal_survives_a_crash() -> None:
    """A withdrawn input stays withdrawn after a crash: the rebuilt inbox lacks it and it is never placed."""
    d, first = busy(store=True)
    a = d.sid(submit("a"))
    b = d.sid(submit("b"))
    d(abort_sub(a))
    store = d.store
    assert store is not None
    reopened = step(State(), store.opened(now=100, catalog=CATALOG))
    store.apply(reopened)
    r = Driver(reopened.state, store)
    assert [i.submission_id for i in r.state.conversations[ROOT].inbox] == [b]
    assert a not in r.state.submissions
    r(answer(TaskId(generation(r.state).id), now=110))
    assert r.run_inputs == (b,)
    assert [e.text for e in store.entries() if e.kind == EntryKind.USER] == ["first", "b"]
