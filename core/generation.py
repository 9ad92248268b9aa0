"""The generation task ``pi.generation``: one model turn of a run.

Theory of operation
-------------------
``MACHINE`` below is the kind's phase table; every decision about a
generation task is one of its rows (phases.py applies them: the handler
decides, the row says which phase comes next). Checkpoints are the typed
records of checkpoints.py:

========== ======================================================================
prepare    ``attempt`` - nothing pinned yet (``compacted...``: its own
           blocking compaction, see checkpoints.py).
request    ``attempt, model, cutoff`` - the intent: which model, and the newest
           entry the request may see. A recovered task re-sends exactly this
           request (same model, same cutoff), it never re-prepares.
retry      ``attempt, until`` - a retryable failure is waited out (durable
           backoff: after a restart only the remaining time is waited).
poll       ``attempt, model, cutoff, handle, poll_at`` - a deferred answer is
           fetched by its saved handle; a second request is never sent.
tools      ``assistant, tools, pending`` held inside ``waiting`` on the round's
           tool tasks (policy allSettled); ``pending`` keeps the calls of a
           sequential batch that have no task yet (rounds.py).
========== ======================================================================

The rows' effects:

- ``(prepare, reserve)`` -> commit ``running request{model, cutoff}`` +
  ``CallModel``; ``(prepare, no_model)`` -> the run fails ``no_model``.
- ``(prepare, measure)`` (a known window, thresholds.py) -> ``MeasureContext``;
  its answer is ``over_threshold`` (a blocking compaction it owns, waiting at
  prepare, same attempt), or ``measured`` / ``measured_render`` (a background
  compaction above the background threshold, then prepare as usual, or the
  sections are rendered first).
- ``(request, reserve)`` (recovery) -> ``CallModel`` with the pinned values.
- ``answer`` -> assistant entry, inputs ``done`` with ``answer_entry_id``, run
  ended, task ``completed`` - one commit; then the final boundary may start
  the next run.
- ``tool_calls`` -> the tool round (rounds.py): assistant entry + one
  ``pi.tool`` task per call + ``waiting tools`` - one commit.
- ``model_failed`` -> the error assistant entry, inputs ``unanswered`` with
  the reason and the provider's message, task ``failed`` - one commit;
  ``model_failed_retryable`` (retries left) -> ``retry`` + ``Sleep``, and
  ``(retry, timer_fired)`` goes back to ``prepare`` with the next attempt.
- ``model_overflow`` (first overflow) -> error entry + a blocking compaction
  it owns, ``waiting prepare`` on it; resumed, it re-prepares and re-sends, or
  ``uncompacted`` fails the run (specs/generation.md).
- ``abort`` (every phase; the round's tool tasks are terminal by then) ->
  unstarted sequential calls answered "aborted", inputs
  ``unanswered/aborted``, task ``aborted``.

Invariants: ``IntentBeforeRequest`` (CallModel only after ``request`` is
stored), ``RoundIsAtomic`` (assistant entry and its tool tasks in one commit).
Events for a task that is not running at a phase with a row for them, or for
another attempt, are stale (from an invocation that ended) and ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .live import LiveMove, live_to
from . import compaction_task, diagnostics, rounds, system, thresholds, yields
from .checkpoints import (
    GenerationPhase,
    PollCheckpoint,
    PrepareCheckpoint,
    RequestCheckpoint,
    RetryCheckpoint,
    ToolsCheckpoint,
    parse_generation,
)
from .answers import assistant_entry, convert_partial, fail
from .draft import Tx
from .effects import RenderSystem, CallModel, CancelDeferred, PollModel, Sleep
from .events import AfterToolsRan, ContextMeasured, ModelDeferred, ModelFailed, ModelResponded, ModelStreamed, SystemRendered
from .events import TimerFired
from .lifecycle import TaskMove
from .record_makers import new_CallModel, new_RequestCheckpoint  # (X(...) without the type call's dict: issue 11 item 2)
from .model import (
    GENERATION,
    Entry,
    EntryId,
    EntryKind,
    Outcome,
    OutcomeStatus,
    Reason,
    ResultCode,
    StopReason,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    Usage,
)
from .phases import END, Machine, Row, Turn
from .runs import end_run
from .settlement import finish_task


# isinstance() targets for rows shared by two phases (tuples: cheaper than unions).
_ASKED = (RequestCheckpoint, PollCheckpoint)
_TIMED = (RetryCheckpoint, PollCheckpoint)


class GenerationInput(enum.StrEnum):
    """What can happen to a generation task (the inputs of ``MACHINE``)."""

    #: The scheduler picked it (at prepare: a model is configured).
    RESERVE = "reserve"
    #: Picked at prepare, but the conversation has no model.
    NO_MODEL = "no_model"
    #: Picked at prepare; the agent's extension sections need rendering first.
    RENDER = "render"
    #: Picked at prepare; the model's window is known: measure the context first.
    MEASURE = "measure"
    #: Measured above ``window - reserve_tokens``: compact before the request.
    OVER_THRESHOLD = "over_threshold"
    #: Measured below it, no sections to render: prepare the request.
    MEASURED = "measured"
    #: Measured below it; the agent's extension sections need rendering first.
    MEASURED_RENDER = "measured_render"
    #: The shell rendered the sections (``SystemRendered``).
    RENDERED = "rendered"
    #: A partial of the answer streamed in.
    STREAMED = "streamed"
    #: The model answered without tool calls.
    ANSWER = "answer"
    #: The model answered with tool calls.
    TOOL_CALLS = "tool_calls"
    #: The provider will answer later (a handle to poll).
    DEFERRED = "model_deferred"
    #: The request failed for good (or no retries are left).
    FAILED = "model_failed"
    #: The request failed retryably and retries are left.
    FAILED_RETRYABLE = "model_failed_retryable"
    #: The context was too long, and this generation has not compacted yet.
    OVERFLOW = "model_overflow"
    #: Picked at prepare after an overflow compaction that placed nothing.
    UNCOMPACTED = "uncompacted"
    #: The saved deadline (backoff end, next poll) arrived.
    TIMER_FIRED = "timer_fired"
    #: Picked at tools, with calls of a sequential batch left.
    NEXT_CALL = "next_call"
    #: Picked at tools, with every call settled.
    ROUND_DONE = "round_done"
    #: Picked at tools, with every call settled and ``after_tools`` hooks selected.
    AFTER_TOOLS = "after_tools"
    #: The ``after_tools`` hooks ran (``AfterToolsRan``).
    AFTER_TOOLS_RAN = "after_tools_ran"
    #: Its abort handler runs (abort-marked, nothing below it live).
    ABORT = "abort"


# Members read once for the per-event and per-round paths (a member read
# through its enum class goes through EnumType's __getattr__ hook: ~1,000
# machine instructions, where a global is ~20).
_RUNNING, _RESERVE, _CHECKPOINT, _ASK = TaskStatus.RUNNING, TaskMove.RESERVE, TaskMove.CHECKPOINT, LiveMove.ASK
_I_RESERVE, _NEXT_CALL, _ROUND_DONE = GenerationInput.RESERVE, GenerationInput.NEXT_CALL, GenerationInput.ROUND_DONE
_TOOL_CALLS, _ANSWER, _STREAMED = GenerationInput.TOOL_CALLS, GenerationInput.ANSWER, GenerationInput.STREAMED
_STREAM = LiveMove.STREAM  # (every streamed partial)


# --- the rows' handlers ------------------------------------------------------


def _render(turn: Turn, _: None) -> None:
    """Row ``(prepare, render)``: ask the shell to render the agent's
    extension sections (host code); the reservation stays in memory."""
    tx, task = turn.tx, turn.task
    if task.status is not _RUNNING:  # measured first: reserved already
        turn.store(_RESERVE, durable=False, started_at=task.started_at or tx.now)
    agent = tx.conversations[task.conversation_id].agent
    extensions = system.sectioned(tx.extensions, agent)
    tx.act(RenderSystem(task_id=task.id, conversation_id=task.conversation_id, extensions=extensions))


def _measured(turn: Turn, ev: ContextMeasured) -> None:
    """Row ``(prepare, measured[_render])``: a background compaction if over
    its threshold, then prepare (or render the sections first)."""
    thresholds.background(turn.tx, turn.task.conversation_id, ev.tokens)
    if turn.next is GenerationPhase.PREPARE:
        _render(turn, None)
    else:
        _prepare(turn, None)


def _prepare(turn: Turn, ev: SystemRendered | None) -> None:
    """Record what the model will be shown (system.py), pin model and cutoff
    (the intent), then call the model."""
    tx, task = turn.tx, turn.task
    cp = turn.checkpoint
    assert isinstance(cp, PrepareCheckpoint)
    conv = tx.conversations[task.conversation_id]
    model = conv.agent.model
    assert model is not None  # classified NO_MODEL otherwise
    system.prepare(tx, conv, task.id, () if ev is None else ev.sections, () if ev is None else ev.failed)
    # Ids are global and increasing: every entry the conversation has now has
    # an id below next_id, every later one above it.
    request = new_RequestCheckpoint(
        attempt=cp.attempt, model=model, cutoff=EntryId(tx.next_id - 1), compacted=cp.compacted, threshold=cp.threshold
    )
    move = _CHECKPOINT if task.status is _RUNNING else _RESERVE  # rendered: running
    running = turn.store(move, request, started_at=task.started_at or tx.now)
    tx.set_live(task.conversation_id, live_to(conv.live, _ASK, attempt=cp.attempt))
    _call_model(tx, running, request)


def _no_model(turn: Turn, _: None) -> None:
    fail(turn.tx, turn.task, reason=Reason.NO_MODEL, message="No model is configured")


def _resend(turn: Turn, _: None) -> None:
    """Recovery: the intent is stored; reserve in memory only and re-send it.
    A partial the dead process had committed becomes an aborted entry."""
    cp = turn.checkpoint
    assert isinstance(cp, RequestCheckpoint)
    running = turn.store(TaskMove.RESERVE, durable=False)
    convert_partial(turn.tx, running)
    _call_model(turn.tx, running, cp)


def _wait_timer(turn: Turn, _: None) -> None:
    """Recovery at ``retry``/``poll``: sleep until the stored deadline (only
    the remaining time is waited)."""
    turn.store(TaskMove.RESERVE, durable=False)
    turn.tx.act(Sleep(task_id=turn.task.id, until=_deadline(turn)))


def _deadline(turn: Turn) -> int:
    cp = turn.checkpoint
    assert isinstance(cp, _TIMED)
    return cp.until if isinstance(cp, RetryCheckpoint) else cp.poll_at


def _retry(turn: Turn, _: TimerFired) -> None:
    """The backoff ended: back to prepare with the next attempt (agent and
    settings changes made during the backoff apply; the pass prepares it at
    once)."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, RetryCheckpoint)
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, LiveMove.RETRY, retry_at=None, retry_error=None))
    turn.store(TaskMove.RETRY, PrepareCheckpoint(attempt=cp.attempt + 1, compacted=cp.compacted, threshold=cp.threshold))


