"""Chord ops: the change vocabulary of documents, applied and derived.

Theory of operation
-------------------
A document's value is strict JSON. A change to it is a short list of *ops*
(the reference's Chord vocabulary, reference §2.6), each a JSON array whose
first item is its verb:

=========================================== ===================================
``["r", value]``                            replace the root
``["s", path, value]``                      set the member at ``path`` (a new
                                            object key, or an existing array
                                            index)
``["d", path]``                             delete the member at ``path``
``["a", path, text]``                       append ``text`` to the string at
                                            ``path``
``["t", path, n]``                          drop the first ``n`` characters of
                                            the string at ``path``
``["p", path, index, delete_count, items]`` splice the array at ``path`` (the
                                            path may be the root)
``["m", path, permutation]``                reorder the array at ``path``:
                                            ``new[i] = old[permutation[i]]``
=========================================== ===================================

A path is a list of object keys (strings) and array indexes (integers). An
unknown verb, a path that does not lead where its op needs, or an argument
of the wrong type raises :class:`OpError` - never skipped.

:func:`apply` never changes its input: it copies only the containers along
each op's path, so an op costs the size of what it touches, not of the
document. :func:`diff` derives the ops from an old value to a new one, small
for the common cases: a changed leaf is one ``s``, a string that grew at the
end one ``a`` (a rolling log trimmed at the front ``t`` then ``a``), a list
with items inserted or removed in one place one ``p``, and a change inside
one item of a list or object is followed down into it. ``apply(old,
diff(old, new)) == new`` always (values compare with their JSON types:
``1``, ``1.0`` and ``True`` differ).

Stored revisions (:func:`rebuild`): a *base* holds a whole value, a *delta*
the ops of one commit; a value is the newest base then every later delta in
order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Json = Any
Op = list[Json]

#: The verbs :func:`apply` knows.
VERBS = frozenset({"r", "s", "d", "a", "t", "p", "m"})

#: A front trim is looked for at no more than this many candidate offsets
#: (beyond: the string is set whole; a pathological string stays linear).
_TRIM_CANDIDATES = 64


class OpError(ValueError):
    """An op that cannot be applied (unknown verb, bad path, bad argument)."""


# --- apply -------------------------------------------------------------------------


def apply(value: Json, ops: Iterable[Op]) -> Json:
    """``value`` changed by ``ops`` in order (``value`` itself unchanged)."""
    for op in ops:
        value = apply_op(value, op)
    return value


def apply_op(value: Json, op: Op) -> Json:
    if not isinstance(op, (list, tuple)) or not op or not isinstance(op[0], str):
        raise OpError(f"an op is a list starting with its verb, not {op!r:.80}")
    verb = op[0]
    if verb not in VERBS:
        raise OpError(f"unknown op verb {verb!r}")
    if verb == "r":
        _arity(op, 2)
        return op[1]
    path = _path(op)
    if verb == "s":
        _arity(op, 3)
        if not path:
            raise OpError("'s' needs a non-empty path (use 'r' for the root)")
        return _modify(value, path[:-1], lambda parent: _set(parent, path[-1], op[2]))
    if verb == "d":
        _arity(op, 2)
        if not path:
            raise OpError("'d' needs a non-empty path")
        return _modify(value, path[:-1], lambda parent: _delete(parent, path[-1]))
    if verb == "a":
        _arity(op, 3)
        text = op[2]
        if type(text) is not str:
            raise OpError("'a' appends a string")
        return _modify(value, path, lambda s: _string(s, "a") + str(text))
    if verb == "t":
        _arity(op, 3)
        n = op[2]
        if type(n) is not int or n < 0:
            raise OpError("'t' drops a non-negative count of characters")

        def trim(member: Json) -> str:
            s = _string(member, "t")
            if n > len(s):
                raise OpError(f"'t' drops {n} characters of a string of {len(s)}")
            return s[n:]

        return _modify(value, path, trim)
    if verb == "p":
        _arity(op, 5)
        index, count, items = op[2], op[3], op[4]
        if type(index) is not int or type(count) is not int or index < 0 or count < 0:
            raise OpError("'p' needs a non-negative index and delete count")
        if not isinstance(items, (list, tuple)):
            raise OpError("'p' inserts a list of items")

        def splice(a: Json) -> list[Json]:
            a = _array(a, "p")
            if index + count > len(a):
                raise OpError(f"'p' at {index} deletes {count} of an array of {len(a)}")
            return [*a[:index], *items, *a[index + count :]]

        return _modify(value, path, splice)
    _arity(op, 3)  # "m"
    perm = op[2]

    def move(a: Json) -> list[Json]:
        a = _array(a, "m")
        if not isinstance(perm, (list, tuple)) or sorted(perm) != list(range(len(a))) or any(type(i) is not int for i in perm):
            raise OpError("'m' needs a permutation of the array's indexes")
        return [a[i] for i in perm]

    return _modify(value, path, move)


def _arity(op: Op, n: int) -> None:
    if len(op) != n:
        raise OpError(f"op {op[0]!r} has {n} items, not {len(op)}")


def _path(op: Op) -> list[Json]:
    path = op[1]
    if not isinstance(path, (list, tuple)) or not all(type(k) in (str, int) for k in path):
        raise OpError(f"a path is a list of keys and indexes, not {path!r:.80}")
    return list(path)


def _string(value: Json, verb: str) -> str:
    if type(value) is not str:
        raise OpError(f"{verb!r} needs a string, not {type(value).__name__}")
    return value


def _array(value: Json, verb: str) -> list[Json]:
    if type(value) is not list:
        raise OpError(f"{verb!r} needs an array, not {type(value).__name__}")
    return value


def _modify(value: Json, path: Sequence[Json], change: Any) -> Json:
    """``value`` with the member at ``path`` replaced by ``change(member)``;
    only the containers on the path are copied."""
    if not path:
        return change(value)
    key, rest = path[0], path[1:]
    if type(value) is dict:
        if type(key) is not str or key not in value:
            raise OpError(f"no member {key!r}")
        out = dict(value)
        out[key] = _modify(value[key], rest, change)
        return out
    if type(value) is list:
        if type(key) is not int or not 0 <= key < len(value):
            raise OpError(f"no index {key!r} in an array of {len(value)}")
        items = list(value)
        items[key] = _modify(value[key], rest, change)
        return items
    raise OpError(f"path step {key!r} into a {type(value).__name__}")


def _set(parent: Json, key: Json, item: Json) -> Json:
    if type(parent) is dict:
        if type(key) is not str:
            raise OpError(f"object key {key!r} is not a string")
        return {**parent, key: item}
    if type(parent) is list:
        if type(key) is not int or not 0 <= key < len(parent):
            raise OpError(f"no index {key!r} in an array of {len(parent)}")
        items = list(parent)
        items[key] = item
        return items
    raise OpError(f"'s' into a {type(parent).__name__}")


def _delete(parent: Json, key: Json) -> Json:
    if type(parent) is dict:
        if type(key) is not str or key not in parent:
            raise OpError(f"no member {key!r} to delete")
        return {k: v for k, v in parent.items() if k != key}
    if type(parent) is list:
        if type(key) is not int or not 0 <= key < len(parent):
            raise OpError(f"no index {key!r} to delete in an array of {len(parent)}")
        return [*parent[:key], *parent[key + 1 :]]
    raise OpError(f"'d' in a {type(parent).__name__}")


# --- diff ----------------------------------------------------------------------------


def same(a: Json, b: Json) -> bool:
    """Equal as JSON values, types included (``1``, ``1.0``, ``True`` differ)."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if ta is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def diff(old: Json, new: Json, path: Sequence[Json] = ()) -> tuple[Op, ...]:
    """Ops that turn ``old`` into ``new`` (empty when they are the same);
    ``path``: where they are in a bigger value (the ops' paths start with it)."""
    out: list[Op] = []
    _diff(old, new, list(path), out)
    return tuple(out)


