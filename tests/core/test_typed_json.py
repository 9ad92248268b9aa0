"""The spelt-out field walks of core/typed_json.py (``_SPELT``: ``Live``,
``ToolSlot``, ``UsageDoc``, ``UsageTotals``) against the generic record walk
(``_record``) and against the JSON diff, over random changes; and the ops a
caller finds itself (answers.plus_one_ops) against typed_ops."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from pidurable.core import chord, typed_json
from pidurable.core.answers import plus_one_call, plus_one_ops
from pidurable.core.model import SubmissionId, TaskId, Usage
from pidurable.core.typed_json import typed_ops
from pidurable.core.state import Live, RunInfo, SlotStatus, ToolSlot, UsageDoc, UsageTotals

# Small pools, so that a change often keeps a field (the same object), sets
# one equal but not the same (a big int, a fresh string, 1.0 for 1) or one at
# its default.
_BIG = 10**20
_ints = st.sampled_from([0, 1, 2, 7, _BIG, 0.0, 1.0, False, True]) | st.integers(-3, 3).map(lambda i: _BIG + i - i)  # (a fresh equal int)
_texts = st.sampled_from(["", "ab", "abc", "bc", "running"]) | st.sampled_from(["ab", "abc"]).map(lambda s: "".join(s))
_opt_ints = st.none() | _ints
_opt_texts = st.none() | _texts
_runs = st.none() | st.builds(
    RunInfo, task_id=st.sampled_from([TaskId(3), TaskId(4)]), inputs=st.sampled_from([(), (SubmissionId(1),)])
)
_controls = st.none() | st.sampled_from([{}, {"k": 1}, {"k": [1, {"x": None}]}])
_statuses = st.sampled_from(list(SlotStatus))

_slots = st.builds(
    ToolSlot,
    call_id=_texts,
    name=_texts,
    task_id=_opt_ints,
    status=_statuses,
    entry_id=_opt_ints,
    output=_opt_texts,
    control=_controls,
)
_SLOT_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "call_id": _texts,
        "name": _texts,
        "task_id": _opt_ints,
        "status": _statuses,
        "entry_id": _opt_ints,
        "output": _opt_texts,
        "control": _controls,
    },
)


@st.composite
def _slot_pairs(draw: st.DrawFn) -> tuple[ToolSlot, ToolSlot]:
    old = draw(_slots)
    return old, attrs.evolve(old, **draw(_SLOT_CHANGES))


@st.composite
def _live_pairs(draw: st.DrawFn) -> tuple[Live, Live]:
    tools = st.none() | st.lists(_slots, max_size=3).map(tuple)
    old = Live(
        run=draw(_runs),
        tools=draw(tools),
        attempt=draw(_opt_ints),
        partial=draw(_opt_texts),
        retry_at=draw(_opt_ints),
        retry_error=draw(_opt_texts),
        poll_at=draw(_opt_ints),
    )
    changes: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "run": _runs,
                "tools": tools,
                "attempt": _opt_ints,
                "partial": _opt_texts,
                "retry_at": _opt_ints,
                "retry_error": _opt_texts,
                "poll_at": _opt_ints,
            },
        )
    )
    if old.tools and draw(st.booleans()):  # one slot moved (a slot move's change)
        i = draw(st.integers(0, len(old.tools) - 1))
        moved = attrs.evolve(old.tools[i], **draw(_SLOT_CHANGES))
        changes["tools"] = old.tools[:i] + (moved,) + old.tools[i + 1 :]
    return old, attrs.evolve(old, **changes)


_totals = st.builds(UsageTotals, input_tokens=_ints, output_tokens=_ints, calls=_ints)


@st.composite
def _totals_pairs(draw: st.DrawFn) -> tuple[UsageTotals, UsageTotals]:
    old = draw(_totals)
    changes = draw(st.fixed_dictionaries({}, optional={"input_tokens": _ints, "output_tokens": _ints, "calls": _ints}))
    return old, attrs.evolve(old, **changes)


@st.composite
def _usage_pairs(draw: st.DrawFn) -> tuple[UsageDoc, UsageDoc]:
    keys = st.sampled_from(["p/a", "p/b", "t"])
    old = UsageDoc(
        models=draw(st.dictionaries(keys, _totals, max_size=2)), tools=draw(st.dictionaries(keys, _totals, max_size=2))
    )
    models, tools = dict(old.models), dict(old.tools)
    for part in draw(st.lists(st.sampled_from([models, tools]), max_size=3)):
        key = draw(keys)
        if key in part and draw(st.booleans()):
            del part[key]
        else:
            part[key] = attrs.evolve(part[key], calls=part[key].calls + 1) if key in part else draw(_totals)
    # a part kept (the same dict), rebuilt equal, or changed
    return old, UsageDoc(
        models=old.models if models == old.models and draw(st.booleans()) else models,
        tools=old.tools if tools == old.tools and draw(st.booleans()) else tools,
    )


_PATHS = st.sampled_from([[], ["tools", 1], ["models", "p/a"]])


def _check(old: Any, new: Any, path: list[Any]) -> None:
    assert type(old) in typed_json._SPELT
    spelt: list[Any] = []
    typed_json._typed(old, new, list(path), spelt)
    generic: list[Any] = []
    typed_json._record(old, new, typed_json._fields(type(old)), list(path), generic)
    assert spelt == generic
    assert tuple(spelt) == chord.diff(typed_json.to_json(old), typed_json.to_json(new), list(path))


@pytest.mark.parametrize("pairs", [_slot_pairs(), _live_pairs(), _totals_pairs(), _usage_pairs()], ids=["slot", "live", "totals", "usage"])
@settings(max_examples=300)
@given(data=st.data())
def test_a_spelt_out_walk_is_the_generic_records(pairs: st.SearchStrategy[tuple[Any, Any]], data: st.DataObject) -> None:
    """Each spelt-out walk gives exactly the generic record walk's ops (the
    same ops, in the same order), and those are the JSON diff's."""
    old, new = data.draw(pairs)
    _check(old, new, data.draw(_PATHS))