def _poll(turn: Turn, _: TimerFired) -> None:
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, PollCheckpoint)
    tools, system_text = system.request_view(tx, tx.conversations[task.conversation_id])
    tx.act(
        PollModel(
            task_id=task.id,
            conversation_id=task.conversation_id,
            attempt=cp.attempt,
            model=cp.model,
            handle=cp.handle,
            cutoff=cp.cutoff,
            tools=tools,
            system=system_text,
            extensions=tx.conversations[task.conversation_id].agent.extensions,
        )
    )


def _streamed(turn: Turn, ev: ModelStreamed) -> None:
    """The partial grows by ``ev.text`` at ``ev.offset`` (an offset past the
    partial the core holds is not this stream's: ignored)."""
    live = turn.tx.conversations[turn.task.conversation_id].live
    current = live.partial or ""
    if 0 <= ev.offset <= len(current):
        partial = current[: ev.offset] + ev.text
        turn.tx.set_live(turn.task.conversation_id, live_to(live, _STREAM, partial=partial))


def _deferred(turn: Turn, ev: ModelDeferred) -> None:
    """Save the handle and the next poll time; after a restart the SAME
    handle is polled - a second request is never sent."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, _ASKED)
    poll_at = ev.now + max(int(ev.poll_after_ms), 0)
    if isinstance(cp, PollCheckpoint):
        poll_at = max(poll_at, cp.poll_at + 1)
    polling = PollCheckpoint(
        attempt=cp.attempt,
        model=cp.model,
        cutoff=cp.cutoff,
        handle=ev.handle,
        poll_at=poll_at,
        compacted=cp.compacted,
        threshold=cp.threshold,
    )
    turn.store(TaskMove.CHECKPOINT, polling)
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, LiveMove.DEFER, partial=None, poll_at=poll_at))
    tx.act(Sleep(task_id=task.id, until=poll_at))


def _tool_calls(turn: Turn, ev: ModelResponded) -> None:
    entry = yields.responded(turn, ev)
    rounds.start_round(turn, entry, ev.prepared)


def _backoff(turn: Turn, ev: ModelFailed) -> None:
    """A retryable failure with retries left: a durable backoff."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, _ASKED)
    _failure_entry(turn, ev)
    until = ev.now + tx.settings.retry.delay_ms(cp.attempt, ev.retry_after_ms)
    retrying = RetryCheckpoint(attempt=cp.attempt, until=until, compacted=cp.compacted, threshold=cp.threshold)
    turn.store(TaskMove.CHECKPOINT, retrying)
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, LiveMove.BACK_OFF, retry_at=until, retry_error=ev.message))
    tx.act(Sleep(task_id=task.id, until=until))


