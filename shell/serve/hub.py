"""Server-Sent Events for many clients: one hub per followed conversation.

Theory of operation
-------------------
A client that follows a conversation opens ``GET /api/conversations/{id}/
events``. All clients of one conversation share one *hub*, which runs (in the
app's nursery) one ``conv.watch()`` and one ``harness.watch_task_graph()`` and
turns what they yield into JSON once: the view's members, each entry (encoded
once, kept while it is in the view's window), and the conversation's task
tree (re-sent only when it changed).

- **No queue per client.** A client remembers what it sent last (the view's
  ``seq``, the tree's version, the newest entry id) and, whenever it is ready
  to send again, sends the hub's newest state. A slow client - its socket
  full, its send blocked by the server's back-pressure - therefore skips
  ahead to the latest view, like a slow ``conv.watch`` consumer; memory is
  one encoded view and tree per hub, whatever the number or pace of clients.
- **In order, committed only.** The hub publishes only what ``conv.watch``
  yields (committed views, ``seq`` strictly increasing), so every client sees
  a subsequence of one sequence, in order, ending on the newest.
- **The first frame is now.** A connection (or a reconnect) gets the current
  view with the whole window of entries (``"complete": true``), never a
  replay. Later frames carry only entries the client has not had - unless
  some it never got have already left the window (a client far behind), when
  it gets the whole window again, ``complete`` (the page then re-reads the
  transcript).
- **Clean ends.** The last client to leave cancels the hub. When the harness
  closes, the watches end, every hub closes and its clients' streams end.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio

from pidurable.core.model import ConversationId

from ..conversation import Conversation
from ..errors import HarnessClosed
from ..harness import Harness
from ..watch import ConversationView, TaskGraphView
from .wire import dumps, entry_text, task_row, tree_tasks, view_head

log = logging.getLogger("pidurable.serve")

#: A comment line is sent after this long without a frame (proxies and
#: clients see the connection alive; a gone client is noticed).
KEEPALIVE_SECONDS = 15.0


@attrs.frozen(kw_only=True)
class EncodedView:
    """One committed view, encoded: its members, and its entries one by one."""

    seq: int
    head: str
    #: (entry id, encoded entry), oldest first: the view's window.
    entries: tuple[tuple[int, str], ...]
    #: The window holds as many entries as it can (older ones may exist).
    full: bool


@attrs.frozen(kw_only=True)
class EncodedTree:
    version: int
    frame: bytes


def sse(event: str, data: str) -> bytes:
    """One Server-Sent Event (``data`` is one line of compact JSON)."""
    return f"event: {event}\ndata: {data}\n\n".encode()


class Hub:
    """The shared, latest encoded state of one conversation."""

    def __init__(self, harness: Harness, conv: Conversation, entries: int, interval_ms: int) -> None:
        self.harness, self.conv = harness, conv
        self.window, self.interval_ms = entries, interval_ms
        self.view: EncodedView | None = None
        self.tree: EncodedTree | None = None
        self.closed = False
        self.clients = 0
        self.changed = trio.Event()
        self.scope = trio.CancelScope()
        self._encoded: dict[int, str] = {}
        self._tree_body = ""
        #: Views published (for tests and the bench: views, not frames, are shared).
        self.published = 0

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def publish_view(self, view: ConversationView) -> None:
        cache = self._encoded
        encoded: dict[int, str] = {e.id: cache.get(e.id) or entry_text(e) for e in view.entries}
        self._encoded = encoded  # only the window's entries stay encoded
        self.view = EncodedView(
            seq=view.seq, head=view_head(view), entries=tuple(encoded.items()), full=len(view.entries) >= self.window
        )
        self.published += 1
        self._wake()

    async def publish_tree(self, graph: TaskGraphView) -> None:
        cid = self.conv.id
        tasks = tree_tasks(graph.tasks, graph.owned, cid)
        why = {i.task_id: i for i in await self.harness.inspect()} if tasks else {}
        body = dumps([task_row(t, why.get(t.id)) for t in tasks])
        if body == self._tree_body and self.tree is not None:
            return
        self._tree_body = body
        version = self.tree.version + 1 if self.tree is not None else 1
        frame = sse("tasks", f'{{"version":{version},"seq":{graph.seq},"conversation_id":{cid},"tasks":{body}}}')
        self.tree = EncodedTree(version=version, frame=frame)
        self._wake()

    async def run(self) -> None:
        """Watch until cancelled (the last client left) or the harness closes."""
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._tree)
                    async with self.conv.watch(self.window, interval_ms=self.interval_ms) as views:
                        async for view in views:
                            self.publish_view(view)
                    nursery.cancel_scope.cancel()  # the harness closed
        except* HarnessClosed:
            pass  # closed before the watch opened: the clients' streams end
        except* Exception as group:  # noqa: BLE001 - one conversation's stream fails, not the server
            log.error("the event stream of conversation %s failed", self.conv.id, exc_info=group)
        finally:
            self.closed = True
            self._wake()

    async def _tree(self) -> None:
        async with self.harness.watch_task_graph(interval_ms=self.interval_ms) as graphs:
            async for graph in graphs:
                await self.publish_tree(graph)

    def frame_for(self, view: EncodedView, newest: int | None) -> tuple[bytes, int | None]:
        """The ``view`` event for a client whose newest entry is ``newest``
        (None: a new client), and its newest entry after it."""
        pieces = view.entries
        if newest is None:
            complete = True
        elif view.full and pieces and pieces[0][0] > newest:
            complete = True  # entries it never got may have left the window
        else:
            complete = False
            pieces = tuple(p for p in pieces if p[0] > newest)
        data = "{" + view.head + ',"complete":' + ("true" if complete else "false")
        data += ',"entries":[' + ",".join(text for _, text in pieces) + "]}"
        last = view.entries[-1][0] if view.entries else newest
        return sse("view", data), last

    async def frames(self) -> AsyncIterator[bytes]:
        """One client's stream: the newest view and tree it has not had,
        each time it is ready for more; a keep-alive comment when idle."""
        seq, tree_version, newest = -1, 0, None
        yield b"retry: 2000\n\n"
        while True:
            changed = self.changed
            out = []
            view, tree = self.view, self.tree
            if view is not None and view.seq > seq:
                frame, newest = self.frame_for(view, newest)
                out.append(frame)
                seq = view.seq
            if tree is not None and tree.version > tree_version:
                out.append(tree.frame)
                tree_version = tree.version
            if out:
                yield b"".join(out)
                continue
            if self.closed:
                return
            with trio.move_on_after(KEEPALIVE_SECONDS) as waited:
                await changed.wait()
            if waited.cancelled_caught:
                yield b": keep-alive\n\n"


class Hubs:
    """The app's hubs, one per conversation with at least one client."""

    def __init__(self, harness: Harness, *, entries: int = 50, interval_ms: int = 50) -> None:
        self.harness = harness
        self.entries, self.interval_ms = entries, interval_ms
        self.hubs: dict[ConversationId, Hub] = {}
        self.nursery: trio.Nursery | None = None

    @asynccontextmanager
    async def follow(self, conv: Conversation) -> AsyncIterator[Hub]:
        """A client of ``conv``'s hub (started for the first client, cancelled
        after the last)."""
        assert self.nursery is not None, "Hubs.run is not running"
        hub = self.hubs.get(conv.id)
        if hub is None or hub.closed:
            hub = self.hubs[conv.id] = Hub(self.harness, conv, self.entries, self.interval_ms)
            self.nursery.start_soon(hub.run)
        hub.clients += 1
        try:
            yield hub
        finally:
            hub.clients -= 1
            if not hub.clients:
                hub.scope.cancel()
                if self.hubs.get(conv.id) is hub:
                    del self.hubs[conv.id]

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            task_status.started()
            await trio.sleep_forever()

