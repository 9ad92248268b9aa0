"""The step draft (core/draft.py) carries exactly the State's fields and never mutates its input."""

from __future__ import annotations

from typing import get_args, get_type_hints

import attrs

from pidurable.core import State
from pidurable.core.draft import DRAFT_FIELDS, Tx
from pidurable.core.effects import EFFECT_TYPES, WRITE_TYPES, Effect, Write
from pidurable.core.events import EVENT_TYPES, Event
from pidurable.core.index import empty_index
from pidurable.core.state import UsageTotals

from .helpers import opened_state


def test_draft_fields_are_the_state_fields() -> None:
    """Every State field but next_seq/opened is drafted, and each drafted
    field is declared (typed) on Tx: adding a State field cannot be forgotten."""
    names = {f.name for f in attrs.fields(State)}
    assert set(DRAFT_FIELDS) == names - {"next_seq", "opened"}
    assert set(DRAFT_FIELDS) <= set(get_type_hints(Tx))


def test_the_draft_takes_each_field_from_its_own_state_field() -> None:
    """Tx reads the drafted fields in one unpacking (its order written out):
    each field gets its own value, and finish gives each back."""
    state = State()
    marked: dict[str, object] = {name: object() for name in DRAFT_FIELDS}
    # the draft opens its working index on the state's: that marker is an
    # index (a fresh one, so still only this field's value)
    marked["task_index"] = empty_index()
    for name, value in marked.items():
        object.__setattr__(state, name, value)
    tx = Tx(state, 0)
    assert {name: getattr(tx, name) for name in DRAFT_FIELDS} == marked
    frozen = tx._freeze(state.next_seq)
    assert {name: getattr(frozen, name) for name in DRAFT_FIELDS} == marked


def test_draft_round_trips_the_state_without_touching_it() -> None:
    """A draft with no decisions gives back an equal state; the input is unchanged."""
    state = opened_state()
    before = repr(state)
    tx = Tx(state, 5)
    tx._owned("tasks")
    assert tx.finish().state == state
    assert repr(state) == before


def test_union_member_tuples_are_derived_from_the_unions() -> None:
    """EVENT_TYPES / WRITE_TYPES / EFFECT_TYPES list exactly the union members."""
    assert EVENT_TYPES == get_args(Event)
    assert WRITE_TYPES == get_args(Write)
    assert EFFECT_TYPES == get_args(Effect)


def test_usage_totals_add() -> None:
    """UsageTotals add field by field; one call counts its tokens and one call."""
    a = UsageTotals(input_tokens=1, output_tokens=2, calls=3)
    assert a + UsageTotals.one_call(None) == UsageTotals(input_tokens=1, output_tokens=2, calls=4)


def test_put_task_and_put_entry_stage_their_write_under_its_write_key() -> None:
    """put_task/put_entry stage their write without Tx.write's lookups: the
    key is still write_key's, so a later write of the same record replaces it."""
    from pidurable.core.effects import PutEntry, PutTask, write_key
    from pidurable.core.model import Entry, EntryKind, Task

    tx = Tx(opened_state(), 5)
    task = Task(id=40, conversation_id=1, kind="custom")
    entry = Entry(id=41, conversation_id=1, kind=EntryKind.USER, text="hi", at=5)
    tx.put_task(task)
    tx.put_entry(entry)
    tx.write(PutTask(task=task))  # the same keys: replaced in place, not added
    tx.write(PutEntry(entry=entry))
    assert list(tx._writes) == [write_key(PutTask(task=task)), write_key(PutEntry(entry=entry))]


def test_set_live_compares_as_live_equality_does() -> None:
    """set_live's spelt-out comparison says equal exactly when ``==`` does,
    over values that share parts and values that are equal copies: an
    equal value writes nothing, an unequal one a revision."""
    import itertools

    from pidurable.core.state import Live, RunInfo, SlotStatus, ToolSlot

    slot = ToolSlot(call_id="c", name="t", task_id=3)
    run = RunInfo(task_id=2, inputs=(5,))
    values = [
        Live(),
        Live(run=run),
        Live(run=RunInfo(task_id=2, inputs=(5,))),
        Live(run=RunInfo(task_id=2, inputs=(6,))),
        Live(run=run, tools=(slot,)),
        Live(run=run, tools=(ToolSlot(call_id="c", name="t", task_id=3),)),
        Live(run=run, tools=(ToolSlot(call_id="c", name="t", task_id=3, status=SlotStatus.DONE),)),
        Live(run=run, attempt=1),
        Live(run=run, partial="p"),
        Live(run=run, retry_at=9, retry_error="e"),
        Live(run=run, poll_at=9),
    ]
    state = opened_state()
    for a, b in itertools.product(values, repeat=2):
        tx = Tx(attrs.evolve(state, conversations={1: attrs.evolve(state.conversations[1], live=a)}), 5)
        tx.set_live(1, b)
        assert (not tx._writes) == (a == b), (a, b)
