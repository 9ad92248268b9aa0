"""The bounds of integers that cross the edge, in one place.

Ids, versions, settings, token counts and waits are stored as signed 64-bit
integers (SQLite's and PostgreSQL's), so every one of them is checked with
:func:`is_int_in` against ``MIN_INT64`` / ``MAX_INT64``. Messages about a
refused value use :func:`shown`: ``repr`` of an int of over 4,300 digits
raises ``ValueError`` (CPython's ``int_max_str_digits``), which would turn a
clear refusal into an error from inside.
"""

from __future__ import annotations

from typing import TypeGuard

MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1


def is_int_in(value: object, least: int = 0, most: int = MAX_INT64) -> TypeGuard[int]:
    """``value`` is an int (not a bool) with ``least <= value <= most``."""
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= most


def shown(value: object) -> str:
    """``repr(value)`` for a message, but an int longer than 64 bits as its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return repr(value)
