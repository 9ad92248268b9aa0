"""Ownership: who owns what, and the traversal that cancellation and idleness use.

Theory of operation
-------------------
Tasks are owned by their conversation (``owner is None``) or by a task;
conversations are ownerless or owned by a task (``owner_task_id``: sub-agents).
*Ordinary traversal* from a conversation visits its conversation-owned live
tasks, then, for each non-background one, the tasks it owns and the
conversations it owns, recursively. A background task and its whole subtree
are excluded (``background=True`` crosses that boundary).

The *ordinary owned work* of a task T is every live non-background task
reached below T this way (through child tasks and owned conversations),
stopping below the first background owner. A task with owned work cannot
become terminal: it is held ``completing`` until the work drains, and an abort
runs bottom-up, children first.

Pure functions over the live state; nothing here writes. They read the
derived indexes (index.py: children, conversation-owned tasks, owned
conversations), so their cost is the size of the subtree they visit, not
the number of live tasks. Each takes a *graph*: a ``State`` or the step's
draft (``Tx``), anything with ``tasks``, ``conversations`` and ``index``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .model import ConversationId, Task, TaskId
from .state import ConvState


class _Index(Protocol):
    @property
    def children(self) -> Mapping[TaskId, frozenset[TaskId]]: ...
    @property
    def top(self) -> Mapping[ConversationId, frozenset[TaskId]]: ...
    @property
    def owned_conversations(self) -> Mapping[TaskId, frozenset[ConversationId]]: ...
    @property
    def in_conversation(self) -> Mapping[ConversationId, frozenset[TaskId]]: ...


class Graph(Protocol):
    """What the traversals read (a ``State`` or a ``Tx``)."""

    @property
    def tasks(self) -> Mapping[TaskId, Task]: ...
    @property
    def conversations(self) -> Mapping[ConversationId, ConvState]: ...
    @property
    def index(self) -> _Index: ...


def _children(g: Graph, owner: TaskId) -> list[Task]:
    return [g.tasks[t] for t in sorted(g.index.children.get(owner, ()))]


def _conversations_owned(g: Graph, owner: TaskId) -> list[ConversationId]:
    return sorted(g.index.owned_conversations.get(owner, ()))


def _top_level(g: Graph, cid: ConversationId) -> list[Task]:
    return [g.tasks[t] for t in sorted(g.index.top.get(cid, ()))]


def _walk(g: Graph, start: list[Task], *, background: bool) -> tuple[list[Task], list[ConversationId]]:
    """Ordinary traversal from ``start``: each reached live task (background
    subtrees excluded unless ``background``) and the conversations entered."""
    reached: list[Task] = []
    convs: list[ConversationId] = []
    seen: set[TaskId] = set()
    stack = list(start)
    while stack:
        t = stack.pop()
        if t.id in seen or (t.background and not background):
            continue
        seen.add(t.id)
        reached.append(t)
        stack.extend(_children(g, t.id))
        for owned in _conversations_owned(g, t.id):
            if owned not in convs:
                convs.append(owned)
            stack.extend(_top_level(g, owned))
    reached.sort(key=lambda t: t.id)
    return reached, convs


def owned_work(g: Graph, owner: TaskId, *, background: bool = False) -> list[Task]:
    """The live work below ``owner`` (ordinary: background subtrees excluded)."""
    start = _children(g, owner)
    for cid in _conversations_owned(g, owner):
        start.extend(_top_level(g, cid))
    return _walk(g, start, background=background)[0]


def has_owned_work(g: Graph, owner: TaskId) -> bool:
    index = g.index
    children = index.children.get(owner)
    if children is not None:
        tasks = g.tasks  # (a loop, not any() over a generator: every outcome asks)
        for t in children:
            if not tasks[t].background:
                return True
    elif owner not in index.owned_conversations:
        return False
    return bool(owned_work(g, owner))


def reached_from_conversation(
    g: Graph, cid: ConversationId, *, background: bool = False
) -> tuple[list[Task], list[ConversationId]]:
    """Ordinary traversal from a conversation: the live tasks reached and the
    conversations reached (``cid`` first)."""
    reached, convs = _walk(g, _top_level(g, cid), background=background)
    return reached, [cid, *(c for c in convs if c != cid)]


def conversations_below(g: Graph, owner: TaskId) -> list[ConversationId]:
    """Conversations owned by ``owner`` or by its ordinary owned work."""
    owners = [owner, *(t.id for t in owned_work(g, owner))]
    out: list[ConversationId] = []
    for o in owners:
        out.extend(_conversations_owned(g, o))
    return out


def owner_chain(g: Graph, task: Task) -> list[TaskId]:
    """The live tasks above ``task`` (its owner, the owner's owner, ... across
    owned conversations), nearest first."""
    chain: list[TaskId] = []
    current: Task | None = task
    while current is not None:
        nxt: TaskId | None
        if current.owner is not None:
            nxt = current.owner
        else:
            conv = g.conversations.get(current.conversation_id)
            nxt = conv.conversation.owner_task_id if conv is not None else None
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
        current = g.tasks.get(nxt)
    return chain


def conversation_is_idle(g: Graph, cid: ConversationId) -> bool:
    """No live non-background task is reached by ordinary traversal."""
    return not any(not g.tasks[t].background for t in g.index.top.get(cid, ())) and not reached_from_conversation(g, cid)[0]