def _failed(turn: Turn, ev: ModelFailed) -> None:
    """``no_model`` / ``context_overflow`` / anything else, or no retries
    left: the run ends with its inputs ``unanswered`` and the provider's
    message as detail."""
    cp = turn.checkpoint
    assert isinstance(cp, _ASKED)
    _failure_entry(turn, ev)
    message, reason = ev.message, ev.reason
    if ev.retryable and ev.reason == Reason.MODEL_ERROR and turn.tx.settings.retry.enabled:
        message = f"{ev.message} (gave up after {cp.attempt} attempts)"
    if reason == Reason.CONTEXT_OVERFLOW and cp.compacted is not None:
        reason = Reason.MODEL_ERROR  # a second overflow: compacting did not help
    fail(turn.tx, turn.task, reason=reason, message=message)


def _overflow(turn: Turn, ev: ModelFailed) -> None:
    """Keep the error entry; wait on a blocking compaction of our own. The
    resend is the next attempt (an attempt names one request) but no retry."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, _ASKED)
    _failure_entry(turn, ev)
    cid = task.conversation_id
    tx.set_live(cid, live_to(tx.conversations[cid].live, LiveMove.COMPACT, attempt=None))
    child = compaction_task.create(tx, cid, reason=compaction_task.OVERFLOW, owner=task.id)
    head = tx.conversations[cid].context.head
    waiting = PrepareCheckpoint(attempt=cp.attempt + 1, compacted=child.id, overflow=ev.message or "Context overflow", head=head)
    turn.store(TaskMove.WAIT, waiting, on=(child.id,))


def _uncompacted(turn: Turn, _: None) -> None:
    """The overflow compaction placed nothing: the run fails with its text."""
    cp = turn.checkpoint
    assert isinstance(cp, PrepareCheckpoint) and cp.overflow is not None
    fail(turn.tx, turn.task, reason=Reason.MODEL_ERROR, message=cp.overflow)


def _failure_entry(turn: Turn, ev: ModelFailed) -> None:
    """What was streamed before the failure is kept; the failure itself is an
    error assistant entry (counted as a call) unless no model was reached."""
    tx, task = turn.tx, turn.task
    convert_partial(tx, task)
    live = tx.conversations[task.conversation_id].live
    if live.poll_at is not None:
        tx.set_live(task.conversation_id, live_to(live, LiveMove.STOP_POLLING, poll_at=None))
    if ev.reason != Reason.NO_MODEL:
        yields.count_call(turn, None)
        assistant_entry(tx, task, ev.message, stop_reason=StopReason.ERROR, is_error=True)


def _abort(turn: Turn, _: None) -> None:
    """The abort handler (runs once the round's tool tasks are terminal):
    every call of a sequential batch that never got a task is answered
    "Tool X was aborted"; the run's inputs settle ``unanswered/aborted``; the
    task ends ``aborted``."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    cid = task.conversation_id
    convert_partial(tx, task)
    if isinstance(cp, PollCheckpoint):
        tx.act(CancelDeferred(task_id=task.id, model=cp.model, handle=cp.handle))
    if isinstance(cp, ToolsCheckpoint) and cp.pending:
        names = {s.call_id: s.name for s in tx.conversations[cid].live.tools or ()}
        for call_id in cp.pending:
            name = names.get(call_id, "unknown")
            aborted = (diagnostics.error(ResultCode.ABORTED, diagnostics.aborted_message(name)),)
            entry = Entry(
                id=EntryId(tx.alloc_id()),
                conversation_id=cid,
                kind=EntryKind.TOOL_RESULT,
                text=diagnostics.render("", aborted),
                tool_call_id=call_id,
                tool_name=name,
                is_error=True,
                by_task_id=task.id,
                at=tx.now,
                data=diagnostics.result_data(aborted, ResultCode.ABORTED),
            )
            tx.put_entry(entry)
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=Reason.ABORTED)
    finish_task(tx, task, Outcome(status=OutcomeStatus.ABORTED))


