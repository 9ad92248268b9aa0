"""``evolve``: ``attrs.evolve`` with each class's field list read once.

Every change of a record in the core (a task's move, a slot's, ``pi.live``'s,
a conversation's built-ins) makes a changed copy. ``attrs.evolve`` reads the
class's fields and walks them one ``getattr`` at a time on every call; this
one reads them once per class (an ``attrgetter`` of every init field) and
builds the copy through the class's own ``__init__`` exactly as
``attrs.evolve`` does (validators and converters run; an unknown name is a
``TypeError``), so it is the same copy, made with less work: steps make
several per event (issue 11 item 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, NoReturn, TypeVar

import attrs

T = TypeVar("T")

#: Per class: the ``__init__`` argument names of its init fields, and one
#: reader of their values in that order.
_INIT: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _learn(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    fields = [f for f in attrs.fields(cls) if f.init]
    args = tuple(f.alias for f in fields)
    names = [f.name for f in fields]
    read: Callable[[Any], tuple[Any, ...]]
    if len(names) > 1:
        read = attrgetter(*names)
    elif names:
        only = names[0]
        read = lambda inst: (getattr(inst, only),)  # noqa: E731
    else:
        read = lambda inst: ()  # noqa: E731
    known = _INIT[cls] = (args, read)
    return known


def evolve(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes`` (as ``attrs.evolve``)."""
    cls = type(inst)
    known = _INIT.get(cls)
    if known is None:
        known = _learn(cls)
    args, read = known
    values = dict(zip(args, read(inst)))
    values.update(changes)
    return cls(**values)


def spelt_out(cls: type, names: tuple[str, ...]) -> frozenset[str]:
    """``names``, checked to be ``cls``'s attrs fields in order (all set by
    ``__init__``), as a set. For a copy that spells every field out instead
    of calling :func:`evolve` (a hot path: no dict of every field): checked
    at import, so a field added to ``cls`` fails until the copy names it."""
    fields = attrs.fields(cls)
    if tuple(f.name for f in fields) != names or not all(f.init for f in fields):
        raise AssertionError(f"{cls.__name__} has fields {[f.name for f in fields]}: its spelt-out copy names {list(names)}")
    return frozenset(names)


def refuse_changes(allowed: frozenset[str], changes: Mapping[str, Any], what: str) -> NoReturn:
    """A spelt-out copy's ``changes`` name a field not ``allowed``: the
    ``TypeError`` ``evolve`` raises for an unknown name. (The caller tests
    ``allowed.issuperset(changes)`` itself: no call on the hot path.)"""
    raise TypeError(f"{what} cannot set {sorted(set(changes) - allowed)}")


__all__ = ["evolve", "refuse_changes", "spelt_out"]
