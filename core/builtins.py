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

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .record_makers import new_ConvState, new_DocumentRevision, new_PutDocument  # (X(...) without the type call's dict: issue 11 item 2)
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
from .typed_json import _typed, to_json, typed_ops
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
    State,
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


# typed value -> JSON, and the ops between two: typed_json.py

# --- revisions ----------------------------------------------------------------------------

# Enum members read once (a member read through its class is a descriptor
# call: revise runs on most steps).
_ABSENT, _LIVE = DocStatus.ABSENT, DocStatus.LIVE
_CHANGE, _QUIET, _CHECKPOINT = DocInput.CHANGE, DocInput.QUIET, DocInput.CHECKPOINT
_BASE, _DELTA, _RETIRE = RevisionAction.BASE, RevisionAction.DELTA, RevisionAction.RETIRE
_CONVERSATION = DocScope.CONVERSATION


# revise's actions: the ROWS it consults (each a row that stores a revision),
# read once (revise runs on most steps).
_ON_NEW, _ON_QUIET, _ON_CHECKPOINT, _ON_CHANGE = (
    ROWS[key].action for key in ((_ABSENT, _CHANGE), (_LIVE, _QUIET), (_LIVE, _CHECKPOINT), (_LIVE, _CHANGE))
)
assert all(a not in (None, _RETIRE) for a in (_ON_NEW, _ON_QUIET, _ON_CHECKPOINT, _ON_CHANGE))

#: Tests set this: a revision whose change the caller placed (``revise``'s
#: ``within``) or whose ops it found (``ops``) also diffs the whole values
#: and checks the ops are the same.
CHECK_WITHIN = False


def revise(
    tx: Tx, conv: ConvState, kind: str, new: Any, within: tuple[str | int, ...] = (), ops: list[Json] | None = None
) -> ConvState:
    """``conv`` with its built-in ``kind`` set to ``new`` (a changed value),
    its revision staged in ``tx`` - one revision per document per commit: a
    second change in the same step joins the first (``staged_write`` builds
    it once, at the step's end).

    ``within``: the path of the one part of the value that changed, when the
    caller knows it (a slot of ``pi.live.tools``, tool_results.move_slot):
    the ops are that part's diff at that path - what the whole value's diff
    comes to when nothing else changed (typed_ops follows the one changed
    field, and the one changed item of a tuple), without walking the rest.
    ``ops``: the delta's ops, when the caller found them from what it changed
    (answers.plus_one_ops: a usage counter)."""
    spec = BUILTINS[kind]
    cid = conv.conversation.id
    did = -(8 * cid + spec.number)  # builtin_id(cid, kind), inline: revise runs on most steps
    stored = conv.stored
    deltas = stored.get(kind)
    staged = tx.staged.get(did)
    if deltas is None:
        action = _ON_NEW
    elif spec.quiet and not (type(new) is Live and type(new.run) is RunInfo) and new == spec.initial:
        # (a pi.live with a run is not Live(): known without attrs's ``==``,
        # whose RunInfo == None is a Python call - issue 11 item 2)
        action = _ON_QUIET
    else:
        action = _ON_CHECKPOINT if deltas + 1 >= BASE_EVERY else _ON_CHANGE
    if staged is not None and staged[_ACTION] is _BASE:
        action = _BASE  # joins this commit's base
    if action is _DELTA:
        assert deltas is not None
        old = getattr(conv, spec.field)
        if ops is not None:
            out = ops
            if CHECK_WITHIN:
                assert out == typed_ops(old, new), f"{kind}: the ops found for a change are not its diff"
        elif within:
            out = []
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
            out = []
            _typed(old, new, [], out)  # typed_ops, without its call
        if staged is not None:  # a delta already: one revision, the ops of both (its count kept)
            staged[_OPS] += out
            return _with(conv, spec.field, new, stored)
        tx.stage(did, [kind, cid, _DELTA, out, None])
        return _with(conv, spec.field, new, {**stored, kind: deltas + 1})
    if staged is not None:
        staged[_ACTION], staged[_OPS], staged[_VALUE] = action, [], new
    else:
        tx.stage(did, [kind, cid, action, [], new])
    # (a count already 0 kept: the same mapping, not a copy)
    return _with(conv, spec.field, new, stored if deltas == 0 else {**stored, kind: 0})


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
