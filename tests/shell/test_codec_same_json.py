"""``codec._same_json`` (a ModelResponded's prepared arguments are left out
of the journal when they encode like its tool call's): the shortcut for flat
dicts decides exactly as encoding both and comparing the texts."""

from __future__ import annotations

from typing import Any

import pytest

from pidurable.shell.storage import codec

PAIRS: list[tuple[Any, Any]] = [
    ({"i": 0}, {"i": 0}),
    ({"a": "x", "b": 1, "c": None, "d": True}, {"a": "x", "b": 1, "c": None, "d": True}),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # equal, another key order: another text
    ({"a": 1}, {"a": True}),  # equal in Python, "1" and "true" in JSON
    ({"a": 1}, {"a": 1.0}),
    ({"a": 0.0}, {"a": -0.0}),  # equal floats, different texts
    ({"a": 0.5}, {"a": 0.5}),
    ({"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}),  # nested order
    ({"a": {"b": 1}}, {"a": {"b": 1}}),
    ({"a": [1, 2]}, {"a": [1, 2]}),
    ({"a": [1, 2]}, {"a": (1, 2)}),  # a tuple is not equal to a list
    ({"a": "x"}, {"a": "y"}),
    ({}, {}),
    ({"a": 1}, None),
    ([1, 2], [1, 2]),
]


@pytest.mark.parametrize("a, b", PAIRS)
def test_same_json_is_equal_texts(a: Any, b: Any) -> None:
    assert codec._same_json(a, b) == (a == b and codec.dumps(a) == codec.dumps(b))
    assert codec._same_json(b, a) == codec._same_json(a, b)
