"""Tool-call arguments: coercion, validation and the message the model reads.

Theory of operation
-------------------
A model's tool call carries JSON arguments that often have the right value in
the wrong JSON type (``{"path": 123}``, ``{"limit": "20"}``). The reference
(pi-durable, §3.6 step 3) validates them with pi-ai's ``validateToolArguments``,
which first *coerces* and only then validates; the coerced arguments are the
ones recorded as the call's intent and given to ``execute``. This module is
that step for our tools, whose parameters are plain JSON Schema dicts:
:func:`check` = :func:`drop_optional_nulls` → :func:`coerce` →
validate with ``jsonschema`` (Draft 2020-12, as the registry checks schemas) →
the coerced arguments, or :class:`Invalid` with the reference's message.

Where the rules come from. Older pi-ai validated with AJV ``{coerceTypes:
true}``; the current pi-ai (``utils/validation.ts``: ``normalizeOptionalNulls``,
``Value.Convert``, ``coerceWithJsonSchema``, TypeBox ``Compile``) keeps AJV's
coercion table for plain JSON schemas, with two changes: a numeric string must
be non-blank and finite, and ``null`` in an optional property that does not
accept ``null`` is dropped instead of coerced. We implement the current rules
(TypeBox's ``Value.Convert`` only acts on schemas built with TypeBox, never on
plain JSON schemas, so it has no counterpart here). Neither AJV
``coerceTypes: true`` nor pi-ai wraps a scalar in an array (AJV does that only
with ``coerceTypes: "array"``), so neither do we.

The rules (each value is compared with the ``type`` of the schema it sits in):

1. ``null`` for an optional property (not in ``required``) whose schema rejects
   ``null`` (and is not a bare ``$ref``) is removed, recursively through
   ``properties`` and ``items``.
2. A value is coerced only when the schema names types and the value matches
   none of them (a value matching one of several types is kept); the types are
   tried in the schema's order and the first that changes the value wins:

   ============  ===========================================================
   to            from
   ============  ===========================================================
   ``string``    number → JavaScript ``String(x)`` (``1.0`` → ``"1"``,
                 ``1e21`` → ``"1e+21"``); ``true``/``false`` → ``"true"``/
                 ``"false"``; ``null`` → ``""``
   ``number``    a non-blank string JavaScript's ``Number()`` reads as a finite
                 number (``" 12 "``, ``"1e3"``, ``"0x10"``, ``"-.5"``; not
                 ``"Infinity"``, ``"1_000"``, ``"NaN"``); ``true``/``false`` →
                 1/0; ``null`` → 0
   ``integer``   as ``number``, when the number is integral (``"2.0"`` → 2,
                 ``"2.5"`` stays)
   ``boolean``   ``"true"``/``"false"`` (exactly); 1/0; ``null`` → ``false``
   ``null``      ``""``, 0 and ``false`` → ``null``
   ``object``,   never coerced from another type; their members are coerced
   ``array``     (``properties``, object ``additionalProperties``; ``items``
                 as one schema, or as a list matched by position)
   ============  ===========================================================

3. ``allOf``: coerced by each member in turn. ``anyOf``/``oneOf``: kept if some
   member accepts the value as it is, else the first member that accepts its
   own coercion of it gives the value, else it is kept.
4. A number coerced from a string is an ``int`` when integral (below 2**53),
   else a ``float``. NaN and infinities (not JSON, so only a ``before_tool``
   hook can produce them) are never coerced: validation or the edge
   (``edge.py``) refuses them. Values that are not JSON are left as they are.

The failure message is the reference's, exactly::

    Validation failed for tool "edit":
      - old: must have required properties old
      - path: must be string

    Received arguments:
    { ...the arguments as received, JSON.stringify(value, null, 2) ... }

One line per problem, in the order TypeBox checks keywords (``_ORDER``:
type, then object, array, string, number keywords; properties in schema
order, items by index), duplicates once; the path is dotted from the
argument object (``a.b.0``), ``root`` for the object itself, and for a missing
property the property's own path; the wording is TypeBox's (``en_US``), the
validator pi-ai uses, rendered from each jsonschema error's keyword (a keyword
TypeBox has no wording for keeps jsonschema's message; ``format`` is not
checked, as pi registers no formats). The received
arguments are the ones validated before coercion, rendered as JavaScript's
``JSON.stringify`` would (numbers as ``String(x)``, NaN/Infinity as ``null``,
array-index keys first, lone surrogates as ``\\udXXX``; a value that is not
JSON as the JSON string of its ``repr``). Arguments that are not an object
after coercion are refused (``root: must be object``): ``execute`` receives a
dict.

Everything here is pure: inputs are never mutated, results are new values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs
import jsonschema
from referencing.exceptions import Unresolvable

#: The one wording the model reads when a call's arguments do not validate.
HEADER = 'Validation failed for tool "{name}":'
RECEIVED = "Received arguments:"


@attrs.frozen
class Invalid:
    """Arguments that do not validate: the message the model reads."""

    message: str


def check(name: str, schema: object, arguments: object) -> dict[str, Any] | Invalid:
    """``arguments`` coerced to ``schema`` if they then validate, else
    :class:`Invalid` naming every problem (``name`` is the tool's)."""
    value = coerce(drop_optional_nulls(arguments, schema), schema)
    found = problems(value, schema)
    if not found and not isinstance(value, dict):
        found = [("root", "must be object")]
    if not found:
        assert isinstance(value, dict)
        return value
    lines = "\n".join(f"  - {path}: {message}" for path, message in found)
    return Invalid(f"{HEADER.format(name=name)}\n{lines}\n\n{RECEIVED}\n{received(arguments)}")


# --- coercion -----------------------------------------------------------------


def drop_optional_nulls(value: Any, schema: object) -> Any:
    """``value`` without the ``null`` of optional properties whose schema
    rejects ``null`` (rule 1), recursively; a new value, ``value`` untouched."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, list):
            return [drop_optional_nulls(v, items[i]) if i < len(items) else v for i, v in enumerate(value)]
        if isinstance(items, Mapping):
            return [drop_optional_nulls(v, items) for v in value]
        return value
    properties = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(properties, Mapping):
        return value
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    out = dict(value)
    for key, sub in properties.items():
        if key not in out:
            continue
        if out[key] is None and key not in required and not _bare_ref(sub) and _accepts(sub, None) is False:
            del out[key]
        else:
            out[key] = drop_optional_nulls(out[key], sub)
    return out


def coerce(value: Any, schema: object) -> Any:
    """``value`` coerced to ``schema`` by rules 2-4; a new value."""
    if not isinstance(schema, Mapping):
        return value
    members = schema.get("allOf")
    if isinstance(members, list):
        for member in members:
            value = coerce(value, member)
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            value = _coerce_union(value, members)
    types = _types(schema)
    if types and not (len(types) > 1 and any(_is_type(value, t) for t in types)):
        for t in types:
            changed, candidate = coerce_scalar(value, t)
            if changed:
                value = candidate
                break
    if "object" in types and isinstance(value, dict):
        value = _coerce_members(value, schema)
    if "array" in types and isinstance(value, list):
        value = _coerce_items(value, schema)
    return value


def coerce_scalar(value: Any, to: str) -> tuple[bool, Any]:
    """``(True, coerced)`` if the table of rule 2 turns ``value`` into a
    ``to``, else ``(False, value)``."""
    if _is_number(value) and not math.isfinite(value):
        return False, value  # rule 4: not JSON, never coerced
    if to in ("number", "integer"):
        if value is None:
            return True, 0
        if isinstance(value, str) and value.strip(JS_SPACE) != "":
            parsed = js_number(value)
            if parsed is not None and math.isfinite(parsed) and (to == "number" or parsed.is_integer()):
                return True, _number_value(parsed)
        if isinstance(value, bool):
            return True, 1 if value else 0
    elif to == "boolean":
        if value is None:
            return True, False
        if value == "true" or value == "false":
            return True, value == "true"
        if _is_number(value) and value in (0, 1):
            return True, value == 1
    elif to == "string":
        if value is None:
            return True, ""
        if isinstance(value, bool):
            return True, "true" if value else "false"
        if _is_number(value):
            return True, js_string(value)
    elif to == "null":
        if value == "" or value is False or (_is_number(value) and value == 0):
            return True, None
    return False, value


def _coerce_union(value: Any, members: list[Any]) -> Any:
    if any(_accepts(member, value) for member in members):
        return value
    for member in members:
        candidate = coerce(value, member)
        if _accepts(member, candidate):
            return candidate
    return value


def _coerce_members(value: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(value)
    properties = schema.get("properties")
    defined = properties if isinstance(properties, Mapping) else {}
    for key, sub in defined.items():
        if key in out:
            out[key] = coerce(out[key], sub)
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        for key in out:
            if key not in defined:
                out[key] = coerce(out[key], additional)
    return out


def _coerce_items(value: list[Any], schema: Mapping[str, Any]) -> list[Any]:
    items = schema.get("items")
    if isinstance(items, list):
        return [coerce(v, items[i]) if i < len(items) else v for i, v in enumerate(value)]
    if isinstance(items, Mapping):
        return [coerce(v, items) for v in value]
    return value


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return []


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_type(value: object, t: str) -> bool:
    """JSON Schema's (and JavaScript's) view of ``value``'s type."""
    if t == "number":
        return _is_number(value)
    if t == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if t == "boolean":
        return isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "null":
        return value is None
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    return False


