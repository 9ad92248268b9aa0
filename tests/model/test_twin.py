"""The Python twin of tla/Durable.tla explores the real ``step`` at small
bounds (tests/model/twin.py): every interleaving of the shell's replies, the
host's submits and aborts and a crash at every effect boundary, every
invariant in every state. ``PIDURABLE_TWIN=deep`` explores bigger bounds."""

from __future__ import annotations

import os

import attrs
import pytest

from pidurable.core import State, Step, step, tools
from pidurable.core.effects import Commit, RunTool
from pidurable.core.events import Event

from twin import DEEP, DEFAULT, Bounds, Explorer, Violation

DEEP_RUN = os.environ.get("PIDURABLE_TWIN") == "deep"

#: The default suite: 2 inputs (follow-up or steer) with an abort, and 1
#: input with an abort and a crash at every boundary (about 20 and 15 s
#: here); 2 inputs with a crash take minutes (PIDURABLE_TWIN=deep).
RUNS = {
    "2 inputs, abort": attrs.evolve(DEFAULT, crashes=0),
    "1 input, crash, abort": attrs.evolve(DEFAULT, inputs=1),
}
if DEEP_RUN:
    RUNS = {"2 inputs, crash, abort": DEFAULT, "deep": DEEP}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_reachable_state_keeps_every_invariant(name: str) -> None:
    """Every state the real core reaches at the twin's bounds satisfies every invariant that applies."""
    result = Explorer(RUNS[name]).run()
    print(f"twin {name}: {result.states} states, {result.transitions} transitions, "
          f"{result.quiescent} quiescent, depth {result.depth}, {result.seconds:.1f} s")
    assert not result.max_states_hit
    assert result.states > 1000  # not vacuous: the behaviours are there


SMALL = Bounds(inputs=1, max_batch=1, aborts=0, model_errors=False, tool_failures=False, tools=(("unsafe", "unsafe"),))


def test_twin_catches_an_unsafe_tool_rerun_on_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core whose recovery re-runs an interrupted unsafe tool is caught: UnsafeToolRunsAtMostOnce."""
    monkeypatch.setattr(tools, "replay_allows_rerun", lambda tx, task, cp: True)
    with pytest.raises(Violation, match="UnsafeToolRunsAtMostOnce") as caught:
        Explorer(SMALL).run()
    assert "crash" in str(caught.value)


def _act_before_commit(state: State, event: Event) -> Step:
    st = step(state, event)
    effects = list(st.effects)
    if effects and isinstance(effects[0], Commit) and any(isinstance(e, RunTool) for e in effects):
        effects.append(effects.pop(0))  # the body starts before its intent is durable
    return attrs.evolve(st, effects=tuple(effects))


def test_twin_catches_acting_before_the_intent_commit() -> None:
    """A core that starts a tool body before committing its execute intent is caught: IntentBeforeEffect."""
    with pytest.raises(Violation, match="IntentBeforeEffect"):
        Explorer(SMALL, step=_act_before_commit).run()
