"""The rows of a generation whose request did not answer (yet): a deferred
answer polled, a retryable failure waited out, a failure that ends the run,
a context overflow compacted before asking again.

Theory of operation
-------------------
These are handlers of generation.py's table (its docstring lists the rows
and their effects; phases.py applies them): ``deferred`` and ``poll`` keep a
provider's handle and poll it (a second request is never sent);
``backoff`` and ``retry`` wait out a retryable failure durably and go back
to ``prepare`` with the next attempt; ``failed`` ends the run ``unanswered``;
``overflow`` waits on a blocking compaction of its own, and ``uncompacted``
fails the run when that compaction placed nothing; ``wait_timer`` resumes a
recovered wait for only the time that remains.

Must not touch: the answer rows (yields.py), tool rounds (rounds.py).
"""

from __future__ import annotations

from .live import LiveMove, live_to
from . import compaction_task, system, yields
from .answers import assistant_entry, convert_partial, fail
from .checkpoints import PollCheckpoint, PrepareCheckpoint, RequestCheckpoint, RetryCheckpoint
from .effects import PollModel, Sleep
from .events import ModelDeferred, ModelFailed, TimerFired
from .lifecycle import TaskMove
from .model import Reason, StopReason
from .phases import Turn


# isinstance() targets for rows shared by two phases (tuples: cheaper than unions).
ASKED = (RequestCheckpoint, PollCheckpoint)
TIMED = (RetryCheckpoint, PollCheckpoint)


def wait_timer(turn: Turn, _: None) -> None:
    """Recovery at ``retry``/``poll``: sleep until the stored deadline (only
    the remaining time is waited)."""
    turn.store(TaskMove.RESERVE, durable=False)
    turn.tx.act(Sleep(task_id=turn.task.id, until=_deadline(turn)))


def _deadline(turn: Turn) -> int:
    cp = turn.checkpoint
    assert isinstance(cp, TIMED)
    return cp.until if isinstance(cp, RetryCheckpoint) else cp.poll_at


def retry(turn: Turn, _: TimerFired) -> None:
    """The backoff ended: back to prepare with the next attempt (agent and
    settings changes made during the backoff apply; the pass prepares it at
    once)."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, RetryCheckpoint)
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, LiveMove.RETRY, retry_at=None, retry_error=None))
    turn.store(TaskMove.RETRY, PrepareCheckpoint(attempt=cp.attempt + 1, compacted=cp.compacted, threshold=cp.threshold))


def poll(turn: Turn, _: TimerFired) -> None:
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


def deferred(turn: Turn, ev: ModelDeferred) -> None:
    """Save the handle and the next poll time; after a restart the SAME
    handle is polled - a second request is never sent."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ASKED)
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


def backoff(turn: Turn, ev: ModelFailed) -> None:
    """A retryable failure with retries left: a durable backoff."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ASKED)
    _failure_entry(turn, ev)
    until = ev.now + tx.settings.retry.delay_ms(cp.attempt, ev.retry_after_ms)
    retrying = RetryCheckpoint(attempt=cp.attempt, until=until, compacted=cp.compacted, threshold=cp.threshold)
    turn.store(TaskMove.CHECKPOINT, retrying)
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, LiveMove.BACK_OFF, retry_at=until, retry_error=ev.message))
    tx.act(Sleep(task_id=task.id, until=until))


def failed(turn: Turn, ev: ModelFailed) -> None:
    """``no_model`` / ``context_overflow`` / anything else, or no retries
    left: the run ends with its inputs ``unanswered`` and the provider's
    message as detail."""
    cp = turn.checkpoint
    assert isinstance(cp, ASKED)
    _failure_entry(turn, ev)
    message, reason = ev.message, ev.reason
    if ev.retryable and ev.reason == Reason.MODEL_ERROR and turn.tx.settings.retry.enabled:
        message = f"{ev.message} (gave up after {cp.attempt} attempts)"
    if reason == Reason.CONTEXT_OVERFLOW and cp.compacted is not None:
        reason = Reason.MODEL_ERROR  # a second overflow: compacting did not help
    fail(turn.tx, turn.task, reason=reason, message=message)


def overflow(turn: Turn, ev: ModelFailed) -> None:
    """Keep the error entry; wait on a blocking compaction of our own. The
    resend is the next attempt (an attempt names one request) but no retry."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ASKED)
    _failure_entry(turn, ev)
    cid = task.conversation_id
    tx.set_live(cid, live_to(tx.conversations[cid].live, LiveMove.COMPACT, attempt=None))
    child = compaction_task.create(tx, cid, reason=compaction_task.OVERFLOW, owner=task.id)
    head = tx.conversations[cid].context.head
    waiting = PrepareCheckpoint(attempt=cp.attempt + 1, compacted=child.id, overflow=ev.message or "Context overflow", head=head)
    turn.store(TaskMove.WAIT, waiting, on=(child.id,))


def uncompacted(turn: Turn, _: None) -> None:
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
