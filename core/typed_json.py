"""A built-in's typed value as JSON (:func:`to_json`), and the Chord ops
between two typed values (:func:`typed_ops`), for builtins.py.

Theory of operation
-------------------
A built-in (builtins.py) is decided on as a typed value and stored as JSON:
its attrs fields in declared order, those at their default left out, enums
as their values, tuples as lists. A revision's delta is the Chord ops
(chord.py) from the old value's JSON to the new one's, found on the typed
values themselves (``typed_ops``): what a change kept is the same object, so
only what changed is converted and diffed - the same ops as
``chord.diff(to_json(old), to_json(new))``, in its order.

The records changed on most steps (``Live``, ``ToolSlot``, ``UsageDoc``,
``UsageTotals``) have their field walk spelt out (``_SPELT``: issue 11
item 2, a ``pi.live`` or ``pi.usage`` revision is made on almost every
step); tests/core/test_typed_json.py compares each with the generic walk.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from itertools import compress
from operator import is_not
from typing import Any

import attrs

from . import chord
from .model import Json
from .records import spelt_out
from .state import Live, SlotStatus, ToolSlot, UsageDoc, UsageTotals

_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _default(default: Any) -> Any:
    """A field's default value (an ``attrs.Factory`` is called)."""
    return default.factory() if hasattr(default, "factory") and hasattr(default, "takes_self") else default


def _fields(cl: type) -> tuple[tuple[str, Any], ...]:
    found = _FIELDS.get(cl)
    if found is None:
        found = _FIELDS[cl] = tuple((f.name, _default(f.default)) for f in attrs.fields(cl))
    return found


#: A type's (name, default) fields; None for a type that is not an attrs
#: class. Read once per type: to_json and typed_ops run on most steps. (Each
#: field is then read with ``getattr``: fewer instructions than one
#: ``attrgetter`` of all of them - issue 11 item 2, measured.)
_SHAPES: dict[type, tuple[tuple[str, Any], ...] | None] = {}


def _shape(cl: type) -> tuple[tuple[str, Any], ...] | None:
    """``cl``'s fields (registered in ``_FIELDS``, as ``_fields``); None,
    remembered, for a type that is not an attrs class."""
    if cl in _PLAIN or not attrs.has(cl):
        _SHAPES[cl] = None
        return None
    fields = _SHAPES[cl] = _fields(cl)
    return fields


#: The JSON of recently converted containers, by identity (the value is kept
#: so its id is not reused): the core's values are immutable and a change
#: keeps the parts it did not touch, so converting a new value reuses the
#: JSON of its unchanged parts, and the diff (chord.same: ``a is b``) skips
#: them - a revision costs the size of the change. Bounded; a cache only.
_MEMO: dict[int, tuple[Any, Json]] = {}
_MEMO_MAX = 4096
#: Values that are their own JSON.
_PLAIN = frozenset({type(None), bool, int, float, str})


# How to_json converts a value of each type (``_KINDS``, filled as types are met).
_AS_IS, _ENUM, _LIST, _MAPPING, _TUPLE, _RECORD = range(6)
_KINDS: dict[type, int] = dict.fromkeys(_PLAIN, _AS_IS)


def _kind(t: type) -> int:
    if issubclass(t, enum.Enum):
        kind = _ENUM
    elif t is list:
        kind = _LIST
    elif t is dict or (t is not tuple and issubclass(t, Mapping)):
        kind = _MAPPING
    elif t is tuple:
        kind = _TUPLE
    else:
        kind = _RECORD
    _KINDS[t] = kind
    return kind


