"""The tool task ``pi.tool``: one tool call, with intent before effect.

Theory of operation
-------------------
Input ``{assistant, call_id, name}`` names the call inside an assistant entry.
Checkpoints (``phase``):

======== ========================================================================
call     nothing decided: resolve the tool, validate its arguments, run
         before-tool hooks (the shell's ``PrepareTool``). Safe to redo.
execute  ``{arguments, replay}`` - the durable *intent*: the final arguments and
         the replay promise the tool made when it was chosen. Stored BEFORE the
         body runs; a crash after this point leaves "may have partially run".
======== ========================================================================

Transitions (``PHASES`` is the table; ``ON_RESERVE`` maps each phase a
task can be reserved at to its handler):

- reserve at ``call`` -> ``PrepareTool`` (reservation kept in memory only: if
  the process dies now, ``call`` simply runs again).
- ``ToolPrepared`` -> commit ``running execute{arguments, replay}`` + ``RunTool``.
- ``ToolRejected`` (unknown tool, invalid arguments, blocked) -> error result,
  outcome ``completed`` (no intent was ever stored; nothing ran).
- ``ToolFinished`` -> result entry + task ``completed`` + slot done - one commit.
- ``ToolFailed`` (the body raised) -> error result, outcome ``failed`` (the
  round continues: the generation waits with policy allSettled).
- reserve at ``execute`` (only after a restart) -> re-run with the stored
  arguments if the stored replay AND the currently installed tool both say
  ``safe``; otherwise settle the error result
  "Tool X was interrupted and may have partially run", outcome ``failed``.

Invariants: ``UnsafeToolRunsAtMostOnce``, ``OneResultPerCall`` (a task settles
its call exactly once), ``IntentBeforeEffect``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from .effects import PrepareTool, Refusal, RunTool, Tx
from .events import ToolFailed, ToolFinished, ToolPrepared, ToolProcessStarted, ToolRejected
from .handover import fault, finish_task
from .lifecycle import task_to
from .state import UsageTotals
from .model import (
    Entry,
    EntryId,
    EntryKind,
    Outcome,
    OutcomeStatus,
    Task,
    TaskId,
    TaskStatus,
    Usage,
)

PHASES: Mapping[tuple[str, str], str] = {
    ("call", "reserve"): "call",
    ("call", "prepared"): "execute",
    ("call", "rejected"): "-",
    ("execute", "process_started"): "execute",
    ("execute", "finished"): "-",
    ("execute", "failed"): "-",
    ("execute", "reserve_rerun"): "execute",
    ("execute", "reserve_interrupted"): "-",
}


def interrupted_message(name: str) -> str:
    return f"Tool {name} was interrupted and may have partially run"


def on_reserve(tx: Tx, task: Task) -> None:
    handler = ON_RESERVE.get(task.phase or "")
    if handler is None:
        fault(tx, task, f"Task {task.id} has unknown phase {task.phase!r}")
        return
    handler(tx, task)


def _prepare(tx: Tx, task: Task) -> None:
    running = task_to(task, "reserve", started_at=task.started_at or tx.now)
    tx.put_task(running, durable=False)
    tx.act(
        PrepareTool(
            task_id=task.id,
            conversation_id=task.conversation_id,
            assistant_entry_id=EntryId(int(task.input["assistant"])),
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            tools=tx.conv(task.conversation_id).agent.tools,
        )
    )


def _recover_execute(tx: Tx, task: Task) -> None:
    name = str(task.input["name"])
    stored = task.checkpoint.get("replay")
    info = tx.catalog.get(name)
    current = info.replay if info is not None else "unsafe"
    running = task_to(task, "reserve")
    if stored == "safe" and current == "safe":
        tx.put_task(running, durable=False)
        _run(tx, running)
        return
    message = interrupted_message(name)
    _settle(tx, running, message, is_error=True, status=OutcomeStatus.FAILED, error=message)


def run(tx: Tx, task: Task) -> None:
    """Emit ``RunTool`` for a task whose ``execute`` intent is (being) stored."""
    _run(tx, task)


def _run(tx: Tx, task: Task) -> None:
    tx.act(
        RunTool(
            task_id=task.id,
            conversation_id=task.conversation_id,
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            arguments=dict(task.checkpoint.get("arguments", {})),
            cwd=tx.conv(task.conversation_id).agent.cwd,
        )
    )


def _expecting(tx: Tx, task_id: TaskId, phase: str) -> Task | None:
    task = tx.tasks.get(task_id)
    if task is None or task.status is not TaskStatus.RUNNING or task.phase != phase:
        return None
    return task


def on_tool_prepared(tx: Tx, ev: ToolPrepared) -> None:
    task = _expecting(tx, ev.task_id, "call")
    if task is None:
        return
    if ev.replay not in ("safe", "unsafe"):
        fault(tx, task, f"Task {task.id}: replay must be 'safe' or 'unsafe', not {ev.replay!r}")
        return
    execute = task_to(
        task,
        "checkpoint",
        checkpoint={"phase": "execute", "arguments": dict(ev.arguments), "replay": ev.replay},
    )
    tx.put_task(execute)
    _set_slot(tx, execute, status="running")
    _run(tx, execute)


def on_tool_process_started(tx: Tx, ev: ToolProcessStarted) -> None:
    """Row ``(execute, process_started)``: the body started an OS process
    group; record it in the ``execute`` checkpoint (durable before the
    command runs), so an open after a crash can kill what was left running."""
    task = _expecting(tx, ev.task_id, "execute")
    if task is None:
        tx.refuse(ev.ticket, Refusal.INVALID, f"Task {ev.task_id} is not executing a tool")
        return
    tx.put_task(task_to(task, "checkpoint", checkpoint={**task.checkpoint, "process": dict(ev.process)}))
    tx.respond(ev.ticket, task.id)


def on_tool_rejected(tx: Tx, ev: ToolRejected) -> None:
    task = _expecting(tx, ev.task_id, "call")
    if task is None:
        return
    _settle(tx, task, ev.message, is_error=True, status=OutcomeStatus.COMPLETED, code=ev.code)


def on_tool_finished(tx: Tx, ev: ToolFinished) -> None:
    task = _expecting(tx, ev.task_id, "execute")
    if task is None:
        return
    _settle(tx, task, ev.text, is_error=ev.is_error, status=OutcomeStatus.COMPLETED, usage=ev.usage)


def on_tool_failed(tx: Tx, ev: ToolFailed) -> None:
    task = _expecting(tx, ev.task_id, "execute")
    if task is None:
        return
    name = str(task.input["name"])
    _settle(
        tx,
        task,
        ev.message,
        is_error=True,
        status=OutcomeStatus.FAILED,
        error=f"Tool {name} threw",
        code="tool_error",
    )


def _settle(
    tx: Tx,
    task: Task,
    text: str,
    *,
    is_error: bool,
    status: OutcomeStatus,
    error: str | None = None,
    code: str | None = None,
    usage: Usage | None = None,
) -> None:
    """One commit: the result entry, the task terminal, the slot done (and
    the tool's usage, when it reported some, added to ``pi.usage``)."""
    entry = Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=task.conversation_id,
        kind=EntryKind.TOOL_RESULT,
        text=text,
        tool_call_id=str(task.input["call_id"]),
        tool_name=str(task.input["name"]),
        is_error=is_error,
        by_task_id=task.id,
        at=tx.now,
        data={"code": code} if code else None,
    )
    tx.put_entry(entry)
    finish_task(
        tx,
        task,
        Outcome(
            status=status,
            result={"entry_id": entry.id},
            error={"message": error} if error is not None else None,
        ),
    )
    _set_slot(tx, task, status="done", entry_id=entry.id)
    if usage is not None:
        name = str(task.input["name"])
        conv = tx.conv(task.conversation_id)
        old = conv.usage.tools.get(name, UsageTotals())
        new = UsageTotals(
            input_tokens=old.input_tokens + usage.input_tokens,
            output_tokens=old.output_tokens + usage.output_tokens,
            calls=old.calls + 1,
        )
        tx.set_usage(task.conversation_id, attrs.evolve(conv.usage, tools={**conv.usage.tools, name: new}))


def _set_slot(tx: Tx, task: Task, *, status: str, entry_id: EntryId | None = None) -> None:
    live = tx.conv(task.conversation_id).live
    if live.tools is None:
        return
    tools = tuple(
        attrs.evolve(s, status=status, entry_id=entry_id if entry_id is not None else s.entry_id)
        if s.task_id == task.id
        else s
        for s in live.tools
    )
    tx.set_live(task.conversation_id, attrs.evolve(live, tools=tools))


ON_RESERVE: Mapping[str, Callable[[Tx, Task], None]] = {
    "call": _prepare,
    "execute": _recover_execute,
}


def aborted_message(name: str) -> str:
    return f"Tool {name} was aborted"


def on_abort(tx: Tx, task: Task) -> None:
    """The abort handler (its invocation, if any, was cancelled; its owned
    work drained): the call gets the error result "Tool X was aborted" and the
    task ends ``aborted``. Nothing the body did is rolled back."""
    message = aborted_message(str(task.input["name"]))
    _settle(tx, task, message, is_error=True, status=OutcomeStatus.ABORTED, code="aborted")
