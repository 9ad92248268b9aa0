"""A slot move (core/tool_results.py's move_slot): the slot of the task moves
by the slot table, ``pi.live`` by the progress table, and the revision is
that slot's diff."""

from __future__ import annotations

import pytest

from pidurable.core import builtins, chord
from pidurable.core.draft import Tx
from pidurable.core.effects import Commit, PutDocument
from pidurable.core.lifecycle import SlotMove
from pidurable.core.model import ConversationId, CoreInvariantError, EntryId, Task, TaskId
from pidurable.core.state import Live, RunInfo, SlotStatus, State, ToolSlot
from pidurable.core.tool_results import move_slot

from .helpers import ROOT, opened_state

C = ConversationId(ROOT)
_RUN = RunInfo(task_id=TaskId(2), inputs=())


def _slot(i: int, task: int, status: SlotStatus = SlotStatus.RUNNING, **kw: object) -> ToolSlot:
    return ToolSlot(call_id=f"c{i}", name="t", task_id=TaskId(task), status=status, **kw)  # type: ignore[arg-type]


def _with_slots(*slots: ToolSlot) -> State:
    """The root conversation in a tool round of ``slots`` (stored: a delta follows)."""
    state = opened_state()
    for live in (Live(run=_RUN, attempt=1), Live(run=_RUN, tools=slots)):
        tx = Tx(state, now=0)
        tx.set_live(C, live)
        state = tx.finish().state
    return state


def _move(state: State, task: int) -> tuple[Live, tuple[object, ...]]:
    """Settle ``task``'s slot (entry 50): ``pi.live`` after, and the revision's ops."""
    tx = Tx(state, now=0)
    move_slot(tx, Task(id=TaskId(task), conversation_id=C, kind="pi.tool"), SlotMove.SETTLE, entry_id=EntryId(50), output=None)
    result = tx.finish()
    (commit,) = [e for e in result.effects if isinstance(e, Commit)]
    (w,) = [w for w in commit.writes if isinstance(w, PutDocument)]
    return result.state.conversations[C].live, w.revision.ops


def test_a_settled_slot_is_its_own_diff_and_the_others_are_kept() -> None:
    """Settling the middle slot changes that slot only (the others are the
    same objects); the ops are at tools[1], the whole document's diff."""
    slots = (_slot(0, 10), _slot(1, 11, output="ab"), _slot(2, 12))
    state = _with_slots(*slots)
    live, ops = _move(state, 11)
    assert live.tools is not None and live.tools[0] is slots[0] and live.tools[2] is slots[2]
    assert live.tools[1] == _slot(1, 11, status=SlotStatus.DONE, entry_id=50)
    assert ops == (["d", ["tools", 1, "output"]], ["s", ["tools", 1, "status"], "done"], ["s", ["tools", 1, "entry_id"], 50])
    before = state.conversations[C].live
    assert ops == chord.diff(builtins.to_json(before), builtins.to_json(live))


def test_two_slots_of_one_task_both_move_and_the_ops_are_the_whole_diff() -> None:
    """Not made by the core, but handled: two slots naming one task both
    settle, and (two parts changed) the ops are the whole document's diff."""
    slots = (_slot(0, 10), _slot(1, 11), _slot(2, 10, status=SlotStatus.PENDING))
    state = _with_slots(*slots)
    live, ops = _move(state, 10)
    assert live.tools is not None and [s.status for s in live.tools] == [SlotStatus.DONE, SlotStatus.RUNNING, SlotStatus.DONE]
    assert live.tools[1] is slots[1]
    assert ops == chord.diff(builtins.to_json(state.conversations[C].live), builtins.to_json(live))


def test_a_task_without_a_slot_changes_nothing_and_a_settled_slot_cannot_settle_again() -> None:
    """No slot of the task: no revision; a slot's move outside the slot
    table raises."""
    state = _with_slots(_slot(0, 10), _slot(1, 11, status=SlotStatus.DONE))
    tx = Tx(state, now=0)
    move_slot(tx, Task(id=TaskId(99), conversation_id=C, kind="pi.tool"), SlotMove.SETTLE, entry_id=EntryId(50))
    assert not [e for e in tx.finish().effects if isinstance(e, Commit)]
    with pytest.raises(CoreInvariantError, match="not a transition"):
        _move(state, 11)


def test_a_move_that_keeps_the_status_is_compared_and_one_that_changes_nothing_is_no_revision() -> None:
    """A slot move whose status moved is set without comparing pi.live (it
    changed); one whose status stays (running output) is compared: the same
    output again writes no revision, a new one writes its diff."""
    state = _with_slots(_slot(0, 10, output="ab"), _slot(1, 11))
    task = Task(id=TaskId(10), conversation_id=C, kind="pi.tool")
    tx = Tx(state, now=0)
    move_slot(tx, task, SlotMove.OUTPUT, output="".join(["a", "b"]))  # (equal, not the same object)
    assert not [e for e in tx.finish().effects if isinstance(e, Commit)]
    tx = Tx(state, now=0)
    move_slot(tx, task, SlotMove.OUTPUT, output="abc")
    (commit,) = [e for e in tx.finish().effects if isinstance(e, Commit)]
    (w,) = [w for w in commit.writes if isinstance(w, PutDocument)]
    assert w.revision.ops == (["a", ["tools", 0, "output"], "c"],)
