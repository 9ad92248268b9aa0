"""The compaction task ``pi.compaction``: summarize the old part of a context.

Theory of operation
-------------------
``MACHINE`` is the kind's phase table (phases.py applies it). Checkpoints:

========== ======================================================================
select     nothing pinned: on reserve the shell is asked to choose the cut
           (``SelectCut``: compaction.py ``select_cut`` over the committed
           context); a crash here only asks again.
summarize  ``attempt, model, max_tokens, tail, first_kept`` - the intent of one
           summarization request, stored before ``Summarize`` is sent; a
           recovered task re-sends exactly this request.
========== ======================================================================

The rows' effects:

- ``(select, reserve)`` -> ``SelectCut``; ``(select, no_model)`` -> failed.
- ``(select, nothing)`` -> completed ``{}``: nothing placed.
- ``(select, cut)`` -> ``summarize`` stored + ``Summarize``.
- ``(summarize, summary)`` -> the summary is placed (below), task completed;
  every summarizer reply or error counts in ``pi.usage.models``.
- ``(summarize, failed)`` -> failed ``model_error`` with the reference's texts
  ("Summarization failed: ...", "... produced no text", "... attempted to call
  a tool", "... hit the token limit; the summary is incomplete").
- ``abort`` (any phase) -> aborted, nothing placed.

Placement (reference §3.13 step 4): a compaction entry whose text is the
summary as the model reads it and whose ``data`` is ``{head: first_kept,
reason}``. Owned by a generation (blocking) -> appended directly, result
``{entry_id}``. Conversation-owned (manual, background) -> admitted as a
write with request id ``compaction:<task id>`` through admission (placed at
once when idle, else at the next boundary, ``stale`` if its head is older
than the range start by then), result ``{submission_id}``.

Must not touch: the generation's phases (it waits on this task; its own
rows decide what the outcome means).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .admission import admit_write
from .answers import count_usage
from .checkpoints import (
    CompactionPhase,
    SelectCheckpoint,
    SummarizeCheckpoint,
    SummarizeRetryCheckpoint,
    parse_compaction,
    to_dict,
)
from .compaction import summary_text
from .draft import Tx
from .effects import Refusal, SelectCut, Sleep, Summarize
from .events import CompactionRequested, CutSelected, ModelFailed, ModelResponded, TimerFired
from .inbox import append_write
from .lifecycle import TaskMove
from .model import (
    COMPACTION,
    ConversationId,
    EntryId,
    EntryKind,
    Outcome,
    OutcomeStatus,
    Reason,
    SubmissionId,
    Task,
    TaskId,
)
from .phases import END, Machine, Row, Turn
from .settlement import finish_task

#: ``input.reason`` of a compaction task.
MANUAL, THRESHOLD, OVERFLOW = "manual", "threshold", "overflow"

NO_TEXT = "Summarization produced no text"
CALLED_TOOL = "Summarization attempted to call a tool"
TRUNCATED = "Summarization hit the token limit; the summary is incomplete"


class CompactionInput(enum.StrEnum):
    """What can happen to a compaction task (the inputs of ``MACHINE``)."""

    #: The scheduler picked it (a model is configured).
    RESERVE = "reserve"
    #: Picked, but the conversation has no model.
    NO_MODEL = "no_model"
    #: The shell found no cut: nothing to compact.
    NOTHING = "nothing"
    #: The shell chose a cut.
    CUT = "cut"
    #: The shell chose a cut and a ``before_compact`` hook supplied the summary.
    HOOK_SUMMARY = "hook_summary"
    #: The summarizer answered with usable text.
    SUMMARY = "summary"
    #: The summarizer failed (or answered with no text, a tool call, or cut short).
    FAILED = "failed"
    #: The summarizer failed retryably and retries are left (``Settings.retry``).
    FAILED_RETRYABLE = "failed_retryable"
    #: The saved backoff deadline arrived.
    TIMER_FIRED = "timer_fired"
    #: Its abort handler runs.
    ABORT = "abort"


def create(tx: Tx, cid: ConversationId, *, reason: str, owner: TaskId | None = None, instructions: str | None = None) -> Task:
    """A compaction task at ``select``: owned by a generation (blocking) or
    by the conversation (manual; background when the reason is not manual)."""
    data: dict[str, Any] = {"reason": reason}
    if instructions:
        data["instructions"] = instructions
    task = Task(
        id=TaskId(tx.alloc_id()),
        conversation_id=cid,
        kind=COMPACTION,
        input=data,
        owner=owner,
        background=owner is None and reason != MANUAL,
        checkpoint=to_dict(SelectCheckpoint()),
    )
    tx.put_task(task)
    return task


# --- the rows' handlers --------------------------------------------------------


def _select(turn: Turn, _: None) -> None:
    task = turn.store(TaskMove.RESERVE, durable=False)
    keep = turn.tx.settings.compaction.keep_recent_tokens
    instructions = task.input.get("instructions")
    turn.tx.act(
        SelectCut(
            task_id=task.id,
            conversation_id=task.conversation_id,
            keep_recent_tokens=keep,
            reason=str(task.input.get("reason", MANUAL)),
            instructions=instructions if isinstance(instructions, str) else None,
            extensions=turn.tx.conversations[task.conversation_id].agent.extensions,
        )
    )


def _no_model(turn: Turn, _: None) -> None:
    _fail(turn, "No model is configured", Reason.NO_MODEL)


def _nothing(turn: Turn, _: CutSelected) -> None:
    finish_task(turn.tx, turn.task, Outcome(status=OutcomeStatus.COMPLETED, result={}))


def _cut(turn: Turn, ev: CutSelected) -> None:
    """Pin the request (the intent), then send it."""
    tx, task = turn.tx, turn.task
    model = tx.conversations[task.conversation_id].agent.model
    assert model is not None and ev.first_kept is not None and ev.tail is not None
    cp = SummarizeCheckpoint(
        attempt=1,
        model=model,
        max_tokens=max(int(0.8 * tx.settings.compaction.reserve_tokens), 1),
        tail=ev.tail,
        first_kept=ev.first_kept,
    )
    running = turn.store(TaskMove.CHECKPOINT, cp)
    _send(tx, running, cp)


def _resend(turn: Turn, _: None) -> None:
    """Recovery: the request is pinned; reserve in memory and send it again."""
    cp = turn.checkpoint
    assert isinstance(cp, SummarizeCheckpoint)
    _send(turn.tx, turn.store(TaskMove.RESERVE, durable=False), cp)


def _send(tx: Tx, task: Task, cp: SummarizeCheckpoint) -> None:
    instructions = task.input.get("instructions")
    tx.act(
        Summarize(
            task_id=task.id,
            conversation_id=task.conversation_id,
            attempt=cp.attempt,
            model=cp.model,
            max_tokens=cp.max_tokens,
            tail=cp.tail,
            first_kept=cp.first_kept,
            instructions=instructions if isinstance(instructions, str) else None,
        )
    )


def _summary(turn: Turn, ev: ModelResponded) -> None:
    """Place the summary (see the module comment) and complete."""
    cp = turn.checkpoint
    assert isinstance(cp, SummarizeCheckpoint)
    count_usage(turn.tx, turn.task.conversation_id, cp.model, ev.usage)  # every summarizer call counts, placed or stale
    _place(turn, ev.text.strip(), cp.first_kept)


def _hook_summary(turn: Turn, ev: CutSelected) -> None:
    """Row ``(select, hook_summary)``: a ``before_compact`` hook wrote the
    summary: placed like the model's, no model call."""
    assert ev.summary is not None and ev.first_kept is not None
    _place(turn, ev.summary.strip(), ev.first_kept, by_hook=True)


