"""Custom tasks: host-defined durable state machines, and memos.

Theory of operation
-------------------
A custom task kind is defined in the host (``define_task(kind, initial,
phases, version, abort, migrate)``); the core knows only its
:class:`~pidurable.core.model.TaskInfo` (version, phase names, whether it has
an abort handler or a migration). Its phases are host code: the core asks the
shell to run one (``RunPhase``) and the phase reports *durable progress*
through ``runtime.commit`` (a ``TaskCommitRequested`` event, answered after its
commit). When the phase returns (``PhaseReturned``) the step rules decide:

1. the task is no longer running (it committed waiting/terminal, or was
   abort-marked) -> the invocation simply ends;
2. the phase raised -> outcome ``faulted`` with the message;
3. its checkpoint changed -> run the next phase;
4. unchanged -> ``faulted``: "Task K phase P returned without durable progress".

Definitions and versions (checked at every reservation):
- no definition installed -> *blocked* (``missing_task``): stays pending,
  visible in ``inspect``; an abort orphans it (``orphaned``, no code runs);
- installed version older than the stored one -> blocked (``task_too_old``);
- newer -> ``MigrateTask`` (the definition's ``migrate``); a failure leaves it
  blocked (``migration_failed``) until another definition is installed.

``invocations`` holds the custom tasks whose host code is out in the shell:
a task is never reserved twice, and its abort handler starts only after its
cancelled invocation reported back.

Memos: ``memo(name, candidate)`` is one commit, first writer wins, the value
never changes while the task lives and is dropped when it ends (``memos`` on
the task record). Hooks share the asking task's memos.

Invariants: ``OneInvocationPerTask``, ``NoProgressIsAFault``,
``MemoNeverChanges``, ``BlockedIsNeverDropped``.
"""

from __future__ import annotations


import attrs

from .cancellation import no_cycle
from .documents import DocumentProblem, change_documents
from .draft import Tx
from .effects import MigrateTask, Refusal, RunPhase
from .events import MemoRequested, MigrationFinished, PhaseReturned, TaskCommitRequested, TaskCreationRequested
from .lifecycle import TaskMove, task_to
from .settlement import fault, finish_task
from .model import (
    GENERATION,
    TOOL,
    Outcome,
    InvocationMode,
    OutcomeStatus,
    Reason,
    Task,
    TaskId,
    TaskStatus,
    WaitPolicy,
)
from .ownership import owned_work

BUILT_IN = frozenset({GENERATION, TOOL})



def blocked_reason(tx: Tx, task: Task) -> Reason | None:
    """Why a custom task cannot run now, or None when it can."""
    info = tx.task_catalog.get(task.kind)
    if info is None:
        return Reason.MISSING_TASK
    if info.version < task.version:
        return Reason.TASK_TOO_OLD
    if info.version > task.version:
        if not info.has_migrate or tx.failed_migrations.get(task.id) == info.version:
            return Reason.MIGRATION_FAILED
    return None


def _start(tx: Tx, task: Task, mode: InvocationMode) -> None:
    tx.invocations = tx.invocations | {task.id}
    tx.act(RunPhase(task_id=task.id, kind=task.kind, mode=mode, checkpoint=dict(task.checkpoint)))


def on_reserve(tx: Tx, task: Task) -> None:
    """Reserve a ready custom task: migrate it first if its stored version is
    older than the installed definition; else run its current phase."""
    info = tx.task_catalog[task.kind]
    if info.version > task.version:
        tx.invocations = tx.invocations | {task.id}
        tx.act(
            MigrateTask(
                task_id=task.id,
                kind=task.kind,
                from_version=task.version,
                input=dict(task.input),
                checkpoint=dict(task.checkpoint),
            )
        )
        return
    if task.phase not in info.phases:
        fault(tx, task, f"Task {task.id} has phase {task.phase!r}, which {task.kind} does not define")
        return
    # The reservation stays in memory: recovery turns running back into
    # pending anyway, and the phase's own commits are the durable progress.
    running = task_to(task, TaskMove.RESERVE, started_at=task.started_at or tx.now)
    tx.put_task(running, durable=False)
    _start(tx, running, InvocationMode.RUN)


