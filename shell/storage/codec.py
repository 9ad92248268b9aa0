"""The one cattrs converter: records, events and writes <-> JSON.

Core classes carry no wire code; this module is the only place that knows how
they look on disk. Tagged unions (events, writes, effects) are told apart by the
class's ``TAG`` (the stable wire tag, never the class name) in a ``"type"``
field. JSON text is compact and key-ordered as attrs declares fields, so the
same record always encodes to the same bytes (replay compares bytes).

A commit stores each write twice: its record in a table row, and the write in
the journal, ``{"type": TAG, <the write's fields in declared order>}`` (the
same object as ``{"type": TAG, **converter.unstructure(w)}``, tag first). The
record is the write's last field and is the expensive part, so
:func:`encode_write` encodes it once and splices that text into the journal
form; ``WRITE_WIRE`` is derived from the write classes at import, so no module
spells a journal object by hand.

``FORMAT_VERSION`` is stored with every journal row; bump it (and add a reader
for the old one) whenever a persisted shape changes meaning. Format 1 rows
hold the writes' JSON; format 2 rows (issue 11: a lean journal) hold only a
digest of it (:func:`writes_digest`): the writes are what the pure core
recomputes from the journaled events (``shell/journal.py``), and the digest
proves a replay reproduced them byte for byte. Format 3 (issue 11: a lean
store) encodes records, writes and events with ``stored``, which leaves out
fields at their default; formats 1 and 2 used ``converter`` (every field),
which stays the shape hosts are handed and what older rows are compared in.
Format 4 (issue 10) encodes as 3; its commits write the built-in documents as
document revisions (``PutDocument``, core/builtins.py) where formats 1-3 had
whole-value writes (``PutLive``...): replay compares an older row with
``builtins.legacy_writes`` of what it produces.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union

from pidurable.core.effects import WRITE_TYPES, DocumentRevision, Effect, Write
from pidurable.core.events import ModelResponded, TaskCommitRequested, ToolAbortHooked, ToolFailed, ToolFinished
from pidurable.core.events import EVENT_TYPES, Event, Opened, RegistryChanged
from pidurable.core.model import AgentConfig, Conversation, Entry, EntryKind, ExtensionInfo, Settings, ToolInfo
from pidurable.core.state import ContextDoc, ConvState
from pidurable.core.events import ModelStreamed
from pidurable.core.fork_events import ForkPoint
from pidurable.core.state import ToolSlot

from .lazy_converter import LazyConverter

FORMAT_VERSION = 4
#: A format-2/3 row's ``writes``: this prefix and a 128-bit BLAKE2b of the
#: writes' JSON text (format 1 rows start with ``[``).
DIGEST_PREFIX = "b2:"
#: The digest rows written since issue 11's lean journal hold: this prefix
#: and a 96-bit BLAKE2b in base64url (:func:`writes_digest`).
SHORT_DIGEST_PREFIX = "b3:"

T = TypeVar("T")

def _tag(cl: type) -> str:
    return cl.TAG  # type: ignore[attr-defined,no-any-return]


def _entry_kind(value: Any, _: Any) -> str:
    # Built-in kinds come back as EntryKind members (so ``is`` comparisons
    # hold after a round trip); host-defined kinds stay plain strings.
    try:
        return EntryKind(value)
    except ValueError:
        return str(value)


def _lean_prepared(hook: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """ModelResponded as the store encodes it (issue 11: a lean journal): a
    prepared call whose arguments are its tool call's, key for key, leaves
    them out (:func:`event_from_data` puts them back); they were stored twice
    in every tool round."""

    def unstructure(e: ModelResponded) -> dict[str, Any]:
        data = hook(e)
        if e.prepared and len(e.prepared) == len(e.tool_calls):
            for p, call in zip(data["prepared"], e.tool_calls, strict=True):
                if p is not None and _same_json(p.get("arguments"), call.arguments):
                    p.pop("arguments", None)  # (``p``: the new dict the hook made for this call)
        return data

    return unstructure


#: Types whose equal values always encode alike (a float does not: 0.0 and -0.0).
_SAME_WHEN_EQUAL = frozenset({str, int, bool, type(None)})


def _same_json(a: Any, b: Any) -> bool:
    """Equal and with the same key order (a decoded copy must encode alike).
    Equal flat dicts - the usual tool arguments - are compared key by key
    without encoding them (issue 11 item 2: two encodings per tool call)."""
    if a != b:
        return False
    if type(a) is dict and type(b) is dict and _same_flat(a, b):
        return True
    try:
        return plain_dumps(a) == plain_dumps(b)
    except NotPlain:
        return _encode(a) == _encode(b)


def _same_flat(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    """Equal dicts (``a == b``) whose keys are strings in the same order and
    whose values, pairwise of one type, are strings, ints, bools or None:
    certainly the same JSON (False: not decided here). (Each test walks the
    dicts in C - ``map(type, ...)`` - not key by key in Python.)"""
    types = list(map(type, a.values()))
    return (
        list(a) == list(b)
        and _STR.issuperset(map(type, a))
        and _SAME_WHEN_EQUAL.issuperset(types)
        and types == list(map(type, b.values()))
    )


_STR = frozenset({str})


def _fill_prepared(data: dict[str, Any]) -> dict[str, Any]:
    """A ``model_responded`` event's prepared calls with the arguments the
    lean encoding left out (their tool call's)."""
    prepared, calls = data.get("prepared"), data.get("tool_calls")
    if not prepared or not isinstance(calls, list) or len(calls) != len(prepared):
        return data
    filled = [
        {"arguments": call.get("arguments", {}), **p} if isinstance(p, dict) and "arguments" not in p and isinstance(call, dict) else p
        for p, call in zip(prepared, calls)
    ]
    return {**data, "prepared": filled}


def _configure(converter: cattrs.Converter) -> None:
    """Every hook of the one converter configuration (registered on both
    encoders, see below)."""
    # `Any` payloads (checkpoints, arguments) pass through as JSON values, both
    # ways: they are already JSON (the JSON encoder refuses anything else), and
    # copying them key by key was a third of the encoding cost.
    converter.register_structure_hook(Any, lambda v, _: v)
    # (``identity`` itself: a generated hook then reads the field, no call)
    converter.register_unstructure_hook_func(lambda t: t == dict[str, Any], identity)

    converter.register_structure_hook(
        Entry, make_dict_structure_fn(Entry, converter, kind=override(struct_hook=_entry_kind))
    )

    # What the model is shown (system sections, issue 9) and the extension
    # catalog were added after schema 1: agents, contexts and opens without them
    # keep their schema-1 bytes.
    converter.register_unstructure_hook(
        AgentConfig,
        make_dict_unstructure_fn(AgentConfig, converter, _cattrs_omit_if_default=converter.omit_if_default,
            extensions=override(omit_if_default=True),
            context_window=override(omit_if_default=True),
        ),
    )
    converter.register_unstructure_hook(
        ContextDoc,
        make_dict_unstructure_fn(ContextDoc, converter, _cattrs_omit_if_default=converter.omit_if_default,
            sections=override(omit_if_default=True),
            tools=override(omit_if_default=True),
            system_entry=override(omit_if_default=True),
        ),
    )

    # Forks (issue 10 item 2): a conversation that is not a fork keeps its
    # schema-1 bytes.
    converter.register_unstructure_hook(
        Conversation,
        make_dict_unstructure_fn(Conversation, converter, _cattrs_omit_if_default=converter.omit_if_default, parent_id=override(omit_if_default=True), fork_at=override(omit_if_default=True)
        ),
    )

    # A slot's running output (tool output limits) is written only while a body
    # reports it, and a result's control only when it asks something: slots without it keep their schema-1 bytes.
    converter.register_unstructure_hook(
        ToolSlot,
        make_dict_unstructure_fn(ToolSlot, converter, _cattrs_omit_if_default=converter.omit_if_default, output=override(omit_if_default=True), control=override(omit_if_default=True)
        ),
    )

    # ``pi.context`` (where the model context starts) was added after schema 1:
    # a conversation without a head marker keeps its schema-1 bytes.
    # ``stored`` (issue 10: the built-ins as documents, core/builtins.py) too.
    converter.register_unstructure_hook(
        ConvState,
        make_dict_unstructure_fn(ConvState, converter, _cattrs_omit_if_default=converter.omit_if_default,
            context=override(omit_if_default=True),
            stored=override(omit_if_default=True),
        ),
    )
    # A fork point's agent as of the fork point (issue 10) likewise.
    converter.register_unstructure_hook(
        ForkPoint, make_dict_unstructure_fn(ForkPoint, converter, _cattrs_omit_if_default=converter.omit_if_default, agent=override(omit_if_default=True))
    )

    # Compaction settings (issue 9) likewise: default ones keep the schema-1 bytes.
    converter.register_unstructure_hook(
        Settings, make_dict_unstructure_fn(Settings, converter, _cattrs_omit_if_default=converter.omit_if_default, compaction=override(omit_if_default=True))
    )

    # Whether a tool has a reconcile (issue 15) likewise: a catalog without
    # one keeps its old bytes.
    converter.register_unstructure_hook(
        ToolInfo, make_dict_unstructure_fn(ToolInfo, converter, _cattrs_omit_if_default=converter.omit_if_default, reconcile=override(omit_if_default=True))
    )

    # Which core-asked hooks an extension has (issue 9) likewise.
    converter.register_unstructure_hook(
        ExtensionInfo, make_dict_unstructure_fn(ExtensionInfo, converter, _cattrs_omit_if_default=converter.omit_if_default, hooks=override(omit_if_default=True))
    )

    # Events that gained a field in issue 9 (an on_yield continuation, a tool
    # result's control) keep their schema-1 bytes without it.
    converter.register_unstructure_hook(
        ModelResponded, make_dict_unstructure_fn(ModelResponded, converter, _cattrs_omit_if_default=converter.omit_if_default, continuation=override(omit_if_default=True))
    )
    if converter.omit_if_default:  # the store's encoder: prepared arguments once (issue 11)
        converter.register_unstructure_hook(ModelResponded, _lean_prepared(converter.get_unstructure_hook(ModelResponded)))
    # A streamed partial's offset (issue 11: partials carry only what was appended).
    converter.register_unstructure_hook(
        ModelStreamed, make_dict_unstructure_fn(ModelStreamed, converter, _cattrs_omit_if_default=converter.omit_if_default, offset=override(omit_if_default=True))
    )
    converter.register_unstructure_hook(
        ToolFinished, make_dict_unstructure_fn(ToolFinished, converter, _cattrs_omit_if_default=converter.omit_if_default, control=override(omit_if_default=True))
    )

    # Events holding the records above are built after them (a hook captures the
    # hooks of its fields when it is made).
    for _cl in (Opened, RegistryChanged):
        converter.register_unstructure_hook(
            _cl, make_dict_unstructure_fn(_cl, converter, _cattrs_omit_if_default=converter.omit_if_default, extensions=override(omit_if_default=True))
        )

    # Host-defined documents (issue 10): a revision holds a value (base) or ops
    # (delta), never both; events without document changes keep their bytes.
    converter.register_unstructure_hook(
        DocumentRevision,
        make_dict_unstructure_fn(DocumentRevision, converter, _cattrs_omit_if_default=converter.omit_if_default, value=override(omit_if_default=True), ops=override(omit_if_default=True)
        ),
    )
    converter.register_unstructure_hook(
        TaskCommitRequested,
        make_dict_unstructure_fn(TaskCommitRequested, converter, _cattrs_omit_if_default=converter.omit_if_default, documents=override(omit_if_default=True)),
    )
    converter.register_unstructure_hook(  # with issue 9's control (above) and issue 17's diagnostics
        ToolFinished,
        make_dict_unstructure_fn(ToolFinished, converter, _cattrs_omit_if_default=converter.omit_if_default,
            documents=override(omit_if_default=True),
            control=override(omit_if_default=True),
            diagnostics=override(omit_if_default=True),
        ),
    )
    # Tool diagnostics (issue 17): a raising tool's cut message and an on_abort
    # replacement's diagnostics; events without them keep their bytes.
    converter.register_unstructure_hook(
        ToolFailed, make_dict_unstructure_fn(ToolFailed, converter, _cattrs_omit_if_default=converter.omit_if_default, truncated=override(omit_if_default=True))
    )
    converter.register_unstructure_hook(
        ToolAbortHooked,
        make_dict_unstructure_fn(ToolAbortHooked, converter, _cattrs_omit_if_default=converter.omit_if_default, diagnostics=override(omit_if_default=True)),
    )
    converter.register_unstructure_hook(
        Opened,
        make_dict_unstructure_fn(Opened, converter, _cattrs_omit_if_default=converter.omit_if_default, extensions=override(omit_if_default=True), documents=override(omit_if_default=True),
            keep_settled=override(omit_if_default=True),  # issue 11: on-demand loading (core/holding.py)
        ),
    )

    configure_tagged_union(Event, converter, tag_generator=_tag, tag_name="type")
    configure_tagged_union(Write, converter, tag_generator=_tag, tag_name="type")
    configure_tagged_union(Effect, converter, tag_generator=_tag, tag_name="type")


def configure() -> None:
    """Configure both converters now, as their first use would (~0.26 s
    here): for a process that wants that cost at its start - a server before
    it takes requests, a benchmark before its timed span."""
    converter.configure_now()
    stored.configure_now()


#: The encoder of formats 1 and 2, and of every record a host is handed (API
#: output): every field written.
converter = LazyConverter(_configure, omit_if_default=False, forbid_extra_keys=False)
#: The store's encoder from format 3 on (issue 11: a lean store): fields at
#: their default are left out (decoding fills them in).
stored = LazyConverter(_configure, omit_if_default=True, forbid_extra_keys=False)


_EVENT_BY_TAG = {cl.TAG: cl for cl in EVENT_TYPES}  # type: ignore[attr-defined]


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def dumps(value: Any) -> str:
    """Compact, strict JSON (NaN/Infinity and non-JSON values are refused)."""
    return _encode(value)


def loads(text: str) -> Any:
    return json.loads(text)


def to_json(obj: Any, cl: type | None = None) -> str:
    """Encode a record as the store does (or a union member, with ``cl`` the union)."""
    return dumps(stored.unstructure(obj, unstructure_as=cl) if cl is not None else stored.unstructure(obj))


def from_json(text: str | bytes, cl: type[T]) -> T:
    return converter.structure(json.loads(text), cl)


#: Wire tags events had in older journals -> today's tag. Host requests the
#: core may refuse are named ``...Requested``; journals written under the
#: older names still replay.
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
    if tag == ModelResponded.TAG:
        data = _fill_prepared(data)
    return converter.structure(data, Event)  # type: ignore[arg-type]


def write_from_data(data: dict[str, Any]) -> Write:
    return converter.structure(data, Write)  # type: ignore[arg-type]


# --- writes: the row's record and the journal's object, one encoding ------------


@attrs.frozen(kw_only=True)
class WriteWire:
    """How one write class looks in the journal: ``head`` + each key field +
    the record field, derived from the class's ``TAG`` and attrs fields."""

    head: str  #: ``{"type":"pi.agent"``
    keys: tuple[tuple[str, str], ...]  #: (attribute, ``,"conversation_id":``), scalar ids
    record: str  #: the attribute holding the record (the last field)
    record_key: str  #: ``,"agent":``
    record_type: Any  #: the record's declared type (its converter's hook: :func:`encode_write`)


def _write_wire(cl: type) -> WriteWire:
    hints = get_type_hints(cl)
    *keys, record = attrs.fields(cl)
    for f in keys:
        # a key is spliced in with ``str``: only integer ids qualify
        if getattr(hints[f.name], "__supertype__", hints[f.name]) is not int:
            raise TypeError(f"{cl.__name__}.{f.name}: only the last field of a write may be a record")
    return WriteWire(
        head='{"type":' + dumps(_tag(cl)),
        keys=tuple((f.name, "," + dumps(f.name) + ":") for f in keys),
        record=record.name,
        record_key="," + dumps(record.name) + ":",
        record_type=hints[record.name],
    )


#: Which encoder wrote each journal format's events and writes (format 1:
#: writes as JSON, 2: their digest, both every field; 3: the lean encoder).
ENCODERS: dict[int, cattrs.Converter] = {1: converter, 2: converter, 3: stored, 4: stored}
#: How each write class looks in the journal (the same for every format).
WRITE_WIRE: dict[type, WriteWire] = {cl: _write_wire(cl) for cl in WRITE_TYPES}
#: Each (journal format, write class)'s hook for its record, once asked for.
_RECORD_HOOKS: dict[tuple[int, type], Callable[[Any], Any]] = {}


def encode_write(w: Write, fmt: int = FORMAT_VERSION) -> tuple[str, str]:
    """``(record, journal)``: the write's record as JSON (what its table row
    stores) and the write as the journal stores it, around the same text;
    ``fmt``: the journal format whose encoding to use."""
    wire = WRITE_WIRE[type(w)]
    hook = _RECORD_HOOKS.get((fmt, type(w)))
    if hook is None:
        hook = _RECORD_HOOKS[(fmt, type(w))] = ENCODERS[fmt].get_unstructure_hook(wire.record_type)
    record = _encode(hook(getattr(w, wire.record)))
    journal = wire.head
    for attr, key in wire.keys:
        journal += key + str(getattr(w, attr))
    return record, journal + wire.record_key + record + "}"


def journal_writes(pieces: Iterable[str]) -> str:
    """The journal's ``writes`` text: a commit's encoded writes as one array."""
    return "[" + ",".join(pieces) + "]"


def writes_digest(text: str) -> str:
    """What a journal row (format 2 on) stores for writes whose JSON is
    ``text``: ``b3:`` and a 96-bit BLAKE2b in unpadded base64url, 19
    characters (issue 11: a lean journal; rows written before keep ``b2:``
    and 128 bits in hex, 35 characters, and are checked as they are)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()
    # base64.urlsafe_b64encode, without its Python wrapper (12 bytes: no padding)
    return SHORT_DIGEST_PREFIX + binascii.b2a_base64(digest, newline=False).translate(_URLSAFE).decode("ascii")


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _long_digest(text: str) -> str:
    return DIGEST_PREFIX + hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def is_digest(kept: str) -> bool:
    """Does a journal row's ``writes`` hold a digest (format 2 on), not JSON?"""
    return kept.startswith((SHORT_DIGEST_PREFIX, DIGEST_PREFIX))


def writes_match(kept: str, text: str) -> bool:
    """Do writes whose JSON is ``text`` match a row's stored ``writes``
    (its JSON, format 1, or its digest of either length)?"""
    if kept.startswith(SHORT_DIGEST_PREFIX):
        return writes_digest(text) == kept
    if kept.startswith(DIGEST_PREFIX):
        return _long_digest(text) == kept
    return text == kept


def writes_json(writes: Sequence[Write], fmt: int = FORMAT_VERSION) -> str:
    """The journal text of ``writes`` as format ``fmt`` encodes it, byte for
    byte what a commit stored (or digested) - replay compares it."""
    return journal_writes(encode_write(w, fmt)[1] for w in writes)


def events_json(
    events: Sequence[Event],
    fmt: int = FORMAT_VERSION,
    hooks: Mapping[type, tuple[Callable[[Any], dict[str, Any]], str]] | None = None,
) -> str:
    """The journal's ``events`` text: the events behind a commit (the
    plain way, :data:`plain`, when ``fmt`` is ``stored``'s and the events
    hold plain data; the same text either way). ``hooks``: each event
    class's plain hook and wire tag (default :data:`PLAIN_EVENTS`;
    ``spelt.py`` passes one with spelt-out hooks)."""
    if ENCODERS[fmt] is stored:
        table = PLAIN_EVENTS if hooks is None else hooks
        datas = []
        for e in events:  # (what the tagged union's hook does, without its two calls per event)
            hook, tag = table[e.__class__]
            data = hook(e)
            data["type"] = tag
            datas.append(data)
        try:
            return "".join(plain_chunks(datas, 0))
        except (NotPlain, TypeError, ValueError, RecursionError):  # (plain_dumps' NotPlain, inline)
            pass
    return reference_events_json(events, fmt)


def reference_events_json(events: Sequence[Event], fmt: int = FORMAT_VERSION) -> str:
    """:func:`events_json` through the format's converter (what the plain
    way is checked against, tests/shell/test_codec_plain.py)."""
    conv = ENCODERS[fmt]
    return _encode([conv.unstructure(e, unstructure_as=Event) for e in events])


# --- the write path's plain encoding (issue 11 item 2: a cheap write path) ------
#
# ``stored``'s hooks copy what they encode: a checkpoint, a tool's arguments,
# a document's ops are walked value by value (``Any`` is unstructured by its
# runtime type), tuples become lists, and ``dumps`` then walks the copy
# again. For plain JSON data (dicts, lists, tuples, strings, ints, floats,
# bools, None, string enums) the copy is the value itself as far as JSON can
# tell, so :data:`plain` hands such fields to the encoder as they are, and
# :func:`plain_dumps` refuses anything else (an object JSON does not encode
# natively, a NaN, a non-string key, a cycle) with :class:`NotPlain`: the
# caller then encodes that value the reference way, which gives its text or
# the error it always gave. The texts are the same byte for byte
# (tests/shell/test_codec_plain.py checks it over generated records).


class NotPlain(Exception):
    """A value :func:`plain_dumps` does not take: encode it the reference
    way (``stored`` and :func:`dumps`)."""


#: Declared types whose ``stored`` hook, given plain data, returns what JSON
#: encodes to the same text as the value itself (scalars, ``Any``, string
#: and integer enums, and optional values, tuples, lists and string-keyed
#: dicts of them).
_PLAIN_SCALARS: frozenset[Any] = frozenset({str, int, float, bool, type(None), Any})


def _as_is(t: Any) -> bool:
    if t in _PLAIN_SCALARS:
        return True
    if hasattr(t, "__supertype__"):  # NewType
        return _as_is(t.__supertype__)
    if isinstance(t, type):
        return issubclass(t, enum.Enum) and issubclass(t, (str, int))
    origin, args = get_origin(t), get_args(t)
    if origin in (Union, types.UnionType):
        return all(_as_is(a) for a in args)
    if origin in (tuple, list) and args:
        return all(_as_is(a) for a in args if a is not Ellipsis)
    if origin is dict and len(args) == 2:
        return args[0] is str and _as_is(args[1])
    return False


#: ``stored``'s configuration (the same hooks, the same fields left out),
#: with the declared types :func:`_as_is` accepts handed over as they are.
plain = cattrs.Converter(omit_if_default=True, forbid_extra_keys=False)
plain.register_unstructure_hook_func(_as_is, identity)
_configure(plain)
#: Each event class's ``plain`` hook and wire tag: the union's hook without its calls
#: (an event of another class is a KeyError there too).
PLAIN_EVENTS: dict[type, tuple[Callable[[Any], dict[str, Any]], str]] = {
    cl: (plain.get_unstructure_hook(cl), _tag(cl)) for cl in EVENT_TYPES
}


def _refuse(value: Any) -> Any:
    raise NotPlain(f"{type(value).__name__} is not plain JSON data")


#: :func:`dumps`' encoder (compact, ``ensure_ascii=False``, ``allow_nan=False``)
#: made once, without the cycle check (a cycle ends in RecursionError, which
#: :func:`plain_dumps` turns into NotPlain; the reference way names it) and
#: without a ``default`` (:func:`_refuse`).
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # (not in typeshed)
#: ``(value, 0)`` -> the text's chunks (called by :func:`plain_dumps` and the
#: write path's encoders - rows.py, spelt.py - themselves: no Python call
#: between, issue 11 item 2).
plain_chunks: Callable[..., Iterable[str]]
if _c_make_encoder is not None:
    plain_chunks = _c_make_encoder(None, _refuse, encode_basestring, None, ":", ",", False, False, False)
else:  # pragma: no cover - a Python without the C accelerator
    plain_chunks = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False, default=_refuse
    ).iterencode  # (value, 0): not "one shot", the same chunks


def plain_dumps(value: Any) -> str:
    """:func:`dumps` of plain JSON data; :class:`NotPlain` for anything else."""
    try:
        return "".join(plain_chunks(value, 0))
    except (TypeError, ValueError, RecursionError) as e:
        raise NotPlain(f"{type(e).__name__}: {e}") from e


def plain_scalar(value: Any) -> str:
    """The JSON text of an int or string field spliced into a record's text
    (what ``dumps`` writes for it); NotPlain for any other type (a bool or an
    int subclass: the caller encodes the record the reference way)."""
    if type(value) is int:
        return int.__repr__(value)
    if isinstance(value, str):
        return encode_basestring(value)
    raise NotPlain(f"{type(value).__name__} is not an int or a string")
