"""Scheduling and recovery: which live task runs next, and what ``Opened`` does.

Theory of operation
-------------------
After every event, ``run_pass`` reserves every *runnable* task and starts its
phase, until none is left (a phase may make others runnable, e.g. a hand-over
creates the next generation, which prepares in the same step):

- runnable = ``pending``, or ``waiting`` with every task in ``on`` terminal;
- a ``running`` task already has an invocation (one at a time); terminal tasks
  are not in the live map at all, so they can never run again;
- a task whose kind has no handler here stays pending (custom tasks arrive in
  in custom.py) - it is *blocked* while no definition can run it, never dropped.
- the last ready task of a round of the pass runs with ``tx.alone`` naming it:
  nothing of that round runs after it (a generation's hand-over may then
  prepare its successor at birth, as the next round would: generation.py).

All decisions of one step land in ONE commit (``Tx.finish``), placed before the
acts it enables: intent before effect, and fewer transactions per round.

``Opened`` (recovery): the loaded live records replace the state; every
``running`` task goes back to ``pending`` with its checkpoint unchanged (one
commit); waiting tasks keep waiting. Nothing else is special about recovery:
the ordinary pass then decides what each checkpoint means (re-send a pinned
request, re-run a safe tool, settle an unsafe one as interrupted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from . import cancellation, compaction_task, custom, generation, holding, tools
from .draft import Tx
from .index import build, live_map
from .events import Opened, RegistryChanged, Resumed
from .lifecycle import TaskMove, task_to
from .model import COMPACTION, GENERATION, TOOL, CoreInvariantError, Task, TaskId, TaskStatus
from .ownership import owned_work
from .state import State

RESERVE: Mapping[str, Callable[[Tx, Task], None]] = {
    GENERATION: generation.on_reserve,
    TOOL: tools.on_reserve,
    COMPACTION: compaction_task.on_reserve,
}

#: Abort handlers of the built-in kinds (run bottom-up, see cancellation.py).
ABORT: Mapping[str, Callable[[Tx, Task], None]] = {
    GENERATION: generation.on_abort,
    TOOL: tools.on_abort,
    COMPACTION: compaction_task.on_abort,
}


# Members read once (a member read through its class is a descriptor call:
# the pass runs on every step).
_PENDING, _WAITING = TaskStatus.PENDING, TaskStatus.WAITING


def is_runnable(tx: Tx, task: Task) -> bool:
    status = task.status
    if status is not _PENDING and status is not _WAITING:
        return False  # running or completing (an abort handler, too, runs only from these two)
    if task.id in tx.invocations:
        return False  # its host code is still out in the shell
    if task.abort_requested:
        return cancellation.abort_ready(tx, task)
    if task.kind not in RESERVE and custom.blocked_reason(tx, task) is not None:
        return False  # blocked: stays live and visible, never dropped
    if status is _PENDING:
        return True
    tasks = tx.tasks  # waiting: for every task in ``on`` to be terminal
    for t in task.on:
        if t in tasks:
            return False
    return True


def _dispatch(tx: Tx, task: Task) -> None:
    if task.kind not in RESERVE:  # a built-in kind names its row (phases.py)
        tx.rules.append(f"custom.{'on_abort' if task.abort_requested else 'on_reserve'} #{task.id}")
    if task.abort_requested:
        ABORT.get(task.kind, custom.on_abort)(tx, task)
    else:
        RESERVE.get(task.kind, custom.on_reserve)(tx, task)


#: Tests set this: every pass also computes the ready set by looking at every
#: live task and checks that the touched tasks found the same (index.py).
CHECK_TOUCHED = False


def _candidates(tx: Tx) -> list[TaskId]:
    """The tasks whose readiness this step may have changed (what the draft
    touched), or every live task after an open or a registry change."""
    if tx.rescan:
        tx.rescan = False
        tx.touched.clear()
        return sorted(tx.tasks)
    ids = sorted(filter(tx.tasks.__contains__, tx.touched))  # (the touched set is the small one)
    tx.touched.clear()
    return ids


def _check_index(tx: Tx) -> None:
    owners = {c.id: c.conversation.owner_task_id for c in tx.conversations.values()}
    assert tx.index.freeze().as_dict() == build(tx.tasks.values(), owners).as_dict(), "task index out of step"


def run_pass(tx: Tx) -> None:
    """Reserve every runnable task, to a fixpoint. Each round looks only at
    the candidates (``_candidates``): a task becomes runnable only by a
    change the draft records (its own put, the end of a task it waits on or
    owns, an invocation ending) - so a step costs what it changed, not the
    number of live tasks."""
    if not tx.scheduling:
        return
    while True:
        if tx.index.intent:
            cancellation.reconcile(tx)
        tasks = tx.tasks
        ready: list[Task] = []
        for t in _candidates(tx):
            task = tasks[t]
            status = task.status  # (is_runnable's first test, without its call: most candidates are running)
            if (status is _PENDING or status is _WAITING) and is_runnable(tx, task):
                ready.append(task)
        if CHECK_TOUCHED:
            everything = [t.id for _, t in sorted(tx.tasks.items()) if is_runnable(tx, t)]
            assert [t.id for t in ready] == everything, (
                f"touched-set scheduling missed runnable tasks: {sorted(set(everything) - {t.id for t in ready})}"
            )
        if not ready:
            if CHECK_TOUCHED:
                _check_index(tx)
            return
        ran = False  # nothing ran since ``ready`` was found: its first task is still runnable
        last = ready[-1]
        for task in ready:
            if ran:
                current = tx.tasks.get(task.id)
                if current is None or (current is not task and current != task) or not is_runnable(tx, current):
                    continue  # an earlier phase in this pass changed it (else it is ``task`` or equal to it)
            ran = True
            if task is last:  # nothing of this round runs after it (generation.py's hand-over asks)
                tx.alone = task.id
                _dispatch(tx, task)
                tx.alone = None
            else:
                _dispatch(tx, task)
            after = tx.tasks.get(task.id)
            # (equal tasks have the same status: most phases move it, no __eq__ call then)
            if after is not None and (after is task or (after.status is task.status and after == task)):
                if is_runnable(tx, after):
                    raise CoreInvariantError(f"task {task.id} is still runnable after its phase ran")


def on_opened(tx: Tx, ev: Opened) -> None:
    tx.state = attrs.evolve(
        tx.state,
        next_id=max(ev.next_id, 2),
        next_seq=ev.next_seq,
        conversations={c.id: c for c in ev.conversations},
        tasks=live_map({t.id: t for t in ev.tasks if t.status is not TaskStatus.TERMINAL}),
        task_index=build(
            (t for t in ev.tasks if t.status is not TaskStatus.TERMINAL),
            {c.id: c.conversation.owner_task_id for c in ev.conversations},
        ),
        submissions={s.id: s for s in ev.submissions if not s.settled},
        catalog={i.name: i for i in ev.catalog},
        task_catalog={i.kind: i for i in ev.task_catalog},
        extensions=ev.extensions,
        invocations=frozenset(),
        failed_migrations={},
        scheduling=ev.resume,
        settings=ev.settings,
        opened=True,
        documents={d.key: d for d in ev.documents},
        keep_settled=ev.keep_settled,
    )
    holding.seed(tx)
    for task in sorted(ev.tasks, key=lambda t: t.id):
        if task.status is TaskStatus.RUNNING:
            tx.rules.append(f"task:running,recover #{task.id}")  # the lifecycle row (Step.rules)
            tx.put_task(task_to(task, TaskMove.RECOVER))
    tx.rescan = True


def on_resumed(tx: Tx, ev: Resumed) -> None:
    tx.scheduling = True
    tx.rescan = True


def on_registry_changed(tx: Tx, ev: RegistryChanged) -> None:
    tx.catalog = {i.name: i for i in ev.catalog}
    tx.task_catalog = {i.kind: i for i in ev.task_catalog}
    tx.extensions = ev.extensions
    # a failed migration is retried once a different version is installed
    tx.failed_migrations = {
        tid: v
        for tid, v in tx.failed_migrations.items()
        if (t := tx.tasks.get(tid)) is not None
        and (info := tx.task_catalog.get(t.kind)) is not None
        and info.version == v
    }
    tx.rescan = True  # a definition arriving or leaving may (un)block any custom task


@attrs.frozen(kw_only=True)
class TaskInspection:
    """One live task as ``harness.inspect()`` shows it."""

    task_id: TaskId
    kind: str
    conversation_id: int
    owner: TaskId | None
    state: str  # running | waiting | ready | completing | blocked
    phase: str | None
    on: tuple[TaskId, ...] = ()
    reason: str | None = None
    abort_requested: bool = False


def inspect_tasks(state: State) -> tuple[TaskInspection, ...]:
    """Derived, read-only: why each live task is where it is."""
    tx = Tx(state, 0)
    out = []
    for task in sorted(state.tasks.values(), key=lambda t: t.id):
        on: tuple[TaskId, ...] = ()
        reason = None
        if task.status is TaskStatus.COMPLETING:
            kind = "completing"
        elif task.status is TaskStatus.RUNNING or task.id in state.invocations:
            kind = "running"
        elif task.abort_requested:
            below = tuple(t.id for t in owned_work(state, task.id))
            kind, on = ("waiting", below) if below else ("ready", ())
        elif task.kind not in RESERVE and (reason := custom.blocked_reason(tx, task)) is not None:
            kind = "blocked"
        elif task.status is TaskStatus.WAITING and any(t in state.tasks for t in task.on):
            kind, on = "waiting", tuple(t for t in task.on if t in state.tasks)
        else:
            kind = "ready"
        out.append(
            TaskInspection(
                task_id=task.id,
                kind=task.kind,
                conversation_id=task.conversation_id,
                owner=task.owner,
                state=kind,
                phase=task.phase,
                on=on,
                reason=reason,
                abort_requested=task.abort_requested,
            )
        )
    return tuple(out)
