"""Tool-call arguments: coercion, validation and the message the model reads
(issue 17 item 2; rules in shell/arguments.py, strings in specs/tools.md).

Pure-function tests of every coercion rule (also nested in objects and
arrays), of the exact failure message, and of hostile values (NaN, infinities,
lone surrogates, values that are not JSON); then the harness: a coerced call
runs with, and stores as its intent, the coerced arguments.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import invariants
from pidurable.core.model import TOOL, EntryKind, SubmissionStatus
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    MemoryStorage,
    ModelRef,
    Registry,
    ToolCallContext,
    define_extension,
    define_tool,
)
from pidurable.shell.arguments import (
    Invalid,
    check,
    coerce,
    coerce_scalar,
    drop_optional_nulls,
    js_number,
    js_string,
    problems,
    received,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call


def obj(required: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return schema


S, N, I, B, Z = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"}


# --- the coercion table ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "to", "expected"),
    [
        # to string: number -> String(x), booleans, null -> ""
        (123, "string", "123"),
        (1.0, "string", "1"),
        (1.5, "string", "1.5"),
        (1e21, "string", "1e+21"),
        (1e-7, "string", "1e-7"),
        (True, "string", "true"),
        (False, "string", "false"),
        (None, "string", ""),
        # to number: numeric strings (JavaScript Number()), booleans, null
        ("12", "number", 12),
        (" 12 ", "number", 12),
        ("1.5", "number", 1.5),
        ("1e3", "number", 1000),
        ("0x10", "number", 16),
        ("-.5", "number", -0.5),
        (True, "number", 1),
        (False, "number", 0),
        (None, "number", 0),
        # to integer: only integral numbers
        ("2", "integer", 2),
        ("2.0", "integer", 2),
        (True, "integer", 1),
        (None, "integer", 0),
        # to boolean: "true"/"false" exactly, 1/0, null
        ("true", "boolean", True),
        ("false", "boolean", False),
        (1, "boolean", True),
        (0, "boolean", False),
        (1.0, "boolean", True),
        (None, "boolean", False),
        # to null: "", 0, false
        ("", "null", None),
        (0, "null", None),
        (False, "null", None),
    ],
)
def test_each_rule_of_the_table_coerces(value: Any, to: str, expected: Any) -> None:
    """Every row of the coercion table turns the value into the schema's type (numbers from strings are ints when integral)."""
    changed, got = coerce_scalar(value, to)
    assert changed
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("value", "to"),
    [
        ("abc", "number"),
        ("", "number"),  # blank
        ("   ", "number"),
        ("Infinity", "number"),  # not finite
        ("1e400", "number"),
        ("NaN", "number"),
        ("1_000", "number"),  # Python reads it, JavaScript does not
        ("١٢", "number"),  # non-ASCII digits: same
        ("-0x10", "number"),
        ("2.5", "integer"),
        (2.5, "integer"),
        ("TRUE", "boolean"),
        ("1", "boolean"),
        ("yes", "boolean"),
        (2, "boolean"),
        ("null", "null"),
        ("x", "null"),
        (True, "null"),
        ([1], "string"),  # never to or from arrays and objects
        ({}, "string"),
        ("x", "array"),
        ("x", "object"),
        (float("nan"), "string"),  # not JSON: never coerced
        (float("inf"), "boolean"),
        (object(), "string"),
    ],
)
def test_values_outside_the_table_stay(value: Any, to: str) -> None:
    """A value the table does not cover is left as it is (validation then names it)."""
    changed, got = coerce_scalar(value, to)
    assert not changed and got is value


def test_a_scalar_is_not_wrapped_in_an_array() -> None:
    """As AJV coerceTypes: true (not "array") and pi-ai: a scalar where an array is expected stays a scalar and fails validation."""
    schema = obj(paths={"type": "array", "items": S})
    assert coerce({"paths": "a.txt"}, schema) == {"paths": "a.txt"}
    checked = check("grep", schema, {"paths": "a.txt"})
    assert isinstance(checked, Invalid) and "  - paths: must be array" in checked.message


