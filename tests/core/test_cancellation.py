"""Cancellation: abort marks, bottom-up settlement, holds, cascades, background boundaries and crashes mid-abort."""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core import State, Step, step
from pidurable.core.effects import Accepted, Refusal, Refused
from pidurable.core.effects import CallModel, Cancel, Commit, PutConversation, PutInbox, PutTask, Respond, RunTool
from pidurable.core.events import (
    ConversationAbortRequested,
    ConversationCreationRequested,
    TaskAbortRequested,
    ToolFailed,
    WriteSubmitted,
)
from pidurable.core.model import (
    GENERATION,
    TOOL,
    AgentConfig,
    Conversation,
    ConversationId,
    EntryKind,
    ModelRef,
    Outcome,
    OutcomeStatus,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    ToolInfo,
)
from pidurable.core.ownership import conversation_is_idle
from pidurable.core.state import ConvState
from pidurable.core.diagnostics import aborted_message

from .helpers import Driver as BaseDriver
from .helpers import (
    MODEL,
    ROOT,
    Store,
    answer,
    calls,
    effects_of,
    finished,
    kinds,
    only,
    opened_state,
    prepared,
    put_entries,
    put_live,
    put_subs,
    put_tasks,
    respond,
    submit,
    tool_results,
    tools,
    writes_of,
)

CATALOG = (ToolInfo(name="t"), ToolInfo(name="u"))

_tickets = iter(range(70_000, 10**9))


class Driver(BaseDriver):
    def gen(self, cid: int = ROOT) -> int:
        return only(t.id for t in self.state.tasks.values() if t.kind == GENERATION and t.conversation_id == cid)

    def task(self, tid: int) -> Task | None:
        return self.state.tasks.get(TaskId(tid))


def abort_conv(cid: int = ROOT, *, background: bool = False, now: int = 50) -> ConversationAbortRequested:
    return ConversationAbortRequested(
        now=now, ticket=next(_tickets), conversation_id=ConversationId(cid), background=background
    )


def abort_task(tid: int, *, known: Task | None = None, now: int = 50) -> TaskAbortRequested:
    return TaskAbortRequested(now=now, ticket=next(_tickets), task_id=TaskId(tid), known=known)


def create_conv(owner: int | None = None, agent: AgentConfig | None = None) -> ConversationCreationRequested:
    return ConversationCreationRequested(
        now=31, ticket=next(_tickets), owner_task_id=None if owner is None else TaskId(owner), agent=agent
    )


def write(content: str, cid: int = ROOT) -> WriteSubmitted:
    return WriteSubmitted(now=15, ticket=next(_tickets), conversation_id=ConversationId(cid), content=content)


def tool_running(*names: str, store: bool = False, **kw: Any) -> tuple[Driver, int, list[int]]:
    """The root conversation's run is in a tool round; every created tool task is executing. Returns the
    driver, the placed input and the tool task ids in call order."""
    state = opened_state(catalog=CATALOG, **kw)
    d = Driver(state, Store(state) if store else None)
    first = d.value(submit("first"))
    d(calls(d.gen(), *(names or ("t",))))
    tids = [t.id for t in tools(d.state)]
    for tid in tids:
        assert kinds(d(prepared(tid))) == [Commit, RunTool]
    return d, first, tids


def with_child(d: Driver, owner: int, *, busy: bool = True) -> int:
    """A conversation owned by task ``owner``; busy with a run awaiting the model when ``busy``."""
    child = d.value(create_conv(owner))
    if busy:
        d.value(submit("child question", cid=child))
    return child


def outcome(st: Step, tid: int) -> Outcome | None:
    task = put_tasks(st)[tid]
    return task.outcome


# --- conv.abort ------------------------------------------------------------------------


