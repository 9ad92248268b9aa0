"""A storage-like view of the twin's store model (the last write of every
record, plus the journal of the path), so the checkers of
tests/invariants.py run on it unchanged, and the ``Opened`` a new process
builds from such a store (as tests/core/helpers.py's ``Store.opened``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pidurable.core.events import Opened
from pidurable.core.model import Conversation, ConversationId, Entry, EntryKind, Submission, Task, TaskStatus, ToolInfo
from pidurable.core.builtins import BUILTINS, builtin_id
from pidurable.core.chord import apply as apply_ops
from pidurable.core.effects import DocumentRevision, RevisionAction
from pidurable.core.state import ConvState, DocHistory, DocScope, DocumentState
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import DOC_TYPES, JournalRow

Records = Mapping[tuple[str, int], Any]


def _of(records: Records, tag: str, field: str) -> list[Any]:
    return [getattr(w, field) for (k, _), w in sorted(records.items()) if k == tag]


#: A built-in document as the store model keeps it (core/builtins.py): its
#: value, the deltas since its base, and (rewindable) its value per commit.
Builtin = tuple[Any, int, tuple[tuple[int, Any], ...]]


def revised(old: Builtin | None, seq: int, r: DocumentRevision) -> Builtin:
    """A built-in after the revision ``r`` of commit ``seq``."""
    if r.action is RevisionAction.BASE:
        value, deltas = r.value, 0
    else:
        assert old is not None, "a delta with no base before it"
        value, deltas = apply_ops(old[0], r.ops), old[1] + 1
    past = old[2] if old is not None else ()
    return value, deltas, (past + ((seq, value),) if r.history is DocHistory.REWINDABLE else ())


def _builtin(records: Records, cid: int, kind: str) -> Builtin | None:
    return records.get(("builtin", builtin_id(cid, kind)))  # type: ignore[no-any-return]


def conversations(records: Records) -> list[ConvState]:
    out = []
    for c in _of(records, "conversation", "conversation"):
        values, stored = {}, {}
        for kind, spec in BUILTINS.items():
            found = _builtin(records, c.id, kind)
            if found is not None:
                values[spec.field] = codec.converter.structure(found[0], DOC_TYPES[kind])
                stored[kind] = found[1]
        out.append(ConvState(conversation=c, **values, stored=stored))
    return out


def opened_from(records: Records, *, next_id: int, next_seq: int, now: int, catalog: Sequence[ToolInfo]) -> Opened:
    """The ``Opened`` event of a new process on this store: its live tasks
    and unsettled submissions, the counters, this life's catalog."""
    return Opened(
        now=now,
        next_id=next_id,
        next_seq=next_seq,
        conversations=tuple(conversations(records)),
        tasks=tuple(t for t in _of(records, "task", "task") if t.status is not TaskStatus.TERMINAL),
        submissions=tuple(s for s in _of(records, "submission", "submission") if not s.settled),
        catalog=tuple(catalog),
    )


class StoreView:
    """What the invariant checkers read of a storage adapter."""

    def __init__(self, records: Records, journal: Sequence[JournalRow]) -> None:
        self.records = records
        self._journal = list(journal)

    def journal(self) -> list[JournalRow]:
        return self._journal

    def tasks(self, live_only: bool = False) -> list[Task]:
        return [t for t in _of(self.records, "task", "task") if not live_only or t.status is not TaskStatus.TERMINAL]

    def submissions(self) -> list[Submission]:
        return _of(self.records, "submission", "submission")

    def conversations(self) -> list[Conversation]:
        return _of(self.records, "conversation", "conversation")

    def entries(self, conversation_id: int, upto: int | None = None) -> list[Entry]:
        return [e for e in _of(self.records, "entry", "entry")
                if e.conversation_id == conversation_id and (upto is None or e.id <= upto)]

    def document(self, conversation_id: int, kind: str) -> Any:
        found = _builtin(self.records, conversation_id, kind)
        return BUILTINS[kind].initial if found is None else codec.converter.structure(found[0], DOC_TYPES[kind])

    def _state(self, cid: int, kind: str, value: Any, deltas: int) -> DocumentState:
        spec = BUILTINS[kind]
        return DocumentState(id=builtin_id(cid, kind), scope=DocScope.CONVERSATION, owner=cid, kind=kind, version=1,
                             history=spec.history, fork=spec.fork, value=value, deltas=deltas)

    def document_state(self, scope: DocScope, owner: int, kind: str) -> DocumentState | None:
        """A built-in (no host-defined documents at the twin's bounds)."""
        found = _builtin(self.records, owner, kind) if kind in BUILTINS else None
        return None if found is None else self._state(owner, kind, found[0], found[1])

    def document_at(self, conversation_id: int, kind: str, seq: int) -> DocumentState | None:
        found = _builtin(self.records, conversation_id, kind)
        past = [v for s, v in (found[2] if found is not None else ()) if s <= seq]
        return self._state(conversation_id, kind, past[-1], 0) if past else None

    def check_results_so_far(self) -> None:
        """OneResultPerCall in every state: a call has at most one result,
        after it, and none for a call not stored (exactly one once its task
        ends is checked at quiescence)."""
        calls: dict[str, int] = {}
        seen: set[str] = set()
        for e in sorted(_of(self.records, "entry", "entry"), key=lambda e: e.id):
            if e.kind == EntryKind.ASSISTANT:
                for c in e.tool_calls:
                    assert c.id not in calls, f"OneResultPerCall: call id {c.id} appears twice"
                    calls[c.id] = e.id
            elif e.kind == EntryKind.TOOL_RESULT:
                assert e.tool_call_id in calls, f"OneResultPerCall: result {e.id} answers unknown call {e.tool_call_id}"
                assert e.tool_call_id not in seen, f"OneResultPerCall: call {e.tool_call_id} has two results"
                seen.add(e.tool_call_id)
        for t in self.tasks():
            if t.kind == "pi.tool" and t.status is TaskStatus.TERMINAL:
                assert t.input["call_id"] in seen, f"OneResultPerCall: tool task {t.id} ended without a result"


__all__ = ["ConversationId", "StoreView", "conversations", "opened_from"]
