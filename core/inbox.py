"""The inbox (``pi.inbox``) and boundaries: where queued input is placed.

Theory of operation
-------------------
Input that arrives while a conversation is busy is *queued*: its submission is
written ``queued`` and an :class:`~pidurable.core.state.InboxItem` holding the
content is appended to ``pi.inbox``, in one commit, so a crash loses nothing.

A *boundary* is a point inside another commit where queued items are placed:
- ``post_tools`` (a tool round finished, the run continues): the first steer
  item joins the running run;
- ``final`` (the run answered): the first steer item and the first follow-up
  item are placed and start the next run.
Placing an item appends its user entry and moves its submission to ``placed``
in the same commit that removes it from the inbox.

Invariants
- ``QueuedInputNeverLost``: an item leaves the inbox only in the commit that
  places or withdraws its submission.
- ``PlacedOnce``: a submission is placed at most once.

Passive writes (``Write``) queue like input but are all placed at every
boundary, before user items, and never start a run by themselves; an abort
withdraws queued *inputs* only (``unanswered/aborted``), writes stay.

Head markers (reference §3.3): a write whose ``data["head"]`` is ``"self"``
(a reset) gets its own entry id as head; one with a numeric head (a
compaction's summary) keeps it, unless that head is older than the current
range start (``pi.context.head``, moved by the heads placed before it, even
in the same boundary): then it is *stale* - settled ``unanswered/stale``
with no entry. A placed marker moves the range start.
A queued reset makes any boundary final (:func:`has_reset`).
"""

from __future__ import annotations

from typing import Any

import attrs

from .draft import Tx
from .model import (
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    QueueMode,
    Reason,
    SubmissionId,
)
from .lifecycle import SubmissionMove, next_submission_status, submission_to
from .model import Submission
from .state import ContextDoc, InboxItem, InboxMode

#: ``data["head"]`` of a reset write: the marker's own entry id.
HEAD_SELF = "self"


def enqueue(tx: Tx, cid: ConversationId, item: InboxItem) -> None:
    tx.set_inbox(cid, tx.conversations[cid].inbox + (item,))


def append_user(tx: Tx, cid: ConversationId, content: str) -> EntryId:
    return append_entry(tx, cid, EntryKind.USER, content, None)


def append_entry(tx: Tx, cid: ConversationId, kind: str, content: str, data: dict[str, Any] | None) -> EntryId:
    entry = Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=cid,
        kind=kind,
        text=content,
        at=tx.now,
        data=data,
    )
    tx.put_entry(entry)
    return entry.id


def is_stale(tx: Tx, cid: ConversationId, data: dict[str, Any] | None) -> bool:
    """A write whose numeric head is older than the current range start."""
    head = (data or {}).get("head")
    current = tx.conversations[cid].context.head
    return isinstance(head, int) and not isinstance(head, bool) and current is not None and head < current


def append_write(tx: Tx, cid: ConversationId, kind: str, content: str, data: dict[str, Any] | None) -> EntryId:
    """A write's entry; a head marker (``head`` self or numeric) moves the
    range start. The caller checked :func:`is_stale`."""
    head = (data or {}).get("head")
    if head == HEAD_SELF:
        entry_id = EntryId(tx.next_id)  # the id append_entry allocates next
        data = {**(data or {}), "head": entry_id}
    entry_id = append_entry(tx, cid, kind, content, data)
    if kind in (EntryKind.COMPACTION, EntryKind.RESET) and isinstance((data or {}).get("head"), int):
        tx.set_context(cid, ContextDoc(head=EntryId(int((data or {})["head"]))))
    return entry_id


def place_write(
    tx: Tx, sub: Submission, cid: ConversationId, kind: str, content: str, data: dict[str, Any] | None, *, new: bool = False
) -> None:
    """Place a write (queued, or ``new``: admitted on an idle conversation,
    ``sub`` not yet stored): its entry and ``done``, or
    ``unanswered/stale`` with no entry."""
    if is_stale(tx, cid, data):
        if new:
            tx.put_submission(attrs.evolve(sub, status=next_submission_status(None, SubmissionMove.ADMIT_STALE), reason=Reason.STALE))
        else:
            tx.put_submission(submission_to(sub, SubmissionMove.STALE, reason=Reason.STALE))
        return
    entry_id = append_write(tx, cid, kind, content, data)
    if new:
        tx.put_submission(attrs.evolve(sub, status=next_submission_status(None, SubmissionMove.ADMIT_WRITE), entry_id=entry_id))
    else:
        tx.put_submission(submission_to(sub, SubmissionMove.APPEND, entry_id=entry_id))


def has_reset(tx: Tx, cid: ConversationId) -> bool:
    """A queued reset (a write with head ``self``): the boundary is final."""
    return any(i.mode == InboxMode.WRITE and (i.data or {}).get("head") == HEAD_SELF for i in tx.conversations[cid].inbox)


def place(tx: Tx, item: InboxItem, cid: ConversationId) -> SubmissionId:
    """Append the item's entry; a write is then ``done`` (or ``stale``), an
    input ``placed``."""
    sub = tx.submissions[item.submission_id]
    if item.mode == InboxMode.WRITE:
        place_write(tx, sub, cid, item.kind or EntryKind.USER, item.content, item.data)
    else:
        entry_id = append_user(tx, cid, item.content)
        tx.put_submission(submission_to(sub, SubmissionMove.PLACE, entry_id=entry_id))
    return sub.id


def boundary(tx: Tx, cid: ConversationId, *, final: bool) -> tuple[SubmissionId, ...]:
    """Place what this boundary selects; return the placed *input* ids.

    Selection: every write; the first steer item (all with
    ``steering_mode="all"``); at a final boundary also the first follow-up
    (all with ``follow_up_mode="all"``). Writes are placed first, then the
    user items, each group in id order.
    """
    items = tx.conversations[cid].inbox
    if not items:
        return ()
    settings = tx.settings
    writes = [i for i in items if i.mode == InboxMode.WRITE]
    users: list[InboxItem] = []
    steers = [i for i in items if i.mode == InboxMode.STEER]
    users.extend(steers if settings.steering_mode == QueueMode.ALL else steers[:1])
    if final:
        follows = [i for i in items if i.mode == InboxMode.FOLLOW_UP]
        users.extend(follows if settings.follow_up_mode == QueueMode.ALL else follows[:1])
    if not writes and not users:
        return ()
    writes.sort(key=lambda i: i.submission_id)
    users.sort(key=lambda i: i.submission_id)
    chosen = {i.submission_id for i in writes} | {i.submission_id for i in users}
    tx.set_inbox(cid, tuple(i for i in items if i.submission_id not in chosen))
    for item in writes:
        place(tx, item, cid)
    return tuple(place(tx, item, cid) for item in users)


def withdraw_inputs(tx: Tx, cid: ConversationId) -> None:
    """Withdraw every queued *input* of a conversation (an abort): each
    settles ``unanswered/aborted``; queued writes stay."""
    items = tx.conversations[cid].inbox
    inputs = [i for i in items if i.mode != InboxMode.WRITE]
    if not inputs:
        return
    tx.set_inbox(cid, tuple(i for i in items if i.mode == InboxMode.WRITE))
    for item in inputs:
        sub = tx.submissions[item.submission_id]
        tx.put_submission(submission_to(sub, SubmissionMove.WITHDRAW, reason=Reason.ABORTED))
