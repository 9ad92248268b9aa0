"""The status machines: tasks, submissions and tool slots, as tables.

Theory of operation
-------------------
Every status change of a task, a submission or a tool slot in the core goes
through :func:`task_to` (or :func:`move_task`: the same, its changes in one
mapping), :func:`submission_to` or :func:`slot_to`, which look the move up in
the tables below. A move that is not a row is a bug and raises
:class:`~pidurable.core.model.CoreInvariantError` loudly; nothing changes
status by assigning a field directly, and no code reaches a legal move through
another one (a move that happens has its own row). The state diagrams in
``specs/diagrams.md`` are generated from these tables (``specs/diagrams.py``)
and the totality tests sample every (status, input) pair.

Each input is a :class:`TaskMove` / :class:`SubmissionMove` / :class:`SlotMove`
member; its ``#:`` comment says when it happens.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .record_makers import made_Task, new_ToolSlot  # (X(...) without the type call's dict: issue 11 item 2)
from .model import (
    CoreInvariantError,
    Outcome,
    Submission,
    SubmissionStatus,
    Task,
    TaskStatus,
)
from .records import evolve, refuse_changes, spelt_out
from .state import SlotStatus, ToolSlot


class TaskMove(enum.StrEnum):
    """The inputs of the task status machine."""

    #: The scheduler starts an invocation (pending, or waiting whose ``on``
    #: is all terminal).
    RESERVE = "reserve"
    #: A running task stores a new checkpoint (stays running).
    CHECKPOINT = "checkpoint"
    #: A task parks on ``on``: a running one, or a waiting one that moves on
    #: to the next batch (a sequential tool round's next call).
    WAIT = "wait"
    #: A task records its outcome and nothing it owns is live: terminal.
    #: From pending/waiting when the outcome is decided without running task
    #: code (an abort handler, a fault, a finished tool round's hand-over).
    FINISH = "finish"
    #: A new process opened the store (running -> pending, checkpoint
    #: unchanged; everything else stays).
    RECOVER = "recover"
    #: The running invocation was cancelled (an abort mark, or the shell
    #: cancelled it): back to pending; the abort handler runs once the
    #: task's owned work drained.
    INTERRUPT = "interrupt"
    #: A running generation's retry backoff ended: back to pending at its
    #: next attempt (the pass prepares it again at once).
    RETRY = "retry"
    #: A running custom task's phase returned with progress but its next
    #: phase cannot run (its definition went away): back to pending, blocked.
    RELEASE = "release"
    #: An outcome while owned work is still live -> completing.
    HOLD = "hold"
    #: A completing task's owned work is gone -> terminal.
    DRAIN = "drain"


P, R, W, C, T = (
    TaskStatus.PENDING,
    TaskStatus.RUNNING,
    TaskStatus.WAITING,
    TaskStatus.COMPLETING,
    TaskStatus.TERMINAL,
)
_M = TaskMove

TASK_TRANSITIONS: Mapping[tuple[TaskStatus, TaskMove], TaskStatus] = {
    (P, _M.RESERVE): R,
    (W, _M.RESERVE): R,
    (R, _M.CHECKPOINT): R,
    (R, _M.WAIT): W,
    (W, _M.WAIT): W,
    (R, _M.FINISH): T,
    (P, _M.FINISH): T,
    (W, _M.FINISH): T,
    (P, _M.RECOVER): P,
    (R, _M.RECOVER): P,
    (W, _M.RECOVER): W,
    (C, _M.RECOVER): C,
    (R, _M.INTERRUPT): P,
    (R, _M.RETRY): P,
    (R, _M.RELEASE): P,
    (R, _M.HOLD): C,
    (P, _M.HOLD): C,
    (W, _M.HOLD): C,
    (C, _M.DRAIN): T,
}
#: Kept for callers that list the inputs (tests, diagrams).
TASK_INPUTS: tuple[TaskMove, ...] = tuple(TaskMove)
# Not in the table: every move out of TERMINAL (a terminal task never changes);
# COMPLETING is left only by draining (its outcome is already decided).


class SubmissionMove(enum.StrEnum):
    """The inputs of the submission status machine."""

    #: An input accepted on an idle conversation (placed at once).
    ADMIT_IDLE = "admit_idle"
    #: An input or write accepted on a busy conversation (queued).
    ADMIT_BUSY = "admit_busy"
    #: A boundary placed a queued input.
    PLACE = "place"
    #: The run answered it.
    ANSWER = "answer"
    #: The run ended without an answer.
    FAIL = "fail"
    #: Removed from the queue (an abort).
    WITHDRAW = "withdraw"
    #: A queued passive write's entry was appended at a boundary.
    APPEND = "append"
    #: A passive write on an idle conversation, appended at once.
    ADMIT_WRITE = "admit_write"
    #: A queued write whose head marker is older than the current range
    #: start is settled without an entry (``unanswered/stale``).
    STALE = "stale"
    #: The same, for a write admitted on an idle conversation.
    ADMIT_STALE = "admit_stale"


_NEW = None  # a submission that does not exist yet
SQ, SP, SD, SU = (
    SubmissionStatus.QUEUED,
    SubmissionStatus.PLACED,
    SubmissionStatus.DONE,
    SubmissionStatus.UNANSWERED,
)
_S = SubmissionMove

SUBMISSION_TRANSITIONS: Mapping[tuple[SubmissionStatus | None, SubmissionMove], SubmissionStatus] = {
    (_NEW, _S.ADMIT_IDLE): SP,
    (_NEW, _S.ADMIT_BUSY): SQ,
    (SQ, _S.PLACE): SP,
    (SP, _S.ANSWER): SD,
    (SP, _S.FAIL): SU,
    (SQ, _S.WITHDRAW): SU,
    (_NEW, _S.ADMIT_WRITE): SD,
    (SQ, _S.APPEND): SD,
    (_NEW, _S.ADMIT_STALE): SU,
    (SQ, _S.STALE): SU,
}
SUBMISSION_INPUTS: tuple[SubmissionMove, ...] = tuple(SubmissionMove)
# Not in the table: every move out of DONE/UNANSWERED (settled is final; a
# second settlement is ignored by the caller, never written).


class SlotMove(enum.StrEnum):
    """The inputs of a tool slot (``pi.live.tools[i].status``)."""

    #: The round lists a call whose intent is not stored yet (its tool task
    #: is at ``call``, or a sequential call has no task yet).
    OPEN = "open"
    #: The call's ``execute`` intent is stored (by ``ToolPrepared``, or at
    #: birth for a call the shell prepared with the model's answer).
    START = "start"
    #: The call is settled: its result entry was written, or its task ended
    #: without one (a fault, an orphan; the context synthesizes a result).
    SETTLE = "settle"
    #: The running body reported output (or a re-run cleared the old one).
    OUTPUT = "output"


SLOT_TRANSITIONS: Mapping[tuple[SlotStatus | None, SlotMove], SlotStatus] = {
    (None, SlotMove.OPEN): SlotStatus.PENDING,
    (None, SlotMove.START): SlotStatus.RUNNING,
    (SlotStatus.PENDING, SlotMove.START): SlotStatus.RUNNING,
    (SlotStatus.PENDING, SlotMove.SETTLE): SlotStatus.DONE,
    (SlotStatus.RUNNING, SlotMove.SETTLE): SlotStatus.DONE,
    (SlotStatus.RUNNING, SlotMove.OUTPUT): SlotStatus.RUNNING,
}
# Not in the table: every move out of DONE (a call is settled once),
# RUNNING -START-> RUNNING (an intent is stored once), and output of a call
# that is not running (a stale report).


def next_task_status(status: TaskStatus, move: TaskMove) -> TaskStatus:
    try:
        return TASK_TRANSITIONS[(status, move)]
    except KeyError:
        raise CoreInvariantError(f"task move {move!r} from {status.value!r} is not a transition") from None


def next_submission_status(status: SubmissionStatus | None, move: SubmissionMove) -> SubmissionStatus:
    try:
        return SUBMISSION_TRANSITIONS[(status, move)]
    except KeyError:
        cur = "new" if status is None else status.value
        raise CoreInvariantError(f"submission move {move!r} from {cur!r} is not a transition") from None


def next_slot_status(status: SlotStatus | None, move: SlotMove) -> SlotStatus:
    try:
        return SLOT_TRANSITIONS[(status, move)]
    except KeyError:
        cur = "new" if status is None else status.value
        raise CoreInvariantError(f"tool slot move {move!r} from {cur!r} is not a transition") from None


def task_to(task: Task, move: TaskMove, **changes: Any) -> Task:
    """``task`` after ``move`` (checked against the table) and field changes:
    ``evolve(task, status=..., **changes)`` with every field spelt out (the
    same copy; an unknown name is a ``TypeError`` as there), without evolve's
    dict of every field - a step moves a task two or three times."""
    return move_task(task, move, changes)


def move_task(task: Task, move: TaskMove, changes: Mapping[str, Any]) -> Task:
    """``task_to`` with its changes as one mapping (no keyword dict rebuilt
    by a caller that has them in one already)."""
    status = TASK_TRANSITIONS.get((task.status, move))
    if status is None:
        status = next_task_status(task.status, move)  # raises: not a transition
    if (status is T or status is C) and not isinstance(changes.get("outcome", task.outcome), Outcome):
        raise CoreInvariantError(f"task {task.id} cannot finish without an outcome")
    c = changes
    if not _MOVED.issuperset(c):  # a field no move of the core changes: the same copy, through evolve
        if not _CHANGEABLE.issuperset(c):
            refuse_changes(_CHANGEABLE, c, "a task move")
        return evolve(task, **{"on": task.on if status is W else (), **c, "status": status})
    # each field a move may change: the change if one is named (an ``in``
    # test, where .get would be a call); the rest as they are. Every field by
    # position, in _TASK_FIELDS' order (16 named would be a dict: records.py)
    return made_Task(
        task.id,
        task.conversation_id,
        task.kind,
        task.version,
        task.input,
        task.owner,
        task.background,
        c["abort_requested"] if "abort_requested" in c else task.abort_requested,
        status,
        c["checkpoint"] if "checkpoint" in c else task.checkpoint,
        c["on"] if "on" in c else task.on if status is W else (),  # only a waiting task waits on anything
        c["policy"] if "policy" in c else task.policy,
        c["outcome"] if "outcome" in c else task.outcome,
        c["memos"] if "memos" in c else task.memos,
        c["started_at"] if "started_at" in c else task.started_at,
        c["ended_at"] if "ended_at" in c else task.ended_at,
    )


#: Task's fields, in the order ``move_task`` gives them (checked here: a field
#: added to Task must be added there too, or a move would drop it).
_TASK_FIELDS = (
    "id", "conversation_id", "kind", "version", "input", "owner", "background", "abort_requested",
    "status", "checkpoint", "on", "policy", "outcome", "memos", "started_at", "ended_at",
)
#: What a move may change besides the status it decides.
_CHANGEABLE = spelt_out(Task, _TASK_FIELDS) - {"status"}
#: What the core's moves change (``move_task`` tests only these by name;
#: a move changing any other field is copied through ``evolve``).
_MOVED = frozenset({"abort_requested", "checkpoint", "on", "policy", "outcome", "memos", "started_at", "ended_at"})
assert _MOVED <= _CHANGEABLE


def submission_to(sub: Submission, move: SubmissionMove, **changes: Any) -> Submission:
    return evolve(sub, status=next_submission_status(sub.status, move), **changes)


def slot_to(slot: ToolSlot, move: SlotMove, **changes: Any) -> ToolSlot:
    """``slot`` after ``move`` (checked against the slot table)."""
    status = SLOT_TRANSITIONS.get((slot.status, move))
    if status is None:
        status = next_slot_status(slot.status, move)  # raises: not a transition
    if not _SLOT_CHANGEABLE.issuperset(changes):
        refuse_changes(_SLOT_CHANGEABLE, changes, "a slot move")
    c = changes  # every field spelt out, as task_to does for a task
    return new_ToolSlot(
        call_id=c["call_id"] if "call_id" in c else slot.call_id,
        name=c["name"] if "name" in c else slot.name,
        task_id=c["task_id"] if "task_id" in c else slot.task_id,
        status=status,
        entry_id=c["entry_id"] if "entry_id" in c else slot.entry_id,
        output=c["output"] if "output" in c else slot.output,
        control=c["control"] if "control" in c else slot.control,
    )


#: ToolSlot's fields, as ``slot_to`` spells them out (checked here).
_SLOT_FIELDS = ("call_id", "name", "task_id", "status", "entry_id", "output", "control")
_SLOT_CHANGEABLE = spelt_out(ToolSlot, _SLOT_FIELDS) - {"status"}
