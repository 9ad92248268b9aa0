"""The tool task ``pi.tool``: one tool call, with intent before effect.

Theory of operation
-------------------
Input ``{assistant, call_id, name}`` names the call inside an assistant entry.
``MACHINE`` below is the kind's phase table (phases.py applies it); the
checkpoints are checkpoints.py's records:

========= ======================================================================
call      nothing decided: resolve the tool, validate its arguments, run
          before-tool hooks (the shell's ``PrepareTool``). Safe to redo.
execute   ``arguments, replay[, process][, reconciled]`` - the durable
          *intent*: the final arguments and the replay promise the tool made
          when it was chosen. Stored BEFORE the body runs; a crash after this
          point leaves "may have partially run".
reconcile ``arguments, replay`` - the intent of asking the tool's
          ``reconcile`` whether an interrupted call ran (reconcile.py).
========= ======================================================================

The rows' effects:

- ``(call, reserve)`` -> ``PrepareTool`` (reservation kept in memory only: if
  the process dies now, ``call`` simply runs again).
- ``(call, prepared)`` -> commit ``running execute{arguments, replay}`` +
  ``RunTool``; a replay promise that is neither safe nor unsafe
  (``prepared_invalid``) faults the task.
- ``(call, rejected)`` (unknown tool, invalid arguments, blocked) -> error
  result, outcome ``completed`` (no intent was ever stored; nothing ran).
  Every harness-made problem is a diagnostic (diagnostics.py): the entry's
  text is the content, then the ``<harness>`` block; ``data["diagnostics"]``
  keeps them structured.
- ``(execute, finished)`` -> result entry + task ``completed`` + slot done -
  one commit. ``(execute, failed)`` (the body raised) -> error result,
  outcome ``failed`` (the round continues: the generation waits allSettled).
- ``(execute, process_started)`` -> the body's OS process group recorded in
  the checkpoint before the command runs (answered with ``Respond``).
- ``(execute, progressed)`` -> the tail of the body's running output (already
  bounded and throttled by the shell) into the slot's ``output`` in
  ``pi.live``: one commit per report, only for tools that report. Settling
  drops it; a re-run clears it; an interrupted or aborted call's result
  starts with it (what is known of what ran).
- ``(execute, finished)`` with ``truncated`` (the shell bounded the output)
  -> the record is stored in the result entry's ``data["truncated"]``, and
  the ``truncated`` (and ``full_output``) diagnostics are rendered.
- reserve at ``execute`` (only after a restart): ``rerun`` with the stored
  arguments if the stored replay AND the currently installed tool both say
  ``safe``; otherwise ``interrupted``: settle the error result "Tool X was
  interrupted and may have partially run" (after the slot's partial
  output), outcome ``failed``.
- reserve at ``execute`` when the call may not run again but the tool
  installed now has a ``reconcile``: the ``reconcile`` phase and its rows
  (handlers and their theory in reconcile.py).
- ``abort`` (every phase) -> error result "Tool X was aborted" (likewise), outcome
  ``aborted``. Nothing the body did is rolled back. With ``on_abort`` hooks
  selected (``abort_hooks``): reserved in memory, ``RunAbortHooks``; their
  answer (``abort_hooked``) settles the replacement. A body's report for an
  abort-marked task is stale.
- ``(execute, finished)`` with ``control`` -> kept in the outcome and the
  round slot (the generation folds the round's controls, controls.py).

Invariants: ``UnsafeToolRunsAtMostOnce``, ``OneResultPerCall`` (a task settles
its call exactly once), ``IntentBeforeEffect``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from . import diagnostics, reconcile, system
from .checkpoints import CALL_CHECKPOINT, REPLAYS, Checkpoint, ExecuteCheckpoint, ReconcileCheckpoint, ToolPhase, parse_tool, to_dict
from .draft import Tx
from .effects import PrepareTool, Refusal, RunAbortHooks
from .events import (
    PreparedCall,
    ToolFailed,
    ToolFinished,
    ToolAbortHooked,
    ToolPrepared,
    ToolProcessStarted,
    ToolProgressed,
    ToolRejected,
)
from .lifecycle import SlotMove, TaskMove, next_task_status
from .model import TOOL, EntryId, Json, OutcomeStatus, Replay, ResultCode, Task, TaskId, TaskStatus
from .phases import END, Machine, Row, Turn
from .documents import DocumentProblem, change_documents
from .reconcile_events import ToolReconciled, Verdict
from .settlement import fault
from .state import SlotStatus
from .tool_results import aborted, move_slot, partial, run_tool, settle, slot
from .record_makers import new_ExecuteCheckpoint, new_Task  # (X(...) without the type call's dict: issue 11 item 2)


# Members read once: each tool call reads them (a member read through its
# enum class goes through EnumType's __getattr__ hook: ~1,000 machine
# instructions, where a global is ~20).
_PENDING, _RESERVE, _START, _COMPLETED = TaskStatus.PENDING, TaskMove.RESERVE, SlotMove.START, OutcomeStatus.COMPLETED


class ToolInput(enum.StrEnum):
    """What can happen to a tool task (the inputs of ``MACHINE``)."""

    #: The scheduler picked it at ``call``.
    RESERVE = "reserve"
    #: Picked at ``execute`` after a restart; stored and current replay are safe.
    RERUN = "reserve_rerun"
    #: Picked at ``execute`` after a restart; the call may not run again.
    INTERRUPTED = "reserve_interrupted"
    #: Picked at ``execute`` or ``reconcile`` after a restart; it may not run
    #: again, but the tool installed now has a ``reconcile`` (reconcile.py).
    RECONCILE = "reserve_reconcile"
    #: ``ToolReconciled``: the effect happened (a result).
    RECONCILED_DONE = "reconciled_done"
    #: ``ToolReconciled``: the effect provably did not happen.
    RECONCILED_NOT_DONE = "reconciled_not_done"
    #: ``ToolReconciled``: reconcile could not tell (or raised).
    RECONCILED_UNKNOWN = "reconciled_unknown"
    #: The shell resolved and validated the call.
    PREPARED = "prepared"
    #: The shell's verdict carried a replay promise that is not one.
    PREPARED_INVALID = "prepared_invalid"
    #: The shell refused the call (unknown tool, invalid arguments, blocked).
    REJECTED = "rejected"
    #: The body started an OS process group.
    PROCESS_STARTED = "process_started"
    #: The body reported running output (throttled by the shell).
    PROGRESSED = "progressed"
    #: The body returned a result.
    FINISHED = "finished"
    #: The body raised.
    FAILED = "failed"
    #: Its abort handler runs.
    ABORT = "abort"
    #: Its abort handler runs, and the agent's extensions have ``on_abort`` hooks.
    ABORT_HOOKS = "abort_hooks"
    #: The ``on_abort`` hooks ran (``ToolAbortHooked``).
    ABORT_HOOKED = "abort_hooked"


# --- the rows' handlers ------------------------------------------------------


def _prepare(turn: Turn, _: None) -> None:
    task, tx = turn.task, turn.tx
    turn.store(TaskMove.RESERVE, durable=False, started_at=task.started_at or tx.now)
    tx.act(
        PrepareTool(
            task_id=task.id,
            conversation_id=task.conversation_id,
            assistant_entry_id=EntryId(int(task.input["assistant"])),
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            tools=system.tools_view(tx, tx.conversations[task.conversation_id]),
            extensions=tx.conversations[task.conversation_id].agent.extensions,
        )
    )


def _prepared(turn: Turn, ev: ToolPrepared | ExecuteCheckpoint) -> None:
    """Store the intent, mark the slot running, run the body. A call the
    shell prepared with the model's answer (born in this step) comes with
    its intent: ``start_prepared`` built its task reserved at ``execute``."""
    if isinstance(ev, ExecuteCheckpoint):
        # (no slot to move yet: start_round opens this call's slot running)
        run_tool(turn.tx, turn.keep(ev), ev)
        return
    intent = ExecuteCheckpoint(arguments=dict(ev.arguments), replay=REPLAYS[ev.replay])
    execute = turn.store(TaskMove.CHECKPOINT, intent)
    move_slot(turn.tx, execute, _START)
    run_tool(turn.tx, execute, intent)


def _prepared_invalid(turn: Turn, ev: ToolPrepared) -> None:
    fault(turn.tx, turn.task, f"Task {turn.task.id}: replay must be 'safe' or 'unsafe', not {ev.replay!r}")


def _rerun(turn: Turn, _: None) -> None:
    cp = turn.checkpoint
    assert isinstance(cp, ExecuteCheckpoint)
    running = turn.store(TaskMove.RESERVE, durable=False)
    found = slot(turn.tx, running)
    if found is not None and found.output is not None:  # the last life's output is not this run's
        move_slot(turn.tx, running, SlotMove.OUTPUT, output=None)
    run_tool(turn.tx, running, cp)


def _interrupted(turn: Turn, _: None) -> None:
    reconcile.settle_interrupted(turn.tx, turn.task)


def _verdict(cp: Checkpoint) -> Verdict | None:
    """``not_done`` for the result of an execution reconcile allowed."""
    return Verdict.NOT_DONE if isinstance(cp, ExecuteCheckpoint) and cp.reconciled else None


def _progressed(turn: Turn, ev: ToolProgressed) -> None:
    """The running output's tail into the slot (for watchers); the task
    itself does not change. Without a running slot (a document written
    without slots) or without a change, nothing is written."""
    found = slot(turn.tx, turn.task)
    if found is not None and found.status is SlotStatus.RUNNING and found.output != ev.output:
        move_slot(turn.tx, turn.task, SlotMove.OUTPUT, output=ev.output)


def _process_started(turn: Turn, ev: ToolProcessStarted) -> None:
    """Record the process group in the ``execute`` checkpoint (durable
    before the command runs), so an open after a crash can kill what was left
    running; then answer the body."""
    cp = turn.checkpoint
    assert isinstance(cp, ExecuteCheckpoint)
    task = turn.store(TaskMove.CHECKPOINT, attrs.evolve(cp, process=dict(ev.process)))
    turn.tx.respond(ev.ticket, task.id)


def _rejected(turn: Turn, ev: ToolRejected) -> None:
    problem = diagnostics.error(ev.code, ev.message)
    settle(turn.tx, turn.task, "", (problem,), is_error=True, status=OutcomeStatus.COMPLETED, code=ev.code)


def _finished(turn: Turn, ev: ToolFinished) -> None:
    """The result entry, and the document changes the body staged, in one
    commit; changes that cannot be applied fail the call instead."""
    if ev.documents:
        try:
            change_documents(turn.tx, ev.documents)
        except DocumentProblem as e:
            _failed(turn, ToolFailed(now=ev.now, task_id=ev.task_id, message=f"The tool's document update was refused: {e}"))
            return
    settle(
        turn.tx,
        turn.task,
        ev.text,
        diagnostics.ordered(ev.diagnostics, ev.truncated),
        is_error=ev.is_error,
        status=_COMPLETED,
        usage=ev.usage,
        truncated=ev.truncated,
        control=ev.control,
        reconciled=_verdict(turn.checkpoint),
    )


def _failed(turn: Turn, ev: ToolFailed) -> None:
    """A raising body: the content is the slot's durable partial output (if
    any), its message a ``tool_error`` diagnostic."""
    name = str(turn.task.input["name"])
    settle(
        turn.tx,
        turn.task,
        partial(turn.tx, turn.task),
        diagnostics.ordered((), ev.truncated, (diagnostics.error(ResultCode.TOOL_ERROR, ev.message),)),
        is_error=True,
        status=OutcomeStatus.FAILED,
        error=f"Tool {name} threw",
        code=ResultCode.TOOL_ERROR,
        truncated=ev.truncated,
        reconciled=_verdict(turn.checkpoint),
    )


def _abort(turn: Turn, _: None) -> None:
    """The abort handler (its invocation, if any, was cancelled; its owned
    work drained): the call gets the error result "Tool X was aborted"."""
    settle(
        turn.tx,
        turn.task,
        partial(turn.tx, turn.task),
        aborted(turn.tx, turn.task),
        is_error=True,
        status=OutcomeStatus.ABORTED,
        code=ResultCode.ABORTED,
    )


def _abort_hooks(turn: Turn, _: None) -> None:
    """The abort handler of a call whose agent has ``on_abort`` hooks: the
    result it would settle goes to them first (reserved in memory only: a
    crash runs the handler, and the hooks, again)."""
    tx, task = turn.tx, turn.task
    running = turn.store(TaskMove.RESERVE, durable=False)
    cp = turn.checkpoint
    conv = tx.conversations[task.conversation_id]
    tx.act(
        RunAbortHooks(
            task_id=running.id,
            conversation_id=task.conversation_id,
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            arguments=dict(cp.arguments) if isinstance(cp, (ExecuteCheckpoint, ReconcileCheckpoint)) else {},
            text=partial(tx, task),
            diagnostics=aborted(tx, task),
            extensions=system.hooked(tx.extensions, conv.agent, "on_abort"),
        )
    )


def _abort_hooked(turn: Turn, ev: ToolAbortHooked) -> None:
    """The hooks' replacement (a whole result: its text and diagnostics,
    bounded by the shell), or the handler's own result when they kept it."""
    tx, task = turn.tx, turn.task
    if ev.text is None:
        text, problems = partial(tx, task), aborted(tx, task)
    else:
        text, problems = ev.text, diagnostics.ordered(ev.diagnostics, ev.truncated)
    settle(
        tx,
        task,
        text,
        problems,
        is_error=True,
        status=OutcomeStatus.ABORTED,
        code=ResultCode.ABORTED,
        truncated=ev.truncated,
    )


