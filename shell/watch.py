"""Watches: committed views of a conversation (and of the task graph) for hosts.

Theory of operation
-------------------
``conv.watch()`` yields frozen :class:`ConversationView`\\ s, ``harness.
watch_task_graph()`` frozen :class:`TaskGraphView`\\ s. The contract:

- **Durable first.** The loop tells this module about a commit only after
  ``storage.commit_many`` returned (``Watches.committed``), and a view is built
  from the reducer's ``State`` and from storage, which hold exactly the
  committed state whenever host code runs (the loop never awaits between
  stepping an event and committing its writes; docs/concepts.md "One read
  model"). A failed commit closes the watches before the error leaves the loop
  (``Watches.close``): no watcher reads a state the store does not hold.
- **Never backwards.** A view carries ``seq``, the newest commit that touched
  what it shows; a watcher yields a view only when that is above the ``seq``
  it yielded last, so the sequence is strictly increasing.
- **Latest value, never a backlog.** Nothing is queued per watcher: a
  *mount* (one per watched conversation, shared by its watchers) remembers the
  newest touching ``seq`` and the view built for it. A watcher that comes back
  late builds (or reuses) the view of that newest ``seq``: it skips every view
  in between. Memory is one view per mount, whatever the watchers' pace.
- **Cheap for the reducer.** The loop's part is ``committed(seq, writes)``: a
  dict lookup per written record when something is watched, nothing at all
  otherwise, plus one ``trio.Event.set`` per touched mount, with one waiter: the
  mount's relay task, which wakes the watchers. Views are built
  lazily, in the watchers' own tasks, once per ``seq`` per mount (100 watchers
  of one conversation share one build); entries are read incrementally (only
  those after the newest one the mount already has).
- **Clean ends.** Closing the harness closes the watches: every iterator stops
  (``StopAsyncIteration``), none hangs. A watcher that leaves its ``async
  with`` (a ``break``, a cancellation, an error) is removed from its mount; the
  last one drops the mount.

What a view holds: the newest ``entries`` (``watch(entries=50)``, oldest
first), ``documents`` (``{kind: value}``: the built-in ``pi.agent``,
``pi.inbox``, ``pi.usage``, ``pi.context``, then the conversation's own
``define_doc`` documents as stored JSON), ``live`` (``pi.live`` while a run is on:
the streamed partial answer, the tool slots with their streamed output; None
when idle) and ``idle``. This module never writes and never touches the core.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeAlias, TypeVar, assert_never

import attrs
import trio

from pidurable.core.bounds import is_int_in
from pidurable.core.effects import (
    PutAgent,
    PutContext,
    PutConversation,
    PutDocument,
    PutEntry,
    PutInbox,
    PutLive,
    PutSubmission,
    PutTask,
    PutUsage,
    Write,
)
from pidurable.core.model import Conversation as ConversationRecord
from pidurable.core.model import ConversationId, Entry, Task, TaskId
from pidurable.core.ownership import conversation_is_idle
from pidurable.core.state import AGENT_DOC, CONTEXT_DOC, INBOX_DOC, LIVE_DOC, USAGE_DOC, DocScope, Live, State

from .errors import HarnessClosed, InvalidInput
from .storage.base import Storage

#: Entries a view holds unless the watcher asks for another number.
DEFAULT_ENTRIES = 50

#: The built-in documents a view shows (``pi.live`` is ``view.live``).
BUILTIN_DOCS = (AGENT_DOC, INBOX_DOC, USAGE_DOC, CONTEXT_DOC)


@attrs.frozen(kw_only=True)
class ConversationView:
    """One committed view of a conversation."""

    #: The commit the view is as of: the newest that touched the conversation
    #: (the first view of a watch may carry a newer one, the store's newest
    #: when the watch opened). Strictly increasing along one watcher's views.
    seq: int
    #: The newest entries, oldest first (at most the watcher's ``entries``).
    entries: tuple[Entry, ...]
    #: ``{kind: value}``: built-in documents and the conversation's own.
    documents: Mapping[str, Any]
    #: ``pi.live`` while a run is on (partial answer, tool slots with their
    #: streamed output, a retry being waited out); None when idle.
    live: Live | None
    #: No live non-background task is reached from the conversation.
    idle: bool
    conversation_id: ConversationId
    #: The conversation's record (its owner task, for a sub-agent's).
    conversation: ConversationRecord | None = None


@attrs.frozen(kw_only=True)
class TaskGraphView:
    """Every live task, with its owner link (``Task.owner``)."""

    seq: int
    #: Live tasks by id (after a restart, former ``running`` ones are ``pending``).
    tasks: Mapping[TaskId, Task]
    #: Live task id -> the conversations it owns (sub-agents), in id order.
    owned: Mapping[TaskId, tuple[ConversationId, ...]]

    def children(self, task_id: TaskId) -> tuple[Task, ...]:
        """The live tasks ``task_id`` owns, in id order."""
        return tuple(t for _, t in sorted(self.tasks.items()) if t.owner == task_id)


class ViewSource(Protocol):
    """What building a view reads: the reducer's committed ``State`` and the
    store (the loop is one; nothing here writes through it)."""

    @property
    def state(self) -> State: ...

    @property
    def storage(self) -> Storage: ...


def touched_conversations(writes: Iterable[Write]) -> set[ConversationId]:
    """The conversations a commit's writes change (records and documents)."""
    out: set[ConversationId] = set()
    for w in writes:
        match w:
            case PutEntry(entry=e):
                out.add(e.conversation_id)
            case PutTask(task=t):
                out.add(t.conversation_id)
            case PutSubmission(submission=s):
                out.add(s.conversation_id)
            case PutConversation(conversation=c):
                out.add(c.id)
            case PutDocument(revision=r):  # the host's documents (documents.py)
                if r.scope is DocScope.CONVERSATION:
                    out.add(ConversationId(r.owner))
            case PutAgent() | PutLive() | PutInbox() | PutUsage() | PutContext():
                out.add(w.conversation_id)
            case _:
                assert_never(w)
    return out


