"""Custom tasks in the pure core: creation, reservation, the step rules, versions, abort, failFast, memos, inspect."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs

from pidurable.core import State, Step, step
from pidurable.core.effects import Accepted, Refusal, Refused
from pidurable.core.effects import Cancel, MigrateTask, PutTask, Respond, RunPhase
from pidurable.core.events import (
    MemoRequested,
    MigrationFinished,
    Opened,
    PhaseReturned,
    RegistryChanged,
    Resumed,
    TaskAbortRequested,
    TaskCommitRequested,
    TaskCreationRequested,
)
from pidurable.core.model import (
    GENERATION,
    TOOL,
    ConversationId,
    Outcome,
    OutcomeStatus,
    Task,
    TaskId,
    TaskInfo,
    TaskStatus,
)
from pidurable.core.scheduling import inspect_tasks

from .helpers import ROOT, Store, commits, conv_state, effects_of, only, opened_event, put_tasks, respond, run_events

CID = ConversationId(ROOT)
REPORT = TaskInfo(kind="report", version=1, phases=("start", "collect", "finish"))
PART = TaskInfo(kind="part", version=1, phases=("run",))
CATALOG = (REPORT, PART)

_tickets = itertools.count(5000)


# --- helpers -------------------------------------------------------------------------


def opened(
    tasks: Sequence[Task] = (),
    *,
    task_catalog: Sequence[TaskInfo] = CATALOG,
    conversations: Sequence[Any] | None = None,
    resume: bool = True,
) -> State:
    """The state after opening a store holding ``tasks`` with ``task_catalog`` installed."""
    ev: Opened = opened_event(tasks=tasks, conversations=conversations, resume=resume)
    return step(State(), attrs.evolve(ev, task_catalog=tuple(task_catalog))).state


def task(tid: int, kind: str = "report", *, phase: str = "start", **kw: Any) -> Task:
    """A stored custom task (pending at ``phase`` unless told otherwise)."""
    return Task(id=TaskId(tid), conversation_id=kw.pop("conversation_id", CID), kind=kind,
                checkpoint=kw.pop("checkpoint", {"phase": phase}), **kw)


def created(kind: str = "report", *, cid: int = ROOT, checkpoint: dict[str, Any] | None = None,
            owner: int | None = None, background: bool = False, version: int = 1, now: int = 10) -> TaskCreationRequested:
    return TaskCreationRequested(
        now=now, ticket=next(_tickets), kind=kind, conversation_id=ConversationId(cid), input={"n": 1},
        checkpoint={"phase": "start"} if checkpoint is None else checkpoint,
        owner=None if owner is None else TaskId(owner), background=background, version=version,
    )


def committed(tid: int, status: str = "running", *, phase: str = "collect", on: Sequence[int] = (),
              policy: str = "allSettled", outcome: Outcome | None = None, mode: str = "run",
              now: int = 20, **extra: Any) -> TaskCommitRequested:
    checkpoint = None if status == "terminal" else {"phase": phase, **extra}
    return TaskCommitRequested(now=now, ticket=next(_tickets), task_id=TaskId(tid), status=status, checkpoint=checkpoint,
                         on=tuple(TaskId(t) for t in on), policy=policy, outcome=outcome, mode=mode)


def returned(tid: int, ran: dict[str, Any], *, mode: str = "run", error: str | None = None,
             cancelled: bool = False, now: int = 30) -> PhaseReturned:
    return PhaseReturned(now=now, task_id=TaskId(tid), mode=mode, ran=ran, error=error, cancelled=cancelled)


def memo(tid: int, name: str, *candidate: Any, now: int = 25) -> MemoRequested:
    return MemoRequested(now=now, ticket=next(_tickets), task_id=TaskId(tid), name=name,
                         candidate=candidate[0] if candidate else None, write=bool(candidate))


def abort(tid: int, now: int = 40) -> TaskAbortRequested:
    return TaskAbortRequested(now=now, ticket=next(_tickets), task_id=TaskId(tid))


def done(status: OutcomeStatus = OutcomeStatus.COMPLETED, **result: Any) -> Outcome:
    return Outcome(status=status, result=dict(result) or None)


def phases(st: Step) -> list[RunPhase]:
    return effects_of(st, RunPhase)


def refused(st: Step) -> str:
    """The refusal text of the step's one Respond (fails if it was accepted)."""
    r = respond(st)
    assert r.reply.kind == "invalid", r
    assert isinstance(r.reply, Refused)
    return r.reply.message