def to_json(value: Any) -> Json:
    """A built-in's typed value as JSON: attrs fields in declared order, those
    at their default left out; enums as their values, tuples as lists. The
    result is shared (see ``_MEMO``): never change it."""
    t = type(value)
    kind = _KINDS.get(t)
    if kind is None:
        kind = _kind(t)
    if kind == _AS_IS:
        return value
    if kind == _ENUM:
        return value._value_  # (``.value`` is a property: a Python call)
    if kind < _TUPLE:  # containers that could change (lists, mappings): converted every time, never remembered
        if kind == _LIST:
            return list(map(to_json, value))
        return {k: to_json(v) for k, v in value.items()}
    hit = _MEMO.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    out: Json
    if kind == _TUPLE:
        # a round's new slots (each round's pi.live): spelt out, without
        # to_json's call and memo for each (a new slot is not in it)
        out = list(map(_slot_json, value)) if _SLOTS_ONLY.issuperset(map(type, value)) else list(map(to_json, value))
    elif t is ToolSlot:  # a round's new slots, on every round: spelt out (below)
        out = _slot_json(value)
    else:
        fields = _SHAPES.get(t) or _shape(t)
        if fields is None:
            raise TypeError(f"{t.__name__} is not a built-in's value")
        out = {}
        # a value is == None only if it is None (so no ``==`` with a None
        # default: a record's is a Python call)
        for name, default in fields:
            v = getattr(value, name)
            if v is default or (default is not None and v == default):
                continue
            # a plain field (most are: ids, names, counters) or a status is
            # its own JSON or its value: no call for it
            if type(v) in _PLAIN:
                out[name] = v
            elif _KINDS.get(type(v)) is _ENUM:
                out[name] = v._value_
            else:
                out[name] = to_json(v)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[id(value)] = (value, out)
    return out


#: ToolSlot's fields, as ``_slot_json`` spells them out (checked here, with
#: the defaults it tests: a field added or a default changed must be made
#: there too).
_SLOT_FIELDS = ("call_id", "name", "task_id", "status", "entry_id", "output", "control")
spelt_out(ToolSlot, _SLOT_FIELDS)
_PENDING = SlotStatus.PENDING
_SLOTS_ONLY = frozenset({ToolSlot})
assert [d for _, d in _fields(ToolSlot)][2:] == [None, _PENDING, None, None, None]


def _slot_json(s: ToolSlot) -> dict[str, Json]:
    """``to_json``'s record case for a slot, every field spelt out: the same
    dict (fields in order, those at their default left out; a plain value as
    is, another through to_json), without the loop over the fields - a round
    converts each of its new slots (issue 11 item 2: about half the
    instructions)."""
    c, n, t, st = s.call_id, s.name, s.task_id, s.status
    if (
        type(c) is str and type(n) is str and type(t) is int and type(st) is SlotStatus and st is not _PENDING
        and s.entry_id is None and s.output is None and s.control is None
    ):  # a new slot of a round (running, or open): its four fields as one dict
        return {"call_id": c, "name": n, "task_id": t, "status": st._value_}
    v: Any = c  # (call_id and name have no default: always there)
    out: dict[str, Json] = {"call_id": v if type(v) in _PLAIN else to_json(v)}
    v = s.name
    out["name"] = v if type(v) in _PLAIN else to_json(v)
    v = s.task_id
    if v is not None:
        out["task_id"] = v if type(v) in _PLAIN else to_json(v)
    v = s.status
    if not (v is _PENDING or v == _PENDING):
        out["status"] = v._value_ if type(v) is SlotStatus else to_json(v)  # (to_json's enum case, without its call)
    v = s.entry_id
    if v is not None:
        out["entry_id"] = v if type(v) in _PLAIN else to_json(v)
    v = s.output
    if v is not None:
        out["output"] = v if type(v) in _PLAIN else to_json(v)
    v = s.control
    if v is not None:
        out["control"] = v if type(v) in _PLAIN else to_json(v)
    return out


#: chord.diff_scalar's ops from one enum value (a string) to another, as
#: (verb, argument) pairs: found once per pair (a status moves on most steps).
_EDITS: dict[tuple[str, str], tuple[tuple[str, Json], ...]] = {}


