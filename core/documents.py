"""Host-defined documents (``define_doc``): their revisions and lifetime.

Theory of operation
-------------------
A document is small JSON state at an *address* (scope, owner id, kind): a
conversation's (scope ``conversation``) or a task's (scope ``task``, retired
in the commit that makes the task terminal). The shell owns everything that
needs host code - the definition, its schema, the update function, the lazy
migration of an older stored version - and hands the core a resolved
:class:`~pidurable.core.state.DocumentChange`: the Chord ops (chord.py) from
the current value, computed on the reducer right before the event is
stepped, so they always apply to the value the core holds. The core applies
them, decides what revision to store, and writes it in the commit of the
event that carries the change:

- ``DocumentUpdateRequested`` - ``conv.update_document`` (its own commit);
- ``ToolFinished.documents`` - ``call.update_document``, staged by the tool
  and committed with its result entry (tools.py's ``(execute, finished)``);
- ``TaskCommitRequested.documents`` - ``runtime.update_document``, committed
  with the phase's next ``runtime.commit`` (custom.py).

What a change stores is decided by ``ROWS``, a table keyed by the document's
status and the change's input (:func:`classify`):

=========== ============= ======== ========================================
status      input         stores   why
=========== ============= ======== ========================================
absent      change        base     a new document starts with its value
live        change        delta    the ops only: O(delta)
live        checkpoint    base     ``BASE_EVERY`` deltas since the base
live        quiet         base     a built-in back at its initial value
                                   (builtins.py: smaller than a delta)
live        new_version   base     a lazily migrated value (version change)
live        nothing       -        no ops: nothing written
live        owner_ended   retire   its task became terminal
=========== ============= ======== ========================================

A change with no row (ops on an absent document that do not start it, a
version older than the stored one) is refused: a host request gets the
refusal, a tool's result carries the problem instead of the update. The
changes of one event are all applied or none (:func:`change_documents`).
Storage reclaims the revisions before a base of a ``latest`` document and
every revision of a retired task document; ``rewindable`` ones are kept.

Invariants: ``DocumentMatchesRevisions`` (the stored value is its revisions
replayed), ``ToolDocumentWithResult`` (a tool's update is in the commit of
its result).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from . import chord
from .effects import DocumentRevision, PutDocument, Refusal, RevisionAction
from .state import DocKey, DocScope, DocumentChange, DocumentState

if TYPE_CHECKING:  # the draft imports this module (task retirement)
    from .draft import Tx
    from .events import DocumentUpdateRequested

#: A base is stored after this many deltas (reads replay at most as many).
BASE_EVERY = 32


class DocStatus(enum.StrEnum):
    #: No live document at the address.
    ABSENT = "absent"
    #: A live document.
    LIVE = "live"


class DocInput(enum.StrEnum):
    """What a change (or its owner's end) is for the document."""

    #: Ops at the stored version.
    CHANGE = "change"
    #: Ops at the stored version, the deltas since the base at the limit.
    CHECKPOINT = "checkpoint"
    #: A built-in whose new value is its initial one (builtins.py ``quiet``).
    QUIET = "quiet"
    #: A value at a newer definition version (lazily migrated).
    NEW_VERSION = "new_version"
    #: No ops.
    NOTHING = "nothing"
    #: A version older than the stored one (the definition is too old).
    OLDER_VERSION = "older_version"
    #: The owning task became terminal.
    OWNER_ENDED = "owner_ended"


@attrs.frozen(kw_only=True)
class DocRow:
    #: The revision stored, or None (nothing written).
    action: RevisionAction | None
    next: DocStatus


_S, _I, _A = DocStatus, DocInput, RevisionAction

ROWS: Mapping[tuple[DocStatus, DocInput], DocRow] = {
    (_S.ABSENT, _I.CHANGE): DocRow(action=_A.BASE, next=_S.LIVE),
    (_S.LIVE, _I.CHANGE): DocRow(action=_A.DELTA, next=_S.LIVE),
    (_S.LIVE, _I.CHECKPOINT): DocRow(action=_A.BASE, next=_S.LIVE),
    (_S.LIVE, _I.QUIET): DocRow(action=_A.BASE, next=_S.LIVE),
    (_S.LIVE, _I.NEW_VERSION): DocRow(action=_A.BASE, next=_S.LIVE),
    (_S.LIVE, _I.NOTHING): DocRow(action=None, next=_S.LIVE),
    (_S.LIVE, _I.OWNER_ENDED): DocRow(action=_A.RETIRE, next=_S.ABSENT),
}


class DocumentProblem(Exception):
    """A change that cannot be applied (the message says why)."""


def classify(doc: DocumentState | None, change: DocumentChange) -> tuple[DocStatus, DocInput]:
    if doc is None:
        return _S.ABSENT, (_I.CHANGE if change.ops else _I.NOTHING)
    if change.version < doc.version:
        return _S.LIVE, _I.OLDER_VERSION
    if change.version > doc.version:
        return _S.LIVE, _I.NEW_VERSION
    if not change.ops:
        return _S.LIVE, _I.NOTHING
    return _S.LIVE, (_I.CHECKPOINT if doc.deltas + 1 >= BASE_EVERY else _I.CHANGE)


def _row(doc: DocumentState | None, change: DocumentChange) -> DocRow:
    status, move = classify(doc, change)
    row = ROWS.get((status, move))
    if row is not None:
        return row
    what = f"Document {change.kind!r} of {change.scope.value} {change.owner}"
    if move is _I.OLDER_VERSION:
        assert doc is not None
        raise DocumentProblem(
            f"{what} is stored at version {doc.version}, newer than the installed definition (version {change.version})"
        )
    raise DocumentProblem(f"{what} does not exist and the change does not start it")


@attrs.frozen(kw_only=True)
class _Planned:
    key: DocKey
    state: DocumentState | None
    revision: DocumentRevision | None


def _plan(
    tx: Tx, change: DocumentChange, doc: DocumentState | None, staged: PutDocument | None
) -> _Planned:
    """What ``change`` makes of ``doc`` (``staged``: this step's earlier
    revision of it, which the new one joins: one revision per commit)."""
    if change.scope is DocScope.CONVERSATION and change.owner not in tx.conversations:
        raise DocumentProblem(f"Conversation {change.owner} does not exist")
    if change.scope is DocScope.TASK and change.owner not in tx.tasks:
        raise DocumentProblem(f"Task {change.owner} is not live: its documents are retired")
    row = _row(doc, change)
    try:
        value = chord.apply(doc.value if doc is not None else None, change.ops)
    except chord.OpError as e:
        raise DocumentProblem(f"Document {change.kind!r}: {e}") from None
    if row.action is None:
        assert doc is not None
        return _Planned(key=change.key, state=doc, revision=None)
    action, ops, deltas = row.action, tuple(change.ops), 0
    if staged is not None and staged.revision.action is _A.BASE:
        action = _A.BASE  # joins this commit's base
    if action is _A.DELTA:
        deltas = (doc.deltas if doc is not None else 0) + 1
        if staged is not None and staged.revision.action is _A.DELTA:
            ops, deltas = staged.revision.ops + ops, deltas - 1
    state = DocumentState(
        id=doc.id if doc is not None else 0,
        scope=change.scope,
        owner=change.owner,
        kind=change.kind,
        version=change.version,
        history=change.history,
        fork=change.fork,
        value=value,
        deltas=deltas,
    )
    revision = DocumentRevision(
        scope=state.scope,
        owner=state.owner,
        kind=state.kind,
        version=state.version,
        history=state.history,
        fork=state.fork,
        action=action,
        value=value if action is _A.BASE else None,
        ops=ops if action is _A.DELTA else (),
    )
    return _Planned(key=change.key, state=state, revision=revision)


def change_documents(tx: Tx, changes: Iterable[DocumentChange]) -> None:
    """Apply every change, or none: raises :class:`DocumentProblem` (and
    writes nothing) if one cannot be applied."""
    seen: set[DocKey] = set()
    plans: list[_Planned] = []
    for change in changes:
        if change.key in seen:
            raise DocumentProblem(f"Document {change.kind!r} is changed twice in one update")
        seen.add(change.key)
        doc = tx.documents.get(change.key)
        staged = tx.document_write(doc.id) if doc is not None else None
        plans.append(_plan(tx, change, doc, staged))
    for plan in plans:
        state = plan.state
        if state is not None and state.id == 0:
            state = attrs.evolve(state, id=tx.alloc_id())
        write = None if plan.revision is None or state is None else PutDocument(document_id=state.id, revision=plan.revision)
        tx.put_document(plan.key, state, write)


def retire_task_documents(tx: Tx, task_id: int) -> None:
    """The task became terminal: its documents retire in the same commit."""
    for key, doc in list(tx.documents.items()):
        if key[0] is not DocScope.TASK or key[1] != task_id:
            continue
        row = ROWS[(_S.LIVE, _I.OWNER_ENDED)]
        assert row.action is _A.RETIRE and row.next is _S.ABSENT
        revision = DocumentRevision(
            scope=doc.scope,
            owner=doc.owner,
            kind=doc.kind,
            version=doc.version,
            history=doc.history,
            fork=doc.fork,
            action=row.action,
        )
        tx.put_document(key, None, PutDocument(document_id=doc.id, revision=revision))


def on_document_update_requested(tx: Tx, ev: DocumentUpdateRequested) -> None:
    """``conv.update_document``: one commit, answered with the document id."""
    try:
        change_documents(tx, (ev.change,))
    except DocumentProblem as e:
        tx.refuse(ev.ticket, Refusal.INVALID, str(e))
        return
    doc = tx.documents.get(ev.change.key)
    tx.respond(ev.ticket, doc.id if doc is not None else None)