def on_abort(tx: Tx, task: Task) -> None:
    """A marked custom task whose owned work is gone: run its abort handler,
    or end ``aborted`` when it has none; orphan it when it is blocked."""
    reason = blocked_reason(tx, task)
    if reason is not None:
        from .cancellation import orphan

        orphan(tx, task, reason)
        return
    info = tx.task_catalog[task.kind]
    if not info.has_abort:
        finish_task(tx, task, Outcome(status=OutcomeStatus.ABORTED))
        return
    running = task_to(task, TaskMove.RESERVE)
    tx.put_task(running, durable=False)
    _start(tx, running, InvocationMode.ABORT)


def on_task_created(tx: Tx, ev: TaskCreationRequested) -> None:
    problem = _creation_problem(tx, ev)
    if problem is not None:
        tx.refuse(ev.ticket, Refusal.INVALID, problem)
        return
    task = Task(
        id=TaskId(tx.alloc_id()),
        conversation_id=ev.conversation_id,
        kind=ev.kind,
        version=ev.version,
        input=dict(ev.input),
        owner=ev.owner,
        background=ev.background,
        checkpoint=dict(ev.checkpoint),
    )
    tx.put_task(task)
    tx.respond(ev.ticket, task.id)


def _creation_problem(tx: Tx, ev: TaskCreationRequested) -> str | None:
    if ev.kind in BUILT_IN:
        return f"{ev.kind} tasks are created by the harness, not by hosts"
    if ev.conversation_id not in tx.conversations:
        return f"Conversation {ev.conversation_id} does not exist"
    if not isinstance(ev.checkpoint.get("phase"), str):
        return f"The initial checkpoint of {ev.kind} needs a string 'phase'"
    if ev.owner is not None:
        owner = tx.tasks.get(ev.owner)
        if owner is None:
            return f"Owner task {ev.owner} does not exist or is terminal"
        if owner.status is TaskStatus.COMPLETING:
            return f"Owner task {ev.owner} is completing"
        if owner.abort_requested:
            return f"Owner task {ev.owner} is abort-marked"
        if owner.conversation_id != ev.conversation_id:
            return f"A child task lives in its owner's conversation ({owner.conversation_id})"
        if ev.background:
            return "A child task cannot be background"
    return None


def on_task_committed(tx: Tx, ev: TaskCommitRequested) -> None:
    """``runtime.commit``: accepted only from the task's own live invocation."""
    task = tx.tasks.get(ev.task_id)
    problem = _commit_problem(tx, task, ev)
    if problem is not None:
        tx.refuse(ev.ticket, Refusal.INVALID, problem)
        return
    assert task is not None
    if ev.documents:  # runtime.update_document: committed with this state
        try:
            change_documents(tx, ev.documents)
        except DocumentProblem as e:
            tx.refuse(ev.ticket, Refusal.INVALID, str(e))
            return
    if ev.status == TaskStatus.RUNNING:
        assert ev.checkpoint is not None
        tx.put_task(task_to(task, TaskMove.CHECKPOINT, checkpoint=dict(ev.checkpoint)))
    elif ev.status == TaskStatus.WAITING:
        assert ev.checkpoint is not None
        tx.put_task(task_to(
                task, TaskMove.WAIT, checkpoint=dict(ev.checkpoint), on=tuple(ev.on), policy=WaitPolicy(ev.policy)
            ))
    else:
        assert ev.outcome is not None
        finish_task(tx, task, ev.outcome)
    tx.respond(ev.ticket, task.id)


