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

Pure functions over the live state; nothing here writes. Their cost is
O(live tasks + conversations), which stays small: terminal tasks are not in
the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import ConversationId, Task, TaskId
from .state import ConvState


def _children(tasks: Mapping[TaskId, Task], owner: TaskId) -> list[Task]:
    return [t for t in tasks.values() if t.owner == owner]


def _conversations_owned(conversations: Mapping[ConversationId, ConvState], owner: TaskId) -> list[ConversationId]:
    return [c.id for c in conversations.values() if c.conversation.owner_task_id == owner]


def _top_level(tasks: Mapping[TaskId, Task], cid: ConversationId) -> list[Task]:
    return [t for t in tasks.values() if t.conversation_id == cid and t.owner is None]


def _walk(
    tasks: Mapping[TaskId, Task],
    conversations: Mapping[ConversationId, ConvState],
    start: list[Task],
    *,
    background: bool,
) -> tuple[list[Task], list[ConversationId]]:
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
        stack.extend(_children(tasks, t.id))
        for owned in _conversations_owned(conversations, t.id):
            if owned not in convs:
                convs.append(owned)
            stack.extend(_top_level(tasks, owned))
    reached.sort(key=lambda t: t.id)
    return reached, convs


def owned_work(
    tasks: Mapping[TaskId, Task],
    conversations: Mapping[ConversationId, ConvState],
    owner: TaskId,
    *,
    background: bool = False,
) -> list[Task]:
    """The live work below ``owner`` (ordinary: background subtrees excluded)."""
    start = _children(tasks, owner)
    for cid in _conversations_owned(conversations, owner):
        start.extend(_top_level(tasks, cid))
    return _walk(tasks, conversations, start, background=background)[0]


def has_owned_work(tasks: Mapping[TaskId, Task], conversations: Mapping[ConversationId, ConvState], owner: TaskId) -> bool:
    if any(t.owner == owner and not t.background for t in tasks.values()):
        return True
    return bool(owned_work(tasks, conversations, owner))


def reached_from_conversation(
    tasks: Mapping[TaskId, Task],
    conversations: Mapping[ConversationId, ConvState],
    cid: ConversationId,
    *,
    background: bool = False,
) -> tuple[list[Task], list[ConversationId]]:
    """Ordinary traversal from a conversation: the live tasks reached and the
    conversations reached (``cid`` first)."""
    reached, convs = _walk(tasks, conversations, _top_level(tasks, cid), background=background)
    return reached, [cid, *(c for c in convs if c != cid)]


def conversations_below(
    tasks: Mapping[TaskId, Task], conversations: Mapping[ConversationId, ConvState], owner: TaskId
) -> list[ConversationId]:
    """Conversations owned by ``owner`` or by its ordinary owned work."""
    owners: Iterable[TaskId] = [owner, *(t.id for t in owned_work(tasks, conversations, owner))]
    out: list[ConversationId] = []
    for o in owners:
        out.extend(_conversations_owned(conversations, o))
    return out


def owner_chain(tasks: Mapping[TaskId, Task], conversations: Mapping[ConversationId, ConvState], task: Task) -> list[TaskId]:
    """The live tasks above ``task`` (its owner, the owner's owner, ... across
    owned conversations), nearest first."""
    chain: list[TaskId] = []
    current: Task | None = task
    while current is not None:
        nxt: TaskId | None
        if current.owner is not None:
            nxt = current.owner
        else:
            conv = conversations.get(current.conversation_id)
            nxt = conv.conversation.owner_task_id if conv is not None else None
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
        current = tasks.get(nxt)
    return chain


def conversation_is_idle(
    tasks: Mapping[TaskId, Task], conversations: Mapping[ConversationId, ConvState], cid: ConversationId
) -> bool:
    """No live non-background task is reached by ordinary traversal."""
    reached, _ = reached_from_conversation(tasks, conversations, cid)
    return not reached
