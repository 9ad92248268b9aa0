"""Which conversations the state holds: the live ones, and a few settled ones.

Theory of operation
-------------------
The state holds a conversation while something in it is live; ``HOLD`` names
each reason (busy, queued input, a live task in it, owned by a live task). A
conversation with none is *settled*: everything about it is in storage and no
decision reads it until a host event names it again. So:

- ``Opened`` carries only the live conversations (and what they need);
- a conversation that settles joins ``State.settled`` (least recently
  changed first); once more than ``State.keep_settled`` are settled, the
  oldest are evicted: its ``ConvState``, its conversation documents and its
  index entries leave the state (nothing is written: storage has it all);
- a host event naming a conversation the state does not hold is preceded by
  ``ConversationsLoaded`` (the shell reads it right before; shell/loading.py),
  which puts it back as the newest settled one (with the held ones the same
  batch names, ``refreshed``, so that loading does not evict those). An id storage does not know is
  not in the event, and the core refuses the host event exactly as before.

``settle`` runs at the end of every step except ``ConversationsLoaded`` (what it
loaded must still be held when the event that asked for it is stepped). It
looks only at the conversations the step changed (``Tx.changed``: a built-in
document or the record written, a task in it or owning it ended) and, when it
evicts, at the oldest settled ones - so a step costs what it changed, not the
number of conversations. Before evicting, the reasons are checked again: a
settled conversation that got live work without a change the draft saw (a
custom task created in it) is kept and leaves the settled list.

``keep_settled`` is None when the ``Opened`` of this process life says nothing
(journals written before on-demand loading): every conversation is held and
nothing is evicted, so those journals replay as recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from .draft import Tx
from .loading_events import ConversationsLoaded
from .model import ConversationId
from .ownership import Graph
from .state import ConvState, DocScope

#: Why the state holds a conversation (any one suffices); with none it is settled.
HOLD: tuple[tuple[str, Callable[[Graph, ConvState], bool]], ...] = (
    ("busy", lambda g, c: c.live.run is not None),
    ("queued input", lambda g, c: bool(c.inbox)),
    ("live task in it", lambda g, c: bool(g.index.in_conversation.get(c.id))),
    (
        "owned by a live task",
        lambda g, c: c.conversation.owner_task_id is not None and c.conversation.owner_task_id in g.tasks,
    ),
)

#: Tests set this: every pass also checks every held conversation (the
#: settled list names exactly the held ones with no reason in HOLD).
CHECK = False


def hold_reasons(g: Graph, conv: ConvState) -> list[str]:
    """The rows of ``HOLD`` that hold ``conv`` (empty: it is settled)."""
    return [name for name, holds in HOLD if holds(g, conv)]


def is_settled(g: Graph, conv: ConvState) -> bool:
    return not any(holds(g, conv) for _, holds in HOLD)


def seed(tx: Tx) -> None:
    """After ``Opened``: the loaded conversations that are settled (a few
    can be: a conversation read for a live one's sake), by id."""
    if tx.keep_settled is None:
        tx.settled = ()
        return
    tx.settled = tuple(cid for cid, conv in sorted(tx.conversations.items()) if is_settled(tx, conv))
    tx.changed.clear()


def on_conversations_loaded(tx: Tx, ev: ConversationsLoaded) -> None:
    """Hold what the shell loaded (conversations already held are kept as
    they are: the state's copy is the newest)."""
    added: list[ConversationId] = []
    for conv in ev.conversations:
        if conv.id in tx.conversations:
            continue
        tx._owned("conversations")[conv.id] = conv
        tx.index.conversation(conv.id, None, conv.conversation.owner_task_id)
        added.append(conv.id)
    new = set(added)
    docs = [d for d in ev.documents if d.scope is DocScope.CONVERSATION and d.owner in new and d.key not in tx.documents]
    if docs:
        owned = tx._owned("documents")
        for d in docs:
            owned[d.key] = d
    if tx.keep_settled is not None:
        named = [*added, *(c for c in ev.refreshed if c in tx.conversations and c not in new)]
        moved = set(named)
        tx.settled = tuple(c for c in tx.settled if c not in moved) + tuple(
            c for c in named if is_settled(tx, tx.conversations[c])
        )


def settle(tx: Tx) -> None:
    """The end-of-step pass (see the module comment)."""
    changed, keep = tx.changed, tx.keep_settled
    if keep is None:
        changed.clear()
        return
    settled = tx.settled
    if changed:
        convs = tx.conversations
        now: list[ConversationId] = []
        stale = False  # a changed one is in the settled list (it moves or leaves)
        for cid in sorted(changed) if len(changed) > 1 else changed:  # (one, most steps: no list made)
            conv = convs.get(cid)
            if conv is None:
                continue
            if conv.live.run is None and is_settled(tx, conv):  # busy (HOLD's first row) is the common case
                now.append(cid)
            elif settled and cid in settled:
                stale = True
        if now or stale:
            settled = tuple(c for c in settled if c not in changed) + tuple(now)
        changed.clear()
    if len(settled) > keep:
        cut = len(settled) - keep
        for cid in settled[:cut]:
            conv = tx.conversations.get(cid)
            if conv is not None and is_settled(tx, conv):
                _evict(tx, cid)
        settled = settled[cut:]
    tx.settled = settled
    if CHECK:
        _check(tx)


def _evict(tx: Tx, cid: ConversationId) -> None:
    conv = tx._owned("conversations").pop(cid)
    tx.index.conversation(cid, conv.conversation.owner_task_id, None)
    if tx.documents:
        mine = [k for k in tx.documents if k[0] is DocScope.CONVERSATION and k[1] == cid]
        if mine:
            owned = tx._owned("documents")
            for k in mine:
                del owned[k]


def _check(tx: Tx) -> None:
    settled = [cid for cid, conv in sorted(tx.conversations.items()) if is_settled(tx, conv)]
    assert sorted(tx.settled) == settled, f"settled list {sorted(tx.settled)} but settled conversations {settled}"
    assert len(tx.settled) <= (tx.keep_settled or 0), "more settled conversations held than keep_settled"
