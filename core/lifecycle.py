"""The two status machines: tasks and submissions, as tables.

Theory of operation
-------------------
Every status change of a task or a submission in the core goes through
:func:`task_to` or :func:`submission_to`, which look the move up in the tables
below. A move that is not a row is a bug and raises
:class:`~pidurable.core.model.CoreInvariantError` loudly; nothing changes status
by assigning a field directly. The tables are also what the docs' state
diagrams and the totality tests are generated from.

Task inputs
- ``reserve``: the scheduler starts an invocation (pending, or waiting whose
  ``on`` is all terminal).
- ``checkpoint``: a running task stores a new checkpoint (stays running).
- ``wait``: a running task parks on ``on`` (policy allSettled).
- ``finish``: a task records its outcome (running -> terminal; pending ->
  terminal only for settlement decided without running any code).
- ``recover``: a new process opened the store (running -> pending, checkpoint
  unchanged; everything else stays).
- ``interrupt``: an abort mark cancelled the running invocation (running ->
  pending; the abort handler runs once the task's owned work drained).
- ``hold``: an outcome while owned work is still live -> completing.
- ``drain``: a completing task's owned work is gone -> terminal.

Submission inputs
- ``admit_idle`` / ``admit_busy``: accepted on an idle / busy conversation.
- ``place``: a boundary placed a queued input.
- ``answer``: the run answered it. ``fail``: the run ended without an answer.
- ``withdraw``: removed from the queue (an abort).
- ``admit_write``: a passive write on an idle conversation, appended at once.
- ``append``: a queued passive write's entry was appended at a boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .model import (
    CoreInvariantError,
    Outcome,
    Submission,
    SubmissionStatus,
    Task,
    TaskStatus,
)

P, R, W, C, T = (
    TaskStatus.PENDING,
    TaskStatus.RUNNING,
    TaskStatus.WAITING,
    TaskStatus.COMPLETING,
    TaskStatus.TERMINAL,
)

TASK_INPUTS = ("reserve", "checkpoint", "wait", "finish", "recover", "interrupt", "hold", "drain")

TASK_TRANSITIONS: Mapping[tuple[TaskStatus, str], TaskStatus] = {
    (P, "reserve"): R,
    (W, "reserve"): R,
    (R, "checkpoint"): R,
    (R, "wait"): W,
    (R, "finish"): T,
    (P, "finish"): T,
    (P, "recover"): P,
    (R, "recover"): P,
    (W, "recover"): W,
    (C, "recover"): C,
    (R, "interrupt"): P,
    (R, "hold"): C,
    (P, "hold"): C,
    (C, "drain"): T,
}
# Not in the table: every move out of TERMINAL (a terminal task never changes);
# COMPLETING is left only by draining (its outcome is already decided).

_NEW = None  # a submission that does not exist yet
SQ, SP, SD, SU = (
    SubmissionStatus.QUEUED,
    SubmissionStatus.PLACED,
    SubmissionStatus.DONE,
    SubmissionStatus.UNANSWERED,
)

SUBMISSION_INPUTS = ("admit_idle", "admit_busy", "place", "answer", "fail", "withdraw", "append", "admit_write")

SUBMISSION_TRANSITIONS: Mapping[tuple[SubmissionStatus | None, str], SubmissionStatus] = {
    (_NEW, "admit_idle"): SP,
    (_NEW, "admit_busy"): SQ,
    (SQ, "place"): SP,
    (SP, "answer"): SD,
    (SP, "fail"): SU,
    (SQ, "withdraw"): SU,
    (_NEW, "admit_write"): SD,
    (SQ, "append"): SD,
}
# Not in the table: every move out of DONE/UNANSWERED (settled is final; a
# second settlement is ignored by the caller, never written).


def next_task_status(status: TaskStatus, move: str) -> TaskStatus:
    try:
        return TASK_TRANSITIONS[(status, move)]
    except KeyError:
        raise CoreInvariantError(f"task move {move!r} from {status.value!r} is not a transition") from None


def next_submission_status(status: SubmissionStatus | None, move: str) -> SubmissionStatus:
    try:
        return SUBMISSION_TRANSITIONS[(status, move)]
    except KeyError:
        cur = "new" if status is None else status.value
        raise CoreInvariantError(f"submission move {move!r} from {cur!r} is not a transition") from None


def task_to(task: Task, move: str, **changes: Any) -> Task:
    """``task`` after ``move`` (checked against the table) and field changes."""
    status = next_task_status(task.status, move)
    if status in (TaskStatus.TERMINAL, TaskStatus.COMPLETING) and not isinstance(
        changes.get("outcome", task.outcome), Outcome
    ):
        raise CoreInvariantError(f"task {task.id} cannot finish without an outcome")
    if status is not TaskStatus.WAITING and "on" not in changes:
        changes["on"] = ()
    return attrs.evolve(task, status=status, **changes)


def submission_to(sub: Submission, move: str, **changes: Any) -> Submission:
    return attrs.evolve(sub, status=next_submission_status(sub.status, move), **changes)
