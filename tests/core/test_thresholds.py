"""Threshold compaction at prepare (issue 9 item 4): with a known context
window the generation first measures its request (``MeasureContext`` ->
``ContextMeasured``); above ``window - reserve_tokens`` it waits on a blocking
compaction of its own (same attempt), above ``window - reserve_tokens -
background_tokens`` it starts a background compaction and sends at once."""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core.effects import CallModel, Commit, MeasureContext, RenderSystem, SelectCut, Sleep
from pidurable.core.events import ContextMeasured, CutSelected, ModelFailed, ModelResponded
from pidurable.core.model import (
    COMPACTION,
    CompactionSettings,
    EntryId,
    EntryKind,
    ExtensionInfo,
    RetryPolicy,
    Settings,
    SubmissionStatus,
    TaskStatus,
)
from pidurable.core.state import State

from .helpers import ROOT, Driver, effects_of, generation, kinds, only, opened_state, put_entries, put_subs, put_tasks, submit

# blocking = 1000 - 200 = 800; background = 800 - 300 = 500
WINDOW = 1000
SETTINGS = CompactionSettings(reserve_tokens=200, background_tokens=300, keep_recent_tokens=100)


def windowed(window: int | None = WINDOW, **settings: Any) -> State:
    """The opened state with the root agent's window set and small thresholds."""
    state = opened_state()
    conv = state.conversations[ROOT]
    conv = attrs.evolve(conv, agent=attrs.evolve(conv.agent, context_window=window))
    merged = Settings(**{**attrs.asdict(state.settings, recurse=False), "compaction": SETTINGS, **settings})
    return attrs.evolve(state, conversations={**state.conversations, ROOT: conv}, settings=merged)


def measured(state: State, tokens: int) -> tuple[Driver, int, Any]:
    """Submit, then answer the measurement: (driver, generation id, step)."""
    d = Driver(state)
    gen = generation(d(submit("hi")).state).id
    return d, gen, d(ContextMeasured(now=11, task_id=gen, tokens=tokens))


def compactions(state: State) -> list[Any]:
    return [t for t in state.tasks.values() if t.kind == COMPACTION]


def test_without_a_window_the_request_is_sent_without_measuring() -> None:
    """No ``context_window``: prepare sends the request at once (no extra round trip)."""
    st = Driver(windowed(None))(submit("hi"))
    assert effects_of(st, CallModel) and not effects_of(st, MeasureContext)


def test_with_compaction_disabled_nothing_is_measured() -> None:
    """``compaction.enabled=False``: no measurement even with a window."""
    state = windowed()
    state = attrs.evolve(state, settings=attrs.evolve(state.settings, compaction=CompactionSettings(enabled=False)))
    st = Driver(state)(submit("hi"))
    assert effects_of(st, CallModel) and not effects_of(st, MeasureContext)


def test_with_a_window_prepare_measures_first() -> None:
    """Row (prepare, measure): ``MeasureContext`` through the newest entry; no request yet, nothing stored at request."""
    st = Driver(windowed())(submit("hi"))
    gen = generation(st.state)
    (m,) = effects_of(st, MeasureContext)
    assert m.task_id == gen.id and m.conversation_id == ROOT and m.cutoff == st.state.next_id - 1
    assert not effects_of(st, CallModel)
    assert gen.status is TaskStatus.RUNNING and gen.checkpoint["phase"] == "prepare"


def test_under_the_background_threshold_the_request_is_sent() -> None:
    """Row (prepare, measured): 500 tokens (not above 500) -> the request, no compaction."""
    _, gen, st = measured(windowed(), 500)
    (call,) = effects_of(st, CallModel)
    assert call.task_id == gen and call.attempt == 1
    assert not compactions(st.state)


def test_above_the_background_threshold_a_background_compaction_starts_and_the_request_goes_on() -> None:
    """501 tokens: one commit holds a conversation-owned background compaction (reason threshold) and the request intent; then CallModel."""
    _, gen, st = measured(windowed(), 501)
    comp = only(compactions(st.state))
    assert comp.owner is None and comp.background and comp.input == {"reason": "threshold"}
    assert comp.id in put_tasks(st) and put_tasks(st)[gen].checkpoint["phase"] == "request"
    order = kinds(st)
    assert order.count(Commit) == 1 and order.index(Commit) < order.index(CallModel)


def test_no_second_background_compaction_while_one_is_live() -> None:
    """A compaction already live in the conversation: the measurement creates none."""
    d, gen, st = measured(windowed(), 700)
    d(ModelResponded(now=12, task_id=gen, attempt=1, text="done"))
    gen2 = generation(d(submit("again", now=13)).state).id
    st = d(ContextMeasured(now=14, task_id=gen2, tokens=700))
    assert len(compactions(st.state)) == 1 and effects_of(st, CallModel)