def diff_into(old: Json, new: Json, path: list[Json], out: list[Op]) -> None:
    """``diff``, appending its ops to ``out``; ``path`` is the caller's own
    fresh list, which the ops may hold (builtins.typed_ops: no copies)."""
    _diff(old, new, path, out)


def _whole(path: list[Json], new: Json, out: list[Op]) -> None:
    out.append(["s", path, new] if path else ["r", new])


def _diff(a: Json, b: Json, path: list[Json], out: list[Op]) -> None:
    if same(a, b):
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        for k in a:
            if k not in b:
                out.append(["d", [*path, k]])
        for k, v in b.items():
            if k in a:
                _diff(a[k], v, [*path, k], out)
            else:
                out.append(["s", [*path, k], v])
        return
    if ta is list and tb is list:
        _diff_list(a, b, path, out)
        return
    _changed(a, b, path, out)


def diff_scalar(old: Json, new: Json, path: list[Json], out: list[Op]) -> None:
    """``diff_into`` for two values that are not both objects nor both
    arrays (a string, a number, a status - what most changes of a built-in
    are, builtins.typed_ops): the same ops, without ``same``'s walk."""
    if old is new or (type(old) is type(new) and old == new):
        return  # (``same``, for such values)
    _changed(old, new, path, out)


def _changed(a: Json, b: Json, path: list[Json], out: list[Op]) -> None:
    """The ops of two different values that are not both objects nor both
    arrays: a string that grew or lost its front is an edit, anything else
    is replaced."""
    if type(a) is str and type(b) is str:
        if b.startswith(a):
            out.append(["a", path, b[len(a) :]])
            return
        n = _front_trim(a, b)
        if n is not None:
            out.append(["t", path, n])
            if len(b) > len(a) - n:
                out.append(["a", path, b[len(a) - n :]])
            return
    _whole(path, b, out)