# --- the table ---------------------------------------------------------------

_P, _I = GenerationPhase, GenerationInput


def _rows() -> Mapping[tuple[enum.StrEnum, enum.StrEnum], Row]:
    rows: dict[tuple[enum.StrEnum, enum.StrEnum], Row] = {
        (_P.PREPARE, _I.RESERVE): Row(handler=_prepare, next=_P.REQUEST),
        (_P.PREPARE, _I.NO_MODEL): Row(handler=_no_model, next=END),
        (_P.PREPARE, _I.RENDER): Row(handler=_render, next=_P.PREPARE),
        (_P.PREPARE, _I.RENDERED): Row(handler=_prepare, next=_P.REQUEST),
        (_P.PREPARE, _I.MEASURE): Row(handler=thresholds.measure, next=_P.PREPARE),
        (_P.PREPARE, _I.OVER_THRESHOLD): Row(handler=thresholds.block, next=_P.PREPARE),
        (_P.PREPARE, _I.MEASURED): Row(handler=_measured, next=_P.REQUEST),
        (_P.PREPARE, _I.MEASURED_RENDER): Row(handler=_measured, next=_P.PREPARE),
        (_P.PREPARE, _I.UNCOMPACTED): Row(handler=_uncompacted, next=END),
        (_P.REQUEST, _I.RESERVE): Row(handler=_resend, next=_P.REQUEST),
        (_P.REQUEST, _I.STREAMED): Row(handler=_streamed, next=_P.REQUEST),
        (_P.RETRY, _I.RESERVE): Row(handler=_wait_timer, next=_P.RETRY),
        (_P.RETRY, _I.TIMER_FIRED): Row(handler=_retry, next=_P.PREPARE),
        (_P.POLL, _I.RESERVE): Row(handler=_wait_timer, next=_P.POLL),
        (_P.POLL, _I.TIMER_FIRED): Row(handler=_poll, next=_P.POLL),
        (_P.TOOLS, _I.NEXT_CALL): Row(handler=rounds.next_call, next=_P.TOOLS),
        (_P.TOOLS, _I.ROUND_DONE): Row(handler=rounds.round_done, next=END),
        (_P.TOOLS, _I.AFTER_TOOLS): Row(handler=rounds.after_tools, next=_P.TOOLS),
        (_P.TOOLS, _I.AFTER_TOOLS_RAN): Row(handler=rounds.round_done, next=END),
    }
    # A request and a poll await the same answers.
    for phase in (_P.REQUEST, _P.POLL):
        rows[(phase, _I.ANSWER)] = Row(handler=yields.answer, next=END)
        rows[(phase, _I.TOOL_CALLS)] = Row(handler=_tool_calls, next=_P.TOOLS)
        rows[(phase, _I.DEFERRED)] = Row(handler=_deferred, next=_P.POLL)
        rows[(phase, _I.FAILED_RETRYABLE)] = Row(handler=_backoff, next=_P.RETRY)
        rows[(phase, _I.FAILED)] = Row(handler=_failed, next=END)
        rows[(phase, _I.OVERFLOW)] = Row(handler=_overflow, next=_P.PREPARE)
    # The abort handler runs at any phase.
    for phase in GenerationPhase:
        rows[(phase, _I.ABORT)] = Row(handler=_abort, next=END)
    return rows