def test_above_the_blocking_threshold_the_generation_waits_on_its_own_compaction() -> None:
    """Row (prepare, over_threshold): 801 tokens -> a compaction owned by the generation (not background, reason threshold); the generation waits at prepare with the same attempt and ``threshold``."""
    _, gen, st = measured(windowed(), 801)
    comp = only(compactions(st.state))
    assert comp.owner == gen and not comp.background and comp.input == {"reason": "threshold"}
    waiting = put_tasks(st)[gen]
    assert waiting.status is TaskStatus.WAITING and waiting.on == (comp.id,)
    assert waiting.checkpoint == {"phase": "prepare", "attempt": 1, "compacted": comp.id, "threshold": True}
    assert not effects_of(st, CallModel) and not put_entries(st)


def test_after_the_threshold_compaction_the_request_is_sent_without_measuring_again() -> None:
    """The summary is appended directly; the generation prepares (no second measurement) and sends attempt 1 seeing it."""
    d, gen, st = measured(windowed(), 900)
    comp = only(compactions(st.state)).id
    d(CutSelected(now=12, task_id=comp, first_kept=EntryId(3), tail=EntryId(4)))
    st = d(ModelResponded(now=13, task_id=comp, attempt=1, text="the gist"))
    summary = only(e for e in put_entries(st) if e.kind == EntryKind.COMPACTION)
    assert summary.data == {"head": 3, "reason": "threshold"}
    (call,) = effects_of(st, CallModel)
    assert call.attempt == 1 and call.cutoff >= summary.id and not effects_of(st, MeasureContext)
    assert put_tasks(st)[gen].checkpoint["threshold"] is True


def test_a_threshold_compaction_that_placed_nothing_still_sends() -> None:
    """No cut: the compaction completes ``{}`` and the request is sent anyway (unlike after an overflow)."""
    d, gen, st = measured(windowed(), 900)
    comp = only(compactions(st.state)).id
    st = d(CutSelected(now=12, task_id=comp))
    assert effects_of(st, CallModel)[0].task_id == gen


def test_a_threshold_compaction_does_not_extend_the_retry_budget() -> None:
    """With ``max_retries=1`` after a threshold compaction: attempt 1 fails retryably -> retry; attempt 2 fails -> the run gives up."""
    d, gen, st = measured(windowed(retry=RetryPolicy(max_retries=1)), 900)
    comp = only(compactions(st.state)).id
    d(CutSelected(now=12, task_id=comp))
    st = d(ModelFailed(now=13, task_id=gen, attempt=1, message="503", retryable=True))
    assert effects_of(st, Sleep) and put_tasks(st)[gen].checkpoint == {
        "phase": "retry", "attempt": 1, "until": put_tasks(st)[gen].checkpoint["until"], "compacted": comp, "threshold": True,
    }
    (sleep,) = effects_of(st, Sleep)
    from pidurable.core.events import TimerFired

    st = d(TimerFired(now=sleep.until, task_id=gen, until=sleep.until))
    assert effects_of(st, CallModel)[0].attempt == 2  # no second measurement: compacted already
    sid = only(s for s in st.state.submissions)
    st = d(ModelFailed(now=sleep.until + 1, task_id=gen, attempt=2, message="503", retryable=True))
    sub = put_subs(st)[sid]
    assert sub.status == SubmissionStatus.UNANSWERED and "gave up after 2 attempts" in (sub.detail or "")


def test_sections_are_rendered_after_the_measurement() -> None:
    """Row (prepare, measured_render): an agent with extension sections renders after measuring (a background compaction is committed first)."""
    state = attrs.evolve(windowed(), extensions=(ExtensionInfo(name="ext", sections=("notes",)),))
    _, gen, st = measured(state, 600)
    (render,) = effects_of(st, RenderSystem)
    assert render.task_id == gen and not effects_of(st, CallModel)
    assert only(compactions(st.state)).background
    assert kinds(st).index(Commit) < kinds(st).index(RenderSystem)


def test_a_stale_measurement_is_ignored() -> None:
    """A ``ContextMeasured`` for a generation no longer at prepare changes nothing."""
    d, gen, st = measured(windowed(), 100)
    again = d(ContextMeasured(now=12, task_id=gen, tokens=5000))
    assert not again.effects and not compactions(again.state)


def test_select_follows_the_commit_that_creates_the_blocking_compaction() -> None:
    """Intent before effect: the compaction's SelectCut comes after the commit that creates it."""
    _, _, st = measured(windowed(), 900)
    order = kinds(st)
    assert order.index(Commit) < order.index(SelectCut)
