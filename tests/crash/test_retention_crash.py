"""Journal retention under crashes (issue 11): a SQLite store that prunes
its journal after every commit (``journal_retention=1``, ``PRUNE_EVERY=1``)
is killed before every effect of a scenario and reopened; every record it
ends with (transcript, submissions, tasks) must be byte for byte those of
the same lives on a store that keeps its whole journal. Pruning only ever
deletes journal rows, in their own transaction: it changes no record, no
recovery and no id or sequence number (the newest row always stays, and
open reads the next seq from it). Deterministic lives (MockClock, fixed
harness clock, seeded scheduler), so the two stores can be compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pidurable.shell import open_sqlite_storage
from pidurable.shell.storage import sqlite_retention
from pidurable.shell.storage.base import as_stored

from harness import Life, Scenario, World, run_virtual_life
from scenarios import CONFIG_FIX, FOLLOW_UP, UNSAFE


def _world(s: Scenario) -> World:
    w = World()
    w.files.update(dict(s.files))
    return w


def _life(storage: Any, scenario: Scenario, world: World, crash_at: int | None, start_ms: int) -> tuple[Life, int]:
    return run_virtual_life(storage, scenario, world, crash_at, start_ms)


def _run(path: Path, scenario: Scenario, crash_at: int | None, retention: int | str) -> list[Life]:
    """A life crashing before effect ``crash_at`` and (if it crashed) one to the end."""
    world = _world(scenario)
    start = 1_704_067_200_000
    life, last = _life(open_sqlite_storage(path, journal_retention=retention), scenario, world, crash_at, start)
    lives = [life]
    if life.crashed:
        again, _ = _life(open_sqlite_storage(path, journal_retention=retention), scenario, world, None, last + 1000)
        lives.append(again)
    return lives


def _records(path: Path) -> tuple[Any, ...]:
    store = open_sqlite_storage(path)
    try:
        return (
            store.entries(1),
            store.submissions(),
            [as_stored(t) for t in store.tasks()],
            store.load().next_seq,
            store.journal_span(),
        )
    finally:
        store.close()


@pytest.mark.parametrize("scenario", [CONFIG_FIX, UNSAFE, FOLLOW_UP], ids=lambda s: s.name)
def test_pruning_after_every_commit_changes_no_record_across_crashes(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_retention, "PRUNE_EVERY", 1)
    base = _run(tmp_path / "base.sqlite", scenario, None, "all")
    n_effects = len(base[0].effects)
    crashed = 0
    for k in range(n_effects + 1):
        kept, pruned = tmp_path / f"kept-{k}.sqlite", tmp_path / f"pruned-{k}.sqlite"
        lives = _run(kept, scenario, k, "all")
        again = _run(pruned, scenario, k, 1)
        assert [lf.crashed for lf in again] == [lf.crashed for lf in lives], f"crash before effect {k}"
        crashed += lives[0].crashed
        *records, full_span = _records(kept)
        *lean, span = _records(pruned)
        assert lean == records, f"crash before effect {k}: pruning changed a record"
        assert full_span is not None and full_span[0] == 1
        # every run settled at the end: only the newest row is kept
        assert span == (full_span[1], full_span[1]), f"crash before effect {k}: journal span {span}"
    assert crashed >= n_effects - 2
