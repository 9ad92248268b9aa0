"""The built-in documents - ``pi.agent``, ``pi.live``, ``pi.inbox``,
``pi.usage``, ``pi.context`` - stored through the document machinery.

Theory of operation
-------------------
The core decides on a conversation's built-ins as typed values
(:class:`~pidurable.core.state.ConvState`'s ``agent``, ``live``, ``inbox``,
``usage``, ``context``); storage keeps them exactly as it keeps a host's
``define_doc`` documents (documents.py): a ``document_records`` row and
revisions, a *base* (the whole value) or a *delta* (the Chord ops of one
commit, chord.py), so a change costs O(delta): a usage counter that grows is
one ``s`` op, a streamed partial answer one string append. Each revision is
decided by documents.py's ``ROWS`` (:func:`revise`), with the kind's own
settings from ``BUILTINS``:

============= ========== ======== ===== ==========================================
kind          history    fork     quiet a base besides the rows' (absent, every
                                        ``BASE_EVERY`` deltas)
============= ========== ======== ===== ==========================================
``pi.agent``  rewindable as_of    no    - (created with its conversation)
``pi.live``   latest     initial  yes   the conversation is idle again (``{}``)
``pi.inbox``  latest     initial  yes   the inbox is empty again (``[]``)
``pi.usage``  latest     initial  no    -
``pi.context`` latest    initial  no    -
============= ========== ======== ===== ==========================================

A *quiet* kind stores a base whenever its value is back at the initial one:
that base is smaller than a delta, and - the history being ``latest`` - it
lets storage reclaim every revision before it, so an idle conversation's
``pi.live`` is one tiny row however long it streamed. ``pi.agent`` is
``rewindable``: every revision is kept, so a fork takes the agent as of its
fork point (fork.py) and ``document_at`` reads any past configuration.

Ids: a built-in's incarnation id is derived from its conversation,
``-(8 * conversation + n)`` (``n`` its row's number), never taken from the id
counter: built-ins are never retired (one incarnation per conversation), and
journals written before them replay with the same ids.

Values: the JSON of a built-in is its typed value with fields at their
default left out (:func:`to_json`; the same shape as the codec's store
encoder, so the shell reads it back with the codec). A conversation's
``ConvState.stored`` says which built-ins are stored and how many deltas
follow their newest base (what decides the next revision); a kind not in it
is not stored and reads as its initial value.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from itertools import compress
from operator import is_not
from typing import TYPE_CHECKING, Any

import attrs

from .record_makers import new_ConvState, new_DocumentRevision, new_PutDocument  # (X(...) without the type call's dict: issue 11 item 2)
from . import chord
from .documents import BASE_EVERY, ROWS, DocInput, DocStatus
from .effects import (
    DocumentRevision,
    PutAgent,
    PutContext,
    PutConversation,
    PutDocument,
    PutInbox,
    PutLive,
    PutUsage,
    RevisionAction,
    Write,
)
from .model import AgentConfig, ConversationId, Json
from .records import spelt_out
from .state import (
    AGENT_DOC,
    CONTEXT_DOC,
    INBOX_DOC,
    LIVE_DOC,
    USAGE_DOC,
    ContextDoc,
    ConvState,
    DocHistory,
    DocScope,
    ForkPolicy,
    Live,
    RunInfo,
    SlotStatus,
    State,
    ToolSlot,
    UsageDoc,
)

if TYPE_CHECKING:
    from .draft import Tx

#: Every built-in is at version 1.
VERSION = 1


@attrs.frozen(kw_only=True)
class Builtin:
    """One built-in kind's settings (a row of ``BUILTINS``)."""

    #: Its number in the derived id (1..7).
    number: int
    #: The ``ConvState`` field holding its typed value.
    field: str
    history: DocHistory
    fork: ForkPolicy
    #: The value of a conversation that has not stored it.
    initial: Any
    #: A base whenever the value is back at ``initial`` (see the module comment).
    quiet: bool
    #: Stored (a base) when its conversation is created, even at ``initial``.
    with_conversation: bool


_H, _F = DocHistory, ForkPolicy

