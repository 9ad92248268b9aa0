"""A finished round's successor born reserved at ``request``
(``generation._hand_over``, issue 11 item 2): when the scheduling pass would
prepare the successor next, alone and at once, it is built once at
``request`` - and the step must be exactly the step the pass makes from a
successor created pending (state, effects, commit, rules); in every other
case the hand-over is ``runs.hand_over``'s, unchanged."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from pidurable.core import State, Step, generation as gen_mod, runs, step
from pidurable.core.effects import CallModel
from pidurable.core.events import AfterToolsRan, AgentConfigurationRequested, Event
from pidurable.core.model import GENERATION, AgentConfig, ConversationId, ExtensionInfo, Task, TaskId, TaskStatus
from pidurable.core.state import Live, RunInfo

from .helpers import MODEL, ROOT, calls, conv_state, effects_of, finished, generation, opened_event, opened_state, prepared, submit, tools


def _last_results(state: State, *names: str, steer: bool = False, agent: AgentConfig | None = None) -> tuple[State, Event]:
    """A round of ``names`` up to its last tool result (returned, not fed)."""
    if agent is not None:
        ev = AgentConfigurationRequested(now=5, ticket=1, conversation_id=ConversationId(ROOT), agent=agent)
        state = step(state, ev).state
    state = step(state, submit("go")).state
    state = step(state, calls(generation(state).id, *names)).state
    ids = sorted(t.id for t in tools(state))
    for tid in ids:
        state = step(state, prepared(tid)).state
    if steer:
        state = step(state, submit("and then", when_busy="steer")).state
    for tid in ids[:-1]:
        state = step(state, finished(tid)).state
    return state, finished(ids[-1])


def _both(monkeypatch: pytest.MonkeyPatch, state: State, event: Event) -> tuple[Step, bool]:
    """The step with the hand-over as it is, and with every successor created
    pending (runs.hand_over): equal, or the test fails; and whether the first
    one was born at request (no successor was created pending)."""
    called: list[object] = []
    create = runs.create_generation

    def spy(*args: Any) -> Any:
        called.append(args)
        return create(*args)

    with monkeypatch.context() as m:
        m.setattr(runs, "create_generation", spy)
        fast = step(state, event)
    with monkeypatch.context() as m:
        m.setattr(gen_mod, "_hand_over", runs.hand_over)
        slow = step(state, event)
    assert repr(fast.effects) == repr(slow.effects)
    assert fast.rules == slow.rules
    assert repr(fast.state) == repr(slow.state)
    assert fast.state.task_index.as_dict() == slow.state.task_index.as_dict()
    return fast, not called


@pytest.mark.parametrize("names", [("read",), ("read", "write", "edit")])
def test_a_plain_round_hands_over_to_a_successor_born_at_request(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> None:
    state, last = _last_results(opened_state(), *names)
    st, born = _both(monkeypatch, state, last)
    assert born
    successor = generation(st.state)
    assert successor.phase == "request" and st.rules[-1] == f"pi.generation:prepare,reserve #{successor.id}"


def test_steered_input_joins_the_born_successors_run(monkeypatch: pytest.MonkeyPatch) -> None:
    state, last = _last_results(opened_state(), "read", steer=True)
    st, born = _both(monkeypatch, state, last)
    assert born
    run = st.state.conversations[ROOT].live.run
    assert run is not None and len(run.inputs) == 2


def test_a_tracked_system_prompt_that_shows_nothing_new_is_born_at_request(monkeypatch: pytest.MonkeyPatch) -> None:
    state, last = _last_results(opened_state(), "read", agent=AgentConfig(model=MODEL, instructions="Be brief."))
    assert _both(monkeypatch, state, last)[1]


def test_a_system_prompt_changed_during_the_round_is_prepared_by_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The successor's prepare records a system entry: created pending, prepared by the pass."""
    state, last = _last_results(opened_state(), "read", agent=AgentConfig(model=MODEL, instructions="Be brief."))
    ev = AgentConfigurationRequested(now=35, ticket=2, conversation_id=ConversationId(ROOT), agent=AgentConfig(model=MODEL, instructions="Be long."))
    state = step(state, ev).state
    assert not _both(monkeypatch, state, last)[1]


