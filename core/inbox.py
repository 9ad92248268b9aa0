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
"""

from __future__ import annotations

from typing import Any

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
from .lifecycle import SubmissionMove, submission_to
from .state import InboxItem, InboxMode


def enqueue(tx: Tx, cid: ConversationId, item: InboxItem) -> None:
    tx.set_inbox(cid, tx.conv(cid).inbox + (item,))


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


def place(tx: Tx, item: InboxItem, cid: ConversationId) -> SubmissionId:
    """Append the item's entry; a write is then ``done``, an input ``placed``."""
    sub = tx.submissions[item.submission_id]
    if item.mode == InboxMode.WRITE:
        entry_id = append_entry(tx, cid, item.kind or EntryKind.USER, item.content, item.data)
        tx.put_submission(submission_to(sub, SubmissionMove.APPEND, entry_id=entry_id))
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
    items = tx.conv(cid).inbox
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
    items = tx.conv(cid).inbox
    inputs = [i for i in items if i.mode != InboxMode.WRITE]
    if not inputs:
        return
    tx.set_inbox(cid, tuple(i for i in items if i.mode == InboxMode.WRITE))
    for item in inputs:
        sub = tx.submissions[item.submission_id]
        tx.put_submission(submission_to(sub, SubmissionMove.WITHDRAW, reason=Reason.ABORTED))