BUILTINS: Mapping[str, Builtin] = {
    AGENT_DOC: Builtin(number=1, field="agent", history=_H.REWINDABLE, fork=_F.AS_OF, initial=AgentConfig(),
                       quiet=False, with_conversation=True),
    LIVE_DOC: Builtin(number=2, field="live", history=_H.LATEST, fork=_F.INITIAL, initial=Live(),
                      quiet=True, with_conversation=False),
    INBOX_DOC: Builtin(number=3, field="inbox", history=_H.LATEST, fork=_F.INITIAL, initial=(),
                       quiet=True, with_conversation=False),
    USAGE_DOC: Builtin(number=4, field="usage", history=_H.LATEST, fork=_F.INITIAL, initial=UsageDoc(),
                       quiet=False, with_conversation=False),
    CONTEXT_DOC: Builtin(number=5, field="context", history=_H.LATEST, fork=_F.INITIAL, initial=ContextDoc(),
                         quiet=False, with_conversation=False),
}
assert len({b.number for b in BUILTINS.values()}) == len(BUILTINS) and all(0 < b.number < 8 for b in BUILTINS.values())
_BY_NUMBER = {b.number: kind for kind, b in BUILTINS.items()}


def builtin_id(cid: ConversationId | int, kind: str) -> int:
    """The incarnation id of conversation ``cid``'s built-in ``kind``."""
    return -(8 * int(cid) + BUILTINS[kind].number)


def builtin_address(document_id: int) -> tuple[ConversationId, str] | None:
    """The (conversation, kind) a built-in's id names; None for any other id."""
    if document_id >= 0:
        return None
    cid, number = divmod(-document_id, 8)
    kind = _BY_NUMBER.get(number)
    return (ConversationId(cid), kind) if kind is not None and cid > 0 else None


# --- typed value -> JSON ------------------------------------------------------------------

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
        out = list(map(to_json, value))
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
assert [d for _, d in _fields(ToolSlot)][2:] == [None, _PENDING, None, None, None]


def _slot_json(s: ToolSlot) -> dict[str, Json]:
    """``to_json``'s record case for a slot, every field spelt out: the same
    dict (fields in order, those at their default left out; a plain value as
    is, another through to_json), without the loop over the fields - a round
    converts each of its new slots (issue 11 item 2: about half the
    instructions)."""
    v: Any = s.call_id  # (call_id and name have no default: always there)
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
    fields = None
    if type(old) is t:
        fields = _SHAPES[t] if t in _SHAPES else _shape(t)
    if fields is not None:  # chord's order: the deleted keys, then the new value's keys in order
        later = None  # the ops of the fields set: after every deletion
        # only the fields that are not the same object are looked at (a
        # change keeps the rest); a value is == None only if it is None (so
        # no ``==`` with a None default: a record's is a Python call)
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
            kb = _KINDS.get(type(b))
            if a is default or (default is not None and a == default):
                later.append(["s", [*path, name], b if kb is _AS_IS else b._value_ if kb is _ENUM else to_json(b)])
            elif kb is _AS_IS or kb is _ENUM:  # a status, a number, a string: chord.diff_scalar's ops
                ka = _KINDS.get(type(a))  # (both as JSON without a call: to_json's first two cases)
                ja = a if ka is _AS_IS else a._value_ if ka is _ENUM else to_json(a)
                jb = b if kb is _AS_IS else b._value_
                if type(ja) is not str or type(jb) is not str:  # not an edit: set, unless the same
                    if not (ja is jb or (type(ja) is type(jb) and ja == jb)):
                        later.append(["s", [*path, name], jb])
                elif ka is _ENUM and kb is _ENUM:  # one status to another: its ops found once
                    edits = _EDITS.get((ja, jb))
                    if edits is None:
                        edits = _edits(ja, jb)
                    at = [*path, name]
                    for verb, arg in edits:
                        later.append([verb, at, arg])
                else:
                    chord.diff_scalar(ja, jb, [*path, name], later)
            else:
                _typed(a, b, [*path, name], later)
        if later is not None:
            out += later
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


# --- revisions ----------------------------------------------------------------------------

# Enum members read once (a member read through its class is a descriptor
# call: revise runs on most steps).
_ABSENT, _LIVE = DocStatus.ABSENT, DocStatus.LIVE
_CHANGE, _QUIET, _CHECKPOINT = DocInput.CHANGE, DocInput.QUIET, DocInput.CHECKPOINT
_BASE, _DELTA, _RETIRE = RevisionAction.BASE, RevisionAction.DELTA, RevisionAction.RETIRE
_CONVERSATION = DocScope.CONVERSATION