def _bare_ref(schema: object) -> bool:
    return isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str)


def _number_value(parsed: float) -> int | float:
    """A JavaScript number as JSON would carry it: integral ones as ``int``."""
    return int(parsed) if parsed.is_integer() and abs(parsed) < 2**53 else parsed


# --- JavaScript number semantics -----------------------------------------------------

#: ECMAScript WhiteSpace and LineTerminator (what ``String.prototype.trim``
#: and ``Number()`` strip); Python's ``str.strip()`` strips a different set.
JS_SPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_DECIMAL = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Infinity)")
_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_BASES = {"x": 16, "o": 8, "b": 2}


def js_number(text: str) -> float | None:
    """JavaScript's ``Number(text)``, or None where it gives NaN."""
    s = text.strip(JS_SPACE)
    if s == "":
        return 0.0
    if _DECIMAL.fullmatch(s):
        if s.lstrip("+-") == "Infinity":
            return -math.inf if s.startswith("-") else math.inf
        return float(s)
    radix = _RADIX.fullmatch(s)
    if radix:
        digits = radix.group(1)
        whole = int(digits[1:], _BASES[digits[0].lower()])
        return float(whole) if whole < 2**1024 else math.inf
    return None


def js_string(number: int | float) -> str:
    """JavaScript's ``String(number)`` (ECMAScript Number::toString)."""
    if isinstance(number, int):
        if abs(number) < 10**21:
            return str(number)
        number = float(number) if abs(number) < 2**1024 else math.copysign(math.inf, number)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that read back as the same double, as
    # JavaScript does; only the layout differs
    _, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    assert isinstance(exponent, int)
    n = exponent + len(digit_tuple)  # number = 0.<digits> * 10**n
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + text


