"""The live ``State`` as a snapshot (shell/storage/snapshot.py) and the
journal replayed from it (``journal.replay(state=...)``): what an
event-sourced store recovers with (issue 11 item 2; docs/performance.md).

For every commit of every golden scenario (crashes and reopenings among
them) and of a bench-shaped run (tool rounds, documents), the state that
commit's events were stepped on is encoded, decoded, and must be equal to
it (its rebuilt index too, and its tasks in the same representation); the
rows of its process life from that commit on, replayed from the decoded
state, must reproduce every recorded commit byte for byte (the invariant
``ResumesFromSnapshot`` at every commit: tests/invariants.py). A ``Map`` of
live tasks is made here by hand; the crash sweep meets it for real.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import attrs
import pytest
from immutables import Map

from pidurable.core.state import State
from pidurable.shell.journal import replay
from pidurable.shell.journal_file import read_journal
from pidurable.shell.storage.base import JournalRow
from pidurable.shell.storage.memory import MemoryStorage
from pidurable.shell.storage.snapshot import SNAPSHOT_FORMAT, SnapshotError, decode_state, encode_state

from golden_scenarios import GOLDEN, path
from invariants import resumes_from_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import workload  # noqa: E402


def _befores(rows: list[JournalRow]) -> list[State]:
    """The state each row's events were stepped on (the journal replayed whole)."""
    transitions = list(replay(rows, describe=False))
    assert [t.divergence for t in transitions if t.divergence is not None] == []
    befores = [t.before for t in transitions]
    assert all(b is not None for b in befores)
    return befores  # type: ignore[return-value]


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g.name)
def test_every_golden_commit_resumes_from_a_snapshot(golden: object) -> None:
    rows = read_journal(path(golden))  # type: ignore[arg-type]
    assert resumes_from_rows(rows, every_commit=True) >= len(rows) // 2


async def _bench_journal(rounds: int) -> list[JournalRow]:
    storage = MemoryStorage()
    from pidurable.shell import Harness, Input

    async with Harness.open(storage, models=workload.make_models(rounds, [], None), registry=workload.make_registry()) as h:
        conv = await h.root(agent=workload.AGENT)
        sub = await conv.submit(Input("go"))
        assert (await sub.wait()).status == "done"
    return storage.journal()


async def test_a_tool_round_run_resumes_from_a_snapshot_at_every_commit() -> None:
    rows = await _bench_journal(6)
    assert len(rows) > 12
    assert resumes_from_rows(rows, every_commit=True) == len(rows) - 1  # every row but the opening one


def test_many_live_tasks_keep_their_persistent_map() -> None:
    """Past ``index.LARGE`` live tasks the core holds a ``Map``: kept so, in its order (not a dict's)."""
    rows = read_journal(path(next(g for g in GOLDEN if g.name == "vienna")))
    before = next(b for b in _befores(rows) if len(b.tasks) > 1)
    many = attrs.evolve(before, tasks=Map(before.tasks))
    back = decode_state(encode_state(many))
    assert type(back.tasks) is Map and back == many
    assert list(back.tasks) == list(many.tasks)
    assert type(decode_state(encode_state(before)).tasks) is dict


def test_a_wrong_snapshot_is_caught_by_the_replay() -> None:
    """The check bites: a snapshot missing the live tasks does not reproduce the journal after it."""
    rows = read_journal(path(next(g for g in GOLDEN if g.name == "config_fix")))
    befores = _befores(rows)
    i = next(i for i, b in enumerate(befores) if b.opened and b.tasks)
    wrong = decode_state(encode_state(attrs.evolve(befores[i], tasks={})))
    tail = list(replay(rows[i:], describe=False, state=wrong))
    assert any(t.divergence is not None for t in tail)


def test_a_state_that_is_not_strict_json_is_refused() -> None:
    rows = read_journal(path(GOLDEN[0]))
    before = next(b for b in _befores(rows) if b.tasks)
    task = next(iter(before.tasks.values()))
    for bad in (math.nan, "lone \ud800 surrogate"):
        state = attrs.evolve(before, tasks={task.id: attrs.evolve(task, checkpoint={"x": bad})})
        with pytest.raises(SnapshotError, match="not strict JSON"):
            encode_state(state)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "not strict JSON"),
        (b"\xff\xfe", "not strict JSON"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "next_id": NaN}}', "not strict JSON.*NaN"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "x": -Infinity}}', "not strict JSON.*Infinity"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "x": "\\ud800"}}', "not valid UTF-8"),
        ("[1, 2]", "not a JSON object"),
        ('{"format": 99}', "format 99"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "next_id": 2}}', "part 'next_seq'"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "next_id": "2"}}', "part 'next_id' .*str where int"),
        (f'{{"format": {SNAPSHOT_FORMAT}, "next_id": 2, "next_seq": 1, "scheduling": 1}}', "part 'scheduling' .*int where bool"),
    ],
)
def test_a_text_that_is_not_a_snapshot_raises_a_clear_error(text: str | bytes, says: str) -> None:
    with pytest.raises(SnapshotError, match=says):
        decode_state(text)


def test_a_malformed_record_names_its_part() -> None:
    rows = read_journal(path(GOLDEN[0]))
    text = encode_state(next(b for b in _befores(rows) if b.tasks))
    broken = text.replace('"tasks":[{', '"tasks":[17,{', 1)
    assert broken != text
    with pytest.raises(SnapshotError, match="part 'tasks'"):
        decode_state(broken)


def test_a_key_the_record_does_not_carry_is_refused() -> None:
    rows = read_journal(path(GOLDEN[0]))
    before = next(b for b in _befores(rows) if b.tasks)
    task = next(iter(before.tasks.values()))
    with pytest.raises(SnapshotError, match="another key"):
        encode_state(attrs.evolve(before, tasks={task.id + 1000: task}))


def test_phases_out_and_failed_migrations_are_kept() -> None:
    """What an open from the tables loses (``Opened`` clears both): the
    phases out in the shell and the migrations that failed (the crash
    sweep's states have the first; ResumesFromSnapshot checks them there)."""
    rows = read_journal(path(GOLDEN[0]))
    before = next(b for b in _befores(rows) if b.tasks)
    tid = next(iter(before.tasks))
    state = attrs.evolve(before, invocations=frozenset({tid, tid + 7}), failed_migrations={tid: 3})
    back = decode_state(encode_state(state))
    assert back == state
    assert back.invocations == frozenset({tid, tid + 7}) and back.failed_migrations == {tid: 3}


def test_ids_that_are_not_integers_name_their_part() -> None:
    rows = read_journal(path(GOLDEN[0]))
    text = encode_state(next(b for b in _befores(rows) if b.tasks))
    for part, bad in (("invocations", '["7"]'), ("settled", "[1.5]"), ("failed_migrations", '[["7", 1]]'), ("invocations", "{}")):
        broken = text.replace(f'"{part}":[]', f'"{part}":{bad}', 1)
        assert broken != text, part
        with pytest.raises(SnapshotError, match=f"part '{part}'"):
            decode_state(broken)