MACHINE = Machine(
    kind=GENERATION,
    phases=GenerationPhase,
    inputs=GenerationInput,
    rows=_rows(),
    parse=parse_generation,
)
# Not in the table: STREAMED at poll (a deferred answer does not stream; such
# an event is stale), every event at prepare or tools (no invocation is out).


# --- entry points (scheduler and events) --------------------------------------


def on_reserve(tx: Tx, task: Task) -> None:
    """The scheduler picked this generation task."""
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    move = _I_RESERVE
    if isinstance(cp, PrepareCheckpoint):
        conv = tx.conversations[task.conversation_id]
        if conv.agent.model is None:
            move = _I.NO_MODEL
        elif cp.overflow is not None and conv.context.head == cp.head:
            move = _I.UNCOMPACTED  # the overflow compaction placed nothing
        elif thresholds.measures(tx, task.conversation_id, cp):
            move = _I.MEASURE
        elif system.sectioned(tx.extensions, conv.agent):
            move = _I.RENDER
    elif isinstance(cp, ToolsCheckpoint):
        move = _NEXT_CALL if cp.pending else _ROUND_DONE
        if move is _ROUND_DONE and system.hooked(tx.extensions, tx.conversations[task.conversation_id].agent, "after_tools"):
            move = _I.AFTER_TOOLS
    MACHINE.run(tx, task, cp, move)