# --- validation -------------------------------------------------------------------

_VALIDATORS: dict[int, tuple[object, Any]] = {}
_MAX_VALIDATORS = 512


def _validator(schema: object) -> Any:
    """A compiled validator per schema object (kept while the object lives)."""
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_VALIDATORS) >= _MAX_VALIDATORS:
            _VALIDATORS.clear()
        hit = (schema, jsonschema.Draft202012Validator(schema))
        _VALIDATORS[id(schema)] = hit
    return hit[1]


def _accepts(schema: object, value: Any) -> bool | None:
    """Whether ``schema`` alone accepts ``value``; None when it cannot be
    checked on its own (not a schema, or a reference it cannot resolve)."""
    if not isinstance(schema, (Mapping, bool)):
        return None
    try:
        return bool(_validator(schema).is_valid(value))
    except Unresolvable:
        return None


def problems(value: Any, schema: object) -> list[tuple[str, str]]:
    """Every problem of ``value`` against ``schema``: (path, message), worded
    and ordered as TypeBox reports them (``_ORDER``)."""
    if not isinstance(schema, (Mapping, bool)):
        return []
    try:
        errors = list(_validator(schema).iter_errors(value))
    except Unresolvable as e:
        return [("root", f"cannot resolve the schema reference {e.ref}")]
    ranked = sorted((_placed(error, schema) for error in errors), key=lambda placed: placed[0])
    out: list[tuple[str, str]] = []
    for _, line in ranked:
        if line not in out:  # jsonschema reports each missing property apart
            out.append(line)
    return out


