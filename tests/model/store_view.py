"""A storage-like view of the twin's store model (the last write of every
record, plus the journal of the path), so the checkers of
tests/invariants.py run on it unchanged, and the ``Opened`` a new process
builds from such a store (as tests/core/helpers.py's ``Store.opened``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pidurable.core.events import Opened
from pidurable.core.model import Conversation, ConversationId, Entry, EntryKind, Submission, Task, TaskStatus, ToolInfo
from pidurable.core.state import INBOX_DOC, LIVE_DOC, ContextDoc, ConvState, Live, UsageDoc
from pidurable.shell.storage.base import JournalRow

Records = Mapping[tuple[str, int], Any]


def _of(records: Records, tag: str, field: str) -> list[Any]:
    return [getattr(w, field) for (k, _), w in sorted(records.items()) if k == tag]


def conversations(records: Records) -> list[ConvState]:
    out = []
    for c in _of(records, "conversation", "conversation"):
        agent = records.get(("pi.agent", c.id))
        live = records.get(("pi.live", c.id))
        inbox = records.get(("pi.inbox", c.id))
        usage = records.get(("pi.usage", c.id))
        ctx = records.get(("pi.context", c.id))
        out.append(ConvState(
            conversation=c,
            **({"agent": agent.agent} if agent is not None else {}),
            live=live.live if live is not None else Live(),
            inbox=inbox.items if inbox is not None else (),
            usage=usage.usage if usage is not None else UsageDoc(),
            context=ctx.context if ctx is not None else ContextDoc(),
        ))
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
        w = self.records.get((kind, conversation_id))
        if w is None:
            return None
        if kind == LIVE_DOC:
            return w.live
        if kind == INBOX_DOC:
            return w.items
        raise KeyError(kind)

    def document_state(self, *args: Any) -> Any:
        return None  # no host-defined documents at the twin's bounds

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
