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
  ``CallModel``; ``(prepare, no_model)`` -> the run fails ``no_model``. A
  round's successor the pass would prepare next and at once takes this row
  at birth, born at ``request`` (``_hand_over``).
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

import attrs

from .live import LiveMove, live_to
from . import diagnostics, retries, rounds, system, thresholds, yields
from .checkpoints import (
    FIRST_PREPARE,
    GenerationPhase,
    PollCheckpoint,
    PrepareCheckpoint,
    RequestCheckpoint,
    RetryCheckpoint,
    ToolsCheckpoint,
    parse_generation,
    to_dict,
)
from .answers import convert_partial, fail
from .draft import Tx
from .effects import RenderSystem, CallModel, CancelDeferred
from .events import AfterToolsRan, ContextMeasured, ModelDeferred, ModelFailed, ModelResponded, ModelStreamed, SystemRendered
from .events import TimerFired
from .lifecycle import TaskMove, next_task_status
from .record_makers import new_CallModel, new_RequestCheckpoint, new_Task  # (X(...) without the type call's dict: issue 11 item 2)
from .model import (
    GENERATION,
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    ModelRef,
    Outcome,
    OutcomeStatus,
    Reason,
    ResultCode,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    Usage,
)
from .phases import END, Machine, Row, Turn
from .runs import end_run, hand_over, handed
from .state import Live
from .settlement import finish_task


from .retries import ASKED as _ASKED, TIMED as _TIMED


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
#: The status of a successor born reserved (_hand_over): the table's reserve move.
_BORN = next_task_status(TaskStatus.PENDING, _RESERVE)


@attrs.frozen(kw_only=True)
class Born:
    """Row ``(prepare, reserve)`` taken at birth (``_hand_over``): the
    request the task was born with, and the run's pi.live as handed to it."""

    request: RequestCheckpoint
    handed: Live


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


def _prepare(turn: Turn, ev: SystemRendered | Born | None) -> None:
    """Record what the model will be shown (system.py), pin model and cutoff
    (the intent), then call the model. A successor born at ``request``
    (``Born``, from ``_hand_over``) comes with its intent, nothing to show."""
    tx, task = turn.tx, turn.task
    if isinstance(ev, Born):
        running = turn.keep(ev.request)
        # the hand-over's pi.live and this ask, one revision (_hand_over)
        tx.set_live(task.conversation_id, live_to(ev.handed, _ASK, attempt=ev.request.attempt))
        _call_model(tx, running, ev.request)
        return
    cp = turn.checkpoint
    assert isinstance(cp, PrepareCheckpoint)
    conv = tx.conversations[task.conversation_id]
    model = conv.agent.model
    assert model is not None  # classified NO_MODEL otherwise
    system.prepare(tx, conv, task.id, () if ev is None else ev.sections, () if ev is None else ev.failed)
    request = _pinned(tx, cp, model)
    move = _CHECKPOINT if task.status is _RUNNING else _RESERVE  # rendered: running
    running = turn.store(move, request, started_at=task.started_at or tx.now)
    tx.set_live(task.conversation_id, live_to(conv.live, _ASK, attempt=cp.attempt))
    _call_model(tx, running, request)


def _pinned(tx: Tx, cp: PrepareCheckpoint, model: ModelRef) -> RequestCheckpoint:
    """The intent of a prepared generation: its model and cutoff pinned. Ids
    are global and increasing: every entry the conversation has now has an
    id below next_id, every later one above it."""
    return new_RequestCheckpoint(
        attempt=cp.attempt, model=model, cutoff=EntryId(tx.next_id - 1), compacted=cp.compacted, threshold=cp.threshold
    )


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


def _streamed(turn: Turn, ev: ModelStreamed) -> None:
    """The partial grows by ``ev.text`` at ``ev.offset`` (an offset past the
    partial the core holds is not this stream's: ignored)."""
    live = turn.tx.conversations[turn.task.conversation_id].live
    current = live.partial or ""
    if 0 <= ev.offset <= len(current):
        partial = current[: ev.offset] + ev.text
        turn.tx.set_live(turn.task.conversation_id, live_to(live, _STREAM, partial=partial))


def _tool_calls(turn: Turn, ev: ModelResponded) -> None:
    entry = yields.responded(turn, ev)
    rounds.start_round(turn, entry, ev.prepared)


def _round_done(turn: Turn, ev: None) -> None:
    rounds.round_done(turn, ev, _hand_over)