def on_abort(tx: Tx, task: Task) -> None:
    """The abort handler of a generation task (see ``_abort``)."""
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    MACHINE.run(tx, task, cp, _I.ABORT)


def _expecting(
    tx: Tx, task_id: TaskId, attempt: int, move: GenerationInput
) -> tuple[Task, RequestCheckpoint | PollCheckpoint] | None:
    """The task a model event is for, if it still waits for it at a phase with
    a row for ``move`` and at the same attempt; None for a stale event."""
    found = MACHINE.running(tx, task_id)
    if found is None:
        return None
    task, cp = found
    if not isinstance(cp, _ASKED) or cp.attempt != attempt:
        return None
    return (task, cp) if MACHINE.accepts(cp, move) else None


def on_model_streamed(tx: Tx, ev: ModelStreamed) -> None:
    found = _expecting(tx, ev.task_id, ev.attempt, _STREAMED)
    if found is not None:
        MACHINE.run(tx, *found, _STREAMED, ev)


def on_model_deferred(tx: Tx, ev: ModelDeferred) -> None:
    found = _expecting(tx, ev.task_id, ev.attempt, _I.DEFERRED)
    if found is not None:
        MACHINE.run(tx, *found, _I.DEFERRED, ev)


def on_model_responded(tx: Tx, ev: ModelResponded) -> None:
    move = _TOOL_CALLS if ev.tool_calls else _ANSWER
    found = _expecting(tx, ev.task_id, ev.attempt, move)
    if found is not None:
        MACHINE.run(tx, *found, move, ev)


