"""The task, submission and tool-slot status tables are total: every (status, input) is a row or a loud error."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis.strategies import sampled_from

from pidurable.core.lifecycle import (
    SLOT_TRANSITIONS,
    SUBMISSION_INPUTS,
    SUBMISSION_TRANSITIONS,
    TASK_INPUTS,
    TASK_TRANSITIONS,
    SlotMove,
    TaskMove,
    next_slot_status,
    next_submission_status,
    next_task_status,
    slot_to,
    submission_to,
    move_task,
    task_to,
)
from pidurable.core.model import (
    SETTLED_SUBMISSION,
    ConversationId,
    CoreInvariantError,
    Outcome,
    OutcomeStatus,
    Submission,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    WaitPolicy,
)
from pidurable.core.state import SlotStatus, ToolSlot

LIVE_STATUSES = [s for s in TaskStatus if s is not TaskStatus.TERMINAL]


def a_task(status: TaskStatus, **kw: object) -> Task:
    outcome = Outcome(status=OutcomeStatus.COMPLETED) if status is TaskStatus.TERMINAL else None
    return Task(
        id=TaskId(7),
        conversation_id=ConversationId(1),
        kind="pi.generation",
        status=status,
        outcome=outcome,
        checkpoint={"phase": "request", "attempt": 1},
        **kw,  # type: ignore[arg-type]
    )


def a_submission(status: SubmissionStatus) -> Submission:
    return Submission(id=SubmissionId(3), conversation_id=ConversationId(1), type="input", status=status)


# --- tasks -------------------------------------------------------------------


def test_task_table_uses_only_known_inputs() -> None:
    """Every row of the task table names a declared input and a real status."""
    for (status, move), target in TASK_TRANSITIONS.items():
        assert move in TASK_INPUTS
        assert isinstance(status, TaskStatus) and isinstance(target, TaskStatus)


@given(sampled_from(TaskStatus), sampled_from(TASK_INPUTS))
def test_task_moves_are_total(status: TaskStatus, move: str) -> None:
    """A task move is either a row of the table (and ``task_to`` applies it) or raises CoreInvariantError."""
    task = a_task(status)
    outcome = Outcome(status=OutcomeStatus.FAILED)
    if (status, move) in TASK_TRANSITIONS:
        target = TASK_TRANSITIONS[(status, move)]
        assert next_task_status(status, move) is target
        needs_outcome = target in (TaskStatus.TERMINAL, TaskStatus.COMPLETING)
        moved = task_to(task, move, outcome=outcome) if needs_outcome else task_to(task, move)
        assert moved.status is target
        assert moved.checkpoint == task.checkpoint  # a bare move never touches the checkpoint
    else:
        with pytest.raises(CoreInvariantError):
            next_task_status(status, move)
        with pytest.raises(CoreInvariantError):
            task_to(task, move, outcome=outcome)


@given(sampled_from(TASK_INPUTS))
def test_no_move_out_of_terminal(move: str) -> None:
    """A terminal task never changes: every input from TERMINAL is refused."""
    assert (TaskStatus.TERMINAL, move) not in TASK_TRANSITIONS
    with pytest.raises(CoreInvariantError, match="not a transition"):
        task_to(a_task(TaskStatus.TERMINAL), move, outcome=Outcome(status=OutcomeStatus.COMPLETED))


@given(sampled_from(LIVE_STATUSES))
def test_recover_is_defined_for_every_live_status_and_never_leaves_a_task_running(status: TaskStatus) -> None:
    """Opening a store can recover any live task, and no task is still ``running`` after recovery."""
    target = next_task_status(status, "recover")
    assert target is not TaskStatus.RUNNING
    assert target is not TaskStatus.TERMINAL
    if status is not TaskStatus.RUNNING:
        assert target is status  # only running tasks change


def test_only_finish_reaches_terminal_and_only_reserve_starts_running() -> None:
    """TERMINAL is entered only by ``finish`` (or ``drain``, from a held
    COMPLETING outcome) and RUNNING only by ``reserve`` (or staying running)."""
    for (status, move), target in TASK_TRANSITIONS.items():
        if target is TaskStatus.TERMINAL:
            assert move == "finish" or (move == "drain" and status is TaskStatus.COMPLETING)
        if target is TaskStatus.RUNNING and status is not TaskStatus.RUNNING:
            assert move == "reserve"


@pytest.mark.parametrize("status", [TaskStatus.PENDING, TaskStatus.RUNNING])
def test_task_to_requires_an_outcome_to_finish(status: TaskStatus) -> None:
    """Finishing a task without an Outcome (missing or of the wrong type) is a loud bug, not a silent terminal."""
    task = a_task(status)
    with pytest.raises(CoreInvariantError, match="without an outcome"):
        task_to(task, "finish")
    with pytest.raises(CoreInvariantError, match="without an outcome"):
        task_to(task, "finish", outcome={"status": "completed"})
    done = task_to(task, "finish", outcome=Outcome(status=OutcomeStatus.COMPLETED))
    assert done.status is TaskStatus.TERMINAL and done.outcome is not None


def test_task_to_keeps_on_only_while_waiting() -> None:
    """``on`` is kept by a move into WAITING and cleared by any move out of it."""
    running = a_task(TaskStatus.RUNNING)
    waiting = task_to(running, "wait", on=(TaskId(8), TaskId(9)))
    assert waiting.status is TaskStatus.WAITING and waiting.on == (8, 9)
    resumed = task_to(waiting, "reserve")
    assert resumed.status is TaskStatus.RUNNING and resumed.on == ()


def test_task_to_does_not_mutate_its_argument() -> None:
    """``task_to`` returns a new record and leaves the old one as it was."""
    task = a_task(TaskStatus.PENDING)
    before = repr(task)
    task_to(task, "reserve", checkpoint={"phase": "request", "attempt": 2})
    assert repr(task) == before


def test_move_task_is_task_to_with_its_changes_in_one_mapping() -> None:
    """Every field the mapping names is changed as task_to's keywords would
    (on cleared by a move out of waiting that names none); a name that is no
    field is refused."""
    running = a_task(TaskStatus.RUNNING, started_at=5)
    changes = {"checkpoint": {"phase": "tools"}, "on": (TaskId(8),), "memos": {"m": 1}}
    assert move_task(running, TaskMove.WAIT, changes) == task_to(running, TaskMove.WAIT, **changes)
    assert move_task(running, TaskMove.INTERRUPT, changes) == task_to(running, TaskMove.INTERRUPT, **changes)
    waiting = move_task(running, TaskMove.WAIT, changes)
    assert move_task(waiting, TaskMove.RESERVE, {}).on == () == task_to(waiting, TaskMove.RESERVE).on
    assert changes == {"checkpoint": {"phase": "tools"}, "on": (TaskId(8),), "memos": {"m": 1}}  # not mutated
    with pytest.raises(TypeError, match="cannot set"):
        move_task(running, TaskMove.CHECKPOINT, {"colour": "red"})


# --- submissions -------------------------------------------------------------


SUB_STATUSES: list[SubmissionStatus | None] = [None, *SubmissionStatus]


@given(sampled_from(SUB_STATUSES), sampled_from(SUBMISSION_INPUTS))
def test_submission_moves_are_total(status: SubmissionStatus | None, move: str) -> None:
    """A submission move is either a row of the table or raises CoreInvariantError."""
    if (status, move) in SUBMISSION_TRANSITIONS:
        target = SUBMISSION_TRANSITIONS[(status, move)]
        assert next_submission_status(status, move) is target
        if status is not None:
            assert submission_to(a_submission(status), move).status is target
    else:
        with pytest.raises(CoreInvariantError):
            next_submission_status(status, move)
        if status is not None:
            with pytest.raises(CoreInvariantError):
                submission_to(a_submission(status), move)


@given(sampled_from(sorted(SETTLED_SUBMISSION)), sampled_from(SUBMISSION_INPUTS))
def test_no_move_out_of_settled(status: SubmissionStatus, move: str) -> None:
    """A settled submission (done/unanswered) is final: every further move is refused."""
    with pytest.raises(CoreInvariantError, match="not a transition"):
        submission_to(a_submission(status), move)


def test_submissions_are_born_only_by_admission() -> None:
    """Only ``admit_*`` creates a submission, and admission never applies to an existing one."""
    for (status, move) in SUBMISSION_TRANSITIONS:
        assert (status is None) == move.startswith("admit_")
    assert next_submission_status(None, "admit_idle") is SubmissionStatus.PLACED
    assert next_submission_status(None, "admit_busy") is SubmissionStatus.QUEUED


def test_only_placed_inputs_are_answered() -> None:
    """``answer`` and ``fail`` settle only a placed submission: a queued one must be placed or withdrawn first."""
    with pytest.raises(CoreInvariantError):
        next_submission_status(SubmissionStatus.QUEUED, "answer")
    with pytest.raises(CoreInvariantError):
        next_submission_status(SubmissionStatus.QUEUED, "fail")
    assert next_submission_status(SubmissionStatus.PLACED, "answer") is SubmissionStatus.DONE
    assert next_submission_status(SubmissionStatus.PLACED, "fail") is SubmissionStatus.UNANSWERED


# --- moves that used to be reached through other moves --------------------------


@pytest.mark.parametrize("status", [TaskStatus.PENDING, TaskStatus.WAITING])
def test_pending_and_waiting_tasks_settle_by_their_own_rows(status: TaskStatus) -> None:
    """A task whose outcome is decided without running code (an abort
    handler, a fault, a finished tool round) finishes or is held straight
    from pending/waiting - never via ``reserve``."""
    outcome = Outcome(status=OutcomeStatus.ABORTED)
    assert task_to(a_task(status), TaskMove.FINISH, outcome=outcome).status is TaskStatus.TERMINAL
    assert task_to(a_task(status), TaskMove.HOLD, outcome=outcome).status is TaskStatus.COMPLETING


def test_retry_and_release_return_a_running_task_to_pending() -> None:
    """A backoff that ended (``retry``) and a custom phase whose definition
    went away (``release``) are their own moves, not ``interrupt``."""
    for move in (TaskMove.RETRY, TaskMove.RELEASE, TaskMove.INTERRUPT):
        assert next_task_status(TaskStatus.RUNNING, move) is TaskStatus.PENDING
        with pytest.raises(CoreInvariantError):
            next_task_status(TaskStatus.WAITING, move)


def test_a_waiting_task_can_wait_again() -> None:
    """A sequential round's generation moves on to the next call's task
    without leaving ``waiting``."""
    waiting = task_to(a_task(TaskStatus.RUNNING), TaskMove.WAIT, on=(TaskId(8),))
    again = task_to(waiting, TaskMove.WAIT, on=(TaskId(9),))
    assert again.status is TaskStatus.WAITING and again.on == (9,)


# --- tool slots -------------------------------------------------------------------

SLOT_STATUSES: list[SlotStatus | None] = [None, *SlotStatus]


@given(sampled_from(SLOT_STATUSES), sampled_from(SlotMove))
def test_slot_moves_are_total(status: SlotStatus | None, move: SlotMove) -> None:
    """A slot move is either a row of the slot table or raises CoreInvariantError."""
    if (status, move) in SLOT_TRANSITIONS:
        target = SLOT_TRANSITIONS[(status, move)]
        assert next_slot_status(status, move) is target
        if status is not None:
            assert slot_to(ToolSlot(call_id="c1", name="t", status=status), move).status is target
    else:
        with pytest.raises(CoreInvariantError, match="not a transition"):
            next_slot_status(status, move)
        if status is not None:
            with pytest.raises(CoreInvariantError):
                slot_to(ToolSlot(call_id="c1", name="t", status=status), move)


def test_a_settled_slot_never_moves_and_only_settle_reaches_done() -> None:
    """DONE is final and entered only by ``settle``."""
    for (status, move), target in SLOT_TRANSITIONS.items():
        assert status is not SlotStatus.DONE
        assert (target is SlotStatus.DONE) == (move is SlotMove.SETTLE)


@given(sampled_from(sorted(TASK_TRANSITIONS, key=str)))
def test_task_to_is_attrs_evolve_with_the_rows_status(row: tuple[TaskStatus, TaskMove]) -> None:
    """task_to builds the moved task with every field spelt out (lifecycle._moved):
    the same copy attrs.evolve makes, whatever the move changes."""
    status, move = row
    task = Task(
        id=TaskId(5), conversation_id=ConversationId(1), kind="pi.tool", owner=TaskId(2), input={"a": 1},
        status=status, checkpoint={"phase": "call"}, on=(TaskId(3),), memos={"m": 1}, started_at=4,
    )
    changes = {"outcome": Outcome(status=OutcomeStatus.COMPLETED), "memos": None, "ended_at": 9, "checkpoint": {"phase": "x"}}
    after = TASK_TRANSITIONS[row]
    moved = task_to(task, move, **changes)
    on = {} if after is TaskStatus.WAITING else {"on": ()}
    assert moved == attrs.evolve(task, status=after, **changes, **on)
    assert attrs.asdict(moved, recurse=False) == attrs.asdict(attrs.evolve(task, status=after, **changes, **on), recurse=False)


@pytest.mark.parametrize(
    "changes",
    [
        {"abort_requested": True, "on": (TaskId(7),), "policy": WaitPolicy.FAIL_FAST, "started_at": 1},
        {"kind": "other", "version": 3, "input": {"b": 2}, "owner": None, "background": True},
        {"id": TaskId(6), "conversation_id": ConversationId(2), "checkpoint": {"phase": "y"}},
    ],
)
def test_task_to_copies_every_changeable_field(changes: dict[str, Any]) -> None:
    """A move naming only fields the core's moves change (lifecycle._MOVED)
    takes the spelt-out copy, one naming any other field goes through
    evolve: either way the copy attrs.evolve makes."""
    task = Task(
        id=TaskId(5), conversation_id=ConversationId(1), kind="pi.tool", owner=TaskId(2), input={"a": 1},
        status=TaskStatus.RUNNING, checkpoint={"phase": "call"}, memos={"m": 1}, started_at=4,
    )
    for move in (TaskMove.WAIT, TaskMove.CHECKPOINT):
        after = TASK_TRANSITIONS[(TaskStatus.RUNNING, move)]
        on = {} if after is TaskStatus.WAITING or "on" in changes else {"on": ()}
        expected = attrs.evolve(task, status=after, **changes, **on)
        moved = task_to(task, move, **changes)
        assert attrs.asdict(moved, recurse=False) == attrs.asdict(expected, recurse=False)


def test_task_to_refuses_an_unknown_field_or_a_status() -> None:
    task = Task(id=TaskId(5), conversation_id=ConversationId(1), kind="k")
    with pytest.raises(TypeError):
        task_to(task, TaskMove.RESERVE, nonsense=1)
    with pytest.raises(TypeError):
        task_to(task, TaskMove.RESERVE, status=TaskStatus.TERMINAL)


@pytest.mark.parametrize("row", sorted(SLOT_TRANSITIONS, key=str))
def test_slot_to_is_attrs_evolve_with_the_rows_status(row: tuple[SlotStatus | None, SlotMove]) -> None:
    """slot_to builds the moved slot with every field spelt out: the same copy
    attrs.evolve makes; an unknown field or a status is refused."""
    status, move = row
    if status is None:
        return  # a slot is born at its row's status (rounds.py), not moved
    slot = ToolSlot(call_id="c", name="t", task_id=TaskId(4), status=status, output="so far")
    changes = {"entry_id": 7, "output": None, "control": {"terminate": True}}
    moved = slot_to(slot, move, **changes)
    expected = attrs.evolve(slot, status=SLOT_TRANSITIONS[row], **changes)
    assert attrs.asdict(moved, recurse=False) == attrs.asdict(expected, recurse=False)
    with pytest.raises(TypeError):
        slot_to(slot, move, nonsense=1)
    with pytest.raises(TypeError):
        slot_to(slot, move, status=SlotStatus.DONE)
