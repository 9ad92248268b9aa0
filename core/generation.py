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
from typing import Any

import attrs

from .effects import CallModel, CancelDeferred, PollModel, Sleep, Tx
from . import tools
from .events import ModelDeferred, ModelFailed, ModelResponded, ModelStreamed, PreparedCall, TimerFired
from .handover import end_run, finish_task, hand_over, initial_generation_checkpoint, start_run
from .inbox import boundary
from .lifecycle import task_to
from .model import (
    TOOL,
    AgentConfig,
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
    Usage,
)
from .state import ToolSlot, UsageTotals

# (phase, input) -> next phase ("-" = terminal). The handlers below implement
# the rows; tests/core/test_phase_tables.py checks that the phases a task can
# be reserved at are exactly the ones with a reserve handler.
PHASES: Mapping[tuple[str, str], str] = {
    ("prepare", "reserve"): "request",
    ("request", "model_failed_retryable"): "retry",
    ("request", "model_deferred"): "poll",
    ("retry", "reserve"): "retry",
    ("retry", "timer_fired"): "prepare",
    ("poll", "reserve"): "poll",
    ("poll", "timer_fired"): "poll",
    ("poll", "model_deferred"): "poll",
    ("poll", "answer"): "-",
    ("poll", "tool_calls"): "tools",
    ("poll", "model_failed"): "-",
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
    handler = ON_RESERVE.get(task.phase or "")
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
    # A partial the dead process had committed becomes an aborted entry.
    running = task_to(task, "reserve")
    tx.put_task(running, durable=False)
    convert_partial(tx, running)
    _call_model(tx, running)


def convert_partial(tx: Tx, task: Task) -> None:
    """A committed partial answer that will never complete becomes an
    assistant entry with stop reason ``aborted`` (kept in the transcript, not
    sent to models)."""
    live = tx.conv(task.conversation_id).live
    if live.partial is None:
        return
    _assistant_entry(tx, task, live.partial, stop_reason="aborted")
    tx.set_live(task.conversation_id, attrs.evolve(live, partial=None))


def _assistant_entry(tx: Tx, task: Task, text: str, *, stop_reason: str, is_error: bool = False) -> Entry:
    """Append an assistant entry that ends no round (an error or a partial)."""
    entry = Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=task.conversation_id,
        kind=EntryKind.ASSISTANT,
        text=text,
        stop_reason=stop_reason,
        is_error=is_error,
        by_task_id=task.id,
        at=tx.now,
    )
    tx.put_entry(entry)
    return entry


def _wait_timer(tx: Tx, task: Task) -> None:
    """Recovery at ``retry``/``poll``: sleep until the stored deadline (only
    the remaining time is waited)."""
    running = task_to(task, "reserve")
    tx.put_task(running, durable=False)
    cp = task.checkpoint
    tx.act(Sleep(task_id=task.id, until=int(cp["until"] if task.phase == "retry" else cp["poll_at"])))


def on_timer_fired(tx: Tx, ev: TimerFired) -> None:
    task = tx.tasks.get(ev.task_id)
    if task is None or task.status is not TaskStatus.RUNNING:
        return
    cp = task.checkpoint
    if task.phase == "retry" and int(cp["until"]) == ev.until:
        # back to prepare with the next attempt: agent and settings changes
        # made during the backoff apply; the pass prepares it at once.
        live = tx.conv(task.conversation_id).live
        tx.set_live(task.conversation_id, attrs.evolve(live, retry_at=None, retry_error=None))
        tx.put_task(task_to(task, "interrupt", checkpoint=initial_generation_checkpoint(int(cp["attempt"]) + 1)))
    elif task.phase == "poll" and int(cp["poll_at"]) == ev.until:
        agent = tx.conv(task.conversation_id).agent
        tx.act(
            PollModel(
                task_id=task.id,
                conversation_id=task.conversation_id,
                attempt=int(cp["attempt"]),
                model=pinned_model(cp),
                handle=cp["handle"],
                cutoff=EntryId(int(cp["cutoff"])),
                tools=agent.tools,
                system=system_prompt(agent),
            )
        )