def accepted(st: Step) -> Respond:
    r = respond(st)
    assert isinstance(r.reply, Accepted), r.reply
    return r


def outcome_of(st: Step, tid: int) -> Outcome:
    written = put_tasks(st)[tid]
    assert written.outcome is not None, written
    return written.outcome


# --- creation -------------------------------------------------------------------------


def test_task_created_stores_a_pending_task_and_answers_its_id() -> None:
    """A valid TaskCreationRequested commits a pending task with the given checkpoint and answers its id after the commit."""
    st = step(opened(resume=False), created(checkpoint={"phase": "start", "k": 1}))
    r = accepted(st)
    stored = put_tasks(st)[r.reply.value]
    assert stored.kind == "report" and stored.status is TaskStatus.PENDING
    assert stored.checkpoint == {"phase": "start", "k": 1} and stored.input == {"n": 1}
    assert st.effects[0] is commits(st)[0] and st.effects[-1] is r


def _assert_invalid(state: State, ev: TaskCreationRequested, needle: str) -> None:
    st = step(state, ev)
    assert needle in refused(st)
    assert commits(st) == [], "a refused creation must store nothing"
    assert st.state.tasks == state.tasks


def test_task_created_in_an_unknown_conversation_is_refused() -> None:
    """Creating a task in a conversation that does not exist is refused with no commit."""
    _assert_invalid(opened(resume=False), created(cid=77), "Conversation 77 does not exist")


def test_task_created_with_a_built_in_kind_is_refused() -> None:
    """Hosts cannot create pi.generation or pi.tool tasks: refused with no commit."""
    for kind in (GENERATION, TOOL):
        _assert_invalid(opened(resume=False), created(kind=kind), "created by the harness")


def test_task_created_without_a_string_phase_is_refused() -> None:
    """An initial checkpoint without a string 'phase' is refused with no commit."""
    _assert_invalid(opened(resume=False), created(checkpoint={"step": 1}), "'phase'")
    _assert_invalid(opened(resume=False), created(checkpoint={"phase": 3}), "'phase'")


def test_task_created_with_a_missing_owner_is_refused() -> None:
    """A child whose owner task does not exist (or is terminal) is refused with no commit."""
    _assert_invalid(opened(resume=False), created(owner=404), "Owner task 404 does not exist")


def test_task_created_under_a_completing_owner_is_refused() -> None:
    """A completing owner (outcome held) cannot take new children: refused with no commit."""
    owner = task(50, status=TaskStatus.COMPLETING, outcome=done())
    child = task(51, "part", phase="run", owner=TaskId(50))
    _assert_invalid(opened([owner, child], resume=False), created("part", checkpoint={"phase": "run"}, owner=50),
                    "Owner task 50 is completing")


def test_task_created_under_an_abort_marked_owner_is_refused() -> None:
    """An abort-marked owner cannot take new children: refused with no commit."""
    owner = task(50, abort_requested=True)
    _assert_invalid(opened([owner], resume=False), created("part", checkpoint={"phase": "run"}, owner=50),
                    "Owner task 50 is abort-marked")


def test_task_created_child_in_another_conversation_is_refused() -> None:
    """A child task must live in its owner's conversation: another conversation is refused with no commit."""
    state = opened([task(50)], conversations=[conv_state(ROOT), conv_state(2)], resume=False)
    _assert_invalid(state, created("part", cid=2, checkpoint={"phase": "run"}, owner=50), "owner's conversation")


def test_task_created_background_child_is_refused() -> None:
    """A child task cannot be background: refused with no commit."""
    _assert_invalid(opened([task(50)], resume=False),
                    created("part", checkpoint={"phase": "run"}, owner=50, background=True), "background")


# --- reservation ------------------------------------------------------------------------