def test_a_value_of_one_of_several_types_is_kept() -> None:
    """With several types, a value matching one is kept; else the types are tried in order and the first that changes it wins."""
    assert coerce(5, {"type": ["string", "number"]}) == 5
    assert coerce(True, {"type": ["number", "string"]}) == 1
    assert coerce(True, {"type": ["string", "number"]}) == "true"
    assert coerce(None, {"type": ["integer", "null"]}) is None
    assert coerce("7", {"type": ["integer", "null"]}) == 7


def test_nested_objects_and_arrays_are_coerced_member_by_member() -> None:
    """Coercion follows properties, additionalProperties schemas and items (one schema or by position), at any depth."""
    schema = obj(
        edits={"type": "array", "items": obj(line=I, text=S, keep=B)},
        pair={"type": "array", "items": [N, S]},
        tags={"type": "object", "additionalProperties": N},
    )
    value = {
        "edits": [{"line": "3", "text": 7, "keep": "false"}, {"line": 4.0, "text": None}],
        "pair": ["1.5", 2, "extra"],
        "tags": {"a": "1", "b": True},
        "other": "12",
    }
    assert coerce(value, schema) == {
        "edits": [{"line": 3, "text": "7", "keep": False}, {"line": 4.0, "text": ""}],
        "pair": [1.5, "2", "extra"],
        "tags": {"a": 1, "b": 1},
        "other": "12",  # no schema for it: untouched
    }
    assert value["edits"][0]["line"] == "3"  # the input is never mutated


def test_unions_keep_an_accepted_value_else_take_the_first_member_that_accepts_its_coercion() -> None:
    """anyOf/oneOf: a value some member accepts is kept; else the first member whose coercion it accepts; allOf coerces by each member."""
    assert coerce(5, {"anyOf": [S, N]}) == 5
    assert coerce("5", {"anyOf": [N, B]}) == 5
    assert coerce("true", {"oneOf": [N, B]}) is True
    assert coerce("x", {"anyOf": [N, B]}) == "x"
    assert coerce("3", {"allOf": [N, {"minimum": 1}]}) == 3


def test_null_in_an_optional_property_that_rejects_null_is_dropped() -> None:
    """An optional property sent as null is removed when its schema rejects null; a required one or a nullable one is kept (and coerced)."""
    schema = obj(["path"], path=S, limit=I, label={"type": ["string", "null"]}, ref={"$ref": "#/$defs/x"})
    value = {"path": None, "limit": None, "label": None, "ref": None}
    assert drop_optional_nulls(value, schema) == {"path": None, "label": None, "ref": None}
    checked = check("read", schema, {"path": None, "limit": None, "label": None})
    assert checked == {"path": "", "label": None}
    # a null behind a bare $ref is neither dropped nor coerced (coercion does not follow references)
    checked = check("read", schema | {"$defs": {"x": S}}, value)
    assert isinstance(checked, Invalid) and checked.message.split("\n")[1:2] == ["  - ref: must be string"]
    nested = obj(items={"type": "array", "items": obj(n=I)})
    assert drop_optional_nulls({"items": [{"n": None}, {"n": 1}]}, nested) == {"items": [{}, {"n": 1}]}


# --- JavaScript number semantics -------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0, "0"),
        (-0.0, "0"),
        (100.0, "100"),
        (0.1, "0.1"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (-2e100, "-2e+100"),
        (5e-324, "5e-324"),
        (10**22, "1e+22"),
        (float("nan"), "NaN"),
        (float("-inf"), "-Infinity"),
    ],
)
def test_js_string_formats_numbers_as_javascript(number: float, text: str) -> None:
    """Numbers become strings exactly as JavaScript's String(x) writes them."""
    assert js_string(number) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_string_reads_back_as_the_same_number(number: float) -> None:
    """Any finite double written by js_string reads back (via JavaScript's Number()) as itself."""
    assert js_number(js_string(number)) == number


@given(st.text())
def test_js_number_never_crashes(text: str) -> None:
    """Any text, lone surrogates included, gives a number or None."""
    result = js_number(text)
    assert result is None or isinstance(result, float)


# --- validation and the message --------------------------------------------------------

EDIT = obj(["path", "old", "new"], path=S, old=S, new=S)


