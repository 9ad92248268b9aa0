"""The phase tables of the built-in kinds drive the code and are total: every
(phase, input) pair is a row or a loud CoreInvariantError; handlers store only
the phase their row names; checkpoints keep their wire shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidurable.core import compaction_task, generation, tools
from pidurable.core.checkpoints import (
    FIRST_PREPARE,
    CallCheckpoint,
    ExecuteCheckpoint,
    GenerationPhase,
    PollCheckpoint,
    PrepareCheckpoint,
    RequestCheckpoint,
    RetryCheckpoint,
    ToolPhase,
    ToolsCheckpoint,
    parse_generation,
    parse_tool,
    to_dict,
)
from pidurable.core.draft import Tx
from pidurable.core.lifecycle import TaskMove
from pidurable.core.model import CoreInvariantError, EntryId, ModelRef, Replay, TaskId
from pidurable.core.phases import END, Machine, Turn

from .helpers import calls, opened_state, run_events, submit

MACHINES = [generation.MACHINE, tools.MACHINE, compaction_task.MACHINE]
IDS = ["generation", "tools", "compaction"]


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_rows_name_known_phases_and_inputs(machine: Machine) -> None:
    """Each row is keyed by a phase and an input of the kind's enums and leads
    to one of its phases, or ends the task."""
    for (phase, move), row in machine.rows.items():
        assert isinstance(phase, machine.phases) and isinstance(move, machine.inputs)
        assert row.next is END or isinstance(row.next, machine.phases), (phase, move, row.next)


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_every_phase_can_be_reserved_and_aborted(machine: Machine) -> None:
    """A task stored at any phase can be picked by the scheduler (some
    reserve-like row) and settled by its abort handler: no phase strands it."""
    reserve_like = {m for m in machine.inputs if m.value.startswith("reserve")} | {
        generation.GenerationInput.NO_MODEL,
        generation.GenerationInput.NEXT_CALL,
        generation.GenerationInput.ROUND_DONE,
    }
    for phase in machine.phases:
        assert any((phase, m) in machine.rows for m in reserve_like), phase
        assert machine.rows[(phase, machine.inputs("abort"))].next is END


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_every_phase_and_input_is_reachable(machine: Machine) -> None:
    """No dead enum members: every phase is entered by some row or is a
    birth phase, and every input has at least one row."""
    targets = {row.next for row in machine.rows.values()}
    births = {GenerationPhase.PREPARE, ToolPhase.CALL}
    assert set(machine.phases) <= targets | births
    assert {move for (_, move) in machine.rows} == set(machine.inputs)


@given(st.sampled_from(GenerationPhase), st.sampled_from(generation.GenerationInput))
def test_generation_table_is_total(phase: GenerationPhase, move: generation.GenerationInput) -> None:
    """A (phase, input) pair is either a row or raises CoreInvariantError."""
    _total(generation.MACHINE, phase, move)


@given(st.sampled_from(ToolPhase), st.sampled_from(tools.ToolInput))
def test_tool_table_is_total(phase: ToolPhase, move: tools.ToolInput) -> None:
    """A (phase, input) pair is either a row or raises CoreInvariantError."""
    _total(tools.MACHINE, phase, move)


def _total(machine: Machine, phase: Any, move: Any) -> None:
    if (phase, move) in machine.rows:
        assert machine.row(phase, move) is machine.rows[(phase, move)]
    else:
        with pytest.raises(CoreInvariantError, match="no row"):
            machine.row(phase, move)


def test_running_a_missing_row_is_a_loud_error() -> None:
    """The dispatcher refuses an input its table has no row for (here: a
    timer at ``request``) before any handler runs."""
    state = opened_state()
    gen_id = next(iter(run_events(state, submit())[-1].state.tasks))
    tx = Tx(run_events(state, submit())[-1].state, 30)
    task = tx.tasks[gen_id]
    cp = parse_generation(task.checkpoint)
    assert isinstance(cp, RequestCheckpoint)
    with pytest.raises(CoreInvariantError, match="no row"):
        generation.MACHINE.run(tx, task, cp, generation.GenerationInput.TIMER_FIRED)


def test_a_handler_cannot_store_another_phase_than_its_row() -> None:
    """``Turn.store`` writes only the record of the row's next phase."""
    state = run_events(opened_state(), submit())[-1].state
    tx = Tx(state, 30)
    task = next(iter(tx.tasks.values()))
    cp = parse_generation(task.checkpoint)
    assert cp is not None
    turn = Turn(tx, task, cp, GenerationPhase.POLL)
    with pytest.raises(CoreInvariantError, match="leads to poll"):
        turn.store(TaskMove.CHECKPOINT, RetryCheckpoint(attempt=1, until=5))
    ending = Turn(tx, task, cp, END)
    with pytest.raises(CoreInvariantError, match="ends the task"):
        ending.store(TaskMove.CHECKPOINT)


