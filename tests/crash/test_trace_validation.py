"""Trace validation (issue 12 item 5): the journals the crash harness
produces - every scenario, uninterrupted and crashed before each of its
effects - are behaviours of tla/Durable.tla (tests/trace_validation.py maps
every journaled commit to the model's actions and checks its invariants)."""

from __future__ import annotations

from collections import Counter

import pytest

from pidurable.shell import MemoryStorage

import trace_validation
from harness import Scenario, World, run_life
from scenarios import ALL

SEEN: Counter[str] = Counter()
#: commits of several ready results (group commit) checked against the model
GROUPED: list[int] = []


def _world(s: Scenario) -> World:
    w = World()
    w.files.update(dict(s.files))
    return w


@pytest.mark.parametrize("scenario", ALL, ids=lambda s: s.name)
def test_crash_suite_journals_refine_the_model(scenario: Scenario) -> None:
    """Every commit of every crash-suite journal maps to an allowed Durable.tla action and keeps its invariants."""
    storage = MemoryStorage()
    base = run_life(storage, scenario, _world(scenario), crash_at=None)
    report = trace_validation.refines(storage)
    SEEN.update(report.actions)
    GROUPED.append(report.grouped)
    for k in range(len(base.effects) + 1):
        storage = MemoryStorage()
        world = _world(scenario)
        first = run_life(storage, scenario, world, crash_at=k, seed=k)
        if first.crashed:
            run_life(storage, scenario, world, crash_at=None, seed=k)
        try:
            report = trace_validation.refines(storage)
        except AssertionError as e:
            raise AssertionError(f"scenario {scenario.name}, crash before effect {k}: {e}") from None
        SEEN.update(report.actions)
        GROUPED.append(report.grouped)


def test_the_journals_exercise_the_models_actions() -> None:
    """Across the crash suite the journals take every action of the model (not vacuous)."""
    if not SEEN:
        pytest.skip("run with the scenario tests")
    # ResendRequest writes nothing, so no journal row shows it
    want = {"Submit", "Abort", "SettleAborted", "RequestModel", "ModelAnswers", "ModelFails",
            "ModelCallsTools", "HandOver", "StartTool", "ResumeTool", "ToolFinishes", "Recover"}
    assert want <= set(SEEN), sorted(want - set(SEEN))


def test_grouped_commits_are_checked_not_skipped() -> None:
    """Commits of several results stepped together (group commit) are
    checked move by move against the model, not counted outside it."""
    if not GROUPED:
        pytest.skip("run with the scenario tests")
    assert sum(GROUPED) > 0, "no journal of the crash suite holds a grouped commit the model checks"