def test_the_message_names_every_problem_in_the_reference_format() -> None:
    """The failure reads 'Validation failed for tool "edit":', one '  - path: message' line per problem, then the received arguments."""
    checked = check("edit", EDIT, {"path": [1], "new": "b"})
    assert checked == Invalid(
        'Validation failed for tool "edit":\n'
        "  - old: must have required properties old\n"
        "  - path: must be string\n"
        "\n"
        "Received arguments:\n"
        '{\n  "path": [\n    1\n  ],\n  "new": "b"\n}'
    )


@pytest.mark.parametrize(
    ("schema", "value", "line"),
    [
        (obj(n={"type": "integer", "minimum": 1}), {"n": 0}, "n: must be >= 1"),
        (obj(n={"type": "number", "exclusiveMaximum": 2.5}), {"n": 3}, "n: must be < 2.5"),
        (obj(s={"type": "string", "maxLength": 2}), {"s": "abc"}, "s: must not have more than 2 characters"),
        (obj(s={"type": "string", "pattern": "^a"}), {"s": "b"}, 's: must match pattern "^a"'),
        (obj(e={"enum": ["a", "b"]}), {"e": "c"}, "e: must be equal to one of the allowed values"),
        (obj(c={"const": 1}), {"c": 2}, "c: must be equal to constant"),
        (obj(u={"type": ["string", "null"]}), {"u": []}, "u: must be either string or null"),
        (obj(a={"type": "array", "minItems": 2}), {"a": [1]}, "a: must not have fewer than 2 items"),
        (obj(a={"type": "array", "uniqueItems": True}), {"a": [1, 1]}, "a: must not have duplicate items"),
        (obj(x=N) | {"additionalProperties": False}, {"y": 1}, "root: must not have additional properties"),
        (obj(x={"anyOf": [N, B]}), {"x": "z"}, "x: must match a schema in anyOf"),
        (obj(d=obj(["k"], k=S)), {"d": {}}, "d.k: must have required properties k"),
        (obj(l={"type": "array", "items": obj(n=I)}), {"l": [{"n": 1}, {"n": "x"}]}, "l.1.n: must be integer"),
        ({"type": "object", "additionalProperties": S}, {"a": []}, "root: must not have additional properties"),
        (obj(a={"oneOf": [N, I]}), {"a": 1}, "a: must match exactly one schema in oneOf"),
        (obj(a={"not": S}), {"a": "x"}, "a: must not be valid"),
        (obj(a={"type": "array", "contains": S}), {"a": [1]}, "a: must contain at least 1 valid item"),
        (obj(a={"type": "array", "maxItems": 1}), {"a": [1, 2]}, "a: must not have more than 1 items"),
        (obj(a={"type": "string", "minLength": 3}), {"a": "x"}, "a: must not have fewer than 3 characters"),
        (obj(a={"type": "object", "minProperties": 1}), {"a": {}}, "a: must not have fewer than 1 properties"),
        (obj(a={"type": "object", "maxProperties": 0}), {"a": {"x": 1}}, "a: must not have more than 0 properties"),
        (obj(a={"type": "number", "maximum": 1}), {"a": 2}, "a: must be <= 1"),
        (obj(a={"type": "number", "exclusiveMinimum": 1}), {"a": 1}, "a: must be > 1"),
        (obj(a={"type": "number", "multipleOf": 0.5}), {"a": 0.3}, "a: must be multiple of 0.5"),
        (
            obj(a={"type": "array", "prefixItems": [S], "unevaluatedItems": False}),
            {"a": ["x", 1]},
            "a: must not have unevaluated items",
        ),
        (obj(a={}) | {"unevaluatedProperties": False}, {"b": 1}, "root: must not have unevaluated properties"),
        (
            obj(a={"type": "object", "dependentRequired": {"x": ["y", "z"]}}),
            {"a": {"x": 1, "y": 2}},
            "a: must have properties y, z when property x is present",
        ),
        ({"type": "object", "not": {}}, {}, "root: must not be valid"),
    ],
)
def test_each_keyword_is_worded_as_typebox_words_it(schema: dict[str, Any], value: Any, line: str) -> None:
    """Each failed keyword gives one line in TypeBox's en_US wording with its dotted path ('root' for the object)."""
    checked = check("t", schema, value)
    assert isinstance(checked, Invalid)
    assert checked.message.split("\n")[1] == f"  - {line}"