#: The order in which TypeBox checks the keywords of one schema (its
#: ``ErrorSchema``): type; object, array, string and number keywords; the rest.
_ORDER = {
    word: rank
    for rank, word in enumerate(
        "type required additionalProperties dependencies dependentRequired dependentSchemas patternProperties"
        " properties propertyNames minProperties maxProperties additionalItems contains items maxContains maxItems"
        " minContains minItems prefixItems uniqueItems format maxLength minLength pattern exclusiveMaximum"
        " exclusiveMinimum maximum minimum multipleOf $ref const enum if then else not allOf anyOf oneOf"
        " unevaluatedItems unevaluatedProperties".split()
    )
}


def _placed(error: Any, root: object) -> tuple[list[int], tuple[str, str]]:
    """The error's place in TypeBox's order and its (path, message) line.

    The place is read along the error's schema path: each keyword's rank,
    then, where the schema branches, the branch's position (a property's
    place in ``properties``, an item's index). A failure inside an object's
    ``additionalProperties`` schema is, as TypeBox reports it, the object's
    ``must not have additional properties``."""
    place: list[int] = []
    schema_path, instance_path = list(error.relative_schema_path), list(error.absolute_path)
    node, i, depth = root, 0, 0  # depth: instance path elements consumed
    while i < len(schema_path):
        word = schema_path[i]
        i += 1
        place.append(_ORDER.get(word, len(_ORDER)) if isinstance(word, str) else 0)
        child = node.get(word) if isinstance(node, Mapping) and isinstance(word, str) else None
        if word == "additionalProperties" and i < len(schema_path):
            return place, (_dotted(instance_path[:depth]) or "root", _WORDING["additionalProperties"])
        if word in ("properties", "patternProperties", "dependentSchemas", "$defs") and i < len(schema_path):
            name = schema_path[i]
            i += 1
            place.append(list(child).index(name) if isinstance(child, Mapping) and name in child else 0)
            node = child.get(name) if isinstance(child, Mapping) else None
            depth += word in ("properties", "patternProperties")
        elif isinstance(child, list) and i < len(schema_path) and isinstance(schema_path[i], int):
            index = schema_path[i]  # prefixItems, items as a list, allOf/anyOf/oneOf
            i += 1
            place.append(index)
            node = child[index] if index < len(child) else None
            depth += word in ("prefixItems", "items")
        elif word in ("items", "additionalItems", "contains", "unevaluatedItems") and depth < len(instance_path):
            item = instance_path[depth]
            place.append(item if isinstance(item, int) else 0)
            node, depth = child, depth + 1
        else:
            node = child
    return place, _line(error)


def _dotted(path: list[Any]) -> str:
    return ".".join(str(p) for p in path)


