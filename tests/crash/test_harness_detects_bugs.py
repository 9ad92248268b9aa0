"""The crash harness must catch known-bad cores (the deliberately broken
variants, as tla/ keeps a model that must fail)."""

from __future__ import annotations

from typing import Any

import pytest

import trio

from pidurable.core import tools as core_tools
from pidurable.shell import MemoryStorage
from pidurable.shell.runtime import INTERPRETERS, Runtime

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
    durable breaks the invariants (an unsafe tool runs twice after a crash)."""

    def acts_first(self: Any) -> None:
        commits, acts = self._commits, self._acts
        self._commits, self._acts = [], []
        for effect in acts:
            self._before(effect)
            INTERPRETERS[type(effect)](self, effect)
        if commits:
            for effect, _ in commits:
                self._before(effect)
            self.storage.commit_many([(c.seq, c.writes, evs) for c, evs in commits])
            for effect, _ in commits:
                self._committed_writes(effect)
            self._committed.set()
            self._committed = trio.Event()

    monkeypatch.setattr(Runtime, "_flush", acts_first)
    with pytest.raises(AssertionError, match="UnsafeToolRunsAtMostOnce|SameOutcome|OneResultPerCall|IntentBeforeRequest|IntentBeforeEffect"):
        _sweep(CONFIG_FIX)