def test_reserve_starts_the_phase_and_records_the_invocation() -> None:
    """A ready custom task is reserved: RunPhase with its checkpoint, and its id is in state.invocations."""
    st = step(opened(resume=False), created(checkpoint={"phase": "start", "k": 1}))
    tid = accepted(st).reply.value
    assert phases(st) == []  # scheduling is off
    st2 = step(st.state, Resumed(now=11))
    run = only(phases(st2))
    assert (run.task_id, run.kind, run.mode, run.checkpoint) == (tid, "report", "run", {"phase": "start", "k": 1})
    assert tid in st2.state.invocations
    assert st2.state.tasks[tid].status is TaskStatus.RUNNING


def test_a_task_with_an_invocation_is_never_reserved_twice() -> None:
    """While its phase is out, later events (even a commit of a new checkpoint) never start a second RunPhase."""
    state = opened([task(50)])
    assert TaskId(50) in state.invocations
    steps = run_events(state, created("part", checkpoint={"phase": "run"}), committed(50, phase="collect"),
                       memo(50, "m", 1))
    started = [p.task_id for s in steps for p in phases(s)]
    assert 50 not in started
    assert started == [accepted(steps[0]).reply.value]  # only the new task was reserved


# --- runtime commit --------------------------------------------------------------------------


def test_commit_running_replaces_the_checkpoint() -> None:
    """A running commit from the live invocation stores the new checkpoint and the task stays running."""
    st = step(opened([task(50)]), committed(50, phase="collect", k=2))
    accepted(st)
    assert put_tasks(st)[50].checkpoint == {"phase": "collect", "k": 2}
    assert put_tasks(st)[50].status is TaskStatus.RUNNING


def test_commit_waiting_parks_the_task_on_its_children() -> None:
    """A waiting commit stores status waiting with `on` and the policy."""
    state = opened([task(50), task(51, "part", phase="run", owner=TaskId(50))])
    st = step(state, committed(50, "waiting", on=[51], policy="failFast"))
    accepted(st)
    w = put_tasks(st)[50]
    assert (w.status, w.on, w.policy) == (TaskStatus.WAITING, (51,), "failFast")


def test_commit_terminal_ends_the_task_and_drops_memos() -> None:
    """A terminal commit stores the outcome; the task leaves the live state and its memos are gone."""
    state = opened([task(50, memos={"m": 1})])
    st = step(state, committed(50, "terminal", outcome=done(total=3)))
    accepted(st)
    end = put_tasks(st)[50]
    assert end.status is TaskStatus.TERMINAL and end.outcome == done(total=3) and end.memos is None
    assert 50 not in st.state.tasks


def test_commit_after_the_phase_returned_is_refused() -> None:
    """Once PhaseReturned ended the invocation (the task is waiting), a commit is refused 'invocation has ended'."""
    state = opened([task(50), task(51, "part", phase="run", owner=TaskId(50))])
    steps = run_events(state, committed(50, "waiting", on=[51]), returned(50, {"phase": "start"}))
    assert TaskId(50) not in steps[-1].state.invocations
    st = step(steps[-1].state, committed(50, phase="collect"))
    assert "invocation has ended" in refused(st)
    assert commits(st) == []


def test_commit_of_a_terminal_task_is_refused() -> None:
    """A commit naming a task that is no longer live is refused as terminal."""
    state = opened([task(50)])
    steps = run_events(state, committed(50, "terminal", outcome=done()), committed(50, phase="collect"))
    assert "is terminal" in refused(steps[-1])


def test_commit_of_an_abort_marked_task_in_run_mode_is_refused() -> None:
    """After an abort mark, a late run-mode commit of the cancelled invocation is refused."""
    state = opened([task(50)])
    steps = run_events(state, abort(50), committed(50, phase="collect"))
    assert "invocation has ended" in refused(steps[-1])
    assert commits(steps[-1]) == []


def test_waiting_on_itself_is_refused_and_the_phase_then_faults() -> None:
    """A task cannot wait on itself; the refused commit makes the phase raise, and the task ends faulted."""
    state = opened([task(50)])
    st = step(state, committed(50, "waiting", on=[50]))
    message = refused(st)
    assert "cannot wait on itself or its owner" in message
    assert st.state.tasks[50].status is TaskStatus.RUNNING
    st2 = step(st.state, returned(50, {"phase": "start"}, error=message))
    out = outcome_of(st2, 50)
    assert out.status is OutcomeStatus.FAULTED and out.error == {"message": message}


