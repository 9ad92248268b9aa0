"""Kill the shell before every effect of each scenario, reopen, finish, and
check every invariant of tests/invariants.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from pidurable.shell import MemoryStorage, open_jsonl_storage, open_sqlite_storage

from pidurable.core import index
from pidurable.core.effects import RunReconcile

from harness import CRASH_REPORT, Life, Scenario, World, check_all, run_life, run_virtual_life
from scenarios import ALL


def _world(s: Scenario) -> World:
    w = World()
    w.files.update(dict(s.files))
    return w


#: The PostgreSQL server of the ``postgres`` backend (set by ``_postgres``).
_PG: dict[str, str] = {}

#: The scenarios the ``postgres`` backend runs by default: one of each kind
#: of storage traffic (unsafe tools, abort, steer, sub-agent conversations,
#: custom tasks, deferred calls, streaming, compaction, host documents,
#: forks). Every commit is a round trip, so all scenarios take several
#: minutes; ``PIDURABLE_PG_CRASH=all`` runs them all.
PG_SCENARIOS = frozenset(
    {"unsafe", "abort_tool", "steer", "subagent", "custom_task", "deferred", "streaming",
     "threshold_background", "document_tool", "fork_of_fork"}
)


#: The scenarios the ``pgtree`` backend runs (issue 13: each life is a worker's
#: claim of the tree, opened like a restart, with a fresh id block): unsafe
#: tools, sub-agent conversations in the tree, forks in the tree.
PG_TREE_SCENARIOS = frozenset({"unsafe", "subagent", "fork_of_fork"})


@pytest.fixture(autouse=True)
def _postgres(request: pytest.FixtureRequest) -> None:
    """Start (once per session) the throwaway PostgreSQL, for the
    ``postgres`` and ``pgtree`` backends only (tests/pg_server.py)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("backend") not in ("postgres", "pgtree"):
        return
    _PG["dsn"] = request.getfixturevalue("postgres_server").dsn


#: The shared stores the ``pgtree`` backend opened (each schema's one), closed
#: when the next schema is opened.
_TREE_STORES: list[Any] = []


def _claimed(store: Any) -> Any:
    """A view of tree 1 under a fresh claim: the previous claimer's lease is
    taken from it (as if it expired), so whatever it still tries to commit
    is fenced out; the new claim's ids start at a fresh block."""
    from pidurable.shell.storage import postgres_tree as trees

    with store._connection() as conn:
        conn.execute(
            b"INSERT INTO leases (root, work_at) VALUES (1, now()) "
            b"ON CONFLICT (root) DO UPDATE SET owner = NULL, expires_at = NULL, work_at = now()"
        )
    (claim,) = trees.claim(store, "crash-test", 1, 3600.0, only=1)
    return trees.TreeStorage(store, claim)


#: Backends whose commits run inline (no thread): their lives run on virtual time.
_INLINE = frozenset({"memory", "sqlite", "jsonl"})


class _Time:
    """The clocks of the lives on one store. On an inline backend each life
    runs on virtual time (``run_virtual_life``), its clock going on from the
    previous life's (a restart later): a life's interleaving then depends
    on its seed alone, not on how long a commit takes on a loaded machine -
    with wall time, a scenario's
    2 ms tool pauses raced the commits, and the recovering lives' effects
    (so the boundaries swept) differed from run to run. PostgreSQL commits
    in a worker thread (a mock clock would jump while one is in flight), so
    its lives keep wall time."""

    def __init__(self, backend: str) -> None:
        self.virtual = backend in _INLINE
        self.last_ms = 1_767_225_600_000  # 2026-01-01

    def life(self, storage: Any, scenario: Scenario, world: World, crash_at: int | None, seed: int = 0) -> Life:
        if not self.virtual:
            return run_life(storage, scenario, world, crash_at=crash_at, seed=seed)
        life, self.last_ms = run_virtual_life(storage, scenario, world, crash_at, self.last_ms + 1_000, seed)
        return life


def _storage(backend: str, tmp_path: Path, n: int) -> Any:
    if backend == "memory":
        return MemoryStorage()
    if backend == "pgtree":  # a schema per store, the tree of conversation 1 claimed by each life
        from pidurable.shell.storage.postgres import PostgresStorage
        from pidurable.shell.storage import postgres_tree as trees

        while _TREE_STORES:
            _TREE_STORES.pop().close()
        tag = hashlib.blake2b(str(tmp_path).encode(), digest_size=6).hexdigest()
        store = PostgresStorage(_PG["dsn"], schema=f"t{tag}_{n}", shared=True, worker_id="crash-test")
        _TREE_STORES.append(store)
        trees.bump_id_blocks(store)
        return _claimed(store)
    if backend == "postgres":  # a store per schema; tmp_path is unique per test
        from pidurable.shell import open_postgres_storage

        tag = hashlib.blake2b(str(tmp_path).encode(), digest_size=6).hexdigest()
        return open_postgres_storage(_PG["dsn"], schema=f"k{tag}_{n}")
    if backend == "jsonl":
        return open_jsonl_storage(tmp_path / f"store-{n}")
    return open_sqlite_storage(tmp_path / f"store-{n}.sqlite")