def on_model_failed(tx: Tx, ev: ModelFailed) -> None:
    """Classify a failure: retryable (and retries left) -> durable backoff;
    anything else -> the run ends without an answer."""
    found = _expecting(tx, ev.task_id, ev.attempt, _I.FAILED)
    if found is None:
        return
    policy = tx.settings.retry
    retry = ev.retryable and ev.reason == Reason.MODEL_ERROR and policy.enabled
    cp = found[1]
    # the overflow resend is no retry (a threshold compaction kept the attempt)
    retries = cp.attempt - (1 if cp.compacted is not None and not cp.threshold else 0)
    move = _I.FAILED_RETRYABLE if retry and retries <= policy.max_retries else _I.FAILED
    if ev.reason == Reason.CONTEXT_OVERFLOW and tx.settings.compaction.enabled and cp.compacted is None:
        move = _I.OVERFLOW
    MACHINE.run(tx, *found, move, ev)


def on_context_measured(tx: Tx, ev: ContextMeasured) -> None:
    """The size of the next request: compact first, or go on (thresholds.py)."""
    found = MACHINE.running(tx, ev.task_id)
    if found is None or not MACHINE.accepts(found[1], _I.MEASURED):
        return
    task, cid = found[0], found[0].conversation_id
    move = _I.MEASURED_RENDER if system.sectioned(tx.extensions, tx.conversations[cid].agent) else _I.MEASURED
    if thresholds.over_blocking(tx, cid, ev.tokens):
        move = _I.OVER_THRESHOLD
    MACHINE.run(tx, task, found[1], move, ev)


def on_system_rendered(tx: Tx, ev: SystemRendered) -> None:
    found = MACHINE.running(tx, ev.task_id)
    if found is not None and MACHINE.accepts(found[1], _I.RENDERED):
        MACHINE.run(tx, *found, _I.RENDERED, ev)


def on_after_tools_ran(tx: Tx, ev: AfterToolsRan) -> None:
    found = MACHINE.running(tx, ev.task_id)
    if found is not None and MACHINE.accepts(found[1], _I.AFTER_TOOLS_RAN):
        MACHINE.run(tx, *found, _I.AFTER_TOOLS_RAN, ev)


def on_timer_fired(tx: Tx, ev: TimerFired) -> None:
    found = MACHINE.running(tx, ev.task_id)
    if found is None or not MACHINE.accepts(found[1], _I.TIMER_FIRED):
        return
    task, cp = found
    assert isinstance(cp, _TIMED)
    if (cp.until if isinstance(cp, RetryCheckpoint) else cp.poll_at) == ev.until:
        MACHINE.run(tx, task, cp, _I.TIMER_FIRED, ev)


# --- helpers -----------------------------------------------------------------


def _call_model(tx: Tx, task: Task, cp: RequestCheckpoint) -> None:
    tools, system_text = system.request_view(tx, tx.conversations[task.conversation_id])
    tx.act(
        new_CallModel(
            task_id=task.id,
            conversation_id=task.conversation_id,
            attempt=cp.attempt,
            model=cp.model,
            cutoff=cp.cutoff,
            tools=tools,
            system=system_text,
            extensions=tx.conversations[task.conversation_id].agent.extensions,
        )
    )
