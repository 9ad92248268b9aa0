"""Model context: the messages a request sees, derived from transcript entries.

Theory of operation
-------------------
Pure function of the entries (oldest first) and the request's ``cutoff``:

1. only entries with ``id <= cutoff`` are seen (the pinned intent of the
   request: a resend after a crash sees exactly what the first send saw);
   of those, the context starts at the newest *head marker* (a
   ``compaction`` or ``reset`` entry whose ``data["head"]`` names the first
   entry it keeps): the marker's own message first (the summary, or the
   reset's handoff text), then the non-marker entries from ``head`` on
   (:func:`active_range`); the full transcript stays stored;
2. assistant entries that ended in ``error`` or ``aborted`` stay in the
   transcript but are not sent;
3. each assistant's tool results are moved directly after it, in call order;
4. a call without a result gets a synthesized error result
   ("Tool result unavailable: history ends before this call completed."), and
   a result without a preceding call is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from .model import Entry, EntryId, EntryKind, StopReason, ToolCall

MISSING_RESULT = "Tool result unavailable: history ends before this call completed."
_HIDDEN_STOPS = frozenset({StopReason.ERROR, StopReason.ABORTED})


@attrs.frozen(kw_only=True)
class Message:
    role: str  # system | user | assistant | tool
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


def entry_message(entry: Entry) -> Message | None:
    match entry.kind:
        case EntryKind.USER | EntryKind.RESET | EntryKind.COMPACTION:
            return Message(role="user", text=entry.text) if entry.text else None
        case EntryKind.SYSTEM:
            # a recorded system-prompt change (system.py) is not a message:
            # the request's system prompt is the shown state it records
            return Message(role="system", text=entry.text) if entry.text else None
        case EntryKind.ASSISTANT:
            if entry.stop_reason in _HIDDEN_STOPS:
                return None
            return Message(role="assistant", text=entry.text, tool_calls=entry.tool_calls)
        case EntryKind.TOOL_RESULT:
            return Message(
                role="tool",
                text=entry.text,
                tool_call_id=entry.tool_call_id,
                tool_name=entry.tool_name,
                is_error=entry.is_error,
            )
    return None  # pragma: no cover


#: Entry kinds that start a context (the newest one at or before the cutoff).
HEAD_MARKERS = frozenset({EntryKind.COMPACTION, EntryKind.RESET})


def is_marker(entry: Entry) -> bool:
    return entry.kind in HEAD_MARKERS and isinstance((entry.data or {}).get("head"), int)


def marker_head(entry: Entry) -> EntryId:
    """The first entry a head marker keeps (its own id for a reset)."""
    head = (entry.data or {}).get("head")
    assert isinstance(head, int)
    return EntryId(head)


def active_range(entries: Iterable[Entry], cutoff: int | None = None) -> tuple[Entry | None, list[Entry]]:
    """The newest head marker at or before ``cutoff`` (None if there is none)
    and the non-marker entries of its range, oldest first."""
    seen = [e for e in entries if cutoff is None or e.id <= cutoff]
    marker = next((e for e in reversed(seen) if is_marker(e)), None)
    if marker is None:
        return None, [e for e in seen if not is_marker(e)]
    head = marker_head(marker)
    return marker, [e for e in seen if e.id >= head and not is_marker(e)]


def context_entries(entries: Iterable[Entry], cutoff: int | None = None) -> list[Entry]:
    """The entries a request through ``cutoff`` is built from: the newest
    head marker (if any) first, then its range."""
    marker, kept = active_range(entries, cutoff)
    return kept if marker is None else [marker, *kept]


def context_messages(entries: Iterable[Entry], cutoff: int | None = None) -> list[Message]:
    return range_messages(context_entries(entries, cutoff))


def range_messages(entries: Iterable[Entry]) -> list[Message]:
    """Steps 2-4 over entries already cut to the context (marker first)."""
    seen = [m for e in entries if (m := entry_message(e)) is not None]
    out: list[Message] = []
    i = 0
    while i < len(seen):
        msg = seen[i]
        i += 1
        if msg.role == "tool":
            continue  # a result with no preceding call
        out.append(msg)
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        # gather everything up to the next assistant message
        j = i
        while j < len(seen) and seen[j].role != "assistant":
            j += 1
        window: Sequence[Message] = seen[i:j]
        results = {m.tool_call_id: m for m in window if m.role == "tool"}
        for call in msg.tool_calls:
            out.append(
                results.get(call.id)
                or Message(role="tool", text=MISSING_RESULT, tool_call_id=call.id, tool_name=call.name, is_error=True)
            )
        out.extend(m for m in window if m.role != "tool")
        i = j
    return out