def _line(error: Any) -> tuple[str, str]:
    base = _dotted(list(error.absolute_path))
    keyword, limit, instance = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(instance, dict) and isinstance(limit, list):
        missing = [str(p) for p in limit if p not in instance]
        if missing:
            path = f"{base}.{missing[0]}" if base else missing[0]
            return path, "must have required properties " + ", ".join(missing)
    if keyword == "dependentRequired" and isinstance(instance, dict) and isinstance(limit, Mapping):
        for prop, needed in limit.items():
            if prop in instance and isinstance(needed, list) and any(n not in instance for n in needed):
                names = ", ".join(map(str, needed))
                return base or "root", f"must have properties {names} when property {prop} is present"
    return base or "root", _message(keyword, limit, error.message)


#: TypeBox's en_US wording per keyword ({} is the keyword's value).
_WORDING = {
    "additionalProperties": "must not have additional properties",
    "anyOf": "must match a schema in anyOf",
    "const": "must be equal to constant",
    "contains": "must contain at least 1 valid item",
    "enum": "must be equal to one of the allowed values",
    "exclusiveMaximum": "must be < {}",
    "exclusiveMinimum": "must be > {}",
    "maxItems": "must not have more than {} items",
    "maxLength": "must not have more than {} characters",
    "maxProperties": "must not have more than {} properties",
    "maximum": "must be <= {}",
    "minItems": "must not have fewer than {} items",
    "minLength": "must not have fewer than {} characters",
    "minProperties": "must not have fewer than {} properties",
    "minimum": "must be >= {}",
    "multipleOf": "must be multiple of {}",
    "not": "must not be valid",
    "oneOf": "must match exactly one schema in oneOf",
    "pattern": 'must match pattern "{}"',
    "uniqueItems": "must not have duplicate items",
    "unevaluatedItems": "must not have unevaluated items",
    "unevaluatedProperties": "must not have unevaluated properties",
}


def _message(keyword: object, limit: object, fallback: str) -> str:
    if keyword is None:  # a ``false`` schema
        return "schema is false"
    if keyword == "type":
        if isinstance(limit, list):
            return "must be either " + " or ".join(map(str, limit))
        return f"must be {limit}"
    wording = _WORDING.get(str(keyword))
    if wording is None:
        return fallback
    shown = js_string(limit) if _is_number(limit) else str(limit)  # type: ignore[arg-type]
    return wording.format(shown)


# --- the received arguments ----------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def received(value: Any) -> str:
    """``value`` as JavaScript's ``JSON.stringify(value, null, 2)`` shows it."""
    return _stringify(value, "")


def _stringify(value: Any, indent: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return js_string(value) if math.isfinite(value) else "null"
    if isinstance(value, str):
        return _quote(value)
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        keys = _js_key_order([str(k) for k in value])
        by_text = {str(k): v for k, v in value.items()}
        members = [f"{inner}{_quote(k)}: {_stringify(by_text[k], inner)}" for k in keys]
        return "{\n" + ",\n".join(members) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(inner + _stringify(v, inner) for v in value) + "\n" + indent + "]"
    return _quote(repr(value))  # not JSON: shown, never a crash


def _quote(text: str) -> str:
    """A JSON string as JavaScript writes it: non-ASCII kept, a surrogate
    pair joined, a lone surrogate escaped (``\\ud800``)."""
    joined = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    quoted = json.dumps(joined, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _js_key_order(keys: list[str]) -> list[str]:
    """JavaScript's own-property order: array-index keys ascending, then the
    others in insertion order."""
    indexes = [k for k in keys if k.isdigit() and k.isascii() and str(int(k)) == k and int(k) < 2**32 - 1]
    index_set = set(indexes)
    return sorted(indexes, key=int) + [k for k in keys if k not in index_set]


__all__ = [
    "HEADER",
    "Invalid",
    "JS_SPACE",
    "RECEIVED",
    "check",
    "coerce",
    "coerce_scalar",
    "drop_optional_nulls",
    "js_number",
    "js_string",
    "problems",
    "received",
]
