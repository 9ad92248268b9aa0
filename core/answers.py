"""Entries and outcomes a model call leaves behind (shared by generation and compaction).

Theory of operation
-------------------
A model call ends in one of a few durable shapes, and these helpers write
them into a ``Tx`` (they decide nothing; the phase tables choose when):

- an assistant entry that ends no round (an error, or a partial that will
  never complete: ``convert_partial``);
- a run ended without an answer (``fail``: inputs ``unanswered/<reason>``,
  task ``failed {message, detail: {reason}}``);
- one model call counted in ``pi.usage.models`` (``count_usage``: the call,
  and its tokens when the provider reported them);
- call ids made unique per assistant entry (``unique_call_ids``).

Must not touch: phases and checkpoints (the caller's row stores those).
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter

import attrs

from .draft import Tx
from .live import LiveMove, live_to
from .model import (
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    Json,
    ModelRef,
    Outcome,
    OutcomeStatus,
    StopReason,
    SubmissionStatus,
    Task,
    ToolCall,
    Usage,
)
from .records import spelt_out
from .record_makers import new_UsageDoc, new_UsageTotals  # (X(...) without the type call's dict: issue 11 item 2)
from .runs import end_run
from .settlement import finish_task
from .state import UsageDoc, UsageTotals
from .typed_json import _typed, to_json


def convert_partial(tx: Tx, task: Task) -> None:
    """A committed partial answer that will never complete becomes an
    assistant entry with stop reason ``aborted`` (kept in the transcript, not
    sent to models)."""
    live = tx.conversations[task.conversation_id].live
    if live.partial is None:
        return
    assistant_entry(tx, task, live.partial, stop_reason=StopReason.ABORTED)
    tx.set_live(task.conversation_id, live_to(live, LiveMove.DROP_PARTIAL, partial=None))


def assistant_entry(tx: Tx, task: Task, text: str, *, stop_reason: str, is_error: bool = False) -> Entry:
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


def count_usage(tx: Tx, cid: ConversationId, model: ModelRef, usage: Usage | None) -> None:
    """One model call (and its tokens, if reported) in ``pi.usage``."""
    key = str(model)
    doc = tx.conversations[cid].usage
    # ``evolve(doc, models=...)`` spelt out (_USAGE_FIELDS): a call counted
    # always changes the doc, so it is set without comparing it
    prior = doc.models.get(key)
    total = plus_one_call(prior, usage)
    models = {**doc.models, key: total}
    tx.set_usage(
        cid, new_UsageDoc(models=models, tools=doc.tools), changed=True, ops=plus_one_ops("models", doc.models, models, key, prior)
    )


def plus_one_call(prior: UsageTotals | None, usage: Usage | None) -> UsageTotals:
    """``(prior or UsageTotals()) + UsageTotals.one_call(usage)``, spelt out
    (_USAGE_FIELDS): one record, where that builds three (issue 11 item 2)."""
    n_in, n_out = (0, 0) if usage is None else (usage.input_tokens, usage.output_tokens)
    if prior is None:
        return new_UsageTotals(input_tokens=n_in, output_tokens=n_out, calls=1)
    return new_UsageTotals(input_tokens=prior.input_tokens + n_in, output_tokens=prior.output_tokens + n_out, calls=prior.calls + 1)


def plus_one_ops(part: str, old: Mapping[str, UsageTotals], new: Mapping[str, UsageTotals], key: str, prior: UsageTotals | None) -> list[Json]:
    """The ops of a ``pi.usage`` whose ``part`` (``models``, ``tools``) went
    from ``old`` to ``new``, its member ``key`` alone changed (from
    ``prior``): what typed_ops finds walking the whole document (that part's
    changed member, or the member or part that is new; tests compare), from
    that member alone (issue 11 item 2: a model call's usage is counted on
    most rounds)."""
    if prior is not None:
        ops: list[Json] = []
        _typed(prior, new[key], [part, key], ops)  # (typed_ops, without its call and copy of the path)
        return ops
    if old == {}:  # the part was at its default (left out): set whole
        return [["s", [part], to_json(new)]]
    return [["s", [part, key], to_json(new[key])]]


#: The fields count_usage and plus_one_call spell out (checked here).
_USAGE_FIELDS = spelt_out(UsageTotals, ("input_tokens", "output_tokens", "calls")), spelt_out(UsageDoc, ("models", "tools"))


_CALL_ID = attrgetter("id")


def unique_call_ids(entry_id: EntryId, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """Call ids key results and slots: a provider that sends an empty or a
    repeated id gets a deterministic replacement (``call_<entry>_<index>``)."""
    ids = list(map(_CALL_ID, calls))
    if all(ids) and len(set(ids)) == len(ids):  # (most answers: none replaced, found in C - issue 11 item 2)
        return calls if type(calls) is tuple else tuple(calls)
    return _renamed(entry_id, calls)


def _renamed(entry_id: EntryId, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """unique_call_ids' rule, one call at a time."""
    seen: set[str] = set()
    out = []
    for i, call in enumerate(calls):
        if not call.id or call.id in seen:
            call = attrs.evolve(call, id=f"call_{entry_id}_{i}")
        seen.add(call.id)
        out.append(call)
    return tuple(out)


def fail(tx: Tx, task: Task, *, reason: str, message: str) -> None:
    """End the run without an answer: inputs ``unanswered/<reason>``, task
    ``failed {message, detail: {reason}}``. The inbox is left alone."""
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=reason, detail=message)
    finish_task(
        tx,
        task,
        Outcome(status=OutcomeStatus.FAILED, error={"message": message, "detail": {"reason": reason}}),
    )
