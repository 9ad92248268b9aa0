"""An incremental cache of each conversation's model context.

Deriving the context from the whole transcript on every model call costs
O(history) per step. The derivation (core/context.py) works segment by
segment - a segment starts at each visible assistant message - so the messages
of every segment before the newest one never change once the next assistant
message exists. This cache keeps those *closed* messages, plus the entries of
the open segment, and appends committed entries as they land (O(1) each: the
segment remembers whether it already holds a visible assistant message). A
request then costs O(size of the open segment) plus ONE copy of the messages
into the request's tuple: the next request usually extends the previous
request's tuple (its open segment has since closed unchanged), else the
messages are gathered into one list made a tuple, the system message first
(``request``; ``ModelRequest.messages`` is a tuple, so one copy per request
is the least).

A request whose cutoff is older than the newest cached entry (rare: only a
resend that must not see later entries) falls back to a full derivation.

A head marker (a compaction or a reset entry) moves where the context starts:
when one lands, the conversation's cached messages are dropped and the next
request rebuilds them from storage, starting at the newest marker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import attrs

from pidurable.core.context import Message, active_range, context_messages, entry_message, is_marker, range_messages
from pidurable.core.model import ConversationId, Entry, EntryKind


def counts_as_turn(entry: Entry) -> bool:
    """A model turn that happened: an assistant entry the model produced
    (answers and errors; not a partial left ``aborted`` by a crash)."""
    return entry.kind == "assistant" and entry.stop_reason != "aborted"


@attrs.frozen
class _Sent:
    """The newest request's messages: ``head``, ``closed[:count]``, then
    ``shown`` (the open segment's messages as they were then)."""

    head: tuple[Message, ...]
    count: int
    shown: list[Message]
    messages: tuple[Message, ...]


class _Conv:
    __slots__ = ("closed", "tail", "answered", "shown", "sent", "last_id", "turns")

    def __init__(self) -> None:
        self.closed: list[Message] = []
        self.tail: list[Entry] = []
        #: the open segment (``tail``) holds a visible assistant message:
        #: the next one closes it
        self.answered = False
        #: the open segment's messages as last derived, while ``tail`` is unchanged
        self.shown: list[Message] | None = None
        #: the newest request built from this cache (``ContextCache.request``)
        self.sent: _Sent | None = None
        self.last_id = 0
        self.turns = 0

    def add(self, entry: Entry, *, turn: bool = True) -> None:
        if entry.id <= self.last_id:
            return
        if turn and counts_as_turn(entry):
            self.turns += 1
        # only an assistant entry can make an assistant message (whether it
        # is shown is entry_message's rule)
        if entry.kind == EntryKind.ASSISTANT and (msg := entry_message(entry)) is not None and msg.role == "assistant":
            if self.answered:
                self.closed.extend(self.tail_messages())
                self.tail = []
            self.answered = True
        self.tail.append(entry)
        self.shown = None
        self.last_id = entry.id

    def tail_messages(self) -> list[Message]:
        """The open segment's messages (derived once per change of it: a
        request and the closing of its segment share them)."""
        if self.shown is None:
            self.shown = range_messages(self.tail)
        return self.shown


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
        conv = self._conv(cid)
        if cutoff < conv.last_id:
            return self._before(cid, cutoff)
        return conv.closed + conv.tail_messages(), conv.turns

    def request(self, cid: ConversationId, cutoff: int, head: tuple[Message, ...] = ()) -> tuple[tuple[Message, ...], int]:
        """A request's messages: ``head`` (its system message), then the
        messages up to ``cutoff``; and the number of model turns so far (as
        ``view``). Usually the previous request's tuple plus what came since
        (one copy); else gathered in one list made a tuple."""
        conv = self._conv(cid)
        if cutoff < conv.last_id:
            found, turns = self._before(cid, cutoff)
            return head + tuple(found), turns
        shown = conv.tail_messages()
        closed = conv.closed
        sent = conv.sent
        if sent is not None and sent.head == head:
            # the usual next request: the segment it showed open has closed
            # as it was (the same messages) - extend its tuple instead of
            # copying every closed message again
            start, end = sent.count, sent.count + len(sent.shown)
            if len(closed) >= end and all(a is b for a, b in zip(closed[start:end], sent.shown)):
                messages = sent.messages + tuple(closed[end:] + shown)
                conv.sent = _Sent(head, len(closed), shown, messages)
                return messages, conv.turns
        out = list(head)
        out += closed
        out += shown
        messages = tuple(out)
        conv.sent = _Sent(head, len(closed), shown, messages)
        return messages, conv.turns

    def _before(self, cid: ConversationId, cutoff: int) -> tuple[list[Message], int]:
        """The full derivation, for a cutoff older than the newest cached entry."""
        entries = [e for e in self._load(cid) if e.id <= cutoff]
        return context_messages(entries, cutoff), sum(1 for e in entries if counts_as_turn(e))

    def _conv(self, cid: ConversationId) -> _Conv:
        """The conversation's cache entry, built from storage if it has none."""
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
        return conv
