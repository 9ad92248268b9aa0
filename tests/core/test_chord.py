"""Chord ops (core/chord.py): apply, diff, and rebuilding from base + deltas."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pidurable.core.chord import OpError, apply, diff, diff_scalar, rebuild, same

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
    st.text("abc", max_size=6),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text("kxy", max_size=2), inner, max_size=4)),
    max_leaves=12,
)


def _containers(value: Any, path: list[Any]) -> list[tuple[list[Any], Any]]:
    """Every (path, member) in ``value``, the root included."""
    out = [(path, value)]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _containers(v, [*path, k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _containers(v, [*path, i])
    return out


@st.composite
def valid_op(draw: st.DrawFn, value: Any) -> list[Any]:
    """One op that applies to ``value`` (every verb the value allows)."""
    path, member = draw(st.sampled_from(_containers(value, [])))
    choices: list[list[Any]] = [["r", draw(json_value)]]
    if path:
        choices += [["s", path, draw(json_value)], ["d", path]]
    if isinstance(member, dict):
        choices.append(["s", [*path, draw(st.text("kxyz", max_size=2))], draw(json_value)])
    if isinstance(member, str):
        choices.append(["a", path, draw(st.text("abc", max_size=4))])
        choices.append(["t", path, draw(st.integers(0, len(member)))])
    if isinstance(member, list):
        i = draw(st.integers(0, len(member)))
        n = draw(st.integers(0, len(member) - i))
        choices.append(["p", path, i, n, draw(st.lists(json_value, max_size=3))])
        choices.append(["m", path, draw(st.permutations(list(range(len(member)))))])
    return draw(st.sampled_from(choices))


@st.composite
def history(draw: st.DrawFn) -> tuple[Any, list[list[Any]]]:
    """A start value and a sequence of ops, each valid where it applies."""
    value = draw(json_value)
    start, ops = value, []
    for _ in range(draw(st.integers(0, 12))):
        op = draw(valid_op(value))
        ops.append(op)
        value = apply(value, [op])
    return start, ops


@given(history(), st.integers(1, 5))
def test_rebuilding_from_base_and_deltas_gives_the_applied_value(case: tuple[Any, list[Any]], every: int) -> None:
    """Applying a random op sequence, and rebuilding the value from a base
    plus deltas (a new base every ``every`` deltas), give the same value."""
    start, ops = case
    value = start
    revisions: list[tuple[str, Any]] = [("base", start)]
    deltas = 0
    for op in ops:
        value = apply(value, [op])
        if deltas + 1 >= every:
            revisions.append(("base", value))
            deltas = 0
        else:
            revisions.append(("delta", [op]))
            deltas += 1
    rebuilt, since = rebuild(revisions)
    assert same(rebuilt, value)
    assert since == deltas


@given(json_value, json_value)
def test_diff_then_apply_gives_the_new_value(old: Any, new: Any) -> None:
    """``apply(old, diff(old, new))`` is ``new``; equal values diff to nothing."""
    assert same(apply(old, diff(old, new)), new)
    assert diff(new, new) == ()


@given(json_value, json_leaf, st.lists(st.text("kx", max_size=2), min_size=1, max_size=3))
@example(1, True, ["k"])  # equal in Python, not as JSON
@example(1.0, 1, ["k"])
@example("ab", "abc", ["k"])  # an append
@example("abc", "bcd", ["k"])  # a front trim and an append
@example({"k": 1}, "x", ["k"])
def test_diff_scalar_is_diff_when_one_side_is_a_scalar(old: Any, new: Any, path: list[Any]) -> None:
    """``diff_scalar`` (builtins.typed_ops' path for a changed status,
    number or string) gives exactly ``diff``'s ops, either way round, at any
    path: the same string edits (append, front trim), the same replacements."""
    for a, b in ((old, new), (new, old)):
        out: list[Any] = []
        diff_scalar(a, b, list(path), out)
        assert out == list(diff(a, b, path))


@given(history())
def test_diff_round_trips_along_a_history(case: tuple[Any, list[Any]]) -> None:
    """Each step of a random history diffs to ops that reproduce it, and
    apply never changes its input."""
    value, ops = case
    for op in ops:
        before = repr(value)
        nxt = apply(value, [op])
        assert repr(value) == before
        assert same(apply(value, diff(value, nxt)), nxt)
        value = nxt


def test_common_changes_diff_to_small_ops() -> None:
    """A leaf set, a string append, a front trim, an array insert: O(delta) ops."""
    todo = {"items": [{"text": "milk", "done": False}, {"text": "eggs", "done": False}], "log": "abc"}
    assert diff(todo, {**todo, "items": [todo["items"][0], {"text": "eggs", "done": True}]}) == (
        ["s", ["items", 1, "done"], True],
    )
    assert diff(todo, {**todo, "log": "abcdef"}) == (["a", ["log"], "def"],)
    assert diff(todo, {**todo, "log": "cdef"}) == (["t", ["log"], 2], ["a", ["log"], "def"])
    grown = {**todo, "items": [*todo["items"], {"text": "tea", "done": False}]}
    assert diff(todo, grown) == (["p", ["items"], 2, 0, [{"text": "tea", "done": False}]],)
    assert diff(1, 1.0) == (["r", 1.0],) and diff(True, 1) == (["r", 1],)


@pytest.mark.parametrize(
    "value, op",
    [
        ({}, ["x", []]),
        ({}, ["s", ["a", "b"], 1]),
        ([1], ["s", [3], 1]),
        ("ab", ["t", [], 3]),
        ({"a": 1}, ["a", ["a"], "x"]),
        ([1, 2], ["p", [], 1, 5, []]),
        ([1, 2], ["m", [], [0, 0]]),
        ({}, ["d", ["missing"]]),
        ({}, "r"),
    ],
)
def test_bad_ops_are_refused_never_skipped(value: Any, op: Any) -> None:
    """An unknown verb or an op that does not fit the value raises OpError."""
    with pytest.raises(OpError):
        apply(value, [op])


def test_a_history_without_a_base_is_refused() -> None:
    """Rebuilding needs a base first: deltas alone are a damaged history."""
    with pytest.raises(OpError):
        rebuild([("delta", [["r", 1]])])