def test_waiting_on_the_owner_chain_is_refused() -> None:
    """A grandchild cannot wait on its owner nor on its owner's owner."""
    state = opened([
        task(50, status=TaskStatus.WAITING, on=(TaskId(51),)),
        task(51, "report", owner=TaskId(50), status=TaskStatus.WAITING, on=(TaskId(52),)),
        task(52, "part", phase="run", owner=TaskId(51)),
    ])
    assert TaskId(52) in state.invocations
    for target in (51, 50):
        st = step(state, committed(52, "waiting", phase="run", on=[target]))
        assert f"cannot wait on itself or its owner ({target})" in refused(st)
        assert commits(st) == []


def test_fail_fast_only_on_owned_tasks() -> None:
    """failFast on a task the waiter does not own is refused; allSettled on the same task is accepted."""
    state = opened([task(50), task(60, "part", phase="run")])
    st = step(state, committed(50, "waiting", on=[60], policy="failFast"))
    assert "only on tasks it owns" in refused(st)
    accepted(step(state, committed(50, "waiting", on=[60], policy="allSettled")))


def test_commit_with_a_phase_the_definition_lacks_is_refused() -> None:
    """A checkpoint naming a phase the installed definition does not define is refused."""
    st = step(opened([task(50)]), committed(50, phase="nope"))
    assert "no phase 'nope'" in refused(st)


# --- PhaseReturned ---------------------------------------------------------------------------


def test_phase_returned_with_a_changed_checkpoint_runs_the_next_phase() -> None:
    """After a progress commit, PhaseReturned starts the next phase from the new checkpoint."""
    steps = run_events(opened([task(50)]), committed(50, phase="collect", k=1), returned(50, {"phase": "start"}))
    run = only(phases(steps[-1]))
    assert (run.task_id, run.mode, run.checkpoint) == (50, "run", {"phase": "collect", "k": 1})
    assert TaskId(50) in steps[-1].state.invocations


def test_same_phase_with_a_changed_payload_counts_as_progress() -> None:
    """Committing the same phase with a different payload is progress: the phase runs again."""
    state = opened([task(50, checkpoint={"phase": "collect", "i": 0})])
    steps = run_events(state, committed(50, phase="collect", i=1), returned(50, {"phase": "collect", "i": 0}))
    assert only(phases(steps[-1])).checkpoint == {"phase": "collect", "i": 1}


def test_phase_returned_unchanged_faults_without_durable_progress() -> None:
    """A phase that returns without committing anything ends faulted 'returned without durable progress'."""
    st = step(opened([task(50)]), returned(50, {"phase": "start"}))
    out = outcome_of(st, 50)
    assert out.status is OutcomeStatus.FAULTED
    assert out.error == {"message": "Task 50 phase start returned without durable progress"}
    assert phases(st) == [] and 50 not in st.state.tasks


def test_phase_raised_faults_with_the_message() -> None:
    """A phase that raised ends faulted with the error message, even if it had committed progress."""
    steps = run_events(opened([task(50)]), committed(50, phase="collect"),
                       returned(50, {"phase": "start"}, error="ValueError: bad part"))
    out = outcome_of(steps[-1], 50)
    assert out.status is OutcomeStatus.FAULTED and out.error == {"message": "ValueError: bad part"}


def test_phase_returned_after_a_terminal_commit_just_ends_the_invocation() -> None:
    """Rule 1: the task is no longer running, so PhaseReturned writes nothing and starts nothing."""
    steps = run_events(opened([task(50)]), committed(50, "terminal", outcome=done()), returned(50, {"phase": "start"}))
    assert commits(steps[-1]) == [] and phases(steps[-1]) == []
    assert TaskId(50) not in steps[-1].state.invocations


def test_a_stale_phase_returned_is_ignored() -> None:
    """A PhaseReturned for a task without an invocation changes nothing."""
    state = opened([task(50)], resume=False)
    st = step(state, returned(50, {"phase": "start"}))
    assert commits(st) == [] and st.state.tasks == state.tasks