@settings(max_examples=300)
@given(_slots)
def test_a_slots_json_is_the_generic_records(slot: ToolSlot) -> None:
    """_slot_json (its quick case for a new slot, and the spelt-out fields)
    makes what the generic record case makes: every field not at its
    default, in declared order."""
    want = {}
    for name, default in typed_json._fields(ToolSlot):
        v = getattr(slot, name)
        if not (v is default or (default is not None and v == default)):
            want[name] = typed_json.to_json(v)
    got = typed_json._slot_json(slot)
    assert got == want and list(got) == list(want)
    assert all(type(got[k]) is type(want[k]) for k in got)


def test_every_spelt_out_walk_is_tested() -> None:
    assert set(typed_json._SPELT) == {Live, ToolSlot, UsageDoc, UsageTotals}


@settings(max_examples=300)
@given(
    _usage_pairs(),
    st.sampled_from(["models", "tools"]),
    st.sampled_from(["p/a", "p/b", "t"]),
    st.none() | st.tuples(_ints, _ints),
)
def test_the_ops_of_a_call_counted_are_the_whole_documents_diff(
    pair: tuple[UsageDoc, UsageDoc], part: str, key: str, reported: tuple[Any, Any] | None
) -> None:
    """answers.plus_one_ops (a counted call's ops, found from its one
    member) are typed_ops of the whole pi.usage: a member changed, a member
    new, a part new."""
    doc = pair[0]
    old = getattr(doc, part)
    prior = old.get(key)
    usage = None if reported is None else Usage(input_tokens=reported[0], output_tokens=reported[1])
    new = {**old, key: plus_one_call(prior, usage)}
    ops = plus_one_ops(part, old, new, key, prior)
    assert ops == typed_ops(doc, attrs.evolve(doc, **{part: new}))


def test_ops_a_caller_found_wrong_are_caught_in_tests() -> None:
    """With CHECK_WITHIN (tests): ops given to revise that are not the diff fail."""
    from pidurable.core import builtins
    from pidurable.core.draft import Tx
    from pidurable.core.model import ConversationId
    from pidurable.core.state import USAGE_DOC

    from .helpers import ROOT, opened_state

    assert builtins.CHECK_WITHIN
    cid = ConversationId(ROOT)
    tx = Tx(opened_state(), now=0)
    tx.set_usage(cid, UsageDoc(models={"p/a": UsageTotals(calls=1)}))
    state = tx.finish().state
    assert state.conversations[cid].stored[USAGE_DOC] == 0
    tx = Tx(state, now=0)
    with pytest.raises(AssertionError, match="not its diff"):
        tx.set_usage(cid, UsageDoc(models={"p/a": UsageTotals(calls=2)}), changed=True, ops=[["s", ["models", "p/a", "calls"], 3]])
