"""Runs: starting one, handing it from generation to generation, ending it.

Theory of operation
-------------------
A *run* is the work from placed input(s) to the final answer. It is recorded in
the conversation's ``pi.live.run = {task_id, inputs}`` and is present exactly
while the conversation is busy. The generation task named by ``task_id`` is the
one responsible; when a tool round finishes, that generation ends and a new one
takes over (``G1 -> G2``) in ONE commit, so there is never a moment where the
run has no responsible task or two of them.

Invariants
- ``RunHasOneOwner``: ``live.run.task_id`` names a live generation task.
- ``InputsSettleOnce``: ``end_run`` settles each listed input once; a
  submission already settled is left as it is (first settlement wins).
- Only the task named by ``live.run.task_id`` may end or hand over the run.

Must not touch: the inbox (boundaries are ``inbox.py``'s), tool tasks.
"""

from __future__ import annotations

import attrs

from .effects import Cancel, Tx
from .events import InvocationFailed
from .model import (
    GENERATION,
    ConversationId,
    EntryId,
    Outcome,
    OutcomeStatus,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
)
from .lifecycle import submission_to, task_to
from .ownership import has_owned_work
from .state import Live, RunInfo

#: The first checkpoint of every generation task.
def initial_generation_checkpoint(attempt: int = 1) -> dict[str, object]:
    return {"phase": "prepare", "attempt": attempt}


def create_generation(tx: Tx, cid: ConversationId) -> Task:
    """A new conversation-owned generation task at ``prepare``."""
    task = Task(
        id=TaskId(tx.alloc_id()),
        conversation_id=cid,
        kind=GENERATION,
        status=TaskStatus.PENDING,
        checkpoint=initial_generation_checkpoint(),
    )
    tx.put_task(task)
    return task


def start_run(tx: Tx, cid: ConversationId, inputs: tuple[SubmissionId, ...]) -> Task:
    """Make the conversation busy with a new run answering ``inputs``."""
    gen = create_generation(tx, cid)
    tx.set_live(cid, Live(run=RunInfo(task_id=gen.id, inputs=inputs)))
    return gen


def owns_run(tx: Tx, task: Task) -> bool:
    run = tx.conv(task.conversation_id).live.run
    return run is not None and run.task_id == task.id


def hand_over(tx: Tx, gen: Task, assistant: EntryId, steered: tuple[SubmissionId, ...]) -> Task:
    """End ``gen`` (its tool round is finished) and give the run to a successor.

    One commit: ``gen`` terminal ``completed {entry_id: assistant}``, the
    successor created at ``prepare``, ``live.run.task_id`` switched, the round's
    slots cleared, steered inputs joined to the run.
    """
    finish_task(tx, gen, Outcome(status=OutcomeStatus.COMPLETED, result={"entry_id": assistant}))
    successor = create_generation(tx, gen.conversation_id)
    live = tx.conv(gen.conversation_id).live
    run = live.run
    assert run is not None and run.task_id == gen.id
    tx.set_live(
        gen.conversation_id,
        attrs.evolve(
            live,
            run=RunInfo(task_id=successor.id, inputs=run.inputs + steered),
            tools=None,
            attempt=None,
        ),
    )
    return successor


def end_run(
    tx: Tx,
    gen: Task,
    *,
    status: SubmissionStatus,
    answer: EntryId | None = None,
    reason: str | None = None,
    detail: str | None = None,
) -> None:
    """Settle the run's inputs and make the conversation idle.

    Does nothing unless ``gen`` is the run's responsible task.
    """
    if not owns_run(tx, gen):
        return
    live = tx.conv(gen.conversation_id).live
    assert live.run is not None
    move = "answer" if status is SubmissionStatus.DONE else "fail"
    for sid in live.run.inputs:
        sub = tx.submissions.get(sid)
        if sub is None or sub.settled:
            continue  # first settlement wins
        tx.put_submission(
            submission_to(sub, move, answer_entry_id=answer, reason=reason, detail=detail)
        )
    tx.set_live(gen.conversation_id, Live())


def finish_task(tx: Tx, task: Task, outcome: Outcome) -> Task:
    """Record ``task``'s outcome (memos are dropped). Terminal at once, or
    held ``completing`` while it still owns live work (it becomes terminal when
    that work drains). A failure releases failFast siblings' waiters."""
    if task.status is TaskStatus.WAITING:
        task = task_to(task, "reserve")
    if has_owned_work(tx.tasks, tx.conversations, task.id):
        done = task_to(task, "hold", outcome=outcome, memos=None)
    else:
        done = task_to(task, "finish", outcome=outcome, memos=None, ended_at=tx.now)
    tx.put_task(done)
    if outcome.status is not OutcomeStatus.COMPLETED:
        fail_fast(tx, done)
    return done


def fail_fast(tx: Tx, failed: Task) -> None:
    """A task failed: every waiter with policy failFast whose ``on`` holds it
    gets the other live members of ``on`` abort-marked (not itself)."""
    for waiter in list(tx.tasks.values()):
        if waiter.status is TaskStatus.WAITING and waiter.policy == "failFast" and failed.id in waiter.on:
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
        marked = task_to(task, "interrupt", abort_requested=True)
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
    if task.status is TaskStatus.PENDING or task.status is TaskStatus.WAITING:
        task = task_to(task, "reserve")
    cleanup(tx, task, reason="faulted", detail=message)
    finish_task(tx, task, Outcome(status=OutcomeStatus.FAULTED, error={"message": message}))


def on_invocation_failed(tx: Tx, ev: InvocationFailed) -> None:
    """The shell could not interpret an effect of this task (a bug, or a
    value it cannot handle): the task faults; the run it was responsible for
    settles ``unanswered/faulted``. A stale report (task gone) is ignored."""
    task = tx.tasks.get(ev.task_id)
    if task is None or task.outcome is not None:
        return
    tx.invocations = tx.invocations - {ev.task_id}
    fault(tx, task, ev.message)


def cleanup(tx: Tx, task: Task, *, reason: str, detail: str | None) -> None:
    """Harness cleanup for a scheduler-written outcome (faulted, orphaned):
    a run the task was responsible for ends with its inputs unanswered; a
    tool slot is marked done without an entry."""
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=reason, detail=detail)
    live = tx.conv(task.conversation_id).live
    if live.tools is not None and any(s.task_id == task.id for s in live.tools):
        tx.set_live(
            task.conversation_id,
            attrs.evolve(
                live,
                tools=tuple(
                    attrs.evolve(s, status="done") if s.task_id == task.id else s for s in live.tools
                ),
            ),
        )
