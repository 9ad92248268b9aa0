"""The crash harness must catch known-bad cores (the deliberately broken
variants, as tla/ keeps a model that must fail)."""

from __future__ import annotations

from typing import Any

import pytest

from pidurable.core import tools as core_tools
from pidurable.shell import MemoryStorage
from pidurable.shell.loop import Loop

from harness import World, check_all, run_life
from scenarios import CONFIG_FIX, UNSAFE


def _sweep(scenario: Any) -> None:
    """Run the kill-every-boundary sweep on memory storage; raise on the
    first broken invariant."""
    world = World()
    world.files.update(dict(scenario.files))
    storage = MemoryStorage()
    base = run_life(storage, scenario, world, crash_at=None)
    expected = storage.entries(1)
    for k in range(len(base.effects) + 1):
        storage = MemoryStorage()
        world = World()
        world.files.update(dict(scenario.files))
        lives = [run_life(storage, scenario, world, crash_at=k, seed=k)]
        if lives[0].crashed:
            lives.append(run_life(storage, scenario, world, crash_at=None, seed=k))
        check_all(storage, scenario, world, lives, expected)


def test_rerunning_unsafe_tools_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that re-runs an interrupted unsafe tool breaks UnsafeToolRunsAtMostOnce."""

    # The broken variant: reserve at ``execute`` always takes the rerun row.
    monkeypatch.setattr(core_tools, "replay_allows_rerun", lambda tx, task, cp: True)
    with pytest.raises(AssertionError, match="UnsafeToolRunsAtMostOnce"):
        _sweep(UNSAFE)


def test_act_before_commit_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell that starts acts before the commit holding their intent is
    durable breaks the invariants (an unsafe tool runs twice after a crash).
    The mutant is the real loop with its one ordering switch flipped: the
    real persist and act paths run, in the wrong order."""
    monkeypatch.setattr(Loop, "PERSIST_BEFORE_ACTING", False)
    with pytest.raises(AssertionError, match="UnsafeToolRunsAtMostOnce|SameOutcome|OneResultPerCall|IntentBeforeRequest|IntentBeforeEffect"):
        _sweep(CONFIG_FIX)


def test_ignoring_a_done_verdict_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that treats reconcile's ``done`` as ``not_done`` (runs the body
    again although the card was charged) breaks ReconciledEffectHappensOnce."""
    from pidurable.core import reconcile as core_reconcile
    from reconciling import RECONCILE_PAY

    row = core_tools.PHASES[(core_tools.ToolPhase.RECONCILE, core_tools.ToolInput.RECONCILED_DONE)]
    broken = type(row)(handler=core_reconcile.not_done, next=core_tools.ToolPhase.EXECUTE)
    monkeypatch.setitem(core_tools.PHASES, (core_tools.ToolPhase.RECONCILE, core_tools.ToolInput.RECONCILED_DONE), broken)  # type: ignore[call-overload]
    with pytest.raises(AssertionError, match="ReconciledEffectHappensOnce"):
        _sweep(RECONCILE_PAY)