def test_abort_handler_returning_while_live_faults() -> None:
    """An abort handler that returns without a terminal outcome ends the task faulted."""
    info = attrs.evolve(REPORT, has_abort=True)
    state = opened([task(50, abort_requested=True)], task_catalog=[info, PART])
    run = only(state.invocations)
    assert run == 50
    st = step(state, returned(50, {"phase": "start"}, mode="abort"))
    out = outcome_of(st, 50)
    assert out.status is OutcomeStatus.FAULTED
    assert out.error == {"message": "Abort handler of task 50 returned without a terminal outcome"}


def test_abort_handler_cannot_wait() -> None:
    """A waiting commit from an abort-mode invocation is refused."""
    info = attrs.evolve(REPORT, has_abort=True)
    state = opened([task(50, abort_requested=True), task(60, "part", phase="run", background=True)],
                   task_catalog=[info, PART])
    st = step(state, committed(50, "waiting", on=[60], mode="abort"))
    assert "cannot wait" in refused(st)


def test_cancelled_invocation_ends_and_the_abort_handler_runs_next() -> None:
    """An abort mark cancels the running phase; once it reports cancelled, the abort handler starts."""
    info = attrs.evolve(REPORT, has_abort=True)
    state = opened([task(50)], task_catalog=[info, PART])
    st = step(state, abort(50))
    assert only(effects_of(st, Cancel)).task_id == 50
    assert phases(st) == [], "the abort handler waits for the cancelled invocation to report back"
    assert put_tasks(st)[50].abort_requested and put_tasks(st)[50].status is TaskStatus.PENDING
    st2 = step(st.state, returned(50, {"phase": "start"}, cancelled=True))
    run = only(phases(st2))
    assert (run.task_id, run.mode) == (50, "abort")
    # the abort handler commits an outcome and returns: done
    steps = run_events(st2.state, committed(50, "terminal", outcome=done(OutcomeStatus.ABORTED), mode="abort"),
                       returned(50, {"phase": "start"}, mode="abort"))
    assert outcome_of(steps[0], 50).status is OutcomeStatus.ABORTED
    assert commits(steps[1]) == []


def test_abort_of_a_custom_task_without_an_abort_handler_ends_aborted() -> None:
    """A pending custom task without an abort handler is aborted directly, no code runs."""
    state = opened([task(50)], resume=False)
    steps = run_events(state, abort(50), Resumed(now=41))
    assert phases(steps[-1]) == []
    assert outcome_of(steps[-1], 50).status is OutcomeStatus.ABORTED
    assert 50 not in steps[-1].state.tasks


# --- versions and blocked tasks ----------------------------------------------------------------


def test_missing_definition_blocks_the_task() -> None:
    """A task whose kind is not installed stays pending and never runs (blocked missing_task)."""
    state = opened([task(50, "ghost")])
    assert state.invocations == frozenset() and state.tasks[50].status is TaskStatus.PENDING
    insp = only(inspect_tasks(state))
    assert (insp.state, insp.reason) == ("blocked", "missing_task")


def test_a_stored_version_newer_than_the_installed_one_is_blocked_task_too_old() -> None:
    """A task stored at version 2 with version 1 installed stays pending and is blocked task_too_old."""
    state = opened([task(50, version=2)])
    assert state.invocations == frozenset()
    assert only(inspect_tasks(state)).reason == "task_too_old"
    # installing version 2 lets it run
    st = step(state, RegistryChanged(now=5, catalog=(), task_catalog=(attrs.evolve(REPORT, version=2), PART)))
    assert only(phases(st)).task_id == 50


def test_an_older_stored_version_is_migrated_then_runs_at_the_new_version() -> None:
    """Installed v2 with migrate: MigrateTask first; a successful MigrationFinished stores the task pending at v2, then its phase runs."""
    v2 = attrs.evolve(REPORT, version=2, has_migrate=True)
    first = step(State(), attrs.evolve(opened_event(tasks=[task(50, checkpoint={"phase": "start", "old": True})]),
                                       task_catalog=(v2, PART)))
    mig = only(effects_of(first, MigrateTask))
    assert (mig.task_id, mig.from_version, mig.checkpoint) == (50, 1, {"phase": "start", "old": True})
    assert phases(first) == [], "no phase runs before the migration reported"
    state = first.state
    assert phases(step(state, memo(50, "x"))) == []
    st = step(state, MigrationFinished(now=5, task_id=TaskId(50), version=2, input={"n": 2},
                                       checkpoint={"phase": "collect", "new": True}))
    stored = put_tasks(st)[50]
    assert (stored.status, stored.version, stored.input, stored.checkpoint) == (
        TaskStatus.PENDING, 2, {"n": 2}, {"phase": "collect", "new": True})
    run = only(phases(st))
    assert run.checkpoint == {"phase": "collect", "new": True}