def _touches_tasks(writes: Iterable[Write]) -> bool:
    return any(isinstance(w, (PutTask, PutConversation)) for w in writes)


class _Mount:
    """The watchers of one thing (a conversation, or the task graph): the
    newest touching ``seq``, a wake-up event, and the views built for it."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        #: Set (and replaced) to wake this mount's watchers.
        self.changed = trio.Event()
        #: The reducer's signal to this mount's relay task (one waiter), when
        #: it has one; the relay wakes the watchers (see ``relay``).
        self.signal: trio.Event | None = None
        self.dropped = False
        self.watchers = 0
        #: The seq the views below were built at.
        self.built = -1
        #: Conversation views by entry count; the task graph's view.
        self.views: dict[int, ConversationView] = {}
        self.graph: TaskGraphView | None = None
        # conversation mounts: the newest entries read so far
        self.window = 0
        self.entries: list[Entry] = []
        #: Every entry up to this id has been read (None: nothing read yet).
        self.read_upto: int | None = None

    def touch(self, seq: int) -> None:
        if seq > self.seq:
            self.seq = seq
            if self.signal is not None:
                self.signal.set()  # O(1) for the reducer, however many watchers
            else:
                self.wake()

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def relay(self) -> None:
        """Wake the watchers on the reducer's behalf: unparking N waiting
        tasks costs O(N), which this task pays instead of the reducer
        (commits that land before it runs are woken for once)."""
        assert self.signal is not None
        while not self.dropped:
            await self.signal.wait()
            self.signal = trio.Event()
            self.wake()


class Watches:
    """The loop's side: one per harness. ``committed`` after every durable
    commit, ``close`` when the harness closes (or a commit fails)."""

    def __init__(self) -> None:
        self.closed = False
        self._closing = trio.Event()
        self._conversations: dict[ConversationId, _Mount] = {}
        self._graph: _Mount | None = None
        #: Starts a task in the harness nursery (the loop sets it when it
        #: starts): each mount's relay runs there.
        self.spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None

    def _new_mount(self, seq: int) -> _Mount:
        mount = _Mount(seq)
        if self.spawn is not None:
            mount.signal = trio.Event()
            self.spawn(mount.relay)
        return mount

    def _drop(self, mount: _Mount) -> None:
        mount.dropped = True
        if mount.signal is not None:
            mount.signal.set()  # the relay ends

    @property
    def active(self) -> bool:
        return bool(self._conversations) or self._graph is not None

    def committed(self, seq: int, writes: Sequence[Write]) -> None:
        """Commit ``seq`` is durable: wake the mounts it touched."""
        if not self._conversations and self._graph is None:
            return  # nothing watched: nothing to do
        if self._conversations:
            for cid in touched_conversations(writes):
                mount = self._conversations.get(cid)
                if mount is not None:
                    mount.touch(seq)
        if self._graph is not None and _touches_tasks(writes):
            self._graph.touch(seq)

    def close(self) -> None:
        """Every watcher's iterator stops (no view is built after this)."""
        self.closed = True
        self._closing.set()
        for mount in (*self._conversations.values(), *((self._graph,) if self._graph else ())):
            mount.wake()

    # --- mounts -------------------------------------------------------------------
    def _mount_conversation(self, cid: ConversationId, seq: int) -> _Mount:
        mount = self._conversations.get(cid)
        if mount is None:
            mount = self._conversations[cid] = self._new_mount(seq)
        mount.watchers += 1
        return mount

    def _unmount_conversation(self, cid: ConversationId, mount: _Mount) -> None:
        mount.watchers -= 1
        if not mount.watchers and self._conversations.get(cid) is mount:
            del self._conversations[cid]
            self._drop(mount)

    def _mount_graph(self, seq: int) -> _Mount:
        if self._graph is None:
            self._graph = self._new_mount(seq)
        self._graph.watchers += 1
        return self._graph

    def _unmount_graph(self, mount: _Mount) -> None:
        mount.watchers -= 1
        if not mount.watchers and self._graph is mount:
            self._graph = None
            self._drop(mount)