def _commit_problem(tx: Tx, task: Task | None, ev: TaskCommitRequested) -> str | None:
    if task is None:
        return f"Task {ev.task_id} is terminal"
    if ev.task_id not in tx.invocations or task.status is not TaskStatus.RUNNING:
        return f"Task {ev.task_id} is {task.status.value}: its invocation has ended"
    if ev.mode == InvocationMode.RUN and task.abort_requested:
        return f"Task {ev.task_id} has a durable abort mark"
    if ev.status in (TaskStatus.RUNNING, TaskStatus.WAITING):
        info = tx.task_catalog.get(task.kind)
        phase = (ev.checkpoint or {}).get("phase")
        if not isinstance(phase, str):
            return "A checkpoint needs a string 'phase'"
        if info is not None and phase not in info.phases:
            return f"{task.kind} has no phase {phase!r}"
    if ev.status == TaskStatus.WAITING:
        if ev.mode == InvocationMode.ABORT:
            return f"The abort handler of task {ev.task_id} cannot wait"
        if ev.policy not in (WaitPolicy.ALL_SETTLED, WaitPolicy.FAIL_FAST):
            return f"policy must be 'allSettled' or 'failFast', not {ev.policy!r}"
        cycle = no_cycle(tx, task, ev.on)
        if cycle is not None:
            return cycle
        if ev.policy == WaitPolicy.FAIL_FAST:
            mine = {t.id for t in owned_work(tx, task.id)}
            for tid in ev.on:
                if tid not in mine and tid in tx.tasks:
                    return f"Task {task.id} can wait failFast only on tasks it owns ({tid})"
        return None
    if ev.status == TaskStatus.TERMINAL:
        if ev.outcome is None or ev.outcome.status not in (
            OutcomeStatus.COMPLETED,
            OutcomeStatus.FAILED,
            OutcomeStatus.ABORTED,
        ):
            return "A terminal commit needs an outcome: completed, failed or aborted"
        return None
    if ev.status not in (TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.TERMINAL):
        return f"status must be running, waiting or terminal, not {ev.status!r}"
    return None


def on_phase_returned(tx: Tx, ev: PhaseReturned) -> None:
    if ev.task_id not in tx.invocations:
        return  # stale
    tx.invocations = tx.invocations - {ev.task_id}
    tx.touch(ev.task_id)
    task = tx.tasks.get(ev.task_id)
    if task is None or task.status is not TaskStatus.RUNNING:
        return  # rule 1: it committed waiting/terminal, or was interrupted
    if ev.cancelled:
        tx.put_task(task_to(task, TaskMove.INTERRUPT), durable=False)
        return
    if ev.mode == InvocationMode.ABORT:
        message = ev.error or f"Abort handler of task {task.id} returned without a terminal outcome"
        fault(tx, task, message)
        return
    if ev.error is not None:
        fault(tx, task, ev.error)
        return
    if task.checkpoint == ev.ran:
        fault(tx, task, f"Task {task.id} phase {ev.ran.get('phase')} returned without durable progress")
        return
    info = tx.task_catalog.get(task.kind)
    if info is None or task.phase not in info.phases:
        # the definition went away or changed shape: stop here, blocked
        tx.put_task(task_to(task, TaskMove.RELEASE), durable=True)
        return
    _start(tx, task, InvocationMode.RUN)


def on_memo_requested(tx: Tx, ev: MemoRequested) -> None:
    task = tx.tasks.get(ev.task_id)
    if task is None or task.outcome is not None:
        tx.refuse(ev.ticket, Refusal.INVALID, f"Task {ev.task_id} is terminal: its memos are gone")
        return
    memos = task.memos or {}
    if ev.name in memos or not ev.write:
        tx.respond(ev.ticket, task.id, data=memos.get(ev.name))
        return
    tx.put_task(attrs.evolve(task, memos={**memos, ev.name: ev.candidate}), durable=True)
    tx.respond(ev.ticket, task.id, data=ev.candidate)


def on_migration_finished(tx: Tx, ev: MigrationFinished) -> None:
    if ev.task_id not in tx.invocations:
        return
    tx.invocations = tx.invocations - {ev.task_id}
    tx.touch(ev.task_id)
    task = tx.tasks.get(ev.task_id)
    if task is None:
        return
    if ev.error is not None or ev.checkpoint is None or not isinstance(ev.checkpoint.get("phase"), str):
        tx.failed_migrations = {**tx.failed_migrations, task.id: ev.version}
        tx.touch(task.id)
        return
    tx.put_task(
        attrs.evolve(task, version=ev.version, input=dict(ev.input or task.input), checkpoint=dict(ev.checkpoint))
    )
