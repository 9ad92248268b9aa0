"""Forks: a new conversation that continues another one from one of its entries.

Theory of operation
-------------------
``conv.fork(at=entry, documents=...)`` is one commit (``ForkRequested``). The
fork is a new conversation whose record names its parent and the fork point
(``Conversation.parent_id`` / ``fork_at``); its transcript is the parent's
visible entries up to and including ``at`` - read through the parent by
storage, never copied - then its own. Forks of forks chain: a conversation
sees its parent's entries up to its fork point, which include the
grandparent's up to the parent's fork point, and so on.

What the core cannot see (the entry, its commit, the documents' history) the
shell reads right before the step and hands over as the event's
:class:`~pidurable.core.fork_events.ForkPoint`. Two tables decide:

``POINTS`` - whether the id is a place to fork at:

============= ======== ==============================================
point         verdict  why
============= ======== ==============================================
visible       fork     an entry the conversation sees
not_visible   refuse   another conversation's entry, or past a fork point
not_an_entry  refuse   a task, a submission, a conversation id
unknown       refuse   no record has that id (a future id)
============= ======== ==============================================

``DOCUMENTS`` - what the fork gets of each of the parent's documents, by the
policy in force (the request's per-kind one, else its blanket one, else the
document's stored ``fork``) and the document's history:

========== ========== ========= ===========================================
policy     history    action    the fork's document
========== ========== ========= ===========================================
as_of      rewindable as_of     the value as of ``at``'s commit (if it existed)
as_of      latest     refuse    no past value is kept: the fork is refused
current    any        current   the parent's value now
initial    any        skip      none: the definition's initial value on use
========== ========== ========= ===========================================

A copy is a new document (a new id, a base revision: documents.py's
``(absent, change)`` row) at the stored version (migrated lazily like any).

The built-in documents (builtins.py, their own policies whatever the
request's): ``pi.agent`` is the parent's as of ``at``'s commit (``as_of``;
the shell reads it into ``ForkPoint.agent``; a store migrated after that
commit has no revision that old, and the fork keeps the current one); ``pi.live``,
``pi.inbox`` and ``pi.usage`` start empty (usage at zero: spend is never
counted twice); ``pi.context`` starts at the range start the parent had at
``at`` (its shown system state is not copied: the fork's first request
records a complete baseline, as after a head marker). Tasks are never copied.
There is no provider session id in this code base to refresh.

Invariant: ``ForkSeesParentUpToItsPoint`` (specs/fork.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .documents import DocumentProblem, change_documents
from .draft import Tx
from .effects import Refusal
from .fork_events import ForkRequested, PointStatus
from .model import Conversation, ConversationId, CoreInvariantError
from .state import ContextDoc, ConvState, DocHistory, DocKey, DocScope, DocumentChange, DocumentState, ForkPolicy


class Verdict(enum.StrEnum):
    #: Create the fork.
    FORK = "fork"
    #: Refuse the request (``InvalidInput``); nothing is written.
    REFUSE = "refuse"


#: (verdict, the refusal's message given the id).
POINTS: Mapping[PointStatus, tuple[Verdict, str]] = {
    PointStatus.VISIBLE: (Verdict.FORK, ""),
    PointStatus.NOT_VISIBLE: (Verdict.REFUSE, "entry {at} is not in this conversation's transcript"),
    PointStatus.NOT_AN_ENTRY: (Verdict.REFUSE, "id {at} is not an entry"),
    PointStatus.UNKNOWN: (Verdict.REFUSE, "no entry has id {at}"),
}


class DocAction(enum.StrEnum):
    """What a fork does with one of the parent's documents."""

    #: Copy the value as of the fork point's commit.
    AS_OF = "as_of"
    #: Copy the current value.
    CURRENT = "current"
    #: Copy nothing.
    SKIP = "skip"
    #: Refuse the fork.
    REFUSE = "refuse"


_P, _H, _D = ForkPolicy, DocHistory, DocAction