V = TypeVar("V", ConversationView, TaskGraphView)


class Views(Generic[V]):
    """One watcher: ``async for view in views`` over its mount's newest views
    (at most one per ``interval`` seconds when that is above 0)."""

    def __init__(self, watches: Watches, mount: _Mount, build: Callable[[], V], interval: float = 0.0) -> None:
        self._watches = watches
        self._mount = mount
        self._build: Callable[[], V] = build
        self._interval = interval
        self._last = -1
        self._next_at = -math.inf
        self.left = False

    def __aiter__(self) -> Views[V]:
        return self

    async def __anext__(self) -> V:
        while True:
            changed = self._mount.changed
            if self._watches.closed or self.left:
                raise StopAsyncIteration
            if self._mount.seq > self._last:
                if self._interval and trio.current_time() < self._next_at:
                    with trio.move_on_at(self._next_at):  # throttled: wait, unless the harness closes
                        await self._watches._closing.wait()
                    continue
                view = self._build()
                self._last = view.seq
                if self._interval:
                    self._next_at = trio.current_time() + self._interval
                return view
            await changed.wait()


ConversationViews: TypeAlias = Views[ConversationView]
TaskGraphViews: TypeAlias = Views[TaskGraphView]


# --- the host calls --------------------------------------------------------------


def _check_interval(interval_ms: int) -> float:
    if not is_int_in(interval_ms):  # (64 bits: a longer one is no longer a float of seconds)
        raise InvalidInput("watch(interval_ms=N) takes a whole number of milliseconds 0 <= N <= 2**63 - 1")
    return interval_ms / 1000


@asynccontextmanager
async def watch_conversation(
    watches: Watches, source: ViewSource, cid: ConversationId, entries: int = DEFAULT_ENTRIES, interval_ms: int = 0
) -> AsyncIterator[ConversationViews]:
    """``conv.watch()``: the first view is the conversation as it is now."""
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
        raise InvalidInput("watch(entries=N) takes a whole number N >= 1")
    interval = _check_interval(interval_ms)
    if watches.closed:
        raise HarnessClosed("Harness is closed; open a new one on the store")
    mount = watches._mount_conversation(cid, source.state.next_seq - 1)
    if entries > mount.window:  # a wider window than the mount keeps: read it anew
        mount.window, mount.built, mount.entries, mount.read_upto = entries, -1, [], None
    views = Views(watches, mount, lambda: _conversation_view(source, cid, mount, entries), interval)
    try:
        yield views
    finally:
        views.left = True
        watches._unmount_conversation(cid, mount)


