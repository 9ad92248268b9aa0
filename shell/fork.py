"""Forks in the shell: the host's arguments checked, the fork point read.

``conv.fork(at, documents)`` checks its arguments here (``fork_policies``)
and sends ``ForkRequested``. Right before the reducer steps it (``enrich``,
after every earlier commit is durable) :func:`read_point` reads what the
core decides on (core/fork.py): whether ``at`` is an entry the conversation
sees, the commit that stored it, the context range start there, and the
value as of that commit of each document the fork copies ``as_of`` - and of
``pi.agent``, which a fork always takes as of its fork point.

An ``as_of`` value is read along the parent chain: for an inherited entry
the conversation's own copy of a document is younger than the entry, so the
value is the ancestor's (the nearest conversation on the way up to the
entry's own whose document existed at that commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from pidurable.core.context import active_range, marker_head
from pidurable.core.fork import parent_documents, wants_as_of
from pidurable.core.fork_events import ForkPoint, ForkRequested, PointStatus
from pidurable.core.model import Conversation, ConversationId, Entry, EntryId, Submission, SubmissionId, Task, TaskId
from pidurable.core.state import AGENT_DOC, DocumentState, ForkPolicy, State

from .doc_types import DocDefinition
from .errors import InvalidInput
from .storage.base import Lineage, StorageError, builtin_value, sees

POLICIES = tuple(p.value for p in ForkPolicy)


class PointReads(Protocol):
    """The storage reads a fork point needs."""

    def entry(self, entry_id: int) -> Entry | None: ...

    def entry_seq(self, entry_id: int) -> int | None: ...

    def lineage(self, conversation_id: ConversationId) -> Lineage: ...

    def entries(self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None) -> list[Entry]: ...

    def conversation(self, conversation_id: ConversationId) -> Conversation | None: ...

    def task(self, task_id: TaskId) -> Task | None: ...

    def submission(self, submission_id: SubmissionId) -> Submission | None: ...

    def document_at(self, conversation_id: ConversationId, kind: str, seq: int) -> DocumentState | None: ...


def _policy(value: Any, what: str) -> ForkPolicy:
    if not isinstance(value, str) or value not in POLICIES:
        raise InvalidInput(f"{what} must be one of {', '.join(POLICIES)}, not {value!r}")
    return ForkPolicy(value)


def fork_policies(
    documents: Any, definition: Callable[[Any], DocDefinition], held: Callable[[str], bool]
) -> tuple[ForkPolicy | None, dict[str, ForkPolicy]]:
    """``documents`` as (blanket policy, per-kind policies): None (each
    document's own policy), one policy for all, or ``{doc or kind: policy}``
    naming installed definitions or documents the conversation holds."""
    if documents is None:
        return None, {}
    if isinstance(documents, str):
        return _policy(documents, "fork(documents=...)"), {}
    if not isinstance(documents, Mapping):
        raise InvalidInput(f"fork(documents=...) takes a policy or a dict of them, not {type(documents).__name__}")
    out: dict[str, ForkPolicy] = {}
    for key, value in documents.items():
        if isinstance(key, str) and held(key):
            kind = key
        else:
            kind = definition(key).kind  # InvalidInput for anything else
        out[kind] = _policy(value, f"fork(documents={{{kind!r}: ...}})")
    return None, out


def _status(storage: PointReads, cid: ConversationId, at: int) -> tuple[PointStatus, Entry | None]:
    entry = storage.entry(at)
    if entry is not None:
        return (PointStatus.VISIBLE if sees(storage.lineage(cid), entry) else PointStatus.NOT_VISIBLE), entry
    other = (
        storage.conversation(ConversationId(at)) or storage.task(TaskId(at)) or storage.submission(SubmissionId(at))
    )
    return (PointStatus.NOT_AN_ENTRY if other is not None else PointStatus.UNKNOWN), None


def _as_of(storage: PointReads, segments: Lineage, kind: str, seq: int) -> DocumentState | None:
    """``kind`` as of commit ``seq``: the first conversation on the way up
    (to the entry's own) whose document existed then."""
    for cid, _ in segments:
        try:
            found = storage.document_at(cid, kind, seq)
        except StorageError:
            found = None  # its past is reclaimed (history 'latest'): nothing to copy
        if found is not None:
            return found
    return None


def read_point(event: ForkRequested, state: State, storage: PointReads) -> ForkRequested:
    """``event`` with its fork point (see the module comment)."""
    cid = event.conversation_id
    if cid not in state.conversations:
        return attrs.evolve(event, point=ForkPoint(status=PointStatus.UNKNOWN))  # the core refuses: not found
    status, entry = _status(storage, cid, event.at)
    if status is not PointStatus.VISIBLE or entry is None:
        return attrs.evolve(event, point=ForkPoint(status=status))
    seq = storage.entry_seq(entry.id) or 0
    marker, _ = active_range(storage.entries(cid, upto=entry.id))
    segments = storage.lineage(cid)
    up_to_owner = segments[: next(i for i, (c, _) in enumerate(segments) if c == entry.conversation_id) + 1]
    as_of = []
    for doc in parent_documents(state.documents, cid):
        if wants_as_of(doc, event.policy, event.policies):
            found = _as_of(storage, up_to_owner, doc.kind, seq)
            if found is not None:
                as_of.append(found)
    agent = _as_of(storage, up_to_owner, AGENT_DOC, seq)  # pi.agent is as_of (core/builtins.py)
    point = ForkPoint(
        status=status,
        seq=seq,
        head=None if marker is None else EntryId(marker_head(marker)),
        as_of=tuple(as_of),
        agent=None if agent is None else builtin_value(agent),
    )
    return attrs.evolve(event, point=point)
