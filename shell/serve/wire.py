"""What the HTTP API sends: records as JSON, through the store's one converter.

Every record leaves the server as ``codec.converter.unstructure`` makes it
(the same field names and values as in the store and the journal), encoded
by ``codec.dumps`` (compact, strict JSON). This module adds only the shapes
the API composes from records: a conversation's summary, a task row with
the core's verdict on it (``harness.inspect()``), and the parts of a live
view (``conv.watch()``) the page shows. Nothing here reads or writes state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pidurable.core.model import Conversation as ConversationRecord
from pidurable.core.model import Entry, Task, TaskId
from pidurable.core.scheduling import TaskInspection
from pidurable.core.state import AGENT_DOC, INBOX_DOC, USAGE_DOC, UsageDoc

from ..storage.codec import converter, dumps
from ..watch import BUILTIN_DOCS, ConversationView

__all__ = [
    "conversation_json",
    "dumps",
    "entry_text",
    "record",
    "task_row",
    "usage_json",
    "view_head",
]

#: How much of a conversation's first user message names it in the list.
TITLE_CHARS = 80


def record(obj: Any) -> Any:
    """A record as a JSON value (the converter's shape)."""
    return converter.unstructure(obj)


def entry_text(entry: Entry) -> str:
    """One entry, encoded (the hubs encode each entry once)."""
    return dumps(converter.unstructure(entry))


def usage_json(doc: UsageDoc | None) -> Any:
    return record(doc if doc is not None else UsageDoc())


def title_of(entries: Iterable[Entry]) -> str | None:
    """The first user message, cut to one line of ``TITLE_CHARS``."""
    for e in entries:
        if e.kind == "user" and e.text.strip():
            line = " ".join(e.text.split())
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
    return None


def conversation_json(conv: ConversationRecord, *, idle: bool, title: str | None, root: bool) -> dict[str, Any]:
    return {
        "id": conv.id,
        "idle": idle,
        "root": root,
        "title": title,
        "owner_task_id": conv.owner_task_id,
        "parent_id": conv.parent_id,
        "fork_at": conv.fork_at,
    }


def _tool_name(task: Task) -> str | None:
    name = task.input.get("name") if task.kind == "pi.tool" else None
    return str(name) if name is not None else None


def task_row(task: Task, why: TaskInspection | None) -> dict[str, Any]:
    """A live task as the API shows it: the record's identity and place,
    and the core's verdict (``state``: running / waiting / ready /
    completing / blocked; ``waiting_on``; ``reason`` when blocked)."""
    return {
        "id": task.id,
        "kind": task.kind,
        "tool": _tool_name(task),
        "conversation_id": task.conversation_id,
        "owner": task.owner,
        "background": task.background,
        "status": str(task.status),
        "phase": task.phase,
        "on": list(task.on),
        "abort_requested": task.abort_requested,
        "started_at": task.started_at,
        "state": why.state if why is not None else None,
        "waiting_on": list(why.on) if why is not None else [],
        "reason": why.reason if why is not None else None,
    }


def tree_tasks(
    tasks: Mapping[TaskId, Task], owned: Mapping[TaskId, tuple[Any, ...]], conversation_id: int
) -> list[Task]:
    """The live tasks of a conversation and of the sub-agent conversations
    its tasks own (transitively), in id order."""
    convs = {conversation_id}
    picked: dict[TaskId, Task] = {}
    grew = True
    while grew:
        grew = False
        for tid, task in tasks.items():
            if tid not in picked and task.conversation_id in convs:
                picked[tid] = task
                grew = True
                for child in owned.get(tid, ()):
                    convs.add(child)
    return [picked[t] for t in sorted(picked)]


def view_head(view: ConversationView) -> str:
    """A view's JSON members except its entries (``"seq":...,...``), which
    a hub sends per client (only the ones the client has not had)."""
    docs = view.documents
    own = {k: v for k, v in docs.items() if k not in BUILTIN_DOCS}
    conv = view.conversation
    head = {
        "seq": view.seq,
        "conversation_id": view.conversation_id,
        "idle": view.idle,
        "live": record(view.live) if view.live is not None else None,
        "agent": record(docs.get(AGENT_DOC)),
        "inbox": record(docs.get(INBOX_DOC, ())),
        "usage": usage_json(docs.get(USAGE_DOC)),
        "documents": own,
        "conversation": record(conv) if conv is not None else None,
    }
    return dumps(head)[1:-1]
