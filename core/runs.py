"""Runs: starting one, handing it from generation to generation, ending it.

Theory of operation
-------------------
A *run* is the work from placed input(s) to the final answer. It is recorded in
the conversation's ``pi.live.run = {task_id, inputs}`` and is present exactly
while the conversation is busy. The generation task named by ``task_id`` is the
one responsible; when a tool round finishes, that generation ends (the caller
finishes it) and a new one takes over (``G1 -> G2``) in the SAME commit, so
there is never a moment where the run has no responsible task or two of them.

Invariants
- ``RunHasOneOwner``: ``live.run.task_id`` names a live generation task.
- ``InputsSettleOnce``: ``end_run`` settles each listed input once; a
  submission already settled is left as it is (first settlement wins).
- Only the task named by ``live.run.task_id`` may end or hand over the run.

Must not touch: the inbox (boundaries are ``inbox.py``'s), tool tasks, task
outcomes (``settlement.py``'s).
"""

from __future__ import annotations

import attrs

from .live import LiveMove, live_to
from .checkpoints import FIRST_PREPARE, to_dict
from .record_makers import new_RunInfo, new_Task  # (X(...) without the type call's dict: issue 11 item 2)
from .draft import Tx
from .lifecycle import SubmissionMove, submission_to
from .model import (
    GENERATION,
    ConversationId,
    EntryId,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
)
from .state import Live, RunInfo

# Members read once: every round hands over, every run starts and ends (a
# member read through its enum class goes through EnumType's __getattr__
# hook: ~1,000 machine instructions, where a global is ~20).
_PENDING, _START, _HAND_OVER, _END = TaskStatus.PENDING, LiveMove.START, LiveMove.HAND_OVER, LiveMove.END
_DONE, _ANSWER, _FAIL = SubmissionStatus.DONE, SubmissionMove.ANSWER, SubmissionMove.FAIL
#: The stored checkpoint every generation starts at (each task gets its own copy).
_FIRST_PREPARE = to_dict(FIRST_PREPARE)


def create_generation(tx: Tx, cid: ConversationId) -> Task:
    """A new conversation-owned generation task at ``prepare`` (attempt 1)."""
    task = new_Task(  # (Task(...) without the type call's dict, and FIRST_PREPARE's dict copied, not rebuilt: issue 11 item 2)
        id=TaskId(tx.alloc_id()),
        conversation_id=cid,
        kind=GENERATION,
        status=_PENDING,
        checkpoint=dict(_FIRST_PREPARE),
    )
    tx.put_task(task)
    return task


def start_run(tx: Tx, cid: ConversationId, inputs: tuple[SubmissionId, ...]) -> Task:
    """Make the conversation busy with a new run answering ``inputs``."""
    gen = create_generation(tx, cid)
    tx.set_live(cid, live_to(tx.conversations[cid].live, _START, run=RunInfo(task_id=gen.id, inputs=inputs)))
    return gen


def owns_run(tx: Tx, task: Task) -> bool:
    run = tx.conversations[task.conversation_id].live.run
    return run is not None and run.task_id == task.id


def hand_over(tx: Tx, gen: Task, steered: tuple[SubmissionId, ...]) -> Task:
    """Give the run of ``gen`` (whose tool round is finished and which the
    caller has just finished) to a successor created at ``prepare``:
    ``live.run.task_id`` switched, the round's slots cleared, steered inputs
    joined to the run. Part of the commit that finished ``gen``."""
    successor = create_generation(tx, gen.conversation_id)
    tx.set_live(gen.conversation_id, handed(tx.conversations[gen.conversation_id].live, gen, successor.id, steered))
    return successor


def handed(live: Live, gen: Task, successor: TaskId, steered: tuple[SubmissionId, ...]) -> Live:
    """``live`` (the run of ``gen``) handed over to ``successor``: its task
    id switched, the round's slots cleared, ``steered`` joined to its inputs."""
    run = live.run
    assert run is not None and run.task_id == gen.id
    return live_to(live, _HAND_OVER, run=new_RunInfo(task_id=successor, inputs=run.inputs + steered), tools=None, attempt=None)


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
    live = tx.conversations[gen.conversation_id].live
    assert live.run is not None
    move = _ANSWER if status is _DONE else _FAIL
    for sid in live.run.inputs:
        sub = tx.submissions.get(sid)
        if sub is None or sub.settled:
            continue  # first settlement wins
        tx.put_submission(submission_to(sub, move, answer_entry_id=answer, reason=reason, detail=detail))
    tx.set_live(gen.conversation_id, live_to(live, _END))