def _hand_over(tx: Tx, gen: Task, steered: tuple[SubmissionId, ...]) -> None:
    """The round's hand-over (runs.hand_over). When the scheduling pass
    would prepare the successor next and alone (``gen`` ran as the last of
    its ready tasks, nothing else the step touched is live, no abort intent
    is to be reconciled first) and at once (row ``(prepare, reserve)``:
    nothing to measure, render or newly show), the successor is born
    reserved at ``request`` and takes that row at birth: the same rules,
    effects and commit, with one Task record and one pi.live revision where
    the pass made two of each (issue 11 item 2). pi.live showing no attempt
    makes the two revisions' ops one diff's (runs.handed clears it)."""
    cid = gen.conversation_id
    conv = tx.conversations[cid]
    model = conv.agent.model
    if (
        tx.alone != gen.id
        or tx.index.intent
        or conv.live.attempt is not None
        or any(map(tx.tasks.__contains__, tx.touched))  # (the touched set is the small one)
        or _prepare_input(tx, cid, FIRST_PREPARE) is not _I_RESERVE
        or not system.unchanged(tx, conv)
        or model is None
    ):
        hand_over(tx, gen, steered)
        return
    cp = FIRST_PREPARE
    tid = TaskId(tx.alloc_id())
    request = _pinned(tx, cp, model)  # (what _prepare pins: the prepare would record nothing)
    born = new_Task(  # (create_generation's task after store's reserve move, built once)
        id=tid, conversation_id=cid, kind=GENERATION, status=_BORN, checkpoint=to_dict(request), started_at=tx.now
    )
    MACHINE.run(tx, born, cp, _I_RESERVE, Born(request=request, handed=handed(conv.live, gen, tid, steered)))


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
        (_P.PREPARE, _I.UNCOMPACTED): Row(handler=retries.uncompacted, next=END),
        (_P.REQUEST, _I.RESERVE): Row(handler=_resend, next=_P.REQUEST),
        (_P.REQUEST, _I.STREAMED): Row(handler=_streamed, next=_P.REQUEST),
        (_P.RETRY, _I.RESERVE): Row(handler=retries.wait_timer, next=_P.RETRY),
        (_P.RETRY, _I.TIMER_FIRED): Row(handler=retries.retry, next=_P.PREPARE),
        (_P.POLL, _I.RESERVE): Row(handler=retries.wait_timer, next=_P.POLL),
        (_P.POLL, _I.TIMER_FIRED): Row(handler=retries.poll, next=_P.POLL),
        (_P.TOOLS, _I.NEXT_CALL): Row(handler=rounds.next_call, next=_P.TOOLS),
        (_P.TOOLS, _I.ROUND_DONE): Row(handler=_round_done, next=END),
        (_P.TOOLS, _I.AFTER_TOOLS): Row(handler=rounds.after_tools, next=_P.TOOLS),
        (_P.TOOLS, _I.AFTER_TOOLS_RAN): Row(handler=rounds.round_done, next=END),
    }
    # A request and a poll await the same answers.
    for phase in (_P.REQUEST, _P.POLL):
        rows[(phase, _I.ANSWER)] = Row(handler=yields.answer, next=END)
        rows[(phase, _I.TOOL_CALLS)] = Row(handler=_tool_calls, next=_P.TOOLS)
        rows[(phase, _I.DEFERRED)] = Row(handler=retries.deferred, next=_P.POLL)
        rows[(phase, _I.FAILED_RETRYABLE)] = Row(handler=retries.backoff, next=_P.RETRY)
        rows[(phase, _I.FAILED)] = Row(handler=retries.failed, next=END)
        rows[(phase, _I.OVERFLOW)] = Row(handler=retries.overflow, next=_P.PREPARE)
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
        move = _prepare_input(tx, task.conversation_id, cp)
    elif isinstance(cp, ToolsCheckpoint):
        move = _NEXT_CALL if cp.pending else _ROUND_DONE
        if move is _ROUND_DONE and system.hooked(tx.extensions, tx.conversations[task.conversation_id].agent, "after_tools"):
            move = _I.AFTER_TOOLS
    MACHINE.run(tx, task, cp, move)


def _prepare_input(tx: Tx, cid: ConversationId, cp: PrepareCheckpoint) -> GenerationInput:
    """The input of a generation picked at ``prepare``."""
    conv = tx.conversations[cid]
    if conv.agent.model is None:
        return _I.NO_MODEL
    if cp.overflow is not None and conv.context.head == cp.head:
        return _I.UNCOMPACTED  # the overflow compaction placed nothing
    if thresholds.measures(tx, cid, cp):
        return _I.MEASURE
    if system.sectioned(tx.extensions, conv.agent):
        return _I.RENDER
    return _I_RESERVE


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
