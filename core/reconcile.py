"""Reconcile: the rows of an interrupted unsafe call whose tool can find out.

Theory of operation
-------------------
An unsafe call found at ``execute`` after a restart may have run: without
more knowledge it settles "Tool X was interrupted and may have partially
run" (tools.py). A tool defined with ``reconcile=fn`` can *check* (ask the
payment service whether the idempotency key was charged, compare a file's
hash). When the tool installed NOW has a reconcile (``ToolInfo.reconcile``;
the stored intent cannot say, a registry changes between lives), the task
takes the phase ``reconcile``:

- ``(execute, reserve_reconcile)`` -> commit ``running reconcile{arguments,
  replay}`` (the intent: reconcile is being asked, with the stored
  arguments), then ``RunReconcile``. The shell runs ``fn(call, args)`` with
  the interrupted execution's ``ToolCallContext`` (same ``idempotency_key``,
  env and cwd) and answers ``ToolReconciled`` with a verdict.
- ``(reconcile, reserve_reconcile)`` (a crash while reconcile ran) -> the
  same question again (reserved in memory: its intent is stored). So a
  reconcile runs at least once and maybe more: it must itself be safe to
  repeat (a query, never an act).
- ``(reconcile, reserve_interrupted)`` (the tool lost its reconcile, or is
  gone) -> the interrupted result, as from ``execute``.
- ``(reconcile, reconciled_done)`` -> settle with the result reconcile gave,
  as if execute had returned it (bounded by the shell, diagnostics as
  usual), outcome ``completed``, ``data.reconciled = "done"``.
- ``(reconcile, reconciled_not_done)`` -> commit a fresh ``execute`` intent
  (the stored arguments and replay, marked ``reconciled``), then
  ``RunTool``: exactly a safe re-run. Its result gets ``data.reconciled =
  "not_done"``; interrupted again, it is reconciled again.
- ``(reconcile, reconciled_unknown)`` (reconcile could not tell, or raised:
  the shell's note is the error) -> the interrupted result plus the note (a
  ``reconcile_unknown`` warning), outcome ``failed``,
  ``data.reconciled = "unknown"``.
- abort rows at ``reconcile``: as at the other phases (tools.py).

Invariants: ``IntentBeforeEffect`` (``RunReconcile`` only after the
``reconcile`` intent, ``RunTool`` after ``execute``),
``ReconciledEffectHappensOnce``, ``OneResultPerCall``.

Must not touch: the shell's verdict (it decides nothing of what reconcile
found); the rows of other phases (tools.py).
"""

from __future__ import annotations

from . import diagnostics
from .checkpoints import ExecuteCheckpoint, ReconcileCheckpoint
from .draft import Tx
from .diagnostics import interrupted_message, unreconciled_message
from .effects import RunReconcile
from .lifecycle import SlotMove, TaskMove
from .model import Diagnostic, OutcomeStatus, ResultCode, Severity, Task
from .phases import Turn
from .reconcile_events import ToolReconciled, Verdict
from .tool_results import move_slot, partial, run_tool, settle, slot


def can_reconcile(tx: Tx, task: Task) -> bool:
    """The tool installed now has a ``reconcile``."""
    info = tx.catalog.get(str(task.input["name"]))
    return info is not None and info.reconcile


def _ask(tx: Tx, task: Task, cp: ReconcileCheckpoint) -> None:
    tx.act(
        RunReconcile(
            task_id=task.id,
            conversation_id=task.conversation_id,
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            arguments=dict(cp.arguments),
            cwd=tx.conversations[task.conversation_id].agent.cwd,
        )
    )


def reconcile(turn: Turn, _: None) -> None:
    """``(execute, reserve_reconcile)``: store the intent, then ask."""
    cp = turn.checkpoint
    assert isinstance(cp, ExecuteCheckpoint)
    intent = ReconcileCheckpoint(arguments=cp.arguments, replay=cp.replay)
    _ask(turn.tx, turn.store(TaskMove.RESERVE, intent), intent)


def reconcile_again(turn: Turn, _: None) -> None:
    """``(reconcile, reserve_reconcile)``: its intent is stored; ask again."""
    cp = turn.checkpoint
    assert isinstance(cp, ReconcileCheckpoint)
    _ask(turn.tx, turn.store(TaskMove.RESERVE, durable=False), cp)


def done(turn: Turn, ev: ToolReconciled) -> None:
    """The effect happened: reconcile's result, as if execute returned it."""
    settle(
        turn.tx,
        turn.task,
        ev.text,
        diagnostics.ordered(ev.diagnostics, ev.truncated),
        is_error=ev.is_error,
        status=OutcomeStatus.COMPLETED,
        usage=ev.usage,
        truncated=ev.truncated,
        reconciled=Verdict.DONE,
    )


def not_done(turn: Turn, _: ToolReconciled) -> None:
    """It provably did not happen: a fresh ``execute`` intent, then the body
    (the last life's running output is not this run's)."""
    cp = turn.checkpoint
    assert isinstance(cp, ReconcileCheckpoint)
    intent = ExecuteCheckpoint(arguments=cp.arguments, replay=cp.replay, reconciled=True)
    task = turn.store(TaskMove.CHECKPOINT, intent)
    found = slot(turn.tx, task)
    if found is not None and found.output is not None:
        move_slot(turn.tx, task, SlotMove.OUTPUT, output=None)
    run_tool(turn.tx, task, intent)


def unknown(turn: Turn, ev: ToolReconciled) -> None:
    """It cannot tell: the interrupted result, plus reconcile's note."""
    note = Diagnostic(Severity.WARN, unreconciled_message(ev.note), str(ResultCode.RECONCILE_UNKNOWN))
    settle_interrupted(turn.tx, turn.task, (note,), Verdict.UNKNOWN)


def settle_interrupted(
    tx: Tx, task: Task, notes: tuple[Diagnostic, ...] = (), reconciled: Verdict | None = None
) -> None:
    """"Tool X was interrupted and may have partially run" (after the slot's
    partial output; ``notes`` after it), outcome ``failed``."""
    message = interrupted_message(str(task.input["name"]))
    settle(
        tx,
        task,
        partial(tx, task),
        (diagnostics.error(ResultCode.INTERRUPTED, message), *notes),
        is_error=True,
        status=OutcomeStatus.FAILED,
        error=message,
        code=ResultCode.INTERRUPTED,
        reconciled=reconciled,
    )