def _place(turn: Turn, summary: str, first_kept: EntryId, *, by_hook: bool = False) -> None:
    tx, task = turn.tx, turn.task
    cid = task.conversation_id
    data: dict[str, Any] = {"head": first_kept, "reason": task.input.get("reason", MANUAL)}
    if by_hook:
        data["summarized_by"] = "before_compact"
    text = summary_text(summary)
    result: dict[str, Any]
    if task.owner is not None:
        result = {"entry_id": append_write(tx, cid, EntryKind.COMPACTION, text, data)}
    else:
        sid = SubmissionId(tx.alloc_id())
        admit_write(tx, tx.conversations[cid], sid, f"compaction:{task.id}", text, EntryKind.COMPACTION, data)
        result = {"submission_id": sid}
    finish_task(tx, task, Outcome(status=OutcomeStatus.COMPLETED, result=result))


def _failed(turn: Turn, ev: ModelResponded | ModelFailed) -> None:
    """Counted in ``pi.usage.models`` (a reply's tokens, or one call for an
    error), then failed with the reference's text."""
    cp = turn.checkpoint
    assert isinstance(cp, SummarizeCheckpoint)
    count_usage(turn.tx, turn.task.conversation_id, cp.model, ev.usage if isinstance(ev, ModelResponded) else None)
    _fail(turn, failure_text(ev), Reason.MODEL_ERROR)