def test_a_failed_migration_blocks_until_a_different_version_is_installed() -> None:
    """A failed migration leaves the task blocked migration_failed; the same version does not retry, another one does."""
    v2 = attrs.evolve(REPORT, version=2, has_migrate=True)
    state = opened([task(50)], task_catalog=[v2, PART])
    assert TaskId(50) in state.invocations
    st = step(state, MigrationFinished(now=5, task_id=TaskId(50), version=2, error="cannot read v1"))
    assert commits(st) == [] and phases(st) == [] and effects_of(st, MigrateTask) == []
    assert st.state.tasks[50].version == 1 and st.state.tasks[50].status is TaskStatus.PENDING
    assert only(inspect_tasks(st.state)).reason == "migration_failed"
    same = step(st.state, RegistryChanged(now=6, catalog=(), task_catalog=(v2, PART)))
    assert effects_of(same, MigrateTask) == [], "the same version is not retried"
    v3 = attrs.evolve(REPORT, version=3, has_migrate=True)
    again = step(same.state, RegistryChanged(now=7, catalog=(), task_catalog=(v3, PART)))
    assert only(effects_of(again, MigrateTask)).task_id == 50


def test_a_newer_definition_without_migrate_blocks_migration_failed() -> None:
    """A newer installed version with no migrate() never runs the task: blocked migration_failed."""
    state = opened([task(50)], task_catalog=[attrs.evolve(REPORT, version=2), PART])
    assert state.invocations == frozenset()
    assert only(inspect_tasks(state)).reason == "migration_failed"


def test_abort_of_a_blocked_task_orphans_it_with_the_reason() -> None:
    """Aborting a blocked task runs no code: it ends orphaned with the blocking reason."""
    for tasks, catalog, reason in (
        ([task(50, "ghost")], CATALOG, "missing_task"),
        ([task(50, version=3)], CATALOG, "task_too_old"),
    ):
        st = step(opened(tasks, task_catalog=catalog), abort(50))
        out = outcome_of(st, 50)
        assert out.status is OutcomeStatus.ORPHANED and out.error == {"message": reason}
        assert phases(st) == [] and effects_of(st, MigrateTask) == []
        assert 50 not in st.state.tasks


# --- failFast --------------------------------------------------------------------------------


def test_fail_fast_marks_the_running_siblings_but_not_the_waiter() -> None:
    """A child that fails marks its still-running sibling (cancelled) while the failFast waiter itself is not marked."""
    state = opened([
        task(50, status=TaskStatus.WAITING, on=(TaskId(51), TaskId(52)), policy="failFast"),
        task(51, "part", phase="run", owner=TaskId(50)),
        task(52, "part", phase="run", owner=TaskId(50)),
    ])
    assert state.invocations == {51, 52}
    st = step(state, committed(51, "terminal", outcome=done(OutcomeStatus.FAILED)))
    accepted(st)
    written = put_tasks(st)
    assert written[52].abort_requested and written[52].status is TaskStatus.PENDING
    assert only(effects_of(st, Cancel)).task_id == 52
    assert not st.state.tasks[50].abort_requested
    # the sibling's cancelled invocation reports back; it ends aborted, and the waiter resumes
    st2 = step(st.state, returned(52, {"phase": "run"}, cancelled=True))
    assert outcome_of(st2, 52).status is OutcomeStatus.ABORTED
    run = only(phases(st2))
    assert (run.task_id, run.mode) == (50, "run")