def _front_trim(a: str, b: str) -> int | None:
    """The smallest ``n`` with ``a[n:]`` a non-empty prefix of ``b``, or None."""
    if not b:
        return len(a) if a else None
    start = 1
    for _ in range(_TRIM_CANDIDATES):
        n = a.find(b[0], start)
        if n < 0:
            return None
        if b.startswith(a[n:]):
            return n
        start = n + 1
    return None


def _diff_list(a: list[Json], b: list[Json], path: list[Json], out: list[Op]) -> None:
    i, shortest = 0, min(len(a), len(b))
    while i < shortest and same(a[i], b[i]):
        i += 1
    j = 0
    while j < shortest - i and same(a[len(a) - 1 - j], b[len(b) - 1 - j]):
        j += 1
    removed, added = len(a) - i - j, len(b) - i - j
    if removed == 1 and added == 1 and type(a[i]) is type(b[i]) and type(a[i]) in (dict, list, str):
        _diff(a[i], b[i], [*path, i], out)  # one item changed inside: follow it
        return
    if removed == len(a) and a and added:
        _whole(path, b, out)  # nothing kept: the array itself
        return
    out.append(["p", path, i, removed, b[i : len(b) - j]])


# --- stored revisions ----------------------------------------------------------------


def rebuild(revisions: Iterable[tuple[str, Json]]) -> tuple[Json, int]:
    """The value from ``(action, content)`` revisions in commit order:
    ``("base", value)`` or ``("delta", ops)``, from the newest base on; also
    the number of deltas after that base. A history without a base raises
    :class:`OpError` (a store missing its base is damaged)."""
    value: Json = None
    deltas = -1
    for action, content in revisions:
        if action == "base":
            value, deltas = content, 0
        elif action == "delta":
            if deltas < 0:
                raise OpError("a delta without a base before it")
            value = apply(value, content)
            deltas += 1
        else:
            raise OpError(f"unknown revision action {action!r}")
    if deltas < 0:
        raise OpError("no base revision")
    return value, deltas