@asynccontextmanager
async def watch_task_graph(watches: Watches, source: ViewSource, interval_ms: int = 0) -> AsyncIterator[TaskGraphViews]:
    """``harness.watch_task_graph()``: the first view is the graph as it is now."""
    interval = _check_interval(interval_ms)
    if watches.closed:
        raise HarnessClosed("Harness is closed; open a new one on the store")
    mount = watches._mount_graph(source.state.next_seq - 1)
    views = Views(watches, mount, lambda: _graph_view(source, mount), interval)
    try:
        yield views
    finally:
        views.left = True
        watches._unmount_graph(mount)


# --- building views (in the watcher's task) --------------------------------------


def _conversation_view(source: ViewSource, cid: ConversationId, mount: _Mount, entries: int) -> ConversationView:
    if mount.built != mount.seq:
        _refresh_entries(source, cid, mount)
        mount.built, mount.views = mount.seq, {}
    view = mount.views.get(entries)
    if view is None:
        st = source.state
        conv = st.conversations.get(cid)
        live = conv.live if conv is not None else source.storage.document(cid, LIVE_DOC)
        view = mount.views[entries] = ConversationView(
            seq=mount.seq,
            entries=tuple(mount.entries[-entries:]),
            documents=_documents(source, cid),
            live=live if isinstance(live, Live) and live.run is not None else None,
            idle=conversation_is_idle(st, cid),
            conversation_id=cid,
            conversation=conv.conversation if conv is not None else source.storage.conversation(cid),
        )
    return view


def _refresh_entries(source: ViewSource, cid: ConversationId, mount: _Mount) -> None:
    """Bring the mount's window up to date: only entries after the newest one
    it holds are read (entries are immutable; ids grow with commits)."""
    upto = source.state.next_id - 1  # every committed entry's id is below next_id
    if mount.read_upto is not None:
        mount.entries.extend(source.storage.entries(cid, after=mount.read_upto))
    else:
        mount.entries = _newest(source, cid, mount.window)
    mount.read_upto = max(upto, mount.entries[-1].id) if mount.entries else upto
    if len(mount.entries) > mount.window:
        del mount.entries[: len(mount.entries) - mount.window]


def _newest(source: ViewSource, cid: ConversationId, n: int) -> list[Entry]:
    """The newest ``n`` entries without reading the whole transcript: ids are
    global and increasing, so look back over a growing range of ids."""
    next_id = source.state.next_id
    span = max(64, 8 * n)
    while True:
        after = next_id - span
        got = source.storage.entries(cid, after=after if after > 0 else None)
        if len(got) >= n or after <= 0:
            return got[-n:]
        span *= 8


def _documents(source: ViewSource, cid: ConversationId) -> Mapping[str, Any]:
    """The conversation's documents: the built-ins from ``State`` (which
    mirrors what is committed), then the host's own (documents.py)."""
    conv = source.state.conversations.get(cid)
    docs: dict[str, Any] = {}
    if conv is not None:
        docs = {AGENT_DOC: conv.agent, INBOX_DOC: conv.inbox, USAGE_DOC: conv.usage, CONTEXT_DOC: conv.context}
    else:
        for kind in BUILTIN_DOCS:
            value = source.storage.document(cid, kind)
            if value is not None:
                docs[kind] = value
    docs.update(_own_documents(source, cid))
    return docs


def _own_documents(source: ViewSource, cid: ConversationId) -> Mapping[str, Any]:
    """The conversation's host-defined documents (``define_doc``) as their
    stored JSON values (``conv.document`` gives the typed, migrated value):
    the live ones the core holds by address (scope, owner, kind)."""
    return {
        kind: doc.value
        for (scope, owner, kind), doc in source.state.documents.items()
        if scope is DocScope.CONVERSATION and owner == cid
    }


def _graph_view(source: ViewSource, mount: _Mount) -> TaskGraphView:
    if mount.built != mount.seq or mount.graph is None:
        st = source.state
        owned: dict[TaskId, list[ConversationId]] = {}
        for c in st.conversations.values():
            owner = c.conversation.owner_task_id
            if owner is not None and owner in st.tasks:
                owned.setdefault(owner, []).append(c.id)
        mount.built = mount.seq
        mount.graph = TaskGraphView(
            seq=mount.seq,
            tasks=dict(st.tasks),
            owned={t: tuple(sorted(cs)) for t, cs in owned.items()},
        )
    return mount.graph
