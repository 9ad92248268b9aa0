"""``pidurable inspect --db FILE [--all]``: conversations, their submissions
and the live tasks as a tree.

Strictly read-only: the file is opened through :mod:`..storage.readonly` and
the store's lock is never taken, so a store held by a live process can be
inspected too (a consistent snapshot, read in one read transaction).
"""

from __future__ import annotations

import argparse

from pidurable.core.model import ConversationId
from pidurable.core.state import AGENT_DOC, INBOX_DOC, LIVE_DOC, InboxItem, Live

from ..storage.readonly import ReadOnlySqlite, lock_holder, open_readonly
from .common import Subparsers, short, task_tree


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="conversations, submissions and live tasks of a store (read-only)",
        description="Print a store's conversations, their submissions and the live tasks as a tree. "
        "Read-only; works on a store held by a live process.",
    )
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    p.add_argument("--all", action="store_true", help="show finished (terminal) tasks too")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    store = open_readonly(args.db)
    try:
        holder = lock_holder(store.file)
        store.begin()
        try:
            lines = inspect_lines(store, show_all=args.all, holder=holder)
        finally:
            store.end()
    finally:
        store.close()
    print("\n".join(lines))
    return 0


def inspect_lines(store: ReadOnlySqlite, *, show_all: bool, holder: int | None) -> list[str]:
    """What ``inspect`` prints, read from ``store`` (in a read transaction)."""
    out = [f"store {store.path} (schema {store.schema_version}, {store.commits()} commits, id {store.store_id()})"]
    if holder is not None:
        out.append(f"  in use by process {holder}: this is a read-only snapshot of a live store")
    convs = store.conversations()
    if not convs:
        out.append("no conversations")
        return out
    all_tasks = store.tasks()
    for c in convs:
        out.extend(_conversation_lines(store, c.id, c.owner_task_id))
        tasks = [t for t in all_tasks if t.conversation_id == c.id]
        shown = tasks if show_all else [t for t in tasks if t.live]
        label = "tasks" if show_all else "live tasks"
        if not shown:
            out.append(f"  {label}: none")
        else:
            out.append(f"  {label} ({len(shown)}):")
            out.extend(task_tree(shown, indent="    "))
    return out


def _conversation_lines(store: ReadOnlySqlite, cid: ConversationId, owner_task_id: int | None) -> list[str]:
    """A conversation's title, state, agent, submissions and inbox."""
    title = f"conversation {cid}" + (" (root)" if cid == 1 else "")
    if owner_task_id is not None:
        title += f" (owned by task #{owner_task_id})"
    live: Live | None = store.document(cid, LIVE_DOC)
    inbox: tuple[InboxItem, ...] = store.document(cid, INBOX_DOC) or ()
    state = "busy" if live is not None and live.run is not None else "idle"
    out = [f"{title}: {state}, {store.entry_count(cid)} entries"]
    agent = store.document(cid, AGENT_DOC)
    if agent is not None and agent.model is not None:
        out.append(f"  model {agent.model}" + (f", cwd {agent.cwd}" if agent.cwd else ""))
    if live is not None and live.run is not None:
        inputs = ", ".join(f"#{s}" for s in live.run.inputs)
        out.append(f"  run: generation #{live.run.task_id} answering [{inputs}]")
    subs = store.submissions(cid)
    out.append(f"  submissions ({len(subs)}):" if subs else "  submissions: none")
    for s in subs:
        line = f"    #{s.id} {s.type} {s.status.value}"
        if s.reason:
            line += f" reason={s.reason}"
        if s.request_id:
            line += f" request={s.request_id}"
        if s.answer_entry_id is not None:
            line += f" answer=entry #{s.answer_entry_id}"
        if s.detail:
            line += f" — {short(s.detail, 60)}"
        out.append(line)
    if inbox:
        out.append(f"  inbox: {len(inbox)} waiting")
        for item in inbox:
            out.append(f"    submission #{item.submission_id} {item.mode}: {short(item.content, 60)}")
    return out