def test_rows_are_what_the_code_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replacing a row's handler changes what a step does: the table drives
    the code (here the ``(request, tool_calls)`` row)."""
    seen: list[Any] = []
    key = (GenerationPhase.REQUEST, generation.GenerationInput.TOOL_CALLS)
    row = generation.MACHINE.rows[key]

    def spy(turn: Turn, ev: Any) -> None:
        seen.append((turn.checkpoint.PHASE, type(ev).__name__))
        row.handler(turn, ev)

    monkeypatch.setitem(generation.MACHINE.rows, key, type(row)(handler=spy, next=row.next))  # type: ignore[call-overload]
    state = run_events(opened_state(), submit())[-1].state
    gen_id = next(iter(state.tasks))
    run_events(state, calls(gen_id, "read"))
    assert seen == [(GenerationPhase.REQUEST, "ModelResponded")]


# --- checkpoints keep their wire shape ----------------------------------------

WIRE = [
    {"phase": "prepare", "attempt": 2},
    {"phase": "prepare", "attempt": 1},
    {"phase": "prepare", "attempt": 1, "compacted": 4},
    {"phase": "request", "attempt": 1, "model": {"provider": "p", "model_id": "m"}, "cutoff": 7},
    {"phase": "retry", "attempt": 1, "until": 2000},
    {"phase": "poll", "attempt": 1, "model": {"provider": "p", "model_id": "m"}, "cutoff": 7, "handle": {"id": "x"}, "poll_at": 5},
    {"phase": "tools", "assistant": 9, "tools": [10, 11], "pending": ["c3"]},
    {"phase": "call"},
    {"phase": "execute", "arguments": {"path": "/a"}, "replay": "safe"},
    {"phase": "execute", "arguments": {}, "replay": "unsafe", "process": {"pid": 1, "pgid": 1}},
]


@pytest.mark.parametrize("wire", WIRE, ids=[f"{w['phase']}{i}" for i, w in enumerate(WIRE)])
def test_checkpoints_round_trip_byte_for_byte(wire: dict[str, Any]) -> None:
    """parse then to_dict gives the same JSON text (same keys, same order)."""
    cp = parse_generation(wire) or parse_tool(wire)
    assert cp is not None and cp.PHASE == wire["phase"]
    assert json.dumps(to_dict(cp)) == json.dumps(wire)


def test_records_serialize_in_the_stored_key_order() -> None:
    """Records built by handlers encode exactly as the store always had them."""
    model = ModelRef("p", "m")
    assert list(to_dict(PrepareCheckpoint(attempt=1))) == ["phase", "attempt"]
    assert list(to_dict(RequestCheckpoint(attempt=1, model=model, cutoff=EntryId(3)))) == ["phase", "attempt", "model", "cutoff"]
    poll = PollCheckpoint(attempt=1, model=model, cutoff=EntryId(3), handle=None, poll_at=4)
    assert list(to_dict(poll)) == ["phase", "attempt", "model", "cutoff", "handle", "poll_at"]
    rnd = ToolsCheckpoint(assistant=EntryId(1), tools=(TaskId(2),), pending=())
    assert to_dict(rnd) == {"phase": "tools", "assistant": 1, "tools": [2], "pending": []}
    assert to_dict(CallCheckpoint()) == {"phase": "call"}
    assert "process" not in to_dict(ExecuteCheckpoint(arguments={}, replay=Replay.SAFE))


def test_unknown_phases_parse_to_none_and_damaged_ones_are_loud() -> None:
    """An unknown phase is data (the task faults); a known phase with missing
    fields is a bug in whoever wrote it."""
    assert parse_generation({"phase": "dance"}) is None
    assert parse_tool({"phase": 3}) is None
    with pytest.raises(CoreInvariantError, match="damaged"):
        parse_generation({"phase": "retry", "attempt": 1})


def test_a_first_prepare_parses_to_the_shared_record_only_when_it_is_one() -> None:
    """Every generation starts at FIRST_PREPARE; its stored form parses back
    to that one instance, and anything else at attempt 1 to its own record."""
    assert parse_generation(to_dict(FIRST_PREPARE)) is FIRST_PREPARE
    compacted = parse_generation({"phase": "prepare", "attempt": 1, "compacted": 4})
    assert compacted == PrepareCheckpoint(attempt=1, compacted=TaskId(4))
    assert parse_generation({"phase": "prepare", "attempt": 2}) == PrepareCheckpoint(attempt=2)


_MODEL = ModelRef("p", "m")
STORED = [  # (record, kept by to_dict)
    (RequestCheckpoint(attempt=1, model=_MODEL, cutoff=EntryId(3)), True),
    (RequestCheckpoint(attempt=2, model=_MODEL, cutoff=EntryId(3), compacted=TaskId(4), threshold=True), True),
    (RequestCheckpoint(attempt=1, model=_MODEL, cutoff=EntryId(3), threshold=True), False),  # threshold not stored
    (ToolsCheckpoint(assistant=EntryId(1), tools=(TaskId(2), TaskId(3)), pending=("c4",)), True),
    (ExecuteCheckpoint(arguments={"path": "/a"}, replay=Replay.SAFE), True),
    (ExecuteCheckpoint(arguments={}, replay=Replay.UNSAFE, process={"pid": 1}, reconciled=True), True),
    (ExecuteCheckpoint(arguments={}, replay="unsafe"), False),  # type: ignore[arg-type]  # a str, not the member
    (PrepareCheckpoint(attempt=2), False),
    (PollCheckpoint(attempt=1, model=_MODEL, cutoff=EntryId(3), handle=None, poll_at=4), False),
]


@pytest.mark.parametrize(("cp", "kept"), STORED, ids=[f"{type(c).__name__}{i}" for i, (c, _) in enumerate(STORED)])
def test_a_stored_dict_parses_back_to_its_record_only_when_a_parse_would_equal_it(cp: Any, kept: bool) -> None:
    """to_dict keeps the record it stored (checkpoints._STORED): parsing that
    very dict gives it back - the records of every round, each only when a
    fresh parse of the same content equals it; a copy is parsed afresh."""
    stored = to_dict(cp)
    parse = parse_generation if isinstance(cp.PHASE, GenerationPhase) else parse_tool
    fresh = parse(dict(stored))
    assert fresh is not cp
    again = parse(stored)
    assert again == fresh and (again is cp) == kept
    if kept:
        assert fresh == cp
