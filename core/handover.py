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

from .effects import Tx
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
    """Make ``task`` terminal with ``outcome`` (memos are dropped)."""
    done = task_to(task, "finish", outcome=outcome, memos=None, ended_at=tx.now)
    tx.put_task(done)
    return done


def fault(tx: Tx, task: Task, message: str) -> None:
    """Scheduler-written outcome for a broken contract (unknown phase, a bad
    event): the task ends ``faulted``; a run it was responsible for ends with
    its inputs ``unanswered/faulted``; a tool slot is marked done without an
    entry (the model context later synthesizes the missing result)."""
    if task.status is TaskStatus.PENDING or task.status is TaskStatus.WAITING:
        task = task_to(task, "reserve")
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason="faulted", detail=message)
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
    finish_task(tx, task, Outcome(status=OutcomeStatus.FAULTED, error={"message": message}))
