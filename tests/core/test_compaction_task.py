"""The ``pi.compaction`` phase table, row by row (issue 9 item 4): select asks
the shell for a cut, the summarize intent is committed before ``Summarize``,
the summary is placed as a write (or stale), failures use the reference's texts."""

from __future__ import annotations

import itertools

import attrs

from pidurable.core.effects import Commit, SelectCut, Summarize
from pidurable.core.events import CompactionRequested, CutSelected, ModelFailed, ModelResponded
from pidurable.core.model import COMPACTION, ConversationId, EntryId, EntryKind, OutcomeStatus, Reason, SubmissionStatus, ToolCall

from .helpers import ROOT, Driver, effects_of, kinds, opened_state, put_entries, put_subs, put_tasks

_tickets = itertools.count(7000)


def start() -> tuple[Driver, int]:
    d = Driver(opened_state())
    task_id = d.value(CompactionRequested(now=5, ticket=next(_tickets), conversation_id=ConversationId(ROOT)))
    return d, task_id


def test_compact_reserves_and_asks_for_a_cut() -> None:
    """``conv.compact()`` creates a manual task that is reserved at once and asks the shell for a cut."""
    d = Driver(opened_state())
    st = d(CompactionRequested(now=5, ticket=next(_tickets), conversation_id=ConversationId(ROOT), instructions="x"))
    (task,) = put_tasks(st).values()
    assert task.kind == COMPACTION and task.input == {"reason": "manual", "instructions": "x"} and not task.background
    (ask,) = effects_of(st, SelectCut)
    assert ask.task_id == task.id


def test_nothing_to_compact_completes_empty() -> None:
    """No cut -> completed with ``{}`` and no entry."""
    d, tid = start()
    st = d(CutSelected(now=6, task_id=tid))
    assert put_tasks(st)[tid].outcome is not None and put_tasks(st)[tid].outcome.result == {}  # type: ignore[union-attr]
    assert put_entries(st) == []


def test_the_summarize_intent_is_committed_before_the_request() -> None:
    """A cut pins ``summarize`` in the commit that precedes ``Summarize`` (intent before effect)."""
    d, tid = start()
    st = d(CutSelected(now=6, task_id=tid, first_kept=EntryId(40), tail=EntryId(50)))
    order = kinds(st)
    assert order.index(Commit) < order.index(Summarize)
    cp = put_tasks(st)[tid].checkpoint
    assert cp["phase"] == "summarize" and cp["first_kept"] == 40 and cp["tail"] == 50
    assert cp["max_tokens"] == int(0.8 * 16384)


def test_a_summary_is_placed_as_a_compaction_write() -> None:
    """On an idle conversation the summary is appended with ``head = first_kept`` and its write is done."""
    d, tid = start()
    d(CutSelected(now=6, task_id=tid, first_kept=EntryId(40), tail=EntryId(50)))
    st = d(ModelResponded(now=7, task_id=tid, attempt=1, text="the gist"))
    (entry,) = put_entries(st)
    assert entry.kind == EntryKind.COMPACTION and "the gist" in entry.text
    assert entry.data == {"head": 40, "reason": "manual"}
    (sub,) = put_subs(st).values()
    assert sub.status == SubmissionStatus.DONE and sub.request_id == f"compaction:{tid}"
    outcome = put_tasks(st)[tid].outcome
    assert outcome is not None and outcome.result == {"submission_id": sub.id}
    assert d.state.conversations[ROOT].context.head == 40


def test_a_summary_behind_a_newer_head_is_stale() -> None:
    """A summary whose cut is older than the current range start settles ``unanswered/stale``."""
    d, tid = start()
    d(CutSelected(now=6, task_id=tid, first_kept=EntryId(3), tail=EntryId(50)))
    other = d.value(CompactionRequested(now=6, ticket=next(_tickets), conversation_id=ConversationId(ROOT)))
    d(CutSelected(now=6, task_id=other, first_kept=EntryId(9), tail=EntryId(50)))
    d(ModelResponded(now=7, task_id=other, attempt=1, text="newer"))
    st = d(ModelResponded(now=8, task_id=tid, attempt=1, text="older"))
    assert put_entries(st) == []
    (sub,) = put_subs(st).values()
    assert sub.status == SubmissionStatus.UNANSWERED and sub.reason == Reason.STALE


def test_failures_use_the_reference_texts() -> None:
    """Empty text, a tool call, a cut-short reply and a provider error fail with the reference's messages."""
    cases = [
        (ModelResponded(now=7, task_id=0, attempt=1, text=""), "Summarization produced no text"),
        (
            ModelResponded(now=7, task_id=0, attempt=1, text="x", tool_calls=(ToolCall(id="c", name="read"),)),
            "Summarization attempted to call a tool",
        ),
        (
            ModelResponded(now=7, task_id=0, attempt=1, text="x", stop_reason="length"),
            "Summarization hit the token limit; the summary is incomplete",
        ),
        (ModelFailed(now=7, task_id=0, attempt=1, message="503"), "Summarization failed: 503"),
    ]
    for event, message in cases:
        d, tid = start()
        d(CutSelected(now=6, task_id=tid, first_kept=EntryId(40), tail=EntryId(50)))
        st = d(attrs.evolve(event, task_id=tid))
        task = put_tasks(st)[tid]
        assert task.outcome is not None and task.outcome.status == OutcomeStatus.FAILED
        assert task.outcome.error == {"message": message, "detail": {"reason": "model_error"}}
        assert put_entries(st) == []