@pytest.mark.parametrize(
    "agent",
    [AgentConfig(model=MODEL, context_window=100_000), AgentConfig(model=None)],
    ids=["measures first", "no model"],
)
def test_a_successor_that_does_not_prepare_at_once_is_created_pending(monkeypatch: pytest.MonkeyPatch, agent: AgentConfig) -> None:
    """The agent changed before the round's last result: the successor measures first, or has no model."""
    state, last = _last_results(opened_state(), "read")
    ev = AgentConfigurationRequested(now=35, ticket=2, conversation_id=ConversationId(ROOT), agent=agent)
    state = step(state, ev).state
    assert not _both(monkeypatch, state, last)[1]


def test_a_round_finished_by_its_after_tools_hooks_is_not_born_at_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``AfterToolsRan`` is an event, not the pass: the hand-over is runs.hand_over's."""
    hooked = attrs.evolve(opened_state(), extensions=(ExtensionInfo(name="ext", hooks=("after_tools",)),))
    state, last = _last_results(hooked, "read")
    state = step(state, last).state
    gen = generation(state)
    st, born = _both(monkeypatch, state, AfterToolsRan(now=50, task_id=TaskId(gen.id)))
    assert not born and generation(st.state).phase == "request"


def _two_conversations(other: int) -> tuple[State, Event]:
    """An open where the root's generation 10 finished its round (its tool
    is no longer live) and conversation 2's generation ``other`` is pending:
    both are ready in the pass's first round, in id order."""
    round_cp = {"phase": "tools", "assistant": 4, "tools": [11], "pending": []}
    gen = Task(id=TaskId(10), conversation_id=ConversationId(ROOT), kind=GENERATION, status=TaskStatus.WAITING,
               checkpoint=round_cp, on=(TaskId(11),))
    pending = Task(id=TaskId(other), conversation_id=ConversationId(2), kind=GENERATION, status=TaskStatus.PENDING,
                   checkpoint={"phase": "prepare", "attempt": 1})
    convs = [conv_state(live=Live(run=RunInfo(task_id=TaskId(10), inputs=()))),
             conv_state(2, live=Live(run=RunInfo(task_id=TaskId(other), inputs=())))]
    return State(), opened_event(conversations=convs, tasks=[gen, pending])


@pytest.mark.parametrize("other", [20, 5], ids=["another task runs after it", "another task ran before it"])
def test_a_round_done_with_other_ready_work_in_the_pass_is_prepared_by_the_pass(
    monkeypatch: pytest.MonkeyPatch, other: int
) -> None:
    """Another task ready in the same pass: it runs first (a later id) or was
    touched (an earlier one): the successor is created pending, in order."""
    state, ev = _two_conversations(other)
    st, born = _both(monkeypatch, state, ev)
    assert not born and len(effects_of(st, CallModel)) == 2


def test_unchanged_is_told_again_only_for_the_same_context_agent_extensions_and_catalog() -> None:
    """system.unchanged keeps the newest four it found recording nothing: an
    equal but new agent is asked again, and a changed one records."""
    from pidurable.core import system
    from pidurable.core.draft import Tx

    agent = AgentConfig(model=MODEL, instructions="Be brief.")
    state, _ = _last_results(opened_state(), "read", agent=agent)
    tx = Tx(state, 0)
    conv = state.conversations[ROOT]
    assert system.unchanged(tx, conv) and system.unchanged(tx, conv)
    other = attrs.evolve(conv, agent=AgentConfig(model=MODEL, instructions="Be long."))
    assert not system.unchanged(tx, other)
    assert system.unchanged(tx, attrs.evolve(conv, agent=AgentConfig(model=MODEL, instructions="Be brief.")))
    assert not system.unchanged(tx, other)