def test_all_settled_waiter_does_not_mark_siblings() -> None:
    """With allSettled, a failing child leaves its sibling running (mutation check for failFast)."""
    state = opened([
        task(50, status=TaskStatus.WAITING, on=(TaskId(51), TaskId(52))),
        task(51, "part", phase="run", owner=TaskId(50)),
        task(52, "part", phase="run", owner=TaskId(50)),
    ])
    st = step(state, committed(51, "terminal", outcome=done(OutcomeStatus.FAILED)))
    assert not st.state.tasks[52].abort_requested and effects_of(st, Cancel) == []


# --- memos -----------------------------------------------------------------------------------


def test_memo_first_writer_wins_and_read_without_candidate() -> None:
    """memo(name, c) stores c once; a later candidate gets the first value; memo(name) reads it; unknown reads None."""
    state = opened([task(50)])
    steps = run_events(state, memo(50, "m", 1), memo(50, "m", 2), memo(50, "m"), memo(50, "other"))
    assert [respond(s).reply.data for s in steps] == [1, 1, 1, None]
    assert put_tasks(steps[0])[50].memos == {"m": 1}
    assert [len(commits(s)) for s in steps] == [1, 0, 0, 0]


def test_memo_names_like_prototype_keys_are_plain_keys() -> None:
    """Names such as __proto__ or constructor behave as ordinary memo names."""
    steps = run_events(opened([task(50)]), memo(50, "constructor"), memo(50, "__proto__", "p"), memo(50, "__proto__"))
    assert [respond(s).reply.data for s in steps] == [None, "p", "p"]


def test_memo_survives_a_crash() -> None:
    """A memo committed before a crash is read back after reopening the store, and a new candidate does not replace it."""
    state = opened([task(50)])
    store = Store(state)
    store.records[("task", 50)] = PutTask(task=state.tasks[TaskId(50)])
    steps = run_events(state, committed(50, phase="collect"), memo(50, "approval", "yes"))
    for s in steps:
        store.apply(s)
    # crash: a new process opens the store
    ev = attrs.evolve(store.opened(now=100), task_catalog=CATALOG)
    st = step(State(), ev)
    assert st.state.tasks[50].memos == {"approval": "yes"}
    run = only(phases(st))
    assert run.checkpoint == {"phase": "collect"}
    again = run_events(st.state, memo(50, "approval", "no"), memo(50, "approval"))
    assert [respond(s).reply.data for s in again] == ["yes", "yes"]


def test_memo_is_dropped_at_terminal() -> None:
    """After the task ends its memos are gone: the stored record has none and a memo call is refused."""
    steps = run_events(opened([task(50)]), memo(50, "m", 1), committed(50, "terminal", outcome=done()),
                       memo(50, "m"))
    assert put_tasks(steps[1])[50].memos is None
    assert "memos are gone" in refused(steps[2])


# --- inspect -----------------------------------------------------------------------------------


def test_inspect_shows_running_waiting_ready_completing_and_blocked() -> None:
    """inspect_tasks derives each live task's state: running, waiting (on live ids), ready, completing, blocked (reason)."""
    tasks = [
        task(50, status=TaskStatus.WAITING, on=(TaskId(51), TaskId(60)), checkpoint={"phase": "collect"}),
        task(51, "part", phase="run", owner=TaskId(50)),
        task(52, "ghost"),
        task(53, status=TaskStatus.COMPLETING, outcome=done(), checkpoint={"phase": "finish"}),
        task(54, "part", phase="run", owner=TaskId(53)),
        task(55, version=9),
    ]
    paused = opened(tasks, resume=False)
    by_id = {i.task_id: i for i in inspect_tasks(paused)}
    assert (by_id[50].state, by_id[50].on, by_id[50].phase) == ("waiting", (51,), "collect")
    assert by_id[51].state == "ready"
    assert (by_id[52].state, by_id[52].reason) == ("blocked", "missing_task")
    assert by_id[53].state == "completing"
    assert (by_id[55].state, by_id[55].reason) == ("blocked", "task_too_old")
    live = step(paused, Resumed(now=1)).state
    by_id = {i.task_id: i for i in inspect_tasks(live)}
    assert by_id[51].state == "running" and by_id[54].state == "running"
    assert by_id[52].state == "blocked" and by_id[50].state == "waiting"
