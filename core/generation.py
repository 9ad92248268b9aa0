"""The generation task ``pi.generation``: one model turn of a run.

Theory of operation
-------------------
Checkpoints (``phase``):

========== ======================================================================
prepare    ``{attempt}`` - nothing pinned yet.
request    ``{attempt, model, cutoff}`` - the intent: which model, and the
           newest entry the request may see. A recovered task re-sends exactly
           this request (same model, same cutoff), it never re-prepares.
tools      ``{assistant, tools, pending}`` held inside ``waiting`` on the round's
           tool tasks (policy allSettled); ``pending`` keeps the calls of a
           sequential batch that have no task yet.
========== ======================================================================

Transitions (``PHASES`` below is the table; handlers are named after its rows):

- reserve at ``prepare`` -> commit ``running request{model, cutoff}`` + CallModel.
  No model configured -> the run fails ``no_model``.
- reserve at ``request`` (recovery) -> CallModel with the pinned values.
- ``ModelResponded`` without tool calls -> *answer*: assistant entry, inputs
  ``done`` with ``answer_entry_id``, run ended, task ``completed`` - one commit;
  then the final boundary may start the next run.
- ``ModelResponded`` with tool calls -> *tool round*: assistant entry + one
  ``pi.tool`` task per call (sequential: only the first) + ``waiting tools`` -
  one commit.
- ``ModelFailed`` -> the error assistant entry, inputs ``unanswered`` with the
  reason (``model_error``/``no_model``) and the provider's message, task
  ``failed`` - one commit.
- reserve at ``tools`` (every tool task terminal) -> the next sequential call,
  or the hand-over to a successor generation (``handover.py``).

Invariants: ``IntentBeforeRequest`` (CallModel only after ``request`` is
stored), ``RoundIsAtomic`` (assistant entry and its tool tasks in one commit).
Events for a task that is not running at the expected phase and attempt are
stale (from an invocation that ended) and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from .effects import CallModel, Tx
from .events import ModelFailed, ModelResponded
from .handover import end_run, finish_task, hand_over, start_run
from .inbox import boundary
from .lifecycle import task_to
from .model import (
    TOOL,
    EntryId,
    Entry,
    EntryKind,
    ModelRef,
    Outcome,
    OutcomeStatus,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    ToolCall,
)
from .state import Live, ToolSlot

# (phase, input) -> next phase ("-" = terminal). The handlers below implement
# the rows; tests check that every row is reachable and nothing else is.
PHASES: Mapping[tuple[str, str], str] = {
    ("prepare", "reserve"): "request",
    ("prepare", "no_model"): "-",
    ("request", "reserve"): "request",
    ("request", "answer"): "-",
    ("request", "tool_calls"): "tools",
    ("request", "model_failed"): "-",
    ("tools", "reserve_pending"): "tools",
    ("tools", "reserve_done"): "-",
}


def on_reserve(tx: Tx, task: Task) -> None:
    """The scheduler picked this generation task."""
    handler = _ON_RESERVE.get(task.phase or "")
    if handler is None:
        from .handover import fault

        fault(tx, task, f"Task {task.id} has unknown phase {task.phase!r}")
        return
    handler(tx, task)


def _prepare(tx: Tx, task: Task) -> None:
    conv = tx.conv(task.conversation_id)
    attempt = int(task.checkpoint.get("attempt", 1))
    model = conv.agent.model
    if model is None:
        _fail(tx, task, reason="no_model", message="No model is configured")
        return
    # Ids are global and increasing: every entry the conversation has now has
    # an id below next_id, every later one above it.
    cutoff = tx.next_id - 1
    checkpoint = {
        "phase": "request",
        "attempt": attempt,
        "model": {"provider": model.provider, "model_id": model.model_id},
        "cutoff": cutoff,
    }
    running = task_to(task, "reserve", checkpoint=checkpoint, started_at=task.started_at or tx.now)
    tx.put_task(running)
    tx.set_live(task.conversation_id, attrs.evolve(conv.live, attempt=attempt))
    _call_model(tx, running)


def _resend(tx: Tx, task: Task) -> None:
    # Recovery: the intent is stored; reserve in memory only and re-send it.
    running = task_to(task, "reserve")
    tx.put_task(running, durable=False)
    _call_model(tx, running)


def _call_model(tx: Tx, task: Task) -> None:
    cp = task.checkpoint
    m = cp["model"]
    tx.act(
        CallModel(
            task_id=task.id,
            conversation_id=task.conversation_id,
            attempt=int(cp["attempt"]),
            model=ModelRef(provider=m["provider"], model_id=m["model_id"]),
            cutoff=EntryId(int(cp["cutoff"])),
        )
    )


def _expecting(tx: Tx, task_id: TaskId, attempt: int) -> Task | None:
    task = tx.tasks.get(task_id)
    if (
        task is None
        or task.status is not TaskStatus.RUNNING
        or task.phase != "request"
        or int(task.checkpoint.get("attempt", 0)) != attempt
    ):
        return None
    return task


def on_model_responded(tx: Tx, ev: ModelResponded) -> None:
    task = _expecting(tx, ev.task_id, ev.attempt)
    if task is None:
        return  # stale: that invocation has ended
    entry_id = EntryId(tx.alloc_id())
    entry = Entry(
        id=entry_id,
        conversation_id=task.conversation_id,
        kind=EntryKind.ASSISTANT,
        text=ev.text,
        tool_calls=_unique_call_ids(entry_id, ev.tool_calls),
        stop_reason="tool_use" if ev.tool_calls else ev.stop_reason,
        usage=ev.usage,
        by_task_id=task.id,
        at=ev.now,
    )
    tx.put_entry(entry)
    if ev.tool_calls:
        _start_round(tx, task, entry)
    else:
        _answer(tx, task, entry)


def _unique_call_ids(entry_id: EntryId, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """Call ids key results and slots: a provider that sends an empty or a
    repeated id gets a deterministic replacement (``call_<entry>_<index>``)."""
    seen: set[str] = set()
    out = []
    for i, call in enumerate(calls):
        if not call.id or call.id in seen:
            call = attrs.evolve(call, id=f"call_{entry_id}_{i}")
        seen.add(call.id)
        out.append(call)
    return tuple(out)


def _answer(tx: Tx, task: Task, entry: Entry) -> None:
    cid = task.conversation_id
    end_run(tx, task, status=SubmissionStatus.DONE, answer=entry.id)
    finish_task(tx, task, Outcome(status=OutcomeStatus.COMPLETED, result={"entry_id": entry.id}))
    placed = boundary(tx, cid, final=True)
    if placed:
        start_run(tx, cid, placed)


def _is_sequential(tx: Tx, task: Task, calls: tuple[ToolCall, ...]) -> bool:
    if tx.conv(task.conversation_id).agent.tool_execution == "sequential":
        return True
    for call in calls:
        info = tx.catalog.get(call.name)
        if info is not None and info.execution_mode == "sequential":
            return True
    return False


def create_tool_task(tx: Tx, gen: Task, assistant: EntryId, call: ToolCall) -> Task:
    tool = Task(
        id=TaskId(tx.alloc_id()),
        conversation_id=gen.conversation_id,
        kind=TOOL,
        owner=gen.id,
        input={"assistant": assistant, "call_id": call.id, "name": call.name},
        checkpoint={"phase": "call"},
    )
    tx.put_task(tool)
    return tool


def _start_round(tx: Tx, task: Task, entry: Entry) -> None:
    sequential = _is_sequential(tx, task, entry.tool_calls)
    slots: list[ToolSlot] = []
    created: list[TaskId] = []
    pending: list[str] = []
    for call in entry.tool_calls:
        if sequential and created:
            slots.append(ToolSlot(call_id=call.id, name=call.name))
            pending.append(call.id)
            continue
        tool = create_tool_task(tx, task, entry.id, call)
        created.append(tool.id)
        slots.append(ToolSlot(call_id=call.id, name=call.name, task_id=tool.id))
    tx.put_task(
        task_to(
            task,
            "wait",
            checkpoint={
                "phase": "tools",
                "assistant": entry.id,
                "tools": list(created),
                "pending": pending,
            },
            on=tuple(created),
        )
    )
    live = tx.conv(task.conversation_id).live
    tx.set_live(task.conversation_id, attrs.evolve(live, tools=tuple(slots), attempt=None))


def _finish_round(tx: Tx, task: Task) -> None:
    cp = task.checkpoint
    assistant = EntryId(int(cp["assistant"]))
    pending = list(cp.get("pending", []))
    if pending:
        _next_sequential(tx, task, assistant, pending)
        return
    cid = task.conversation_id
    steered = boundary(tx, cid, final=False)
    hand_over(tx, task_to(task, "reserve"), assistant, steered)


def _next_sequential(tx: Tx, task: Task, assistant: EntryId, pending: list[str]) -> None:
    live = tx.conv(task.conversation_id).live
    slots = live.tools or ()
    call_id = pending[0]
    slot = next(s for s in slots if s.call_id == call_id)
    call = ToolCall(id=call_id, name=slot.name)
    tool = create_tool_task(tx, task, assistant, call)
    tx.set_live(
        task.conversation_id,
        attrs.evolve(
            live,
            tools=tuple(attrs.evolve(s, task_id=tool.id) if s.call_id == call_id else s for s in slots),
        ),
    )
    tools = [*task.checkpoint.get("tools", []), tool.id]
    waiting = task_to(task, "reserve")
    tx.put_task(
        task_to(
            waiting,
            "wait",
            checkpoint={"phase": "tools", "assistant": assistant, "tools": tools, "pending": pending[1:]},
            on=(tool.id,),
        )
    )


def on_model_failed(tx: Tx, ev: ModelFailed) -> None:
    task = _expecting(tx, ev.task_id, ev.attempt)
    if task is None:
        return
    if ev.reason != "no_model":
        tx.put_entry(
            Entry(
                id=EntryId(tx.alloc_id()),
                conversation_id=task.conversation_id,
                kind=EntryKind.ASSISTANT,
                text=ev.message,
                stop_reason="error",
                is_error=True,
                by_task_id=task.id,
                at=ev.now,
            )
        )
    _fail(tx, task, reason=ev.reason, message=ev.message)


def _fail(tx: Tx, task: Task, *, reason: str, message: str) -> None:
    """End the run without an answer: inputs ``unanswered/<reason>``, task
    ``failed {message, detail: {reason}}``. The inbox is left alone."""
    if task.status is TaskStatus.PENDING:
        task = task_to(task, "reserve")
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=reason, detail=message)
    finish_task(
        tx,
        task,
        Outcome(status=OutcomeStatus.FAILED, error={"message": message, "detail": {"reason": reason}}),
    )


def on_abort(tx: Tx, task: Task) -> None:
    """The abort handler (runs once the round's tool tasks are terminal):
    every call of a sequential batch that never got a task is answered
    "Tool X was aborted"; the run's inputs settle ``unanswered/aborted``; the
    task ends ``aborted``."""
    cid = task.conversation_id
    cp = task.checkpoint
    if task.phase == "tools" and cp.get("pending"):
        live = tx.conv(cid).live
        names = {s.call_id: s.name for s in live.tools or ()}
        for call_id in cp["pending"]:
            name = names.get(call_id, "unknown")
            entry = Entry(
                id=EntryId(tx.alloc_id()),
                conversation_id=cid,
                kind=EntryKind.TOOL_RESULT,
                text=f"Tool {name} was aborted",
                tool_call_id=call_id,
                tool_name=name,
                is_error=True,
                by_task_id=task.id,
                at=tx.now,
                data={"code": "aborted"},
            )
            tx.put_entry(entry)
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason="aborted")
    finish_task(tx, task, Outcome(status=OutcomeStatus.ABORTED))


_ON_RESERVE: Mapping[str, Callable[[Tx, Task], None]] = {
    "prepare": _prepare,
    "request": _resend,
    "tools": _finish_round,
}
