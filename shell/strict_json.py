"""Strict JSON at the edge: the checks every value from outside passes
(``edge.py`` for events and tool results, ``host_input.py`` for host input,
the ``define_*`` functions for definitions). Imports nothing from the shell,
so any module may use it.

A value is stored only as strict JSON: no NaN or Infinity, string keys,
valid UTF-8 text (a lone surrogate becomes U+FFFD where text may be
repaired), ints of at most 640 digits, and objects and arrays nested at most
``MAX_DEPTH`` deep. :func:`clean_json` returns a clean value itself (no
copy), a repaired copy, or raises :class:`EdgeError` naming the path to the
first value it refuses.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from pidurable.core.bounds import shown

_AS_IS = frozenset({int, bool, type(None)})  #: exact types whose values are JSON as they are
_FLAT, _STRS = _AS_IS | {str}, frozenset({str})  #: ... and text (JSON as it is when ASCII)
_IS_STR = str.__instancecheck__  #: isinstance(x, str) in one C call (for filter)
_IS_INT = int.__instancecheck__  #: isinstance(x, int) in one C call (for filter)
#: Integers are stored only below 10**640 in magnitude: every Python process can
#: print and parse those, whatever its ``sys.set_int_max_str_digits`` (at least
#: 640); a longer one (CPython's default refuses over 4,300 digits) would fail
#: the commit that holds it, and could make a store unreadable elsewhere.
_INT_LIMIT = 10**640
#: JSON values nest at most this deep (objects and arrays): deeper ones are
#: refused at the edge, so no later step (the codec, a document's diff,
#: schema validation, ``json.loads`` on reopen) recurses out of stack.
MAX_DEPTH = 100
_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
_TOO_LONG = "an integer of {} bits (over 640 digits) is too long to store"


def _ints_fit(values: Any) -> bool:
    """Every int (and bool) among ``values`` is below ``_INT_LIMIT`` in magnitude (in C)."""
    return max(map(abs, filter(_IS_INT, values)), default=0) < _INT_LIMIT

#: a text is ASCII (for map: each tested in place, never joined - a huge text is not copied)
_ASCII = str.isascii


class EdgeError(ValueError):
    """A value from outside cannot be made strict JSON (readable message)."""


def clean_text(text: str) -> str:
    """``text`` as valid UTF-8: each lone surrogate becomes U+FFFD (a split
    surrogate pair is joined). Returns ``text`` itself when it is valid."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def has_surrogates(text: str) -> bool:
    return clean_text(text) is not text  # (a cleaned text is a new string)


def clean_json(value: Any, where: str) -> Any:
    """``value`` as a strict-JSON value with valid-UTF-8 strings (tuples
    become lists). Raises :class:`EdgeError` naming ``where`` (and the path
    inside) for NaN, Infinity, a non-string key, an int of over 640 digits,
    nesting deeper than ``MAX_DEPTH`` or any non-JSON object. A value that
    is already clean is returned itself (no copy)."""
    try:
        return _clean(value)
    except _Bad as bad:
        raise EdgeError(f"{where}{bad.where()}: {bad}") from None


class _Bad(Exception):
    """A value that cannot be made JSON. Each container it passes through on
    its way out adds its step (``.key``, ``[3]``) to ``path``, innermost
    first: the path costs nothing unless a value is refused."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []

    def where(self) -> str:
        return "".join(reversed(self.path))


def _clean(value: Any, depth: int = 0) -> Any:
    # The hot path: no string formatting, no copies of clean values.
    # ``depth``: the containers around ``value`` (a value nested deeper than
    # MAX_DEPTH is refused, before recursion runs out of stack).
    t = type(value)
    if t is dict:
        if depth >= MAX_DEPTH:
            raise _Bad(_TOO_DEEP)
        # flat and clean as it is, in C (issue 11 item 2): ASCII str keys; ints, bools, None, ASCII text
        vs = value.values()
        if _STRS.issuperset(map(type, value)) and _FLAT.issuperset(map(type, vs)) and all(map(_ASCII, value)):
            if all(map(_ASCII, filter(_IS_STR, vs))) and _ints_fit(vs):
                return value
        return _clean_dict(value, depth + 1)
    if t is str:
        return value if value.isascii() else clean_text(value)
    if t is int:
        if -_INT_LIMIT < value < _INT_LIMIT:
            return value
        raise _Bad(_TOO_LONG.format(value.bit_length()))
    if value is None or t is bool:
        return value
    if t is float:
        if value - value == 0.0:  # finite
            return value
        raise _Bad(f"{value!r} is not a JSON number (NaN and Infinity are not allowed)")
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise _Bad(_TOO_DEEP)
        items = []
        for i, v in enumerate(value):
            try:
                items.append(_clean(v, depth + 1))
            except _Bad as bad:
                bad.path.append(f"[{i}]")
                raise
        if t is list and all(a is b for a, b in zip(items, value)):
            return value
        return items
    if isinstance(value, enum.Enum) and isinstance(value, (str, int)):
        return value  # a vocabulary member (StrEnum): already a JSON string
    if isinstance(value, str):  # a str subclass: store a plain str
        return clean_text(str(value))
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _clean(int(value), depth)
    raise _Bad(f"a {type(value).__name__} is not a JSON value")


def _clean_dict(value: dict[Any, Any], depth: int = 1) -> dict[str, Any]:
    out = None
    for i, (k, v) in enumerate(value.items()):
        if type(k) is not str:
            raise _Bad(f"object key {shown(k)} is not a string")
        ck = k if k.isascii() else clean_text(k)
        tv = type(v)  # (a clean scalar without a call)
        try:
            cv = v if (tv in _AS_IS and tv is not int) or (tv is str and v.isascii()) else _clean(v, depth)
        except _Bad as bad:
            bad.path.append(f".{k}")
            raise
        if out is None and (ck is not k or cv is not v):
            out = dict(list(value.items())[:i])
        if out is not None:
            out[ck] = cv
    return value if out is None else out


def check_definition_json(value: Any, what: str) -> Any:
    """``value`` as :func:`clean_json` makes it, or ValueError naming
    ``what``: a definition's values (a tool's schema and description, a
    document's schema) are sent to providers and stored, so a bad one fails
    where it is defined."""
    try:
        return clean_json(value, what)
    except EdgeError as e:
        raise ValueError(f"{e} (strict JSON is required)") from None


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` of strict JSON: ``NaN``, ``Infinity`` and ``-Infinity``
    (which ``json.loads`` accepts by default) raise ``ValueError`` like any
    other invalid JSON (for provider arguments, request bodies, snapshots)."""
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (non-finite numbers are not allowed)")