# --- the table ---------------------------------------------------------------

_P, _I = ToolPhase, ToolInput
_PREPARED, _FINISHED = _I.PREPARED, _I.FINISHED  # read per call (see _PENDING)

PHASES: Mapping[tuple[enum.StrEnum, enum.StrEnum], Row] = {
    (_P.CALL, _I.RESERVE): Row(handler=_prepare, next=_P.CALL),
    (_P.CALL, _I.PREPARED): Row(handler=_prepared, next=_P.EXECUTE),
    (_P.CALL, _I.PREPARED_INVALID): Row(handler=_prepared_invalid, next=END),
    (_P.CALL, _I.REJECTED): Row(handler=_rejected, next=END),
    (_P.CALL, _I.ABORT): Row(handler=_abort, next=END),
    (_P.CALL, _I.ABORT_HOOKS): Row(handler=_abort_hooks, next=_P.CALL),
    (_P.CALL, _I.ABORT_HOOKED): Row(handler=_abort_hooked, next=END),
    (_P.EXECUTE, _I.PROCESS_STARTED): Row(handler=_process_started, next=_P.EXECUTE),
    (_P.EXECUTE, _I.PROGRESSED): Row(handler=_progressed, next=_P.EXECUTE),
    (_P.EXECUTE, _I.FINISHED): Row(handler=_finished, next=END),
    (_P.EXECUTE, _I.FAILED): Row(handler=_failed, next=END),
    (_P.EXECUTE, _I.RERUN): Row(handler=_rerun, next=_P.EXECUTE),
    (_P.EXECUTE, _I.INTERRUPTED): Row(handler=_interrupted, next=END),
    (_P.EXECUTE, _I.ABORT): Row(handler=_abort, next=END),
    (_P.EXECUTE, _I.ABORT_HOOKS): Row(handler=_abort_hooks, next=_P.EXECUTE),
    (_P.EXECUTE, _I.ABORT_HOOKED): Row(handler=_abort_hooked, next=END),
    (_P.EXECUTE, _I.RECONCILE): Row(handler=reconcile.reconcile, next=_P.RECONCILE),
    (_P.RECONCILE, _I.RECONCILE): Row(handler=reconcile.reconcile_again, next=_P.RECONCILE),
    (_P.RECONCILE, _I.INTERRUPTED): Row(handler=_interrupted, next=END),
    (_P.RECONCILE, _I.RECONCILED_DONE): Row(handler=reconcile.done, next=END),
    (_P.RECONCILE, _I.RECONCILED_NOT_DONE): Row(handler=reconcile.not_done, next=_P.EXECUTE),
    (_P.RECONCILE, _I.RECONCILED_UNKNOWN): Row(handler=reconcile.unknown, next=END),
    (_P.RECONCILE, _I.ABORT): Row(handler=_abort, next=END),
    (_P.RECONCILE, _I.ABORT_HOOKS): Row(handler=_abort_hooks, next=_P.RECONCILE),
    (_P.RECONCILE, _I.ABORT_HOOKED): Row(handler=_abort_hooked, next=END),
}
# Not in the table: the shell's verdicts at execute and the body's reports at
# call (such events are stale: their invocation ended).

