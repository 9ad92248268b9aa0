"""An incremental cache of each conversation's model context.

Deriving the context from the whole transcript on every model call costs
O(history) per step. The derivation (core/context.py) works segment by
segment - a segment starts at each visible assistant message - so the messages
of every segment before the newest one never change once the next assistant
message exists. This cache keeps those *closed* messages, plus the entries of
the open segment, and appends committed entries as they land (O(1) each: the
segment remembers whether it already holds a visible assistant message). A
request then costs O(size of the open segment): its messages are a
:class:`MessageView` - the system message, a prefix of the closed messages
(a list that only grows, so a prefix never changes) and the open segment's
messages - not a copy of the transcript (``request``).

A request whose cutoff is older than the newest cached entry (rare: only a
resend that must not see later entries) falls back to a full derivation.

A head marker (a compaction or a reset entry) moves where the context starts:
when one lands, the conversation's cached messages are dropped and the next
request rebuilds them from storage, starting at the newest marker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import overload

from pidurable.core.context import Message, active_range, context_messages, entry_message, is_marker, range_messages
from pidurable.core.model import ConversationId, Entry, EntryKind


def counts_as_turn(entry: Entry) -> bool:
    """A model turn that happened: an assistant entry the model produced
    (answers and errors; not a partial left ``aborted`` by a crash)."""
    return entry.kind == "assistant" and entry.stop_reason != "aborted"


class MessageView(Sequence[Message]):
    """A request's messages: ``head``, then ``closed[:count]``, then
    ``shown`` - an immutable sequence over the cache's list of closed
    messages, which only ever grows (a head marker makes a new one), so a
    prefix of it never changes. Building one is O(open segment), not
    O(transcript): no per-request copy of every message, nothing to free,
    and the cyclic GC traverses three references instead of one per message
    (a tuple of the whole transcript made every young collection O(n): a
    long run slowed down, docs/performance.md). It compares equal to a tuple
    (or any view) of the same messages; a slice or ``+`` gives a tuple."""

    __slots__ = ("_head", "_closed", "_count", "_shown")

    def __init__(self, head: tuple[Message, ...], closed: list[Message], count: int, shown: tuple[Message, ...]) -> None:
        self._head, self._closed, self._count, self._shown = head, closed, count, shown

    def __len__(self) -> int:
        return len(self._head) + self._count + len(self._shown)

    @overload
    def __getitem__(self, i: int) -> Message: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, i: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError("message index out of range")
        h = len(self._head)
        if j < h:
            return self._head[j]
        j -= h
        return self._closed[j] if j < self._count else self._shown[j - self._count]

    def __iter__(self) -> Iterator[Message]:
        yield from self._head
        yield from islice(self._closed, self._count)
        yield from self._shown

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, MessageView)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[Message]) -> tuple[Message, ...]:
        return (*self, *other)

    def __radd__(self, other: Sequence[Message]) -> tuple[Message, ...]:
        return (*other, *self)

    def __repr__(self) -> str:
        return repr(tuple(self))


class _Conv:
    __slots__ = ("closed", "tail", "answered", "shown", "last_id", "turns")

    def __init__(self) -> None:
        self.closed: list[Message] = []
        self.tail: list[Entry] = []
        #: the open segment (``tail``) holds a visible assistant message:
        #: the next one closes it
        self.answered = False
        #: the open segment's messages as last derived, while ``tail`` is unchanged
        self.shown: list[Message] | None = None
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

    def request(self, cid: ConversationId, cutoff: int, head: tuple[Message, ...] = ()) -> tuple[Sequence[Message], int]:
        """A request's messages: ``head`` (its system message), then the
        messages up to ``cutoff``; and the number of model turns so far (as
        ``view``). Usually a :class:`MessageView` of the cache (O(open
        segment)); a tuple for a cutoff older than the newest entry."""
        conv = self._conv(cid)
        if cutoff < conv.last_id:
            found, turns = self._before(cid, cutoff)
            return head + tuple(found), turns
        return MessageView(head, conv.closed, len(conv.closed), tuple(conv.tail_messages())), conv.turns

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