# revise looks its action up in ROWS under one of these keys: each is a row
# that stores a revision.
assert all(ROWS[key].action not in (None, _RETIRE) for key in ((_ABSENT, _CHANGE), (_LIVE, _QUIET), (_LIVE, _CHECKPOINT), (_LIVE, _CHANGE)))

#: Tests set this: a revision whose change the caller placed (``revise``'s
#: ``within``) also diffs the whole values and checks the ops are the same.
CHECK_WITHIN = False


def revise(tx: Tx, conv: ConvState, kind: str, new: Any, within: tuple[str | int, ...] = ()) -> ConvState:
    """``conv`` with its built-in ``kind`` set to ``new`` (a changed value),
    its revision staged in ``tx`` - one revision per document per commit: a
    second change in the same step joins the first (``staged_write`` builds
    it once, at the step's end).

    ``within``: the path of the one part of the value that changed, when the
    caller knows it (a slot of ``pi.live.tools``, tool_results.move_slot):
    the ops are that part's diff at that path - what the whole value's diff
    comes to when nothing else changed (typed_ops follows the one changed
    field, and the one changed item of a tuple), without walking the rest."""
    spec = BUILTINS[kind]
    cid = conv.conversation.id
    did = -(8 * cid + spec.number)  # builtin_id(cid, kind), inline: revise runs on most steps
    deltas = conv.stored.get(kind)
    staged = tx.staged.get(did)
    if deltas is None:
        action = ROWS[(_ABSENT, _CHANGE)].action
    elif spec.quiet and not (type(new) is Live and type(new.run) is RunInfo) and new == spec.initial:
        # (a pi.live with a run is not Live(): known without attrs's ``==``,
        # whose RunInfo == None is a Python call - issue 11 item 2)
        action = ROWS[(_LIVE, _QUIET)].action
    else:
        action = ROWS[(_LIVE, _CHECKPOINT if deltas + 1 >= BASE_EVERY else _CHANGE)].action
    assert action is not None  # (checked above for these keys)
    if staged is not None and staged[_ACTION] is _BASE:
        action = _BASE  # joins this commit's base
    if action is _DELTA:
        assert deltas is not None
        old = getattr(conv, spec.field)
        out: list[Json] = []
        if within:
            a, b = old, new  # _part of both, in one walk
            for step in within:
                if isinstance(step, int):
                    a, b = a[step], b[step]
                else:
                    a, b = getattr(a, step), getattr(b, step)
            _typed(a, b, list(within), out)
            if CHECK_WITHIN:
                assert out == typed_ops(old, new), f"{kind}: a change said to be within {within} is not"
        else:
            _typed(old, new, [], out)  # typed_ops, without its call
        if staged is not None:  # a delta already: one revision, the ops of both
            staged[_OPS] += out
        else:
            deltas += 1
            tx.stage(did, [kind, cid, _DELTA, out, None])
    else:
        deltas = 0
        if staged is not None:
            staged[_ACTION], staged[_OPS], staged[_VALUE] = action, [], new
        else:
            tx.stage(did, [kind, cid, action, [], new])
    return _with(conv, spec.field, new, {**conv.stored, kind: deltas})


#: A staged revision (``Tx.staged``; a list, filled in place as changes join
#: it - a record rebuilt per join cost the last ToolFinished of a round three
#: revisions for one write, issue 11 item 2): [kind, conversation, action,
#: ops (a list), value (the newest typed value: a base's)].
_KIND, _OWNER, _ACTION, _OPS, _VALUE = range(5)


def staged_write(document_id: int, staged: list[Any]) -> PutDocument:
    """The write of a staged revision (what ``Tx.finish`` commits)."""
    kind, owner, action, ops, value = staged
    spec = BUILTINS[kind]
    revision = new_DocumentRevision(
        scope=_CONVERSATION, owner=owner, kind=kind, version=VERSION, history=spec.history, fork=spec.fork,
        action=action, value=to_json(value) if action is _BASE else None, ops=tuple(ops),
    )
    return new_PutDocument(document_id=document_id, revision=revision)


#: ConvState's fields, as ``_with`` spells them out (checked here: a field
#: added to ConvState must be added there, or it would be dropped).
_CONV_FIELDS = ("conversation", "agent", "live", "inbox", "usage", "context", "stored")
spelt_out(ConvState, _CONV_FIELDS)
assert {spec.field for spec in BUILTINS.values()} <= set(_CONV_FIELDS[1:-1])


