"""An incremental cache of each conversation's model context.

Deriving the context from the whole transcript on every model call costs
O(history) per step. The derivation (core/context.py) works segment by
segment - a segment starts at each visible assistant message - so the messages
of every segment before the newest one never change once the next assistant
message exists. This cache keeps those *closed* messages, plus the entries of
the open segment, and appends committed entries as they land. A request then
costs O(size of the open segment) plus a list copy.

A request whose cutoff is older than the newest cached entry (rare: only a
resend that must not see later entries) falls back to a full derivation.

A head marker (a compaction or a reset entry) moves where the context starts:
when one lands, the conversation's cached messages are dropped and the next
request rebuilds them from storage, starting at the newest marker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from pidurable.core.context import Message, active_range, context_messages, entry_message, is_marker, range_messages
from pidurable.core.model import ConversationId, Entry


def counts_as_turn(entry: Entry) -> bool:
    """A model turn that happened: an assistant entry the model produced
    (answers and errors; not a partial left ``aborted`` by a crash)."""
    return entry.kind == "assistant" and entry.stop_reason != "aborted"


class _Conv:
    __slots__ = ("closed", "tail", "last_id", "turns")

    def __init__(self) -> None:
        self.closed: list[Message] = []
        self.tail: list[Entry] = []
        self.last_id = 0
        self.turns = 0

    def add(self, entry: Entry, *, turn: bool = True) -> None:
        if entry.id <= self.last_id:
            return
        if turn and counts_as_turn(entry):
            self.turns += 1
        msg = entry_message(entry)
        if msg is not None and msg.role == "assistant" and any(
            (m := entry_message(e)) is not None and m.role == "assistant" for e in self.tail
        ):
            self.closed.extend(range_messages(self.tail))
            self.tail = []
        self.tail.append(entry)
        self.last_id = entry.id


class ContextCache:
    def __init__(self, load: Callable[[ConversationId], list[Entry]], capacity: int = 64) -> None:
        self._load = load
        self._capacity = capacity
        self._convs: OrderedDict[ConversationId, _Conv] = OrderedDict()
        # The newest assistant entries with tool calls: tool preparation
        # reads its call from here instead of from storage.
        self._calls: OrderedDict[int, Entry] = OrderedDict()

    def on_entry(self, entry: Entry) -> None:
        if is_marker(entry):
            self._convs.pop(entry.conversation_id, None)  # rebuilt from the marker on next use
        conv = self._convs.get(entry.conversation_id)
        if conv is not None:
            conv.add(entry)
        if entry.tool_calls:
            self._calls[entry.id] = entry
            if len(self._calls) > self._capacity:
                self._calls.popitem(last=False)

    def entry(self, entry_id: int) -> Entry | None:
        """A recently committed assistant entry with tool calls, if cached."""
        return self._calls.get(entry_id)

    def entries(self, cid: ConversationId) -> list[Entry]:
        """Every committed entry of the conversation (compaction reads them)."""
        return self._load(cid)

    def messages(self, cid: ConversationId, cutoff: int) -> list[Message]:
        return self.view(cid, cutoff)[0]

    def view(self, cid: ConversationId, cutoff: int) -> tuple[list[Message], int]:
        """The messages up to ``cutoff`` and the number of model turns
        (assistant entries, errors included, crash partials excluded) so far."""
        conv = self._convs.get(cid)
        if conv is None:
            conv = _Conv()
            everything = self._load(cid)
            conv.turns = sum(1 for e in everything if counts_as_turn(e))
            marker, kept = active_range(everything)
            if marker is not None:
                conv.tail.append(marker)
            for e in kept:
                conv.add(e, turn=False)
            if everything:
                conv.last_id = max(conv.last_id, everything[-1].id)
            self._convs[cid] = conv
            if len(self._convs) > self._capacity:
                self._convs.popitem(last=False)
        else:
            self._convs.move_to_end(cid)
        if cutoff < conv.last_id:
            entries = [e for e in self._load(cid) if e.id <= cutoff]
            return context_messages(entries, cutoff), sum(1 for e in entries if counts_as_turn(e))
        return conv.closed + range_messages(conv.tail), conv.turns