def test_a_false_schema_and_an_unworded_keyword() -> None:
    """A false schema reads 'schema is false'; a keyword TypeBox has no wording for keeps jsonschema's message; formats are not checked."""
    assert problems({}, False) == [("root", "schema is false")]
    few = problems({"a": ["x", 1]}, obj(a={"type": "array", "contains": S, "minContains": 2}))
    assert few == [("a", "Too few items match the given schema (expected at least 2 but only 1 matched)")]
    assert problems({"a": "not an email"}, obj(a={"type": "string", "format": "email"})) == []


def test_problems_come_in_typebox_keyword_order() -> None:
    """Several problems are listed in TypeBox's order: required before properties, properties in schema order, items by index."""
    schema = obj(["z"], a={"type": "string", "minLength": 2}, b=I, l={"type": "array", "items": S}) | {
        "additionalProperties": False
    }
    found = problems({"b": "x", "a": "q", "l": [1, "ok", []], "w": 0}, schema)
    assert found == [
        ("z", "must have required properties z"),
        ("root", "must not have additional properties"),
        ("a", "must not have fewer than 2 characters"),
        ("b", "must be integer"),
        ("l.0", "must be string"),
        ("l.2", "must be string"),
    ]


def test_arguments_that_are_not_an_object_are_refused() -> None:
    """Arguments that are not an object after coercion are refused as 'root: must be object', whatever the schema says."""
    checked = check("t", {"type": "object"}, [1])
    assert isinstance(checked, Invalid) and "  - root: must be object\n" in checked.message
    checked = check("t", {}, "text")
    assert isinstance(checked, Invalid) and "  - root: must be object\n" in checked.message
    assert check("t", {}, {"a": 1}) == {"a": 1}


def test_a_reference_that_cannot_be_resolved_is_a_problem_not_a_crash() -> None:
    """A schema whose $ref cannot be resolved makes the call invalid with a readable line."""
    checked = check("t", obj(x={"$ref": "#/$defs/missing"}), {"x": 1})
    assert isinstance(checked, Invalid)
    assert "  - root: cannot resolve the schema reference /$defs/missing" in checked.message


# --- hostile values ----------------------------------------------------------------------


def test_received_arguments_are_shown_as_javascript_json_stringify() -> None:
    """The received arguments: 2-space JSON, numbers as JavaScript writes them, NaN/Infinity as null, array-index keys first, lone surrogates escaped, non-JSON as a quoted repr."""
    value = {"b": 1.0, "2": float("nan"), "1": float("inf"), "s": "caf\u00e9 \ud800", "t": (1,), "o": {1, 2} and None}
    assert received(value) == (
        '{\n  "1": null,\n  "2": null,\n  "b": 1,\n  "s": "caf\u00e9 \\ud800",\n  "t": [\n    1\n  ],\n  "o": null\n}'
    )
    assert received(object.__new__(type("Odd", (), {"__repr__": lambda self: "<odd>"}))) == '"<odd>"'
    assert received("\ud83d\ude00") == '"\U0001f600"'  # a surrogate pair is one character


def test_nan_infinity_and_lone_surrogates_do_not_crash_the_check() -> None:
    """NaN, infinities and lone surrogates anywhere in the arguments give a result or a message, never an exception."""
    schema = obj(["s"], s=S, n=N, b=B, a={"type": "array", "items": S})
    nan = float("nan")
    checked = check("t", schema, {"s": nan, "n": math.inf, "b": -math.inf, "a": [nan, "\udfff"], "\ud800": nan})
    assert isinstance(checked, Invalid)
    assert "  - s: must be string" in checked.message and '"\\ud800": null' in checked.message
    checked = check("t", schema, {"s": "\ud800", "n": nan})
    assert isinstance(checked, dict) and checked["s"] == "\ud800" and math.isnan(checked["n"])


JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)[:1]}


