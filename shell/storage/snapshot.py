"""The reducer's live ``State`` as text and back: a snapshot.

Why (issue 11 item 2, docs/performance.md round 16): a store that journals
each commit's events and writes its record tables in batches needs, to
recover the commits a crash left unwritten, the state the core stepped
those commits' events on. The tables at the last batch cannot give it: a
new process's state is what ``Opened`` makes of them (running tasks
recovered, ``invocations`` and ``failed_migrations`` cleared), not what the
live process held. So such a store keeps the live state as of its last
batch, and recovery steps the journal rows after it from there
(:func:`pidurable.shell.journal.replay` with ``state=``): the core is pure,
so the same events on the same state make the same commits, byte for byte.

What is kept: every field of ``State`` but ``task_index``, which is derived
and rebuilt as ``Opened`` builds it (``index.build``). A mapping keeps its
values in order (a dict iterates in insertion order) and is rebuilt keyed as
the core keys it (a conversation by id, a tool by name...); the live tasks
keep their representation (a small dict or a persistent ``Map``,
``index.LARGE``: the map a step would otherwise build differs in iteration
order). ``invocations`` is kept sorted. Records go through the store's
converter (``codec.stored``: fields at their default left out), as strict
JSON (``codec.dumps``: no NaN) that must also be valid UTF-8.

``decode_state(encode_state(s)) == s`` holds for every state the core makes
(tests/shell/test_state_snapshot.py: at every commit of the golden
scenarios and of a bench run, and the journal after it replays exactly from
the decoded state). A text that is not a snapshot this code reads raises
:class:`SnapshotError` naming what is wrong; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from immutables import Map

from pidurable.core.index import build
from pidurable.core.model import ExtensionInfo, Settings, Submission, Task, TaskInfo, TaskStatus, ToolInfo
from pidurable.core.state import ConvState, DocumentState, State

from ..strict_json import loads_strict
from . import codec
from .base import StorageError

#: The snapshot format this code writes and reads.
SNAPSHOT_FORMAT = 1


class SnapshotError(StorageError):
    """A state that cannot be kept as a snapshot, or a text that is not one."""


#: The keyed mappings of ``State``: field -> (the record type, its key as the core keys it).
_KEYED: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "conversations": (ConvState, lambda c: c.id),
    "tasks": (Task, lambda t: t.id),
    "submissions": (Submission, lambda s: s.id),
    "catalog": (ToolInfo, lambda i: i.name),
    "task_catalog": (TaskInfo, lambda i: i.kind),
    "documents": (DocumentState, lambda d: d.key),
}
#: The scalar fields of ``State`` and the JSON type each has (``keep_settled`` may also be null).
_SCALAR_TYPES = {"next_id": int, "next_seq": int, "scheduling": bool, "opened": bool, "keep_settled": int}


#: The other fields, each kept its own way (see encode_state); ``task_index`` is rebuilt.
_OTHERS = ("extensions", "settings", "invocations", "failed_migrations", "settled", "task_index")
# a field added to State must be kept here too, or a snapshot would drop it
assert {f.name for f in attrs.fields(State)} == {*_KEYED, *_SCALAR_TYPES, *_OTHERS}, "snapshot.py: State changed"


def _scalar(name: str, value: Any) -> Any:
    if value is None and name == "keep_settled":
        return None
    if type(value) is not _SCALAR_TYPES[name]:
        raise TypeError(f"{type(value).__name__} where {_SCALAR_TYPES[name].__name__} is kept")
    return value


def _id(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"{type(value).__name__} where an id is kept")
    return value


def _ids(values: Any) -> list[int]:
    if type(values) is not list:
        raise TypeError(f"{type(values).__name__} where a list of ids is kept")
    return [_id(v) for v in values]


def encode_state(state: State) -> str:
    """``state`` as a snapshot's text (strict JSON, valid UTF-8)."""
    out: dict[str, Any] = {"format": SNAPSHOT_FORMAT}
    for name in _SCALAR_TYPES:
        out[name] = getattr(state, name)
    for name, (cl, key) in _KEYED.items():
        mapping: Mapping[Any, Any] = getattr(state, name)
        values = list(mapping.values())
        for k, v in zip(mapping, values):
            if k != key(v):
                raise SnapshotError(f"cannot snapshot the state: {name} holds {k!r} under another key than its own")
        out[name] = codec.stored.unstructure(values, list[cl])  # type: ignore[valid-type]
    out["tasks_map"] = type(state.tasks) is Map
    out["extensions"] = codec.stored.unstructure(state.extensions, tuple[ExtensionInfo, ...])
    out["settings"] = codec.stored.unstructure(state.settings, Settings)
    out["invocations"] = sorted(state.invocations)
    out["failed_migrations"] = [[k, v] for k, v in state.failed_migrations.items()]
    out["settled"] = list(state.settled)
    try:
        text = codec.dumps(out)
        text.encode("utf-8")
    except (ValueError, TypeError) as e:  # NaN/Infinity, a non-JSON value, a lone surrogate
        raise SnapshotError(f"cannot snapshot the state: it holds a value that is not strict JSON text ({e})") from e
    return text


def decode_state(text: str | bytes) -> State:
    """The ``State`` a snapshot's text keeps (:class:`SnapshotError` if it is not one this code reads)."""
    try:
        data = loads_strict(text)
    except ValueError as e:  # (UnicodeDecodeError is one)
        raise SnapshotError(f"snapshot is not strict JSON text ({e})") from e
    if not isinstance(data, dict):
        raise SnapshotError(f"snapshot is not a JSON object (a {type(data).__name__})")
    try:  # a "\ud800" escape decodes to a lone surrogate, which no state may hold
        codec.dumps(data).encode("utf-8")
    except ValueError as e:
        raise SnapshotError(f"snapshot holds a string that is not valid UTF-8 ({e})") from e
    fmt = data.get("format")
    if fmt != SNAPSHOT_FORMAT:
        raise SnapshotError(f"snapshot format {fmt!r} is not one this code reads (it reads {SNAPSHOT_FORMAT})")
    part = "?"
    try:
        fields: dict[str, Any] = {}
        for part in _SCALAR_TYPES:
            fields[part] = _scalar(part, data[part])
        for part, (cl, key) in _KEYED.items():
            values = codec.converter.structure(data[part], list[cl])  # type: ignore[valid-type]
            fields[part] = {key(v): v for v in values}
        part = "tasks_map"
        if data[part]:
            fields["tasks"] = Map(fields["tasks"])
        part = "extensions"
        fields[part] = codec.converter.structure(data[part], tuple[ExtensionInfo, ...])
        part = "settings"
        fields[part] = codec.converter.structure(data[part], Settings)
        part = "invocations"
        fields[part] = frozenset(_ids(data[part]))
        part = "failed_migrations"
        fields[part] = {_id(k): _id(v) for k, v in data[part]}
        part = "settled"
        fields[part] = tuple(_ids(data[part]))
    except Exception as e:  # noqa: BLE001 - any malformed part is reported as one, naming it
        raise SnapshotError(f"snapshot part {part!r} does not decode ({type(e).__name__}: {e})") from e
    live = [t for t in fields["tasks"].values() if t.status is not TaskStatus.TERMINAL]
    owners = {c.id: c.conversation.owner_task_id for c in fields["conversations"].values()}
    return State(**fields, task_index=build(live, owners))