def pinned_model(checkpoint: Mapping[str, Any]) -> ModelRef:
    """The model a ``request``/``poll`` checkpoint pinned."""
    m = checkpoint["model"]
    return ModelRef(provider=m["provider"], model_id=m["model_id"])


def system_prompt(agent: AgentConfig) -> str | None:
    """The system prompt of a request: the agent's ``instructions`` as a
    tagged section (``<instructions>\n...\n</instructions>``, reference
    §3.15.2), or None when there are none."""
    if not agent.instructions:
        return None
    return f"<instructions>\n{agent.instructions}\n</instructions>"


def _call_model(tx: Tx, task: Task) -> None:
    cp = task.checkpoint
    agent = tx.conv(task.conversation_id).agent
    tx.act(
        CallModel(
            task_id=task.id,
            conversation_id=task.conversation_id,
            attempt=int(cp["attempt"]),
            model=pinned_model(cp),
            cutoff=EntryId(int(cp["cutoff"])),
            tools=agent.tools,
            system=system_prompt(agent),
        )
    )


def _expecting(tx: Tx, task_id: TaskId, attempt: int) -> Task | None:
    """The task an answer is for, if it still waits for it (``request``, or
    ``poll`` for a deferred one); None for a stale answer."""
    task = tx.tasks.get(task_id)
    if (
        task is None
        or task.status is not TaskStatus.RUNNING
        or task.phase not in ("request", "poll")
        or int(task.checkpoint.get("attempt", 0)) != attempt
    ):
        return None
    return task


def on_model_streamed(tx: Tx, ev: ModelStreamed) -> None:
    task = _expecting(tx, ev.task_id, ev.attempt)
    if task is None or task.phase != "request":
        return
    live = tx.conv(task.conversation_id).live
    tx.set_live(task.conversation_id, attrs.evolve(live, partial=ev.text))


def on_model_deferred(tx: Tx, ev: ModelDeferred) -> None:
    """Save the handle and the next poll time; after a restart the SAME
    handle is polled - a second request is never sent."""
    task = _expecting(tx, ev.task_id, ev.attempt)
    if task is None:
        return
    cp = task.checkpoint
    poll_at = ev.now + max(int(ev.poll_after_ms), 0)
    if task.phase == "poll":
        poll_at = max(poll_at, int(cp["poll_at"]) + 1)
    checkpoint = {
        "phase": "poll",
        "attempt": int(cp["attempt"]),
        "model": cp["model"],
        "cutoff": cp["cutoff"],
        "handle": ev.handle,
        "poll_at": poll_at,
    }
    polling = task_to(task, "checkpoint", checkpoint=checkpoint)
    tx.put_task(polling)
    live = tx.conv(task.conversation_id).live
    tx.set_live(task.conversation_id, attrs.evolve(live, partial=None, poll_at=poll_at))
    tx.act(Sleep(task_id=task.id, until=poll_at))


def _count_usage(tx: Tx, task: Task, usage: Usage | None) -> None:
    m = task.checkpoint.get("model") or {}
    key = f"{m.get('provider')}:{m.get('model_id')}"
    conv = tx.conv(task.conversation_id)
    old = conv.usage.models.get(key, UsageTotals())
    new = UsageTotals(
        input_tokens=old.input_tokens + (usage.input_tokens if usage else 0),
        output_tokens=old.output_tokens + (usage.output_tokens if usage else 0),
        calls=old.calls + 1,
    )
    tx.set_usage(task.conversation_id, attrs.evolve(conv.usage, models={**conv.usage.models, key: new}))


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
    _count_usage(tx, task, ev.usage)
    live = tx.conv(task.conversation_id).live
    if live.partial is not None or live.poll_at is not None:
        tx.set_live(task.conversation_id, attrs.evolve(live, partial=None, poll_at=None))
    if ev.tool_calls:
        _start_round(tx, task, entry, ev.prepared)
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