SCHEMAS = st.recursive(
    st.sampled_from([S, N, I, B, Z, {"type": ["string", "null"]}, {"type": ["number", "boolean"]}, {}]),
    lambda inner: st.builds(_object_schema, st.dictionaries(st.sampled_from("abc"), inner, max_size=3))
    | st.builds(lambda i: {"type": "array", "items": i}, inner)
    | st.builds(lambda alts: {"anyOf": alts}, st.lists(inner, min_size=1, max_size=3)),
    max_leaves=8,
)


@given(SCHEMAS, JSONISH)
def test_check_is_total_and_pure(schema: dict[str, Any], value: Any) -> None:
    """For any schema and value: check returns a dict or an Invalid message, never raises, and leaves its input unchanged."""
    before = received(value)
    result = check("t", {"type": "object", "properties": {"v": schema}}, {"v": value})
    assert isinstance(result, (dict, Invalid))
    assert received(value) == before


# --- in the harness -----------------------------------------------------------------------

AGENT = AgentConfig(model=ModelRef("scripted", "demo"), cwd=".")


async def test_issue_17_coerced_arguments_are_the_intent_and_what_execute_receives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """read{path: 123, limit: "2", offset: null} runs with {path: "123", limit: 2}, which is also the intent stored in the tool task."""
    seen: list[dict[str, Any]] = []

    async def read(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        seen.append(args)
        return "ok"

    schema = obj(["path"], path=S, limit=I, offset=I)
    registry = Registry()
    registry.install(define_tool("read", "Read.", schema, read, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("read", path=123, limit="2", offset=None)]), reply(text="ok")])
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=registry, env=None) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("read"))
        with trio.fail_after(10):
            settled = await handle.wait()
        transcript = await conv.transcript()
        tools = [t for t in await h.tasks() if t.kind == TOOL]

    assert settled.status == SubmissionStatus.DONE
    assert seen == [{"path": "123", "limit": 2}]
    assert [t.status for t in tools] == ["terminal"]  # a store keeps it without its checkpoint: read the journal
    intents = [
        w["task"]["checkpoint"]["arguments"]
        for _, _, writes in invariants.journal_history(storage)
        for w in writes
        if w["type"] == "task" and w["task"]["kind"] == TOOL and w["task"]["checkpoint"].get("phase") == "execute"
    ]
    assert intents and all(a == {"path": "123", "limit": 2} for a in intents)
    calls = [c for e in transcript if e.kind == EntryKind.ASSISTANT for c in e.tool_calls]
    assert calls[0].arguments == {"path": 123, "limit": "2", "offset": None}  # the model's call stays as it was


async def test_issue_17_before_tool_sees_coerced_arguments_and_its_rewrite_is_checked_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A before_tool hook gets the coerced arguments; what it returns is coerced and validated again, and a bad rewrite is refused in the reference wording."""
    seen_by_hook: list[dict[str, Any]] = []
    ran: list[dict[str, Any]] = []

    async def before_tool(ctx: Any, call: Any) -> dict[str, Any]:
        seen_by_hook.append(dict(call.arguments))
        return {"n": "7"} if call.id.endswith("_0") else {"n": "seven"}

    async def count(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        ran.append(args)
        return "counted"

    registry = Registry()
    registry.install(define_tool("count", "Count.", obj(["n"], n=I), count, replay="safe"))
    registry.install(define_extension("rewrite", hooks={"before_tool": before_tool}))
    models = ScriptedModels([reply(tool_calls=[tool_call("count", n="1"), tool_call("count", n=2.0)]), reply(text="ok")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=None) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("count"))
        with trio.fail_after(10):
            await handle.wait()
        transcript = await conv.transcript()

    assert sorted(map(str, seen_by_hook)) == sorted(map(str, [{"n": 1}, {"n": 2.0}]))
    assert ran == [{"n": 7}]
    refused = [e for e in transcript if e.kind == EntryKind.TOOL_RESULT and e.is_error]
    assert len(refused) == 1
    assert 'Validation failed for tool "count":\n  - n: must be integer\n\nReceived arguments:\n{\n  "n": "seven"\n}' in (
        refused[0].text
    )