def _edits(a: str, b: str) -> tuple[tuple[str, Json], ...]:
    ops: list[Json] = []
    chord.diff_scalar(a, b, ["-"], ops)
    found = _EDITS[(a, b)] = tuple((op[0], op[2]) for op in ops)
    return found


def typed_ops(old: Any, new: Any, path: list[Json] | None = None) -> list[Json]:
    """The Chord ops that turn ``to_json(old)`` into ``to_json(new)``, found
    on the typed values: an attrs value's fields, a dict's members and a
    same-length tuple's items are compared by identity first (a change keeps
    what it did not touch), so only what changed is converted and diffed
    (chord.diff): the same ops as ``chord.diff(to_json(old), to_json(new))``, in its order."""
    out: list[Json] = []
    _typed(old, new, list(path) if path else [], out)
    return out


def _typed(old: Any, new: Any, path: list[Json], out: list[Json]) -> None:
    if old is new:
        return
    t = type(new)
    if type(old) is t:
        spelt = _SPELT.get(t)
        if spelt is not None:  # a record changed on most steps: its walk spelt out (below)
            spelt(old, new, path, out)
            return
        fields = _SHAPES[t] if t in _SHAPES else _shape(t)
        if fields is not None:
            _record(old, new, fields, path, out)
            return
    if t is dict and type(old) is dict:  # chord's order: the deleted keys, then the new keys in order
        for name in old:
            if name not in new:
                out.append(["d", [*path, name]])
        for name, b in new.items():
            if name in old:
                _typed(old[name], b, [*path, name], out)
            else:
                out.append(["s", [*path, name], to_json(b)])
        return
    if t is tuple and type(old) is tuple and len(old) == len(new):
        moved = list(compress(range(len(old)), map(is_not, old, new)))
        if len(moved) == 1 and type(old[moved[0]]) is type(new[moved[0]]) and type(new[moved[0]]) in _FIELDS:
            _typed(old[moved[0]], new[moved[0]], [*path, moved[0]], out)  # one item changed: followed, as chord does
            return
    chord.diff_into(to_json(old), to_json(new), path, out)


def _record(old: Any, new: Any, fields: tuple[tuple[str, Any], ...], path: list[Json], out: list[Json]) -> None:
    """``_typed`` of two records of one type (``fields``: its fields). Chord's
    order: the deleted keys, then the new value's keys in order."""
    later: list[Json] | None = None  # the ops of the fields set: after every deletion
    # only the fields that are not the same object are looked at (a change
    # keeps the rest); a value is == None only if it is None (so no ``==``
    # with a None default: a record's is a Python call)
    for name, default in fields:
        a = getattr(old, name)
        b = getattr(new, name)
        if a is b:
            continue
        if b is default or (default is not None and b == default):
            if not (a is default or (default is not None and a == default)):
                out.append(["d", [*path, name]])
            continue
        if later is None:
            later = []
        _set(a, b, a is default or (default is not None and a == default), [*path, name], later)
    if later is not None:
        out += later


def _set(a: Any, b: Any, a_default: bool, at: list[Json], later: list[Json]) -> None:
    """The ops of a record's field that changed from ``a`` to ``b``, ``b`` not
    at its default (``a_default``: ``a`` is), added to ``later`` (the fields
    set come after every deletion)."""
    kb = _KINDS.get(type(b))
    if a_default:
        later.append(["s", at, b if kb is _AS_IS else b._value_ if kb is _ENUM else to_json(b)])
    elif kb is _AS_IS or kb is _ENUM:  # a status, a number, a string: chord.diff_scalar's ops
        ka = _KINDS.get(type(a))  # (both as JSON without a call: to_json's first two cases)
        ja = a if ka is _AS_IS else a._value_ if ka is _ENUM else to_json(a)
        jb = b if kb is _AS_IS else b._value_
        if type(ja) is not str or type(jb) is not str:  # not an edit: set, unless the same
            if not (ja is jb or (type(ja) is type(jb) and ja == jb)):
                later.append(["s", at, jb])
        elif ka is _ENUM and kb is _ENUM:  # one status to another: its ops found once
            edits = _EDITS.get((ja, jb))
            if edits is None:
                edits = _edits(ja, jb)
            for verb, arg in edits:
                later.append([verb, at, arg])
        else:
            chord.diff_scalar(ja, jb, at, later)
    else:
        _typed(a, b, at, later)