MACHINE = Machine(kind=TOOL, phases=ToolPhase, inputs=ToolInput, rows=PHASES, parse=parse_tool)


# --- entry points (scheduler and events) --------------------------------------


def replay_allows_rerun(tx: Tx, task: Task, cp: ExecuteCheckpoint) -> bool:
    """An interrupted call runs again only if the promise stored with its
    intent AND the tool installed now both say ``safe``."""
    info = tx.catalog.get(str(task.input["name"]))
    current = info.replay if info is not None else Replay.UNSAFE
    return cp.replay == Replay.SAFE and current == Replay.SAFE


def on_reserve(tx: Tx, task: Task) -> None:
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    move = _I.RESERVE
    if isinstance(cp, ExecuteCheckpoint) and replay_allows_rerun(tx, task, cp):
        move = _I.RERUN
    elif isinstance(cp, (ExecuteCheckpoint, ReconcileCheckpoint)):
        move = _I.RECONCILE if reconcile.can_reconcile(tx, task) else _I.INTERRUPTED
    MACHINE.run(tx, task, cp, move)


def on_abort(tx: Tx, task: Task) -> None:
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    hooked = system.hooked(tx.extensions, tx.conversations[task.conversation_id].agent, "on_abort")
    MACHINE.run(tx, task, cp, _I.ABORT_HOOKS if hooked else _I.ABORT)