def create_tool_task(
    tx: Tx, gen: Task, assistant: EntryId, call: ToolCall, prepared: PreparedCall | None = None
) -> Task:
    """A tool task for ``call``, owned by the generation. Normally born at
    ``call``; a call the shell already prepared (``prepared``) is born at
    ``execute {arguments, replay}`` - its intent is stored by this very commit
    - and runs at once (one event and one commit fewer per call)."""
    tool = Task(
        id=TaskId(tx.alloc_id()),
        conversation_id=gen.conversation_id,
        kind=TOOL,
        owner=gen.id,
        input={"assistant": assistant, "call_id": call.id, "name": call.name},
        checkpoint={"phase": "call"},
    )
    if prepared is not None and prepared.replay in ("safe", "unsafe"):
        tool = task_to(
            tool,
            "reserve",
            checkpoint={"phase": "execute", "arguments": dict(prepared.arguments), "replay": prepared.replay},
            started_at=tx.now,
        )
        tx.put_task(tool)
        tools.run(tx, tool)
        return tool
    tx.put_task(tool)
    return tool


def _start_round(tx: Tx, task: Task, entry: Entry, prepared: tuple[PreparedCall | None, ...] = ()) -> None:
    sequential = _is_sequential(tx, task, entry.tool_calls)
    slots: list[ToolSlot] = []
    created: list[TaskId] = []
    pending: list[str] = []
    for i, call in enumerate(entry.tool_calls):
        if sequential and created:
            slots.append(ToolSlot(call_id=call.id, name=call.name))
            pending.append(call.id)
            continue
        tool = create_tool_task(tx, task, entry.id, call, prepared[i] if i < len(prepared) else None)
        created.append(tool.id)
        status = "running" if tool.phase == "execute" else "pending"
        slots.append(ToolSlot(call_id=call.id, name=call.name, task_id=tool.id, status=status))
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
    """Classify a failure: retryable (and retries left) -> durable backoff;
    ``no_model`` / ``context_overflow`` / anything else -> the run ends with
    its inputs ``unanswered`` and the provider's message as detail."""
    task = _expecting(tx, ev.task_id, ev.attempt)
    if task is None:
        return
    convert_partial(tx, task)  # what was streamed before the failure is kept
    live = tx.conv(task.conversation_id).live
    if live.poll_at is not None:
        tx.set_live(task.conversation_id, attrs.evolve(live, poll_at=None))
    policy = tx.settings.retry
    attempt = int(task.checkpoint.get("attempt", 1))
    if ev.reason != "no_model":
        _count_usage(tx, task, None)
        _assistant_entry(tx, task, ev.message, stop_reason="error", is_error=True)
    if ev.retryable and ev.reason == "model_error" and policy.enabled and attempt <= policy.max_retries:
        until = ev.now + policy.delay_ms(attempt, ev.retry_after_ms)
        checkpoint = {"phase": "retry", "attempt": attempt, "until": until}
        tx.put_task(task_to(task, "checkpoint", checkpoint=checkpoint))
        live = tx.conv(task.conversation_id).live
        tx.set_live(task.conversation_id, attrs.evolve(live, retry_at=until, retry_error=ev.message))
        tx.act(Sleep(task_id=task.id, until=until))
        return
    message = ev.message
    if ev.retryable and ev.reason == "model_error" and policy.enabled:
        message = f"{ev.message} (gave up after {attempt} attempts)"
    _fail(tx, task, reason=ev.reason, message=message)


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
    convert_partial(tx, task)
    if task.phase == "poll":
        tx.act(
            CancelDeferred(
                task_id=task.id,
                model=pinned_model(cp),
                handle=cp["handle"],
            )
        )
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


ON_RESERVE: Mapping[str, Callable[[Tx, Task], None]] = {
    "prepare": _prepare,
    "request": _resend,
    "retry": _wait_timer,
    "poll": _wait_timer,
    "tools": _finish_round,
}
