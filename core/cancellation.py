"""Cancellation: abort marks, cascades, holds, and bottom-up abort handlers.

Theory of operation
-------------------
An abort never stops anything at once. It writes a durable *mark*
(``abort_requested``) and lets the scheduler settle the marked tasks bottom-up:

1. ``conv.abort()`` marks, in ONE commit, every live task reached by ordinary
   traversal from the conversation (``background=True`` crosses background
   boundaries) and withdraws the queued inputs of every conversation reached
   (``unanswered/aborted``; queued writes stay). ``abort_task`` marks one task.
2. Marking a running task cancels its invocation (a ``Cancel`` effect; the
   shell cancels its Trio scope) and puts it back to ``pending``.
3. *Cascade* (every pass): a live task with *cancellation intent* - abort
   marked, or held ``completing`` with an outcome other than ``completed`` -
   marks all its ordinary owned work, including work created later, and
   withdraws queued inputs in the conversations it owns. Terminal owners never
   cascade.
4. A marked task whose owned work is gone runs its *abort handler* (built-in:
   tools answer "Tool X was aborted"; a generation settles its run's inputs
   ``unanswered/aborted``). Children therefore settle before their parents.
5. *Drain* (every pass): a ``completing`` task whose owned work is gone
   becomes terminal with its held outcome.

A crash anywhere in this keeps the marks (they were committed), and the next
process's passes finish the abort. Nothing external is rolled back.

Invariants: ``AbortSettlesBottomUp``, ``NothingLiveAfterAbort`` (once the
scheduler quiesces, nothing in the aborted tree is live), ``WithdrawnNeverPlaced``.
"""

from __future__ import annotations

import attrs

from .draft import Tx
from .index import has_intent
from .effects import Refusal
from .events import ConversationAbortRequested, ConversationCreationRequested, TaskAbortRequested
from .inbox import withdraw_inputs
from .lifecycle import TaskMove, task_to
from .model import (
    TaskAbortResult,
    Conversation,
    ConversationId,
    Outcome,
    OutcomeStatus,
    Reason,
    Task,
    TaskStatus,
)
from .settlement import cleanup, finish_task, mark
from .ownership import conversations_below, has_owned_work, owned_work, owner_chain, reached_from_conversation
from .state import ConvState, InboxMode


def on_conversation_abort_requested(tx: Tx, ev: ConversationAbortRequested) -> None:
    if ev.conversation_id not in tx.conversations:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    reached, convs = reached_from_conversation(tx, ev.conversation_id, background=ev.background)
    for task in reached:
        current = tx.tasks.get(task.id)
        if current is not None:
            mark(tx, current)
    for cid in convs:
        withdraw_inputs(tx, cid)
    tx.respond(ev.ticket, len(reached), data=[t.id for t in reached])


def on_task_abort_requested(tx: Tx, ev: TaskAbortRequested) -> None:
    """``marked`` (a live task; idempotent) or ``terminal``. A blocked task
    (no definition for its kind) with nothing running and no owned work is
    orphaned at once."""
    task = tx.tasks.get(ev.task_id)
    if task is None:
        if ev.known is not None:
            tx.respond(ev.ticket, ev.task_id, data=TaskAbortResult.TERMINAL)
        else:
            tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Task {ev.task_id} does not exist")
        return
    marked = mark(tx, task)
    tx.respond(ev.ticket, ev.task_id, data=TaskAbortResult.MARKED)
    if marked.status is TaskStatus.COMPLETING:
        return  # its outcome is held; the mark cascades into its owned work


def on_conversation_created(tx: Tx, ev: ConversationCreationRequested) -> None:
    """A new conversation, ownerless or owned by a live task. A task-owned one
    starts with a copy of the owner's conversation's agent settings."""
    agent = ev.agent
    if ev.owner_task_id is not None:
        owner = tx.tasks.get(ev.owner_task_id)
        problem = None
        if owner is None:
            problem = "does not exist or is terminal"
        elif owner.status is TaskStatus.COMPLETING:
            problem = "is completing"
        elif owner.abort_requested:
            problem = "is abort-marked"
        if problem is not None:
            tx.refuse(ev.ticket, Refusal.INVALID, f"Owner task {ev.owner_task_id} {problem}")
            return
        assert owner is not None
        if agent is None:
            agent = tx.conversations[owner.conversation_id].agent
    cid = ConversationId(tx.alloc_id())
    conv = ConvState(conversation=Conversation(id=cid, owner_task_id=ev.owner_task_id))
    if agent is not None:
        conv = attrs.evolve(conv, agent=agent)
    tx.put_conversation(conv)
    tx.respond(ev.ticket, cid)


def reconcile(tx: Tx) -> None:
    """Cascade intent downwards and drain completing tasks, to a fixpoint.
    Only the tasks the index holds in ``intent`` (marked or completing) are
    looked at."""
    changed = True
    while changed:
        changed = False
        for tid in sorted(tx.index.intent):
            task = tx.tasks.get(tid)
            if task is None or not has_intent(task):
                continue
            for below in owned_work(tx, task.id):
                current = tx.tasks.get(below.id)
                if current is not None and not current.abort_requested:
                    mark(tx, current)
                    changed = True
            for cid in conversations_below(tx, task.id):
                if any(i.mode != InboxMode.WRITE for i in tx.conversations[cid].inbox):
                    withdraw_inputs(tx, cid)
                    changed = True
        for tid in sorted(tx.index.intent):
            task = tx.tasks.get(tid)
            if task is not None and task.status is TaskStatus.COMPLETING and not has_owned_work(tx, task.id):
                assert task.outcome is not None
                tx.put_task(task_to(task, TaskMove.DRAIN, ended_at=tx.now))
                changed = True


def abort_ready(tx: Tx, task: Task) -> bool:
    """A marked task runs its abort handler once nothing below it is live and
    no invocation is in flight (pending, or waiting: a mark lets a waiting
    task leave its wait)."""
    return (
        task.abort_requested
        and task.id not in tx.invocations
        and task.status in (TaskStatus.PENDING, TaskStatus.WAITING)
        and not has_owned_work(tx, task.id)
    )


def orphan(tx: Tx, task: Task, reason: Reason) -> None:
    """Abort of a task whose definition is missing: no task code runs; the
    outcome is ``orphaned`` and the harness cleans up after it."""
    cleanup(tx, task, reason=reason, detail=None)
    finish_task(tx, task, Outcome(status=OutcomeStatus.ORPHANED, error={"message": reason}))


def no_cycle(tx: Tx, task: Task, on: tuple[int, ...]) -> str | None:
    """A waiting task may not wait on itself or on its owner chain."""
    chain = set(owner_chain(tx, task))
    for tid in on:
        if tid == task.id or tid in chain:
            return f"Task {task.id} cannot wait on itself or its owner ({tid})"
    return None