def _backoff(turn: Turn, ev: ModelFailed) -> None:
    """Row ``(summarize, failed_retryable)``: count the call, then wait out a
    durable backoff (the deadline is stored) before the same pinned request."""
    tx, cp = turn.tx, turn.checkpoint
    assert isinstance(cp, SummarizeCheckpoint)
    count_usage(tx, turn.task.conversation_id, cp.model, None)
    until = ev.now + tx.settings.retry.delay_ms(cp.attempt, ev.retry_after_ms)
    waiting = SummarizeRetryCheckpoint(
        attempt=cp.attempt, model=cp.model, max_tokens=cp.max_tokens, tail=cp.tail, first_kept=cp.first_kept, until=until
    )
    task = turn.store(TaskMove.CHECKPOINT, waiting)
    tx.act(Sleep(task_id=task.id, until=until))


def _wait(turn: Turn, _: None) -> None:
    """Recovery at ``summarize_retry``: only the remainder is waited."""
    cp = turn.checkpoint
    assert isinstance(cp, SummarizeRetryCheckpoint)
    task = turn.store(TaskMove.RESERVE, durable=False)
    turn.tx.act(Sleep(task_id=task.id, until=cp.until))


def _again(turn: Turn, _: TimerFired) -> None:
    """Row ``(summarize_retry, timer_fired)``: the same pinned request, as
    the next attempt."""
    cp = turn.checkpoint
    assert isinstance(cp, SummarizeRetryCheckpoint)
    pinned = SummarizeCheckpoint(
        attempt=cp.attempt + 1, model=cp.model, max_tokens=cp.max_tokens, tail=cp.tail, first_kept=cp.first_kept
    )
    _send(turn.tx, turn.store(TaskMove.CHECKPOINT, pinned), pinned)


def _abort(turn: Turn, _: None) -> None:
    finish_task(turn.tx, turn.task, Outcome(status=OutcomeStatus.ABORTED))


def _fail(turn: Turn, message: str, reason: str) -> None:
    error = {"message": message, "detail": {"reason": reason}}
    finish_task(turn.tx, turn.task, Outcome(status=OutcomeStatus.FAILED, error=error))


def failure_text(ev: ModelResponded | ModelFailed) -> str:
    """Why a summarizer's reply is not a summary (the reference's texts)."""
    if isinstance(ev, ModelFailed):
        return f"Summarization failed: {ev.message}"
    if ev.tool_calls:
        return CALLED_TOOL
    if ev.stop_reason == "length":
        return TRUNCATED
    return NO_TEXT


def usable(ev: ModelResponded) -> bool:
    return bool(ev.text.strip()) and not ev.tool_calls and ev.stop_reason != "length"


# --- the table -------------------------------------------------------------------

_P, _I = CompactionPhase, CompactionInput