# The walks of the records changed on most steps, every field spelt out: the
# same ops as _record (each field in declared order; a deletion at once, a
# set through _set into ``later``), without the loop's getattr calls and
# default tests for the fields a change kept (issue 11 item 2). A field
# whose default is None is at it only if it is None. The changes made on
# most steps are spelt out too: a plain value set from None is its own JSON
# (_set's first case); a slot status moved from one member to another,
# neither the default, is their edits (_set's enum case); a count from one
# int to another, neither 0, is set unless equal (_set's scalar case).


def _live(old: Live, new: Live, path: list[Json], out: list[Json]) -> None:
    a: Any
    b: Any
    later: list[Json] = []
    if (a := old.run) is not (b := new.run):
        if b is None:
            out.append(["d", [*path, "run"]])
        else:
            _set(a, b, a is None, [*path, "run"], later)
    if (a := old.tools) is not (b := new.tools):
        if b is None:
            out.append(["d", [*path, "tools"]])
        else:
            _set(a, b, a is None, [*path, "tools"], later)
    if (a := old.attempt) is not (b := new.attempt):
        if b is None:
            out.append(["d", [*path, "attempt"]])
        elif a is None and type(b) in _PLAIN:
            later.append(["s", [*path, "attempt"], b])
        else:
            _set(a, b, a is None, [*path, "attempt"], later)
    if (a := old.partial) is not (b := new.partial):
        if b is None:
            out.append(["d", [*path, "partial"]])
        else:
            _set(a, b, a is None, [*path, "partial"], later)
    if (a := old.retry_at) is not (b := new.retry_at):
        if b is None:
            out.append(["d", [*path, "retry_at"]])
        else:
            _set(a, b, a is None, [*path, "retry_at"], later)
    if (a := old.retry_error) is not (b := new.retry_error):
        if b is None:
            out.append(["d", [*path, "retry_error"]])
        else:
            _set(a, b, a is None, [*path, "retry_error"], later)
    if (a := old.poll_at) is not (b := new.poll_at):
        if b is None:
            out.append(["d", [*path, "poll_at"]])
        else:
            _set(a, b, a is None, [*path, "poll_at"], later)
    if later:
        out += later


def _slot(old: ToolSlot, new: ToolSlot, path: list[Json], out: list[Json]) -> None:
    a: Any
    b: Any
    later: list[Json] = []
    if (a := old.call_id) is not (b := new.call_id):  # (call_id and name have no default)
        _set(a, b, False, [*path, "call_id"], later)
    if (a := old.name) is not (b := new.name):
        _set(a, b, False, [*path, "name"], later)
    if (a := old.task_id) is not (b := new.task_id):
        if b is None:
            out.append(["d", [*path, "task_id"]])
        else:
            _set(a, b, a is None, [*path, "task_id"], later)
    if (a := old.status) is not (b := new.status):
        if type(a) is SlotStatus and type(b) is SlotStatus and a is not _PENDING and b is not _PENDING:
            at = [*path, "status"]
            for verb, arg in _EDITS.get((a._value_, b._value_)) or _edits(a._value_, b._value_):
                later.append([verb, at, arg])
        elif b is _PENDING or b == _PENDING:
            if not (a is _PENDING or a == _PENDING):
                out.append(["d", [*path, "status"]])
        else:
            _set(a, b, a is _PENDING or a == _PENDING, [*path, "status"], later)
    if (a := old.entry_id) is not (b := new.entry_id):
        if b is None:
            out.append(["d", [*path, "entry_id"]])
        elif a is None and type(b) in _PLAIN:
            later.append(["s", [*path, "entry_id"], b])
        else:
            _set(a, b, a is None, [*path, "entry_id"], later)
    if (a := old.output) is not (b := new.output):
        if b is None:
            out.append(["d", [*path, "output"]])
        else:
            _set(a, b, a is None, [*path, "output"], later)
    if (a := old.control) is not (b := new.control):
        if b is None:
            out.append(["d", [*path, "control"]])
        else:
            _set(a, b, a is None, [*path, "control"], later)
    if later:
        out += later


