"""``check_arguments`` keeps its verdict on small flat arguments
(``tools._CHECKED``): a kept verdict is exactly the one ``arguments.check``
gives (the same coercion, the same message), handed out as a new dict each
time, told apart by each value's exact type, and never reused for another
schema object or another tool."""

from __future__ import annotations

from typing import Any

import pytest

from pidurable.shell.arguments import Invalid, check
from pidurable.shell.interpreters import tools
from pidurable.shell.interpreters.tools import Rejection, check_arguments
from pidurable.shell.registry import define_tool

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}, "on": {"type": ["boolean", "null"]}},
    "required": ["path"],
}


async def _body(ctx: Any, args: Any) -> str:
    return "ok"


def _expected(name: str, schema: Any, arguments: Any) -> Any:
    checked = check(name, schema, arguments)
    return Rejection("invalid_arguments", checked.message) if isinstance(checked, Invalid) else checked


CASES = [
    {"path": "a", "limit": 3},
    {"path": "a", "limit": "3"},
    {"path": 1, "limit": True},
    {"path": "a", "limit": 1, "on": None},
    {"path": "a", "on": 1},
    {"path": "a", "on": True},
    {"limit": 2},
    {"path": "a", "limit": "x"},
    {"limit": 2, "path": "a"},
    {},
]


@pytest.mark.parametrize("arguments", CASES)
def test_a_kept_verdict_is_checks_verdict(arguments: dict[str, Any]) -> None:
    tool = define_tool("t", "x", SCHEMA, _body)
    tools._CHECKED.clear()
    first, second = check_arguments(tool, dict(arguments)), check_arguments(tool, dict(arguments))
    expected = _expected("t", SCHEMA, arguments)
    assert first == second == expected
    if isinstance(expected, dict):
        assert list(first) == list(second) == list(expected)  # key order too (the journal keeps it)
        assert [type(v) for v in second.values()] == [type(v) for v in expected.values()]


def test_a_kept_coercion_is_a_new_dict_each_time() -> None:
    tool = define_tool("t", "x", SCHEMA, _body)
    tools._CHECKED.clear()
    first = check_arguments(tool, {"path": "a", "limit": "3"})
    assert isinstance(first, dict)
    first["limit"] = 99
    second = check_arguments(tool, {"path": "a", "limit": "3"})
    assert second == {"path": "a", "limit": 3} and second is not first


def test_values_equal_in_python_but_of_other_types_are_not_confused() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    tool = define_tool("t", "x", schema, _body)
    tools._CHECKED.clear()
    verdicts = [check_arguments(tool, {"x": v}) for v in (1, True, 1, True)]
    assert verdicts == [{"x": "1"}, {"x": "true"}, {"x": "1"}, {"x": "true"}]


def test_another_schema_object_or_tool_name_is_not_served_a_kept_verdict() -> None:
    tools._CHECKED.clear()
    loose = define_tool("t", "x", {"type": "object"}, _body)
    assert check_arguments(loose, {"limit": "3"}) == {"limit": "3"}
    strict = define_tool("t", "x", {"type": "object", "properties": {"limit": {"type": "integer"}}}, _body)
    assert check_arguments(strict, {"limit": "3"}) == {"limit": 3}
    other = define_tool("u", "x", {"type": "object", "required": ["k"]}, _body)
    refused = check_arguments(other, {"limit": "3"})
    assert isinstance(refused, Rejection) and 'tool "u"' in refused.message


def test_floats_nested_values_and_long_text_are_not_kept() -> None:
    tool = define_tool("t", "x", {"type": "object"}, _body)
    tools._CHECKED.clear()
    for arguments in ({"x": 1.5}, {"x": -0.0}, {"x": [1]}, {"x": {"y": 1}}, {"x": "a" * 1000}):
        assert check_arguments(tool, arguments) == _expected("t", {"type": "object"}, arguments)
    assert not tools._CHECKED


def test_long_names_and_many_keys_are_not_kept_and_the_key_tells_each_value_apart() -> None:
    """Kept: at most 16 keys, each name and text value at most 256
    characters; the key holds each value with its exact type and order."""
    tool = define_tool("t", "x", {"type": "object"}, _body)
    for arguments, kept in (
        ({"k" * 256: "v" * 256}, True),
        ({"k" * 257: 1}, False),
        ({"k": "v" * 257}, False),
        ({f"k{i}": i for i in range(16)}, True),
        ({f"k{i}": i for i in range(17)}, False),
        ({"a": None, "b": True, "c": 0, "d": ""}, True),
        ({1: "x"}, False),
    ):
        tools._CHECKED.clear()
        assert check_arguments(tool, arguments) == _expected("t", {"type": "object"}, arguments)
        assert bool(tools._CHECKED) is kept, arguments
    keys = {tools._flat_key("t", None, a) for a in ({"x": 1}, {"x": True}, {"x": "1"}, {"y": 1}, {"x": 1, "y": 1})}
    assert len(keys) == 5
    assert tools._flat_key("t", None, {"x": 1, "y": 2}) != tools._flat_key("t", None, {"y": 2, "x": 1})
