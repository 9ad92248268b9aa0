"""The one cattrs converter: records, events and writes <-> JSON.

Core classes carry no wire code; this module is the only place that knows how
they look on disk. Tagged unions (events, writes, effects) are told apart by the
class's ``TAG`` (the stable wire tag, never the class name) in a ``"type"``
field. JSON text is compact and key-ordered as attrs declares fields, so the
same record always encodes to the same bytes (replay compares bytes).

``FORMAT_VERSION`` is stored with every journal row; bump it (and add a reader
for the old one) whenever a persisted shape changes meaning.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn, override
from cattrs.strategies import configure_tagged_union

from pidurable.core.effects import EFFECT_TYPES, WRITE_TYPES, Effect, Write
from pidurable.core.events import EVENT_TYPES, Event
from pidurable.core.model import Entry, EntryKind

FORMAT_VERSION = 1

T = TypeVar("T")

converter = cattrs.Converter(omit_if_default=False, forbid_extra_keys=False)


def _tag(cl: type) -> str:
    return cl.TAG  # type: ignore[attr-defined,no-any-return]


# `Any` payloads (checkpoints, arguments) pass through as JSON values, both
# ways: they are already JSON (the JSON encoder refuses anything else), and
# copying them key by key was a third of the encoding cost.
converter.register_structure_hook(Any, lambda v, _: v)
converter.register_unstructure_hook_func(lambda t: t == dict[str, Any], lambda d: d)

def _entry_kind(value: Any, _: Any) -> str:
    # Built-in kinds come back as EntryKind members (so ``is`` comparisons
    # hold after a round trip); host-defined kinds stay plain strings.
    try:
        return EntryKind(value)
    except ValueError:
        return str(value)


converter.register_structure_hook(
    Entry, make_dict_structure_fn(Entry, converter, kind=override(struct_hook=_entry_kind))
)

configure_tagged_union(Event, converter, tag_generator=_tag, tag_name="type")  # type: ignore[arg-type]
configure_tagged_union(Write, converter, tag_generator=_tag, tag_name="type")  # type: ignore[arg-type]
configure_tagged_union(Effect, converter, tag_generator=_tag, tag_name="type")  # type: ignore[arg-type]

_EVENT_BY_TAG = {cl.TAG: cl for cl in EVENT_TYPES}  # type: ignore[attr-defined]
_WRITE_BY_TAG = {cl.TAG: cl for cl in WRITE_TYPES}  # type: ignore[attr-defined]
_EFFECT_BY_TAG = {cl.TAG: cl for cl in EFFECT_TYPES}  # type: ignore[attr-defined]


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def dumps(value: Any) -> str:
    """Compact, strict JSON (NaN/Infinity and non-JSON values are refused)."""
    return _encode(value)


def loads(text: str) -> Any:
    return json.loads(text)


def to_json(obj: Any, cl: type | None = None) -> str:
    """Encode a record (or a union member, with ``cl`` the union)."""
    return dumps(converter.unstructure(obj, unstructure_as=cl) if cl is not None else converter.unstructure(obj))


def from_json(text: str | bytes, cl: type[T]) -> T:
    return converter.structure(json.loads(text), cl)


def event_to_data(ev: Event) -> dict[str, Any]:
    return converter.unstructure(ev, unstructure_as=Event)  # type: ignore[no-any-return]


#: Wire tags events had in older journals -> today's tag. Host requests the
#: core may refuse were renamed ``...Requested`` (issue 8); journals written
#: before still replay.
EVENT_TAG_ALIASES: dict[str, str] = {
    "conversation_created": "conversation_creation_requested",
    "task_created": "task_creation_requested",
    "task_committed": "task_commit_requested",
    "agent_configured": "agent_configuration_requested",
}
assert not set(EVENT_TAG_ALIASES) & set(_EVENT_BY_TAG), "an alias must not shadow a live tag"
assert set(EVENT_TAG_ALIASES.values()) <= set(_EVENT_BY_TAG)


def event_from_data(data: dict[str, Any]) -> Event:
    tag = data.get("type")
    if tag in EVENT_TAG_ALIASES:
        data = {**data, "type": EVENT_TAG_ALIASES[tag]}
    return converter.structure(data, Event)  # type: ignore[no-any-return,arg-type]


def write_to_data(w: Write) -> dict[str, Any]:
    return converter.unstructure(w, unstructure_as=Write)  # type: ignore[no-any-return]


def write_from_data(data: dict[str, Any]) -> Write:
    return converter.structure(data, Write)  # type: ignore[no-any-return,arg-type]