def _reopen(storage: Any, backend: str) -> Any:
    if backend == "memory":
        return storage
    if backend == "pgtree":
        return _claimed(storage.store)
    if backend == "jsonl":
        return open_jsonl_storage(storage.path)
    if backend == "postgres":
        from pidurable.shell import open_postgres_storage

        return open_postgres_storage(storage.dsn, schema=storage.schema)
    return open_sqlite_storage(storage.path)


#: (scenario, backend) pairs: every scenario on memory, SQLite and JSONL; on
#: PostgreSQL the ``PG_SCENARIOS`` (all with ``PIDURABLE_PG_CRASH=all``) - the
#: others are not generated at all (no skips). ``memory-maps``: memory with
#: the core's persistent maps from two live tasks on (``index.LARGE`` 2;
#: 32 in production), so every scenario's lives hold their live tasks and
#: task index in ``immutables.Map``s as a burst of conversations does.
CASES = [
    pytest.param(s, b, id=f"{s.name}-{b}")
    for s in ALL
    for b in ("memory", "memory-maps", "sqlite", "jsonl", "postgres", "pgtree")
    if (b != "postgres" or s.name in PG_SCENARIOS or os.environ.get("PIDURABLE_PG_CRASH") == "all")
    and (b != "pgtree" or s.name in PG_TREE_SCENARIOS or os.environ.get("PIDURABLE_PG_CRASH") == "all")
]


@pytest.mark.parametrize(("scenario", "backend"), CASES)
def test_kill_at_every_effect_boundary(scenario: Scenario, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For every k, a crash before effect k followed by a reopen ends in the
    uninterrupted run's outcome (modulo "interrupted" unsafe tools), with
    every durability invariant holding."""
    label = backend
    if backend == "memory-maps":
        monkeypatch.setattr(index, "LARGE", 2)
        backend = "memory"
    storage = _storage(backend, tmp_path, 0)
    world = _world(scenario)
    base = _Time(backend).life(storage, scenario, world, crash_at=None)
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
    verdicts: set[str] = set()
    n = 0
    for k in range(n_effects + 1):
        n += 1
        lives, world, check = _lives(scenario, backend, tmp_path, n, (k,))
        crashed += lives[0].crashed
        _check(check, scenario, world, lives, expected, backend, verdicts, f"crash before effect {k}")
        if not (scenario.sweep_recovery and len(lives) > 1 and any(isinstance(e, RunReconcile) for e in lives[1].effects)):
            continue
        # the recovery asked reconcile: crash it too, before each of its effects
        for j in range(len(lives[1].effects) + 1):
            n += 1
            again, world, check = _lives(scenario, backend, tmp_path, n, (k, j))
            crashed += again[0].crashed and len(again) > 2
            where = f"crash before effect {k}, then before effect {j} of the recovery"
            _check(check, scenario, world, again, expected, backend, verdicts, where)
    assert crashed >= n_effects - 2, f"only {crashed} of {n_effects} boundaries crashed"
    missing = set(scenario.verdicts) - verdicts
    assert not missing, f"scenario {scenario.name}: no crash position led to reconcile verdicts {sorted(missing)}"
    CRASH_REPORT[(scenario.name, label)] = (n_effects, crashed)


def _lives(scenario: Scenario, backend: str, tmp_path: Path, n: int, crashes: tuple[int, ...]) -> tuple[list[Life], World, Any]:
    """Lives on a fresh store: the i-th crashing before effect ``crashes[i]``
    (while the previous one crashed), then one to the end."""
    storage = _storage(backend, tmp_path, n)
    world = _world(scenario)
    time = _Time(backend)
    lives = [time.life(storage, scenario, world, crash_at=crashes[0], seed=crashes[0])]
    for crash_at in (*crashes[1:], None):
        if not lives[-1].crashed:
            break
        lives.append(time.life(_reopen(storage, backend), scenario, world, crash_at=crash_at, seed=crashes[0]))
    return lives, world, _reopen(storage, backend)


def _check(
    check: Any, scenario: Scenario, world: World, lives: list[Life], expected: Any, backend: str, verdicts: set[str], where: str
) -> None:
    try:
        check_all(check, scenario, world, lives, expected)
        verdicts.update(str((e.data or {}).get("reconciled")) for e in check.entries(1) if (e.data or {}).get("reconciled"))
    except AssertionError as e:
        raise AssertionError(f"scenario {scenario.name}, {where}: {e}") from None
    finally:
        if backend != "memory":
            check.close()