def _with(conv: ConvState, field: str, value: Any, stored: Mapping[str, int]) -> ConvState:
    """``conv`` with the built-in ``field`` set to ``value`` and ``stored``:
    what ``evolve(conv, **{field: value, "stored": stored})`` makes, with
    every field spelt out (a revision is made on most steps, and evolve's
    dict of every field costs about half as much as the copy itself)."""
    if field == "live":  # most revisions: no test per field
        return new_ConvState(
            conversation=conv.conversation,
            agent=conv.agent,
            live=value,
            inbox=conv.inbox,
            usage=conv.usage,
            context=conv.context,
            stored=stored,
        )
    return new_ConvState(
        conversation=conv.conversation,
        agent=value if field == "agent" else conv.agent,
        live=value if field == "live" else conv.live,
        inbox=value if field == "inbox" else conv.inbox,
        usage=value if field == "usage" else conv.usage,
        context=value if field == "context" else conv.context,
        stored=stored,
    )


def base_revision(cid: ConversationId | int, kind: str, value: Any) -> tuple[int, DocumentRevision]:
    """A base revision of conversation ``cid``'s built-in ``kind`` holding the
    typed ``value``, and its document id (what storage makes of a whole-value
    write of journal formats 1-3, and of schema 4's ``documents`` rows)."""
    spec = BUILTINS[kind]
    revision = new_DocumentRevision(
        scope=DocScope.CONVERSATION, owner=int(cid), kind=kind, version=VERSION, history=spec.history,
        fork=spec.fork, action=RevisionAction.BASE, value=to_json(value),
    )
    return builtin_id(cid, kind), revision


def created(tx: Tx, conv: ConvState) -> ConvState:
    """A new conversation's built-ins: a base of each one created with it
    (``pi.agent``) or not at its initial value, staged in ``tx``."""
    for kind, spec in BUILTINS.items():
        value = getattr(conv, spec.field)
        if spec.with_conversation or value != spec.initial:
            conv = revise(tx, conv, kind, value)
    return conv


# --- the whole-value writes of journal formats 1-3 ------------------------------------------

_LEGACY_AT_CREATION = (AGENT_DOC, LIVE_DOC, INBOX_DOC)


def legacy_write(kind: str, conv: ConvState) -> Write:
    """The whole-value write formats 1-3 journaled for ``conv``'s ``kind``."""
    cid = conv.id
    if kind == AGENT_DOC:
        return PutAgent(conversation_id=cid, agent=conv.agent)
    if kind == LIVE_DOC:
        return PutLive(conversation_id=cid, live=conv.live)
    if kind == INBOX_DOC:
        return PutInbox(conversation_id=cid, items=conv.inbox)
    if kind == USAGE_DOC:
        return PutUsage(conversation_id=cid, usage=conv.usage)
    assert kind == CONTEXT_DOC
    return PutContext(conversation_id=cid, context=conv.context)


def legacy_writes(writes: Iterable[Write], state: State) -> list[Write]:
    """A commit's writes as journal formats 1-3 had them (what replay
    compares an older row with; ``state``: the state after the step): each
    built-in revision is the built-in's whole value, and a new conversation
    is followed by its agent, live state and inbox (written then whatever
    they held), each in the place it was first written in that step."""
    out: list[Write] = []
    placed: set[tuple[int, str]] = set()

    def put(cid: int, kind: str) -> None:
        conv = state.conversations.get(ConversationId(cid))
        if (cid, kind) not in placed and conv is not None:
            placed.add((cid, kind))
            out.append(legacy_write(kind, conv))

    for w in writes:
        if isinstance(w, PutDocument) and (address := builtin_address(w.document_id)) is not None:
            put(address[0], address[1])
            continue
        out.append(w)
        if isinstance(w, PutConversation):
            for kind in _LEGACY_AT_CREATION:
                put(w.conversation.id, kind)
    return out


__all__ = [
    "BUILTINS",
    "VERSION",
    "Builtin",
    "base_revision",
    "builtin_address",
    "builtin_id",
    "created",
    "legacy_write",
    "legacy_writes",
    "revise",
    "to_json",
    "typed_ops",
]
