"""How a model turn ends with an answer: the run ends, or an ``on_yield``
hook continues it.

Theory of operation
-------------------
``responded`` writes the assistant entry of a complete answer (both answer
rows of generation.py: with tool calls or without). ``answer`` is the row
``answer`` (reference §3.7 "Answer"), one commit:

- the final boundary places queued writes and the selected user items;
- a continuation (``ModelResponded.continuation``: an ``on_yield`` hook,
  run by the shell before this commit, asked to go on) is honoured only if
  that boundary placed no user item and no reset: a ``pi.user`` entry with
  its text, the generation ``completed``, and a successor takes the run (its
  inputs stay ``placed``);
- otherwise the run's inputs settle ``done`` with this answer, the run ends,
  and the placed follow-ups start the next run (a dropped continuation is
  not retried).

Must not touch: tool rounds (rounds.py).
"""

from __future__ import annotations

from .answers import count_usage, unique_call_ids
from .checkpoints import PollCheckpoint, RequestCheckpoint
from .events import ModelResponded
from .inbox import append_user, boundary, has_reset
from .live import LiveMove, live_to
from .model import Entry, EntryId, EntryKind, Outcome, OutcomeStatus, StopReason, SubmissionStatus, Usage
from .phases import Turn
from .runs import end_run, hand_over, start_run
from .settlement import finish_task
from .record_makers import new_Entry  # (X(...) without the type call's dict: issue 11 item 2)

# Members read once: each answer reads them (a member read through its enum
# class goes through EnumType's __getattr__ hook: ~1,000 machine instructions,
# where a global is ~20).
_ASSISTANT, _TOOL_USE = EntryKind.ASSISTANT, StopReason.TOOL_USE


def count_call(turn: Turn, usage: Usage | None) -> None:
    """One model call of the pinned model counted in ``pi.usage``."""
    cp = turn.checkpoint
    assert isinstance(cp, (RequestCheckpoint, PollCheckpoint))
    count_usage(turn.tx, turn.task.conversation_id, cp.model, usage)


def responded(turn: Turn, ev: ModelResponded) -> Entry:
    """The assistant entry of a complete answer (both answer rows)."""
    tx, task = turn.tx, turn.task
    entry_id = EntryId(tx.alloc_id())
    entry = new_Entry(
        id=entry_id,
        conversation_id=task.conversation_id,
        kind=_ASSISTANT,
        text=ev.text,
        tool_calls=unique_call_ids(entry_id, ev.tool_calls),
        stop_reason=_TOOL_USE if ev.tool_calls else ev.stop_reason,
        usage=ev.usage,
        by_task_id=task.id,
        at=ev.now,
    )
    tx.put_entry(entry)
    count_call(turn, ev.usage)
    live = tx.conversations[task.conversation_id].live
    if live.partial is not None or live.poll_at is not None:
        tx.set_live(task.conversation_id, live_to(live, LiveMove.ANSWERED, partial=None, poll_at=None))
    return entry


def answer(turn: Turn, ev: ModelResponded) -> None:
    """Row ``answer``: see the module docstring."""
    entry = responded(turn, ev)
    tx, task = turn.tx, turn.task
    cid = task.conversation_id
    done = Outcome(status=OutcomeStatus.COMPLETED, result={"entry_id": entry.id})
    if ev.continuation is not None:
        reset = has_reset(tx, cid)
        placed = boundary(tx, cid, final=True)
        if not placed and not reset:
            append_user(tx, cid, ev.continuation)
            finish_task(tx, task, done)
            hand_over(tx, task, ())
            return
        end_run(tx, task, status=SubmissionStatus.DONE, answer=entry.id)
        finish_task(tx, task, done)
    else:
        end_run(tx, task, status=SubmissionStatus.DONE, answer=entry.id)
        finish_task(tx, task, done)
        placed = boundary(tx, cid, final=True)
    if placed:
        start_run(tx, cid, placed)