DOCUMENTS: Mapping[tuple[ForkPolicy, DocHistory], DocAction] = {
    (_P.AS_OF, _H.REWINDABLE): _D.AS_OF,
    (_P.AS_OF, _H.LATEST): _D.REFUSE,
    (_P.CURRENT, _H.REWINDABLE): _D.CURRENT,
    (_P.CURRENT, _H.LATEST): _D.CURRENT,
    (_P.INITIAL, _H.REWINDABLE): _D.SKIP,
    (_P.INITIAL, _H.LATEST): _D.SKIP,
}


def policy_for(doc: DocumentState, policy: ForkPolicy | None, policies: Mapping[str, ForkPolicy]) -> ForkPolicy:
    """The policy in force for ``doc``: per kind, else blanket, else its own."""
    return policies.get(doc.kind) or policy or doc.fork


def parent_documents(documents: Mapping[DocKey, DocumentState], cid: ConversationId) -> list[DocumentState]:
    """The conversation's live documents, in address order."""
    found = [d for d in documents.values() if d.scope is DocScope.CONVERSATION and d.owner == cid]
    return sorted(found, key=lambda d: d.kind)


def wants_as_of(doc: DocumentState, policy: ForkPolicy | None, policies: Mapping[str, ForkPolicy]) -> bool:
    """Does the fork need ``doc``'s value as of the fork point (the shell reads it)?"""
    return DOCUMENTS[(policy_for(doc, policy, policies), doc.history)] is DocAction.AS_OF


def _copies(tx: Tx, ev: ForkRequested, fork_id: ConversationId) -> list[DocumentChange]:
    """The fork's documents (raises DocumentProblem: the fork is refused)."""
    assert ev.point is not None
    past = {d.kind: d for d in ev.point.as_of}
    out = []
    for doc in parent_documents(tx.documents, ev.conversation_id):
        action = DOCUMENTS[(policy_for(doc, ev.policy, ev.policies), doc.history)]
        if action is DocAction.REFUSE:
            raise DocumentProblem(
                f"document {doc.kind!r} keeps only its latest value (history='latest'): it cannot be forked "
                "'as_of'; fork it 'current' or 'initial' (documents={kind: policy})"
            )
        source = past.get(doc.kind) if action is DocAction.AS_OF else doc if action is DocAction.CURRENT else None
        if source is None:
            continue  # skipped, or it did not exist at the fork point
        out.append(
            DocumentChange(
                scope=DocScope.CONVERSATION,
                owner=fork_id,
                kind=doc.kind,
                version=source.version,
                history=doc.history,
                fork=doc.fork,
                ops=(["r", source.value],),
            )
        )
    return out


def on_fork_requested(tx: Tx, ev: ForkRequested) -> None:
    """One commit: the fork's record, its built-in documents, its copies."""
    parent = tx.conversations.get(ev.conversation_id)
    if parent is None:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    if ev.point is None:
        raise CoreInvariantError("ForkRequested stepped before the shell read its fork point")
    verdict, message = POINTS[ev.point.status]
    if verdict is Verdict.REFUSE:
        tx.refuse(ev.ticket, Refusal.INVALID, f"Cannot fork conversation {ev.conversation_id} at {ev.at}: " + message.format(at=ev.at))
        return
    fork_id = ConversationId(tx.next_id)  # allocated below, after the checks
    try:
        copies = _copies(tx, ev, fork_id)
    except DocumentProblem as e:
        tx.refuse(ev.ticket, Refusal.INVALID, f"Cannot fork conversation {ev.conversation_id}: {e}")
        return
    assert tx.alloc_id() == fork_id
    record = Conversation(id=fork_id, parent_id=parent.id, fork_at=ev.at)
    agent = ev.point.agent if ev.point.agent is not None else parent.agent  # pi.agent is as_of (builtins.py)
    tx.put_conversation(ConvState(conversation=record, agent=agent))
    tx.set_context(fork_id, ContextDoc(head=ev.point.head))
    change_documents(tx, copies)  # new documents: (absent, change) -> base
    tx.respond(ev.ticket, fork_id)


__all__ = ["DOCUMENTS", "POINTS", "DocAction", "Verdict", "on_fork_requested", "policy_for", "wants_as_of"]