def _rows() -> Mapping[tuple[enum.StrEnum, enum.StrEnum], Row]:
    rows: dict[tuple[enum.StrEnum, enum.StrEnum], Row] = {
        (_P.SELECT, _I.RESERVE): Row(handler=_select, next=_P.SELECT),
        (_P.SELECT, _I.NO_MODEL): Row(handler=_no_model, next=END),
        (_P.SELECT, _I.NOTHING): Row(handler=_nothing, next=END),
        (_P.SELECT, _I.CUT): Row(handler=_cut, next=_P.SUMMARIZE),
        (_P.SELECT, _I.HOOK_SUMMARY): Row(handler=_hook_summary, next=END),
        (_P.SUMMARIZE, _I.RESERVE): Row(handler=_resend, next=_P.SUMMARIZE),
        (_P.SUMMARIZE, _I.SUMMARY): Row(handler=_summary, next=END),
        (_P.SUMMARIZE, _I.FAILED): Row(handler=_failed, next=END),
        (_P.SUMMARIZE, _I.FAILED_RETRYABLE): Row(handler=_backoff, next=_P.SUMMARIZE_RETRY),
        (_P.SUMMARIZE_RETRY, _I.RESERVE): Row(handler=_wait, next=_P.SUMMARIZE_RETRY),
        (_P.SUMMARIZE_RETRY, _I.TIMER_FIRED): Row(handler=_again, next=_P.SUMMARIZE),
    }
    for phase in CompactionPhase:
        rows[(phase, _I.ABORT)] = Row(handler=_abort, next=END)
    return rows


MACHINE = Machine(kind=COMPACTION, phases=CompactionPhase, inputs=CompactionInput, rows=_rows(), parse=parse_compaction)
# Not in the table: NO_MODEL at summarize (the model is pinned; an unknown one
# fails the request), CUT/NOTHING at summarize and SUMMARY/FAILED at select
# (events of an invocation that ended: stale, ignored).


# --- entry points ------------------------------------------------------------------


def on_reserve(tx: Tx, task: Task) -> None:
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    move = _I.RESERVE
    if isinstance(cp, SelectCheckpoint) and tx.conversations[task.conversation_id].agent.model is None:
        move = _I.NO_MODEL
    MACHINE.run(tx, task, cp, move)


def on_abort(tx: Tx, task: Task) -> None:
    cp = MACHINE.parsed(tx, task)
    if cp is None:
        return
    MACHINE.run(tx, task, cp, _I.ABORT)


def _running(tx: Tx, task_id: TaskId, move: CompactionInput) -> tuple[Task, Any] | None:
    found = MACHINE.running(tx, task_id)
    return found if found is not None and MACHINE.accepts(found[1], move) else None


def on_cut_selected(tx: Tx, ev: CutSelected) -> None:
    move = _I.NOTHING if ev.first_kept is None or ev.tail is None else _I.CUT
    if move is _I.CUT and ev.summary is not None:
        move = _I.HOOK_SUMMARY
    found = _running(tx, ev.task_id, move)
    if found is not None:
        MACHINE.run(tx, *found, move, ev)


def on_summary(tx: Tx, ev: ModelResponded | ModelFailed) -> None:
    """The summarizer's reply (routed here by task kind from the model events)."""
    move = _I.SUMMARY if isinstance(ev, ModelResponded) and usable(ev) else _I.FAILED
    found = _running(tx, ev.task_id, move)
    if found is None or found[1].attempt != ev.attempt:
        return
    policy = tx.settings.retry
    if isinstance(ev, ModelFailed) and ev.retryable and policy.enabled and found[1].attempt <= policy.max_retries:
        move = _I.FAILED_RETRYABLE
    MACHINE.run(tx, *found, move, ev)


def on_timer_fired(tx: Tx, ev: TimerFired) -> None:
    """The backoff deadline of a retrying summarizer (routed here by kind)."""
    found = _running(tx, ev.task_id, _I.TIMER_FIRED)
    if found is not None and isinstance(found[1], SummarizeRetryCheckpoint) and found[1].until == ev.until:
        MACHINE.run(tx, *found, _I.TIMER_FIRED, ev)


def on_compaction_requested(tx: Tx, ev: CompactionRequested) -> None:
    """``conv.compact()``: a manual, conversation-owned compaction; answered
    with its task id."""
    if ev.conversation_id not in tx.conversations:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    task = create(tx, ev.conversation_id, reason=MANUAL, instructions=ev.instructions)
    tx.respond(ev.ticket, task.id)
