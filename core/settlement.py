"""Settlement: outcomes, abort marks, faults and the cleanup after them.

Theory of operation
-------------------
Every task outcome is recorded by :func:`finish_task`: terminal at once, or
held ``completing`` while the task still owns live work (cancellation.py drains
it later). A non-completed outcome releases ``failFast`` waiters' siblings.

An abort is a durable *mark* (:func:`mark`): a running invocation is cancelled
(``Cancel``) and the task goes back to pending; its abort handler runs later,
bottom-up. A *fault* (:func:`fault`) is the scheduler-written outcome for a
broken contract: the task ends ``faulted`` and :func:`cleanup` settles what it
was responsible for (its run's inputs ``unanswered``, its tool slot ``done``).

Invariants: a task's outcome is written once (``finish_task`` on a live task
only); every status move goes through lifecycle.py's table (a pending or
waiting task finishes by its own row, never through ``reserve``).

Must not touch: phases (the kinds' tables decide what comes next), the inbox.
"""

from __future__ import annotations

import attrs

from .live import LiveMove, live_to
from .draft import Tx
from .effects import Cancel
from .events import InvocationFailed
from .lifecycle import SlotMove, TaskMove, move_task, slot_to, task_to
from .model import Outcome, OutcomeStatus, Reason, SubmissionStatus, Task, TaskStatus, WaitPolicy
from .ownership import has_owned_work
from .runs import end_run


# Members read once: every outcome uses them (a member read through its
# enum class goes through EnumType's __getattr__ hook: ~1,000 machine
# instructions, where a global is ~20).
_COMPLETED, _HOLD, _FINISH = OutcomeStatus.COMPLETED, TaskMove.HOLD, TaskMove.FINISH


def finish_task(tx: Tx, task: Task, outcome: Outcome) -> Task:
    """Record ``task``'s outcome (memos are dropped). Terminal at once, or
    held ``completing`` while it still owns live work (it becomes terminal when
    that work drains). A failure releases failFast siblings' waiters."""
    if has_owned_work(tx, task.id):
        done = task_to(task, _HOLD, outcome=outcome, memos=None)
    else:
        done = move_task(task, _FINISH, {"outcome": outcome, "memos": None, "ended_at": tx.now})
    tx.put_task(done)
    if outcome.status is not _COMPLETED:
        fail_fast(tx, done)
    return done


def fail_fast(tx: Tx, failed: Task) -> None:
    """A task failed: every waiter with policy failFast whose ``on`` holds it
    gets the other live members of ``on`` abort-marked (not itself)."""
    # its waiters from the reverse index (index.py), not a walk of every live task
    for waiter in [tx.tasks[t] for t in sorted(tx.index.waiters.get(failed.id, ())) if t in tx.tasks]:
        if (
            waiter.status is TaskStatus.WAITING
            and waiter.policy == WaitPolicy.FAIL_FAST
            and failed.id in waiter.on
        ):
            for tid in waiter.on:
                other = tx.tasks.get(tid)
                if other is not None and other.id != failed.id and not other.abort_requested and other.outcome is None:
                    mark(tx, other)


def mark(tx: Tx, task: Task) -> Task:
    """Set the durable abort mark; a running invocation is cancelled (the
    task goes back to pending and its abort handler runs later, bottom-up)."""
    if task.abort_requested:
        return task
    if task.status is TaskStatus.RUNNING:
        marked = task_to(task, TaskMove.INTERRUPT, abort_requested=True)
        tx.act(Cancel(task_id=task.id))
    else:
        marked = attrs.evolve(task, abort_requested=True)
    tx.put_task(marked)
    return marked


def fault(tx: Tx, task: Task, message: str) -> None:
    """Scheduler-written outcome for a broken contract (unknown phase, a bad
    event): the task ends ``faulted``; a run it was responsible for ends with
    its inputs ``unanswered/faulted``; a tool slot is marked done without an
    entry (the model context later synthesizes the missing result)."""
    cleanup(tx, task, reason=Reason.FAULTED, detail=message)
    finish_task(tx, task, Outcome(status=OutcomeStatus.FAULTED, error={"message": message}))


def on_invocation_failed(tx: Tx, ev: InvocationFailed) -> None:
    """The shell could not interpret an effect of this task (a bug, or a
    value it cannot handle): the task faults; the run it was responsible for
    settles ``unanswered/faulted``. A stale report (task gone) is ignored."""
    task = tx.tasks.get(ev.task_id)
    if task is None or task.outcome is not None:
        return
    tx.invocations = tx.invocations - {ev.task_id}
    tx.touch(ev.task_id)
    fault(tx, task, ev.message)


def cleanup(tx: Tx, task: Task, *, reason: Reason, detail: str | None) -> None:
    """Harness cleanup for a scheduler-written outcome (faulted, orphaned):
    a run the task was responsible for ends with its inputs unanswered; a
    tool slot is settled without an entry."""
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=reason, detail=detail)
    live = tx.conversations[task.conversation_id].live
    if live.tools is not None and any(s.task_id == task.id for s in live.tools):
        tools = tuple(slot_to(s, SlotMove.SETTLE) if s.task_id == task.id else s for s in live.tools)
        tx.set_live(task.conversation_id, live_to(live, LiveMove.SLOT, tools=tools))
