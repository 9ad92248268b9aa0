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

Not in the table (issue 3 extends this module): passive writes, ``all`` queue
modes, withdrawal on abort.
"""

from __future__ import annotations

from .effects import Tx
from .model import (
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    SubmissionId,
)
from .lifecycle import submission_to
from .state import InboxItem


def enqueue(tx: Tx, cid: ConversationId, sid: SubmissionId, mode: str, content: str) -> None:
    items = tx.conv(cid).inbox + (InboxItem(submission_id=sid, mode=mode, content=content),)
    tx.set_inbox(cid, items)


def append_user(tx: Tx, cid: ConversationId, content: str) -> EntryId:
    entry = Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=cid,
        kind=EntryKind.USER,
        text=content,
        at=tx.now,
    )
    tx.put_entry(entry)
    return entry.id


def place(tx: Tx, item: InboxItem, cid: ConversationId) -> SubmissionId:
    """Append the item's user entry and mark its submission placed."""
    entry_id = append_user(tx, cid, item.content)
    sub = tx.submissions[item.submission_id]
    tx.put_submission(submission_to(sub, "place", entry_id=entry_id))
    return sub.id


def boundary(tx: Tx, cid: ConversationId, *, final: bool) -> tuple[SubmissionId, ...]:
    """Place the items this boundary selects; return their submission ids.

    Selection (one-at-a-time modes): the first steer item; at a final
    boundary also the first follow-up item. Placement is in id order.
    """
    items = tx.conv(cid).inbox
    if not items:
        return ()
    selected: list[InboxItem] = []
    steer = next((i for i in items if i.mode == "steer"), None)
    if steer is not None:
        selected.append(steer)
    if final:
        follow = next((i for i in items if i.mode == "follow_up"), None)
        if follow is not None:
            selected.append(follow)
    if not selected:
        return ()
    selected.sort(key=lambda i: i.submission_id)
    chosen = {i.submission_id for i in selected}
    tx.set_inbox(cid, tuple(i for i in items if i.submission_id not in chosen))
    return tuple(place(tx, item, cid) for item in selected)