def test_conversation_abort_while_a_tool_runs_settles_the_whole_run_in_one_commit() -> None:
    """One commit marks generation and tool, settles the tool "Tool t was aborted" and the run aborted, withdraws queued inputs and keeps queued writes; then Cancel, then Respond."""
    d, first, [tool] = tool_running()
    gen = d.gen()
    follow = d.value(submit("follow"))
    note = d.value(write("note"))

    st = d(abort_conv())

    assert kinds(st) == [Commit, Cancel, Respond]
    assert only(effects_of(st, Cancel)).task_id == tool
    assert respond(st).reply.data == [gen, tool]
    tasks = put_tasks(st)
    assert tasks[tool].abort_requested and tasks[gen].abort_requested
    assert tasks[tool].status is TaskStatus.TERMINAL and outcome(st, tool).status is OutcomeStatus.ABORTED
    assert tasks[gen].status is TaskStatus.TERMINAL and outcome(st, gen).status is OutcomeStatus.ABORTED
    result = only(put_entries(st))
    assert aborted_message("t") == "Tool t was aborted"
    assert result.kind is EntryKind.TOOL_RESULT and result.text == "<harness>\n[error] Tool t was aborted\n</harness>"
    assert result.is_error and result.tool_call_id == "c1"
    assert result.data == {
        "code": "aborted",
        "diagnostics": [{"severity": "error", "message": "Tool t was aborted", "code": "aborted"}],
    }
    assert outcome(st, tool).result == {"entry_id": result.id}
    subs = put_subs(st)
    assert (subs[first].status, subs[first].reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert subs[first].entry_id is not None and subs[first].answer_entry_id is None
    assert (subs[follow].status, subs[follow].reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert note not in subs and d.state.submissions[note].status is SubmissionStatus.QUEUED
    assert [i.submission_id for i in only(writes_of(st, PutInbox)).items] == [note]
    assert put_live(st) is not None and put_live(st).run is None
    assert dict(d.state.tasks) == {} and conversation_is_idle(d.state, ROOT)


def test_a_late_tool_result_after_the_abort_is_ignored() -> None:
    """A ToolFinished that arrives after the abort settled the call writes nothing: the call keeps its one aborted result."""
    d, first, [tool] = tool_running()
    d(abort_conv())
    state = d.state
    st = d(finished(tool, "too late"))
    assert st.effects == () and d.state == state


def test_conversation_abort_during_a_model_request_cancels_it_and_ignores_its_answer() -> None:
    """Aborting while the model is asked cancels the request, settles the input unanswered/aborted with no assistant entry, and a late answer is ignored."""
    d = Driver(opened_state())
    first = d.value(submit("first"))
    gen = d.gen()
    st = d(abort_conv())
    assert kinds(st) == [Commit, Cancel, Respond] and only(effects_of(st, Cancel)).task_id == gen
    assert not put_entries(st)
    assert put_subs(st)[first].reason == "aborted" and outcome(st, gen).status is OutcomeStatus.ABORTED
    late = d(answer(gen, "late"))
    assert late.effects == ()


def test_abort_of_an_idle_conversation_writes_nothing_but_answers() -> None:
    """conv.abort on an idle conversation with an empty inbox answers at once with no commit and no cancel."""
    state = opened_state()
    ev = abort_conv()
    st = step(state, ev)
    assert st.effects == (Respond(ticket=ev.ticket, reply=Accepted(value=0, data=[])),)
    assert st.state == state


def test_abort_of_an_unknown_conversation_is_not_found() -> None:
    """conv.abort naming a conversation that does not exist is refused not_found, writing nothing."""
    state = opened_state()
    st = step(state, abort_conv(42))
    assert kinds(st) == [Respond] and respond(st).reply.kind == "not_found" and "42" in respond(st).reply.message


def test_sequential_batch_aborted_gives_every_call_exactly_one_result() -> None:
    """Aborting a sequential batch answers the running call and every never-started call "Tool X was aborted", one result per call."""
    d, first, [tool] = tool_running("t", "u", "t", tool_execution="sequential")
    gen = d.gen()
    assert d.task(gen).checkpoint["pending"] == ["c2", "c3"]
    st = d(abort_conv())
    results = tool_results(put_entries(st))
    assert {cid: [(e.text, e.is_error) for e in es] for cid, es in results.items()} == {
        "c1": [("<harness>\n[error] Tool t was aborted\n</harness>", True)],
        "c2": [("<harness>\n[error] Tool u was aborted\n</harness>", True)],
        "c3": [("<harness>\n[error] Tool t was aborted\n</harness>", True)],
    }
    assert put_tasks(st)[tool].outcome.status is OutcomeStatus.ABORTED
    assert only(t for t in put_tasks(st).values() if t.kind == TOOL).id == tool  # no task for c2/c3
    assert outcome(st, gen).status is OutcomeStatus.ABORTED and put_subs(st)[first].reason == "aborted"


def test_conversation_abort_reaches_owned_child_conversations() -> None:
    """Aborting the parent settles the child's run first (bottom-up), withdraws the child's queued input and keeps its queued write."""
    d, first, [tool] = tool_running()
    gen = d.gen()
    child = with_child(d, tool)
    child_gen = d.gen(child)
    child_follow = d.value(submit("child follow", cid=child))
    child_note = d.value(write("child note", cid=child))
    child_input = only(s.id for s in d.state.submissions.values()
                       if s.conversation_id == child and s.status is SubmissionStatus.PLACED)

    st = d(abort_conv())

    assert {c.task_id for c in effects_of(st, Cancel)} == {tool, child_gen}
    assert respond(st).reply.data == sorted([gen, tool, child_gen])
    tasks = put_tasks(st)
    assert all(tasks[t].outcome.status is OutcomeStatus.ABORTED for t in (gen, tool, child_gen))
    # the tool ran its own abort handler (it was not held completing behind the child)
    assert [e.text for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT] == ["<harness>\n[error] Tool t was aborted\n</harness>"]
    subs = put_subs(st)
    assert subs[child_input].reason == "aborted" and subs[child_follow].reason == "aborted"
    assert subs[first].reason == "aborted"
    assert child_note not in subs and d.state.conversations[child].inbox[0].submission_id == child_note
    assert dict(d.state.tasks) == {}


def test_conversation_abort_stops_at_background_tasks_unless_background_is_true() -> None:
    """A background task and the conversation it owns are neither marked nor awaited by conv.abort(); abort(background=True) reaches them."""
    anchor = Task(id=TaskId(7), conversation_id=ConversationId(ROOT), kind="host.anchor", background=True)
    d = Driver(opened_state(tasks=[anchor]))
    child = with_child(d, anchor.id)
    child_gen = d.gen(child)
    first = d.value(submit("first"))
    gen = d.gen()
    # idle ignores the background subtree, but the child itself is busy
    assert not conversation_is_idle(d.state, child)

    st = d(abort_conv())
    assert respond(st).reply.data == [gen]
    assert put_subs(st)[first].reason == "aborted"
    assert anchor.id not in put_tasks(st) and child_gen not in put_tasks(st)
    assert d.task(child_gen) is not None and not d.task(child_gen).abort_requested
    assert d.task(anchor.id) == anchor
    assert conversation_is_idle(d.state, ROOT)

    st = d(abort_conv(background=True))
    assert set(respond(st).reply.data) == {anchor.id, child_gen}
    tasks = put_tasks(st)
    assert tasks[anchor.id].abort_requested
    assert tasks[child_gen].outcome.status is OutcomeStatus.ABORTED
    assert only(effects_of(st, Cancel)).task_id == child_gen


# --- abort_task ------------------------------------------------------------------------


def test_abort_task_unknown_terminal_and_live() -> None:
    """abort_task answers not_found for an unknown id, "terminal" (no commit) for a stored terminal task, and "marked" for a live one."""
    d, first, [tool] = tool_running()
    state = d.state
    st = d(abort_task(999))
    assert kinds(st) == [Respond] and respond(st).reply.kind == "not_found" and "999" in respond(st).reply.message

    terminal = Task(id=TaskId(3), conversation_id=ConversationId(ROOT), kind=GENERATION,
                    status=TaskStatus.TERMINAL, outcome=Outcome(status=OutcomeStatus.COMPLETED))
    st = d(abort_task(3, known=terminal))
    assert kinds(st) == [Respond] and (respond(st).reply.value, respond(st).reply.data) == (3, "terminal")
    assert d.state == state

    st = d(abort_task(tool))
    assert (respond(st).reply.value, respond(st).reply.data) == (tool, "marked")
    assert only(effects_of(st, Cancel)).task_id == tool


def test_abort_task_is_idempotent_while_the_mark_is_pending() -> None:
    """With scheduling off, a second abort_task on a marked task answers "marked" again and writes nothing."""
    d = Driver(opened_state(resume=False))
    d.value(submit("first"))
    gen = d.gen()
    st = d(abort_task(gen))
    assert kinds(st) == [Commit, Respond] and put_tasks(st)[gen].abort_requested
    assert put_tasks(st)[gen].status is TaskStatus.PENDING
    state = d.state
    again = d(abort_task(gen))
    assert kinds(again) == [Respond] and respond(again).reply.data == "marked" and d.state == state


def test_abort_task_of_one_tool_answers_the_call_and_the_run_goes_on() -> None:
    """Aborting just a tool task gives its call the aborted result and the generation hands the run to a successor."""
    d, first, [t1, t2] = tool_running("t", "u")
    gen = d.gen()
    st = d(abort_task(t1))
    assert put_tasks(st)[t1].outcome.status is OutcomeStatus.ABORTED
    assert only(put_entries(st)).text == "<harness>\n[error] Tool t was aborted\n</harness>"
    assert d.task(gen) is not None and d.task(gen).status is TaskStatus.WAITING  # still waiting on u
    st = d(finished(t2))
    assert outcome(st, gen).status is OutcomeStatus.COMPLETED
    g2 = d.gen()
    assert g2 != gen and d.state.conversations[ROOT].live.run.inputs == (first,)
    assert only(effects_of(st, CallModel)).task_id == g2


def test_abort_task_of_the_run_generation_cascades_into_its_tools_and_leaves_the_inbox_alone() -> None:
    """Aborting the generation marks its tools (Cancel), settles them and the run aborted, but a queued follow-up in its own conversation stays queued."""
    d, first, [tool] = tool_running()
    gen = d.gen()
    follow = d.value(submit("follow"))
    st = d(abort_task(gen))
    assert only(effects_of(st, Cancel)).task_id == tool
    assert outcome(st, tool).status is outcome(st, gen).status is OutcomeStatus.ABORTED
    assert put_subs(st)[first].reason == "aborted" and follow not in put_subs(st)
    assert [i.submission_id for i in d.state.conversations[ROOT].inbox] == [follow]
    assert d.state.conversations[ROOT].live.run is None


def test_abort_task_of_a_blocked_task_orphans_it() -> None:
    """A pending task of a kind nobody defines, with nothing below it, is orphaned by abort_task (missing_task)."""
    blocked = Task(id=TaskId(5), conversation_id=ConversationId(ROOT), kind="host.nobody")
    d = Driver(opened_state(tasks=[blocked]))
    st = d(abort_task(blocked.id))
    assert respond(st).reply.data == "marked"
    done = put_tasks(st)[blocked.id]
    assert done.status is TaskStatus.TERMINAL and done.abort_requested
    assert done.outcome.status is OutcomeStatus.ORPHANED and done.outcome.error == {"message": "missing_task"}


# --- holds: completing ---------------------------------------------------------------------


def test_tool_with_a_busy_child_is_held_completing_until_the_child_answers() -> None:
    """A tool that finishes while its child conversation works is held completing (result written, slot done); it turns terminal when the child's run ends, then the round ends."""
    d, first, [tool] = tool_running()
    gen = d.gen()
    child = with_child(d, tool)
    child_gen = d.gen(child)

    st = d(finished(tool, "delegated"))
    held = put_tasks(st)[tool]
    assert held.status is TaskStatus.COMPLETING and held.outcome.status is OutcomeStatus.COMPLETED
    assert held.ended_at is None
    result = only(put_entries(st))
    assert result.text == "delegated" and held.outcome.result == {"entry_id": result.id}
    assert only(s for s in put_live(st).tools).status == "done"
    assert d.task(gen).status is TaskStatus.WAITING and not effects_of(st, CallModel)
    assert not conversation_is_idle(d.state, ROOT)

    st = d(answer(child_gen, "child answer"))
    drained = put_tasks(st)[tool]
    assert drained.status is TaskStatus.TERMINAL and drained.outcome == held.outcome and drained.ended_at == 20
    assert outcome(st, gen).status is OutcomeStatus.COMPLETED  # the round finished in the same step
    assert d.gen() != gen and only(effects_of(st, CallModel)).conversation_id == ROOT


def test_completing_tool_with_a_failed_outcome_cascades_into_its_child() -> None:
    """A tool that throws while its child works holds a failed outcome, which marks and aborts the child's run and withdraws its queued input."""
    d, first, [tool] = tool_running()
    child = with_child(d, tool)
    child_gen = d.gen(child)
    child_follow = d.value(submit("child follow", cid=child))

    st = d(ToolFailed(now=40, task_id=TaskId(tool), message="kaput"))
    assert only(effects_of(st, Cancel)).task_id == child_gen
    assert outcome(st, child_gen).status is OutcomeStatus.ABORTED
    assert put_subs(st)[child_follow].reason == "aborted"
    final = put_tasks(st)[tool]
    assert final.status is TaskStatus.TERMINAL and final.outcome.status is OutcomeStatus.FAILED
    assert not final.abort_requested
    # the parent's run continues with the failed result
    assert d.state.conversations[ROOT].live.run is not None


def test_abort_task_on_a_completing_task_keeps_its_outcome_and_cascades() -> None:
    """Marking a task held completing keeps its completed outcome (and the mark) while its child's run is aborted below it."""
    d, first, [tool] = tool_running()
    child = with_child(d, tool)
    child_gen = d.gen(child)
    d(finished(tool, "result"))
    held = d.task(tool)
    assert held is not None and held.status is TaskStatus.COMPLETING

    st = d(abort_task(tool))
    assert respond(st).reply.data == "marked"
    assert only(effects_of(st, Cancel)).task_id == child_gen
    assert outcome(st, child_gen).status is OutcomeStatus.ABORTED
    final = put_tasks(st)[tool]
    assert final.status is TaskStatus.TERMINAL and final.abort_requested
    assert final.outcome == held.outcome  # no abort handler ran: the held outcome stands
    assert [e.text for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT] == []


# --- conversation creation ---------------------------------------------------------------


def test_conversation_created_with_an_owner_copies_the_owner_conversations_agent() -> None:
    """A task-owned conversation starts with the owner's conversation agent (every field) unless an agent is given; an ownerless one gets the given agent or the default."""
    agent = AgentConfig(model=ModelRef("p", "m"), cwd="/w", instructions="be brief", tools=("t",),
                        tool_execution="sequential")
    root = ConvState(conversation=Conversation(id=ConversationId(ROOT)), agent=agent)
    d = Driver(opened_state(conversations=[root], catalog=CATALOG))
    d.value(submit("go"))
    d(calls(d.gen(), "t"))
    [tool] = [t.id for t in tools(d.state)]

    st = d(create_conv(tool))
    child = respond(st).reply.value
    assert only(writes_of(st, PutConversation)).conversation == Conversation(id=child, owner_task_id=tool)
    assert d.state.conversations[child].agent == agent

    other = AgentConfig(model=MODEL)
    explicit = d.value(create_conv(tool, agent=other))
    assert d.state.conversations[explicit].agent == other
    free = d.value(create_conv())
    assert d.state.conversations[free].conversation.owner_task_id is None
    assert d.state.conversations[free].agent == AgentConfig()


def test_conversation_created_refuses_a_missing_completing_or_marked_owner() -> None:
    """A missing, completing or abort-marked owner task is refused as invalid with a message naming the problem, writing nothing."""
    completing = Task(id=TaskId(5), conversation_id=ConversationId(ROOT), kind=TOOL, status=TaskStatus.COMPLETING,
                      outcome=Outcome(status=OutcomeStatus.COMPLETED), owner=None)
    marked = Task(id=TaskId(6), conversation_id=ConversationId(ROOT), kind="host.job", abort_requested=True)
    state = opened_state(tasks=[completing, marked], resume=False)
    for owner, problem in ((99, "does not exist"), (5, "is completing"), (6, "is abort-marked")):
        st = step(state, create_conv(owner))
        assert kinds(st) == [Respond], owner
        r = respond(st)
        assert r.reply.kind == "invalid" and problem in r.reply.message and str(owner) in r.reply.message
        assert st.state == state


# --- crashes -------------------------------------------------------------------------------


def test_a_crash_after_the_abort_commit_keeps_everything_settled() -> None:
    """Reopening a store right after the abort commit (before the Cancel ran) finds nothing live and re-runs nothing."""
    d, first, [tool] = tool_running(store=True)
    d(abort_conv())
    store = d.store
    assert store is not None
    reopened = step(State(), store.opened(now=100, catalog=CATALOG))
    assert reopened.effects == ()
    assert dict(reopened.state.tasks) == {} and reopened.state.submissions == {}
    [result] = tool_results(store.entries())["c1"]
    assert result.text == "<harness>\n[error] Tool t was aborted\n</harness>"
    assert {s.id: (s.status, s.reason) for s in store.submissions()} == {
        first: (SubmissionStatus.UNANSWERED, "aborted")
    }


def test_marks_committed_before_a_crash_finish_the_abort_on_reopen() -> None:
    """Marks committed while scheduling was off survive a crash: the next open settles the tool "aborted" (not "interrupted") and the run aborted."""
    d, first, [tool] = tool_running(store=True)
    gen = d.gen()
    store = d.store
    assert store is not None
    # the process dies mid-tool; a new one opens without resuming and the host aborts
    recovered = step(State(), store.opened(now=60, catalog=CATALOG, resume=False))
    store.apply(recovered)
    paused = Driver(recovered.state, store)
    st = paused(abort_conv(now=61))
    assert kinds(st) == [Commit, Respond] and respond(st).reply.data == [gen, tool]
    assert {t.id: (t.status, t.abort_requested) for t in store.tasks()} == {
        gen: (TaskStatus.WAITING, True),
        tool: (TaskStatus.PENDING, True),
    }

    # crash again before any abort handler ran; the next open finishes the abort
    reopened = step(State(), store.opened(now=70, catalog=CATALOG))
    store.apply(reopened)
    assert not effects_of(reopened, RunTool) and not effects_of(reopened, CallModel)
    assert dict(reopened.state.tasks) == {}
    [result] = tool_results(store.entries())["c1"]
    assert result.text == "<harness>\n[error] Tool t was aborted\n</harness>" and result.at == 70
    final = {t.id: t.outcome.status for t in store.tasks()}
    assert final == {gen: OutcomeStatus.ABORTED, tool: OutcomeStatus.ABORTED}
    assert {s.id: (s.status, s.reason) for s in store.submissions()} == {
        first: (SubmissionStatus.UNANSWERED, "aborted")
    }


def test_an_unapplied_cascade_below_a_held_failed_owner_is_derived_at_open() -> None:
    """A store holding a failed completing owner whose child run was never marked (a crash) gets the cascade at open: the child run is aborted, then the owner drains."""
    owner = Task(id=TaskId(5), conversation_id=ConversationId(ROOT), kind="host.job")
    state = opened_state(tasks=[owner], resume=False)
    store = Store(state)
    d = Driver(state, store)
    child = d.value(create_conv(owner.id))
    child_input = d.value(submit("child q", cid=child))
    child_gen = d.gen(child)
    # the owner's failed outcome reached storage, its cascade did not (written by hand: a crash in between)
    held = attrs.evolve(owner, status=TaskStatus.COMPLETING,
                        outcome=Outcome(status=OutcomeStatus.FAILED, error={"message": "x"}))
    store.records[("task", owner.id)] = PutTask(task=held)

    reopened = step(State(), store.opened(now=90))
    store.apply(reopened)
    final = {t.id: t for t in store.tasks()}
    assert final[child_gen].abort_requested and final[child_gen].outcome.status is OutcomeStatus.ABORTED
    assert final[owner.id].status is TaskStatus.TERMINAL and final[owner.id].outcome == held.outcome
    assert final[owner.id].ended_at == 90
    assert {s.id: s.reason for s in store.submissions()} == {child_input: "aborted"}
    assert dict(reopened.state.tasks) == {}
    assert not effects_of(reopened, CallModel)


def test_conversation_abort_marks_and_withdraws_in_reached_child_conversations_in_its_own_commit() -> None:
    """With scheduling off, the abort commit alone marks the owner task and the child's generation and withdraws the child's queued input (its write stays)."""
    owner = Task(id=TaskId(5), conversation_id=ConversationId(ROOT), kind="host.job")
    d = Driver(opened_state(tasks=[owner], resume=False))
    child = with_child(d, owner.id)
    child_gen = d.gen(child)
    queued = d.value(submit("child follow", cid=child))
    note = d.value(write("child note", cid=child))

    st = d(abort_conv())
    assert kinds(st) == [Commit, Respond]
    assert respond(st).reply.data == [owner.id, child_gen]
    tasks = put_tasks(st)
    assert tasks[owner.id].abort_requested and tasks[child_gen].abort_requested
    assert tasks[child_gen].status is TaskStatus.PENDING  # no handler ran: scheduling is off
    assert (put_subs(st)[queued].status, put_subs(st)[queued].reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert note not in put_subs(st)
    assert [i.submission_id for i in d.state.conversations[child].inbox] == [note]