def start_prepared(tx: Tx, task_id: TaskId, owner: Task, task_input: dict[str, Json], prepared: PreparedCall) -> Task:
    """A new tool task whose call the shell prepared with the model's answer
    takes the ``(call, prepared)`` row at birth. It is built once, as the
    row's store would leave a task born pending at ``call``: reserved (the
    lifecycle table's move), at ``execute`` with the intent, started now."""
    intent = new_ExecuteCheckpoint(arguments=dict(prepared.arguments), replay=REPLAYS[prepared.replay])
    tool = new_Task(
        id=task_id,
        conversation_id=owner.conversation_id,
        kind=TOOL,
        owner=owner.id,
        input=task_input,
        status=next_task_status(_PENDING, _RESERVE),
        checkpoint=to_dict(intent),
        started_at=tx.now,
    )
    MACHINE.run(tx, tool, CALL_CHECKPOINT, _PREPARED, intent)
    return tx.tasks[task_id]


#: Inputs that only the abort handler's own invocation sends: every other
#: event for an abort-marked task is from an invocation the mark cancelled.
_ABORTING = frozenset({_I.ABORT_HOOKED})


def _event(tx: Tx, task_id: TaskId, move: ToolInput, event: object) -> bool:
    """Apply ``move`` if the task is running at a phase with a row for it;
    False for a stale event (also: a body's report for an abort-marked task,
    whose running invocation is then the abort handler's)."""
    found = MACHINE.running(tx, task_id)
    if found is None or not MACHINE.accepts(found[1], move):
        return False
    if found[0].abort_requested != (move in _ABORTING):
        return False
    MACHINE.run(tx, *found, move, event)
    return True


