"""The pi.live progress table (core/live.py): total, and checked against
the fields a move writes."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidurable.core.live import LIVE_TRANSITIONS, LiveMove, Progress, live_to, progress
from pidurable.core.model import CoreInvariantError, SubmissionId, TaskId
from pidurable.core.state import Live, RunInfo, ToolSlot

RUN = RunInfo(task_id=TaskId(5), inputs=(SubmissionId(3),))

#: One document per progress state.
EXAMPLES = {
    Progress.IDLE: Live(),
    Progress.STARTED: Live(run=RUN),
    Progress.ASKING: Live(run=RUN, attempt=1),
    Progress.STREAMING: Live(run=RUN, attempt=1, partial="Hel"),
    Progress.RETRYING: Live(run=RUN, attempt=1, retry_at=99, retry_error="503"),
    Progress.POLLING: Live(run=RUN, attempt=1, poll_at=50),
    Progress.TOOLS: Live(run=RUN, tools=(ToolSlot(call_id="c", name="t"),)),
}

#: The field changes each move makes (as the core's call sites make them).
CHANGES = {
    LiveMove.START: {"run": RUN},
    LiveMove.ASK: {"attempt": 2},
    LiveMove.STREAM: {"partial": "Hello"},
    LiveMove.DROP_PARTIAL: {"partial": None},
    LiveMove.DEFER: {"partial": None, "poll_at": 60},
    LiveMove.STOP_POLLING: {"poll_at": None},
    LiveMove.ANSWERED: {"partial": None, "poll_at": None},
    LiveMove.BACK_OFF: {"retry_at": 99, "retry_error": "429"},
    LiveMove.RETRY: {"retry_at": None, "retry_error": None},
    LiveMove.COMPACT: {"attempt": None},
    LiveMove.ROUND: {"tools": (ToolSlot(call_id="c", name="t"),), "attempt": None},
    LiveMove.SLOT: {"tools": (ToolSlot(call_id="c", name="t", task_id=TaskId(9)),)},
    LiveMove.HAND_OVER: {"run": RunInfo(task_id=TaskId(6), inputs=RUN.inputs), "tools": None, "attempt": None},
    LiveMove.END: {},
}


def test_examples_have_the_progress_they_name() -> None:
    assert {p: progress(live) for p, live in EXAMPLES.items()} == {p: p for p in Progress}


@given(st.sampled_from(Progress), st.sampled_from(LiveMove))
def test_the_table_is_total(state: Progress, move: LiveMove) -> None:
    """Every (progress, move) pair is a row that lands on its target state, or a loud error."""
    live = EXAMPLES[state]
    if (state, move) in LIVE_TRANSITIONS:
        assert progress(live_to(live, move, **CHANGES[move])) is LIVE_TRANSITIONS[(state, move)]
    else:
        with pytest.raises(CoreInvariantError, match="is not a transition"):
            live_to(live, move, **CHANGES[move])


def test_fields_that_contradict_the_row_are_refused() -> None:
    """A move whose field changes land elsewhere than its row is a bug."""
    with pytest.raises(CoreInvariantError, match="should reach 'streaming'"):
        live_to(EXAMPLES[Progress.ASKING], LiveMove.STREAM, partial=None)
    with pytest.raises(CoreInvariantError, match="should reach 'tools'"):
        live_to(EXAMPLES[Progress.ASKING], LiveMove.ROUND, attempt=None)
    assert attrs.evolve(EXAMPLES[Progress.STARTED]) == live_to(Live(), LiveMove.START, run=RUN)


@given(st.sampled_from(sorted(LIVE_TRANSITIONS, key=str)))
def test_a_move_is_attrs_evolve_of_its_changes(row: tuple[Progress, LiveMove]) -> None:
    """live_to builds the moved document with every field spelt out
    (live._changed): the same copy attrs.evolve makes (start and end build
    a fresh document)."""
    state, move = row
    live = EXAMPLES[state]
    if move in (LiveMove.START, LiveMove.END):
        return
    moved = live_to(live, move, **CHANGES[move])
    assert attrs.asdict(moved, recurse=False) == attrs.asdict(attrs.evolve(live, **CHANGES[move]), recurse=False)


def test_an_unknown_field_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        live_to(EXAMPLES[Progress.ASKING], LiveMove.ASK, attempt=2, nonsense=1)