def _usage(old: UsageDoc, new: UsageDoc, path: list[Json], out: list[Json]) -> None:
    a: Any
    b: Any
    later: list[Json] = []
    if (a := old.models) is not (b := new.models):
        if b is _NO_MODELS or b == _NO_MODELS:
            if not (a is _NO_MODELS or a == _NO_MODELS):
                out.append(["d", [*path, "models"]])
        else:
            _set(a, b, a is _NO_MODELS or a == _NO_MODELS, [*path, "models"], later)
    if (a := old.tools) is not (b := new.tools):
        if b is _NO_TOOLS or b == _NO_TOOLS:
            if not (a is _NO_TOOLS or a == _NO_TOOLS):
                out.append(["d", [*path, "tools"]])
        else:
            _set(a, b, a is _NO_TOOLS or a == _NO_TOOLS, [*path, "tools"], later)
    if later:
        out += later


def _totals(old: UsageTotals, new: UsageTotals, path: list[Json], out: list[Json]) -> None:
    a: Any
    b: Any
    later: list[Json] = []
    if (a := old.input_tokens) is not (b := new.input_tokens):
        if type(a) is int and type(b) is int and a and b:
            if a != b:
                later.append(["s", [*path, "input_tokens"], b])
        elif b is _ZERO or b == _ZERO:
            if not (a is _ZERO or a == _ZERO):
                out.append(["d", [*path, "input_tokens"]])
        else:
            _set(a, b, a is _ZERO or a == _ZERO, [*path, "input_tokens"], later)
    if (a := old.output_tokens) is not (b := new.output_tokens):
        if type(a) is int and type(b) is int and a and b:
            if a != b:
                later.append(["s", [*path, "output_tokens"], b])
        elif b is _ZERO or b == _ZERO:
            if not (a is _ZERO or a == _ZERO):
                out.append(["d", [*path, "output_tokens"]])
        else:
            _set(a, b, a is _ZERO or a == _ZERO, [*path, "output_tokens"], later)
    if (a := old.calls) is not (b := new.calls):
        if type(a) is int and type(b) is int and a and b:
            if a != b:
                later.append(["s", [*path, "calls"], b])
        elif b is _ZERO or b == _ZERO:
            if not (a is _ZERO or a == _ZERO):
                out.append(["d", [*path, "calls"]])
        else:
            _set(a, b, a is _ZERO or a == _ZERO, [*path, "calls"], later)
    if later:
        out += later


# The spelt-out walks' fields and defaults, checked against their classes (a
# field added or a default changed must be made there too).
spelt_out(Live, ("run", "tools", "attempt", "partial", "retry_at", "retry_error", "poll_at"))
assert all(d is None for _, d in _fields(Live))
# (ToolSlot: _SLOT_FIELDS and its defaults, checked above for _slot_json)
_NO_MODELS, _NO_TOOLS = (d for _, d in _fields(UsageDoc))  # (the factories' {}: as _record compares them)
assert spelt_out(UsageDoc, ("models", "tools")) and _NO_MODELS == {} and _NO_TOOLS == {}
_ZERO = 0
spelt_out(UsageTotals, ("input_tokens", "output_tokens", "calls"))
assert all(d is _ZERO for _, d in _fields(UsageTotals))

#: The spelt-out walks, by type (``_typed``).
_SPELT: dict[type, Callable[[Any, Any, list[Json], list[Json]], None]] = {
    Live: _live,
    ToolSlot: _slot,
    UsageDoc: _usage,
    UsageTotals: _totals,
}
