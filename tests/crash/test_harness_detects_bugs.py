"""The crash harness must catch known-bad cores (the deliberately broken
variants, as tla/ keeps a model that must fail)."""

from __future__ import annotations

from typing import Any

import pytest

from pidurable.core import effects as core_effects
from pidurable.core import tools as core_tools
from pidurable.shell import MemoryStorage

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

    def always_rerun(tx: Any, task: Any) -> None:
        running = core_tools.task_to(task, "reserve")
        tx.put_task(running, durable=False)
        core_tools._run(tx, running)

    monkeypatch.setattr(core_tools, "_recover_execute", always_rerun)
    with pytest.raises(AssertionError, match="UnsafeToolRunsAtMostOnce"):
        _sweep(UNSAFE)


def test_act_before_commit_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that starts acts before their intent is committed breaks the
    invariants (an unsafe tool runs twice after a crash)."""
    original = core_effects.Tx.finish

    def acts_first(self: Any) -> Any:
        result = original(self)
        commits = [e for e in result.effects if isinstance(e, core_effects.Commit)]
        others = [e for e in result.effects if not isinstance(e, core_effects.Commit)]
        return core_effects.Step(state=result.state, effects=tuple(others + commits))

    monkeypatch.setattr(core_effects.Tx, "finish", acts_first)
    with pytest.raises(AssertionError, match="UnsafeToolRunsAtMostOnce|SameOutcome|OneResultPerCall"):
        _sweep(CONFIG_FIX)
