"""Overflow -> compact once -> retry (issue 9 item 4): a context-overflow
failure makes the generation start a blocking compaction it owns and wait on
it; afterwards it re-prepares (a new cutoff that sees the summary) and
re-sends; nothing placed or a second overflow fails the run ``model_error``."""

from __future__ import annotations

import attrs

from pidurable.core.effects import CallModel, Commit, SelectCut
from pidurable.core.events import CutSelected, ModelFailed, ModelResponded
from pidurable.core.model import (
    COMPACTION,
    CompactionSettings,
    EntryId,
    EntryKind,
    OutcomeStatus,
    Reason,
    SubmissionStatus,
    TaskStatus,
)

from .helpers import ROOT, Driver, effects_of, generation, kinds, only, opened_state, put_entries, put_subs, put_tasks, submit


def overflow(task_id: int, *, attempt: int = 1, now: int = 20) -> ModelFailed:
    return ModelFailed(
        now=now,
        task_id=task_id,
        attempt=attempt,
        message="This model's maximum context length is 300 tokens",
        reason=Reason.CONTEXT_OVERFLOW,
    )


def overflowed() -> tuple[Driver, int, int, int]:
    """A run whose first request overflowed: (driver, generation, compaction, submission)."""
    d = Driver(opened_state())
    st = d(submit("hi"))
    gen = generation(st.state).id
    sid = only(put_subs(st))
    st = d(overflow(gen))
    comp = only(t.id for t in st.state.tasks.values() if t.kind == COMPACTION)
    return d, gen, comp, sid


def test_an_overflow_starts_a_blocking_compaction_and_waits() -> None:
    """One commit: the error entry, a compaction owned by the generation (reason overflow, not background), the generation waiting at prepare on it; the cut is asked for after the commit."""
    d = Driver(opened_state())
    st = d(submit("hi"))
    gen = generation(st.state).id
    st = d(overflow(gen))
    tasks = put_tasks(st)
    comp = only(t for t in tasks.values() if t.kind == COMPACTION)
    assert comp.owner == gen and not comp.background and comp.input == {"reason": "overflow"}
    waiting = tasks[gen]
    assert waiting.status is TaskStatus.WAITING and waiting.on == (comp.id,)
    assert waiting.checkpoint == {
        "phase": "prepare",
        "attempt": 2,
        "compacted": comp.id,
        "overflow": "This model's maximum context length is 300 tokens",
        "head": None,
    }
    (err,) = [e for e in put_entries(st) if e.kind == EntryKind.ASSISTANT]
    assert err.is_error
    order = kinds(st)
    assert order.index(Commit) < order.index(SelectCut)
    assert st.state.conversations[ROOT].live.attempt is None  # the request is over


def test_after_the_summary_the_request_is_sent_again_with_a_new_cutoff() -> None:
    """The summary is appended directly (head moves); the generation re-prepares with a cutoff that includes it and sends the next attempt."""
    d, gen, comp, sid = overflowed()
    d(CutSelected(now=21, task_id=comp, first_kept=EntryId(3), tail=EntryId(4)))
    st = d(ModelResponded(now=22, task_id=comp, attempt=1, text="the gist"))
    summary = only(e for e in put_entries(st) if e.kind == EntryKind.COMPACTION)
    assert summary.data == {"head": 3, "reason": "overflow"}
    (call,) = effects_of(st, CallModel)
    assert call.task_id == gen and call.attempt == 2 and call.cutoff >= summary.id
    assert put_tasks(st)[gen].checkpoint["compacted"] == comp
    st = d(ModelResponded(now=23, task_id=gen, attempt=2, text="answer"))
    assert put_subs(st)[sid].status == SubmissionStatus.DONE


def test_a_compaction_that_placed_nothing_fails_the_run_with_the_overflow_text() -> None:
    """No cut -> the range start did not move -> the run fails ``unanswered/model_error`` with the provider's text."""
    d, gen, comp, sid = overflowed()
    st = d(CutSelected(now=21, task_id=comp))
    sub = put_subs(st)[sid]
    assert sub.status == SubmissionStatus.UNANSWERED and sub.reason == Reason.MODEL_ERROR
    assert sub.detail == "This model's maximum context length is 300 tokens"
    assert put_tasks(st)[gen].outcome is not None
    assert not effects_of(st, CallModel)


def test_a_second_overflow_fails_the_run() -> None:
    """After one compaction, another overflow is a plain failure: ``unanswered/model_error``, no second compaction."""
    d, gen, comp, sid = overflowed()
    d(CutSelected(now=21, task_id=comp, first_kept=EntryId(3), tail=EntryId(4)))
    d(ModelResponded(now=22, task_id=comp, attempt=1, text="the gist"))
    st = d(overflow(gen, attempt=2, now=23))
    sub = put_subs(st)[sid]
    assert sub.status == SubmissionStatus.UNANSWERED and sub.reason == Reason.MODEL_ERROR
    assert not [t for t in st.state.tasks.values() if t.kind == COMPACTION]
    outcome = put_tasks(st)[gen].outcome
    assert outcome is not None and outcome.status == OutcomeStatus.FAILED


def test_with_compaction_disabled_an_overflow_fails_at_once() -> None:
    """``CompactionSettings(enabled=False)``: the run fails ``context_overflow`` and nothing is compacted."""
    state = opened_state()
    state = attrs.evolve(state, settings=attrs.evolve(state.settings, compaction=CompactionSettings(enabled=False)))
    d = Driver(state)
    st = d(submit("hi"))
    gen = generation(st.state).id
    sid = only(put_subs(st))
    st = d(overflow(gen))
    assert put_subs(st)[sid].reason == Reason.CONTEXT_OVERFLOW
    assert not [t for t in st.state.tasks.values() if t.kind == COMPACTION]


def test_aborting_the_run_aborts_its_compaction_first() -> None:
    """A run aborted while its generation waits on the overflow compaction: both end aborted, the input ``unanswered/aborted``."""
    from pidurable.core.events import ConversationAbortRequested

    d, gen, comp, sid = overflowed()
    d(CutSelected(now=21, task_id=comp, first_kept=EntryId(3), tail=EntryId(4)))
    st = d(ConversationAbortRequested(now=22, ticket=99, conversation_id=ROOT))
    outcomes = {t.id: t.outcome for t in put_tasks(st).values()}
    assert outcomes[gen] is not None and outcomes[gen].status == OutcomeStatus.ABORTED
    assert outcomes[comp] is not None and outcomes[comp].status == OutcomeStatus.ABORTED
    assert put_subs(st)[sid].reason == Reason.ABORTED
    assert not put_entries(st)  # no summary


def test_the_overflow_resend_does_not_use_up_a_retry() -> None:
    """With ``max_retries=1``, a retryable failure of the resend after an overflow is still retried once."""
    from pidurable.core.model import RetryPolicy
    from pidurable.core.effects import Sleep

    state = opened_state()
    state = attrs.evolve(state, settings=attrs.evolve(state.settings, retry=RetryPolicy(max_retries=1)))
    d = Driver(state)
    gen = generation(d(submit("hi")).state).id
    st = d(overflow(gen))
    comp = only(t.id for t in st.state.tasks.values() if t.kind == COMPACTION)
    d(CutSelected(now=21, task_id=comp, first_kept=EntryId(3), tail=EntryId(4)))
    d(ModelResponded(now=22, task_id=comp, attempt=1, text="the gist"))
    st = d(ModelFailed(now=23, task_id=gen, attempt=2, message="503", retryable=True))
    assert effects_of(st, Sleep) and put_tasks(st)[gen].checkpoint["phase"] == "retry"
