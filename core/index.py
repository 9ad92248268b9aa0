"""Derived indexes over the live tasks: who owns what, who waits on whom,
and who carries cancellation intent - so that a step touches only what it
changed, not every live task (issue 11: per-event cost independent of the
amount of live work).

Theory of operation
-------------------
``TaskIndex`` is a pure function of ``State.tasks`` and
``State.conversations``: ``build`` computes it from scratch (``Opened``), and
the draft (draft.py) keeps it in step with every ``put_task`` /
``put_conversation`` through ``IndexDraft``. It is never stored and takes no
part in ``State`` equality; ``tests/core/test_index.py`` checks after random
event sequences that the incrementally kept index equals ``build`` of the
same state.

- ``children``: owner task -> its live child tasks;
- ``top``: conversation -> its live conversation-owned tasks (``owner`` None);
- ``owned_conversations``: owner task -> the conversations it owns;
- ``in_conversation``: conversation -> every live task in it (owned or not:
  what keeps a conversation held, holding.py);
- ``waiters``: task -> the live ``waiting`` tasks whose ``on`` holds it;
- ``intent``: the live tasks with cancellation intent (abort-marked, or held
  ``completing`` with an outcome other than completed) or held
  ``completing`` at all (both need ``cancellation.reconcile``).

A large mapping (``LARGE`` keys and more) is a persistent map
(``immutables.Map``, a HAMT): a draft takes a mutation of it on its first
change in a step - O(1), where a dict's copy was O(live) (1,000
conversations at once: ~4,000 tasks, every step) - and ``freeze`` finishes
it. A small one is a dict, copied on its first change. Either way a
committed State's index is never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from immutables import Map

from .model import ConversationId, OutcomeStatus, Task, TaskId, TaskStatus

#: A map's mutation (what a draft changes in place until ``freeze``).
_MUTATION: type[Any] = type(Map().mutate())
#: From this many keys a mapping is a persistent Map; below, a dict (copied
#: whole on its first change: cheaper than a Map's reads and mutation while
#: small). A Map that shrinks below half of it becomes a dict again.
LARGE = 32


def live_map(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    """``mapping`` as a State holds it: a Map from ``LARGE`` keys on."""
    return Map(mapping) if len(mapping) >= LARGE else mapping


def _mutable(mapping: Any) -> Any:
    """What the draft changes in place: a copy of a small dict, a mutation
    of a large Map (a large dict - an index built by ``build`` or older code -
    becomes a Map first)."""
    if type(mapping) is Map:
        return mapping.mutate() if len(mapping) >= LARGE // 2 else dict(mapping.items())
    return dict(mapping) if len(mapping) < LARGE else Map(mapping).mutate()


def _done(mapping: Any) -> Any:
    """``mapping`` as a Map again (a mutation finished)."""
    return mapping.finish() if type(mapping) is _MUTATION else mapping


# Members read once (a member read through its class is a descriptor call:
# the index is kept on every put_task).
_COMPLETING, _WAITING = TaskStatus.COMPLETING, TaskStatus.WAITING


def needs_reconcile(task: Task) -> bool:
    """Abort-marked, or held ``completing`` (a cascade or a drain may be due)."""
    return task.abort_requested or task.status is _COMPLETING


def has_intent(task: Task) -> bool:
    """Cancellation intent: marked, or holding a non-completed outcome."""
    if task.abort_requested:
        return True
    return (
        task.status is TaskStatus.COMPLETING
        and task.outcome is not None
        and task.outcome.status is not OutcomeStatus.COMPLETED
    )


class TaskIndex(NamedTuple):
    """The indexes (see the module docstring); derived, never stored.

    A named tuple, not an attrs record: a step that changes the index builds
    one, and a tuple is built in one C call where a frozen record sets each
    field through a call of its own (~1,000 instructions a field)."""

    children: Mapping[TaskId, frozenset[TaskId]]
    top: Mapping[ConversationId, frozenset[TaskId]]
    owned_conversations: Mapping[TaskId, frozenset[ConversationId]]
    waiters: Mapping[TaskId, frozenset[TaskId]]
    intent: frozenset[TaskId]
    in_conversation: Mapping[ConversationId, frozenset[TaskId]]

    def as_dict(self) -> dict[str, Any]:
        """Comparable form (tests): empty sets dropped."""
        return {
            "children": {k: v for k, v in self.children.items() if v},
            "top": {k: v for k, v in self.top.items() if v},
            "owned_conversations": {k: v for k, v in self.owned_conversations.items() if v},
            "waiters": {k: v for k, v in self.waiters.items() if v},
            "intent": self.intent,
            "in_conversation": {k: v for k, v in self.in_conversation.items() if v},
        }


def empty_index() -> TaskIndex:
    """The index of no tasks (mappings of its own: no defaults shared)."""
    return TaskIndex(children={}, top={}, owned_conversations={}, waiters={}, intent=frozenset(), in_conversation={})


def build(tasks: Iterable[Task], owners: Mapping[ConversationId, TaskId | None]) -> TaskIndex:
    """The index of these live tasks and conversation owners."""
    draft = IndexDraft(empty_index())
    for task in tasks:
        draft.added(task)
    for cid, owner in owners.items():
        draft.conversation(cid, None, owner)
    return draft.freeze()


#: The empty member set (a constant: ``frozenset()`` is a call).
_EMPTY: frozenset[Any] = frozenset()


def _add(index: dict[Any, frozenset[Any]], key: Any, value: Any) -> None:
    index[key] = index.get(key, _EMPTY) | {value}


def _remove(index: dict[Any, frozenset[Any]], key: Any, value: Any) -> None:
    members = index.get(key)
    if members is None or value not in members:
        return
    if len(members) == 1:  # (its last member: no empty set built to be dropped)
        del index[key]
    else:
        index[key] = members - {value}


class IndexDraft:
    """A step's working copy of a ``TaskIndex`` (copy on first change).

    The draft tells it which of three things happened to a task (``added``,
    ``dropped``, ``moved``): each does only its own case's work, with the
    members added and removed inline (a task enters or leaves the live map
    about twice a step; issue 11 item 2)."""

    def __init__(self, base: TaskIndex) -> None:
        self._base = base
        # one unpacking of the tuple, in _FIELDS' order (checked below)
        self.children, self.top, self.owned_conversations, self.waiters, self.intent, self.in_conversation = base

    # A mapping is the draft's own once it is not the base's (copied on its
    # first change in the step): an identity test, inline on the hot paths.
    def _owned(self, name: str) -> dict[Any, Any]:
        mapping = getattr(self, name)
        if mapping is getattr(self._base, name):
            mapping = _mutable(mapping)
            setattr(self, name, mapping)
        return mapping  # type: ignore[no-any-return]

    def added(self, new: Task) -> None:
        """``new`` joined the live map."""
        base = self._base
        tid, cid, owner = new.id, new.conversation_id, new.owner
        m: dict[Any, Any]
        if owner is not None:
            m = self.children  # type: ignore[assignment]
            if m is base.children:
                m = self.children = _mutable(m)
            m[owner] = m.get(owner, _EMPTY) | {tid}
        else:
            m = self.top  # type: ignore[assignment]
            if m is base.top:
                m = self.top = _mutable(m)
            m[cid] = m.get(cid, _EMPTY) | {tid}
        m = self.in_conversation  # type: ignore[assignment]
        if m is base.in_conversation:
            m = self.in_conversation = _mutable(m)
        m[cid] = m.get(cid, _EMPTY) | {tid}
        status = new.status
        if status is _WAITING and new.on:
            m = self._owned("waiters")
            for t in new.on:
                m[t] = m.get(t, _EMPTY) | {tid}
        if new.abort_requested or status is _COMPLETING:  # needs_reconcile, spelt out
            self.intent = self.intent | {tid}

    def dropped(self, old: Task) -> None:
        """``old`` left the live map (it ended)."""
        base = self._base
        tid, cid, owner = old.id, old.conversation_id, old.owner
        m: dict[Any, Any]
        key: Any
        if owner is not None:
            m = self.children  # type: ignore[assignment]
            if m is base.children:
                m = self.children = _mutable(m)
            key = owner
        else:
            m = self.top  # type: ignore[assignment]
            if m is base.top:
                m = self.top = _mutable(m)
            key = cid
        members = m.get(key)  # _remove, inline (twice: a task ends about once a step)
        if members is not None and tid in members:
            if len(members) == 1:
                del m[key]
            else:
                m[key] = members - {tid}
        m = self.in_conversation  # type: ignore[assignment]
        if m is base.in_conversation:
            m = self.in_conversation = _mutable(m)
        members = m.get(cid)
        if members is not None and tid in members:
            if len(members) == 1:
                del m[cid]
            else:
                m[cid] = members - {tid}
        status = old.status
        if status is _WAITING and old.on:
            m = self._owned("waiters")
            for t in old.on:
                _remove(m, t, tid)
        if old.abort_requested or status is _COMPLETING:
            self.intent = self.intent - {tid}

    def moved(self, old: Task, new: Task) -> None:
        """Live task ``old`` became ``new`` (still live)."""
        if new.owner != old.owner or new.conversation_id != old.conversation_id:
            self._place(old, new)  # (most moves keep the task where it was)
        old_on = old.on if old.status is _WAITING else ()
        new_on = new.on if new.status is _WAITING else ()
        if old_on != new_on:
            waiters = self._owned("waiters")
            for tid in old_on:
                _remove(waiters, tid, old.id)
            for tid in new_on:
                _add(waiters, tid, new.id)
        # needs_reconcile, spelt out (two calls per move otherwise)
        was = old.abort_requested or old.status is _COMPLETING
        now = new.abort_requested or new.status is _COMPLETING
        if was != now:
            self.intent = self.intent | {new.id} if now else self.intent - {new.id}

    def _place(self, old: Task, new: Task) -> None:
        """The owner and conversation indexes, for a live task that changed
        its owner or conversation (``moved`` checked that it did)."""
        if old.owner is not None:
            _remove(self._owned("children"), old.owner, old.id)
        else:
            _remove(self._owned("top"), old.conversation_id, old.id)
        if new.owner is not None:
            _add(self._owned("children"), new.owner, new.id)
        else:
            _add(self._owned("top"), new.conversation_id, new.id)
        if new.conversation_id != old.conversation_id:
            convs = self._owned("in_conversation")
            _remove(convs, old.conversation_id, old.id)
            _add(convs, new.conversation_id, new.id)

    def conversation(self, cid: ConversationId, old_owner: TaskId | None, new_owner: TaskId | None) -> None:
        if old_owner == new_owner:
            return
        owned = self._owned("owned_conversations")
        if old_owner is not None:
            _remove(owned, old_owner, cid)
        if new_owner is not None:
            _add(owned, new_owner, cid)

    def freeze(self) -> TaskIndex:
        base = self._base
        if (
            self.children is base.children
            and self.top is base.top
            and self.waiters is base.waiters
            and self.in_conversation is base.in_conversation
            and self.intent is base.intent
            and self.owned_conversations is base.owned_conversations
        ):
            return base
        # by position, in _FIELDS' order (checked below), through tuple.__new__:
        # TaskIndex(...) would run the named tuple's Python __new__ on the way
        frozen = _tuple_new(
            TaskIndex,
            (
                _done(self.children), _done(self.top), _done(self.owned_conversations), _done(self.waiters),
                self.intent, _done(self.in_conversation),
            ),
        )
        # the draft goes on from the frozen index (a finished mutation takes
        # no more changes; the next change takes a new one)
        self._base = frozen
        self.children, self.top, self.owned_conversations, self.waiters, self.intent, self.in_conversation = frozen
        return frozen


_tuple_new = tuple.__new__

#: TaskIndex's fields in the order IndexDraft unpacks and rebuilds them.
_FIELDS = ("children", "top", "owned_conversations", "waiters", "intent", "in_conversation")
if TaskIndex._fields != _FIELDS:
    raise AssertionError(f"TaskIndex has fields {TaskIndex._fields}: IndexDraft spells out {_FIELDS}")