def on_tool_prepared(tx: Tx, ev: ToolPrepared) -> None:
    valid = ev.replay in (Replay.SAFE, Replay.UNSAFE)
    _event(tx, ev.task_id, _I.PREPARED if valid else _I.PREPARED_INVALID, ev)


def on_tool_process_started(tx: Tx, ev: ToolProcessStarted) -> None:
    if not _event(tx, ev.task_id, _I.PROCESS_STARTED, ev):
        tx.refuse(ev.ticket, Refusal.INVALID, f"Task {ev.task_id} is not executing a tool")


def on_tool_rejected(tx: Tx, ev: ToolRejected) -> None:
    _event(tx, ev.task_id, _I.REJECTED, ev)


def on_tool_progressed(tx: Tx, ev: ToolProgressed) -> None:
    _event(tx, ev.task_id, _I.PROGRESSED, ev)


def on_tool_finished(tx: Tx, ev: ToolFinished) -> None:
    _event(tx, ev.task_id, _FINISHED, ev)


def on_tool_failed(tx: Tx, ev: ToolFailed) -> None:
    _event(tx, ev.task_id, _I.FAILED, ev)


def on_tool_abort_hooked(tx: Tx, ev: ToolAbortHooked) -> None:
    _event(tx, ev.task_id, _I.ABORT_HOOKED, ev)


#: The input of each verdict of ``reconcile``.
_VERDICT_INPUT: Mapping[Verdict, ToolInput] = {
    Verdict.DONE: _I.RECONCILED_DONE,
    Verdict.NOT_DONE: _I.RECONCILED_NOT_DONE,
    Verdict.UNKNOWN: _I.RECONCILED_UNKNOWN,
}


def on_tool_reconciled(tx: Tx, ev: ToolReconciled) -> None:
    _event(tx, ev.task_id, _VERDICT_INPUT[ev.verdict], ev)
