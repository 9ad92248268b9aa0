"""Kill the shell before every effect of each scenario, reopen, finish, and
check every invariant of tests/invariants.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pidurable.shell import MemoryStorage, open_jsonl_storage, open_sqlite_storage

from harness import CRASH_REPORT, Scenario, World, check_all, run_life
from scenarios import ALL


def _world(s: Scenario) -> World:
    w = World()
    w.files.update(dict(s.files))
    return w


def _storage(backend: str, tmp_path: Path, n: int) -> Any:
    if backend == "memory":
        return MemoryStorage()
    if backend == "jsonl":
        return open_jsonl_storage(tmp_path / f"store-{n}")
    return open_sqlite_storage(tmp_path / f"store-{n}.sqlite")


def _reopen(storage: Any, backend: str) -> Any:
    if backend == "memory":
        return storage
    if backend == "jsonl":
        return open_jsonl_storage(storage.path)
    return open_sqlite_storage(storage.path)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
@pytest.mark.parametrize("scenario", ALL, ids=lambda s: s.name)
def test_kill_at_every_effect_boundary(scenario: Scenario, backend: str, tmp_path: Path) -> None:
    """For every k, a crash before effect k followed by a reopen ends in the
    uninterrupted run's outcome (modulo "interrupted" unsafe tools), with
    every durability invariant holding."""
    storage = _storage(backend, tmp_path, 0)
    world = _world(scenario)
    base = run_life(storage, scenario, world, crash_at=None)
    assert not base.crashed
    storage = _reopen(storage, backend)
    expected = storage.entries(1)
    check_all(storage, scenario, world, [base], expected=None)
    if scenario.baseline_check is not None:
        scenario.baseline_check(storage)
    n_effects = len(base.effects)
    if backend != "memory":
        storage.close()

    crashed = 0
    for k in range(n_effects + 1):
        storage = _storage(backend, tmp_path, k + 1)
        world = _world(scenario)
        first = run_life(storage, scenario, world, crash_at=k, seed=k)
        lives = [first]
        if first.crashed:
            crashed += 1
            lives.append(run_life(_reopen(storage, backend), scenario, world, crash_at=None, seed=k))
        check = _reopen(storage, backend)
        try:
            check_all(check, scenario, world, lives, expected)
        except AssertionError as e:
            raise AssertionError(f"scenario {scenario.name}, crash before effect {k}: {e}") from None
        finally:
            if backend != "memory":
                check.close()
    assert crashed >= n_effects - 2, f"only {crashed} of {n_effects} boundaries crashed"
    CRASH_REPORT[(scenario.name, backend)] = (n_effects, crashed)
