"""``pidurable transcript --db STORE [--conversation ID] [--json] [--full]``:
a conversation's transcript, readably.

One block per entry, oldest first: a header line (``#12 assistant``,
``#14 tool read [error]``, ``#20 ── compaction ──``) and its body indented
under it. Tool calls are shown with their arguments; tool results, system
prompt texts and compaction summaries are cut to a few lines (``--full``
shows everything); user and assistant texts are shown whole. ``--json``
prints the conversation and its entries as stored (every text whole).

Read-only, like ``inspect``: the lock is never taken; ``STORE`` is a SQLite
file or a JSONL store's directory.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pidurable.core.model import ConversationId, Entry, EntryKind

from ..storage import codec
from ..storage.readonly import StoreView, open_view
from .common import EXIT_USAGE, CliError, Subparsers, existing_store

#: A cut body keeps at most this many lines and characters.
MAX_LINES = 12
MAX_CHARS = 1200
#: Longest argument value shown in a tool call (``--full``: all of it).
MAX_ARG = 200

BODY = "    "


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "transcript",
        parents=[common],
        help="print a conversation's transcript readably (read-only)",
        description="Print a conversation's entries: user and assistant messages, tool calls with their "
        "arguments, tool results (cut to a few lines unless --full), system prompt changes, compaction and "
        "reset markers. Read-only; works on a store held by a live process. The store is a SQLite file or a "
        "JSONL store's directory.",
    )
    p.add_argument("--db", metavar="STORE", required=True, help="the store: a SQLite file or a JSONL store's directory")
    p.add_argument("--conversation", metavar="ID", type=int, default=None, help="which conversation (default: the root)")
    p.add_argument("--json", action="store_true", help="print the conversation and its entries as JSON")
    p.add_argument("--full", action="store_true", help="show tool results, system prompts and arguments whole")
    p.set_defaults(func=cmd_transcript)


def cmd_transcript(args: argparse.Namespace) -> int:
    store = open_view(existing_store(args.db))
    try:
        store.begin()
        try:
            cid, entries, header = _read(store, args.conversation)
        finally:
            store.end()
    finally:
        store.close()
    if args.json:
        print(json.dumps({"conversation": header, "entries": [entry_json(e) for e in entries]}, indent=2, ensure_ascii=False))
    else:
        print("\n".join(transcript_lines(cid, header, entries, full=args.full)))
    return 0


def _read(store: StoreView, wanted: int | None) -> tuple[ConversationId, list[Entry], dict[str, Any]]:
    convs = {c.id: c for c in store.conversations()}
    if not convs:
        raise CliError(f"store {store.path} has no conversations", EXIT_USAGE)
    cid = ConversationId(wanted if wanted is not None else (1 if 1 in convs else min(convs)))
    if cid not in convs:
        known = ", ".join(str(c) for c in sorted(convs))
        raise CliError(f"conversation {cid} does not exist in {store.path} (conversations: {known})", EXIT_USAGE)
    conv = convs[cid]
    agent = store.document(cid, "pi.agent")
    header = {
        "id": cid,
        "owner_task_id": conv.owner_task_id,
        "parent_id": getattr(conv, "parent_id", None),
        "fork_at": getattr(conv, "fork_at", None),
        "model": str(agent.model) if agent is not None and agent.model is not None else None,
    }
    return cid, store.entries(cid), header


def entry_json(e: Entry) -> Any:
    """An entry as stored (the codec's JSON form)."""
    return json.loads(codec.to_json(e))


def transcript_lines(cid: int, header: dict[str, Any], entries: list[Entry], *, full: bool) -> list[str]:
    title = f"conversation {cid}" + (" (root)" if cid == 1 else "")
    if header["owner_task_id"] is not None:
        title += f", owned by task #{header['owner_task_id']}"
    if header["parent_id"] is not None:
        title += f", a fork of conversation {header['parent_id']} at entry #{header['fork_at']}"
    title += f": {len(entries)} entries" + (f", model {header['model']}" if header["model"] else "")
    out = [title]
    for e in entries:
        out.append("")
        out.extend(entry_lines(e, cid, full=full))
    return out


def entry_lines(e: Entry, cid: int, *, full: bool) -> list[str]:
    """One entry: its header line and indented body."""
    where = f" (from conversation {e.conversation_id})" if e.conversation_id != cid else ""
    kind = str(e.kind)
    if kind == EntryKind.ASSISTANT:
        head = f"#{e.id} assistant"
        notes = [n for n in (e.stop_reason, _usage(e)) if n]
        head += f" [{', '.join(notes)}]" if notes else ""
        body = _text(e.text) if e.text else []
        if e.is_error and not e.text:
            body = ["(error)"]
        for call in e.tool_calls:
            body.append(f"{BODY}-> {call.name}({_args(call.arguments, full)})  [{call.id}]")
        return [head + where, *body]
    if kind == EntryKind.TOOL_RESULT:
        verdict = (e.data or {}).get("reconciled")  # how reconcile settled it (issue 15)
        mark = ("error" if e.is_error else "ok") + (f", reconciled: {verdict}" if verdict else "")
        head = f"#{e.id} tool {e.tool_name or '?'} [{mark}] for {e.tool_call_id}"
        return [head + where, *_cut(e.text, full)]
    if kind == EntryKind.SYSTEM:
        return [f"#{e.id} system: {_system_summary(e.data)}" + where, *_system_body(e.data, full)]
    if kind == EntryKind.COMPACTION:
        first = (e.data or {}).get("head")
        reason = (e.data or {}).get("reason")
        title = f"#{e.id} ── compaction" + (f" ({reason})" if reason else "")
        title += f": the model's context starts at entry #{first} after this summary ──" if first is not None else " ──"
        return [title + where, *_cut(e.text, full)]
    if kind == EntryKind.RESET:
        title = f"#{e.id} ── reset: the model's context starts afresh here ──"
        return [title + where, *(_text("handoff: " + e.text) if e.text else [])]
    if kind == EntryKind.USER:
        return [f"#{e.id} user" + where, *_text(e.text)]
    extra = f" {json.dumps(e.data, ensure_ascii=False)}" if e.data else ""
    return [f"#{e.id} {kind}{extra}" + where, *_text(e.text)]


def _usage(e: Entry) -> str:
    if e.usage is None:
        return ""
    return f"{e.usage.input_tokens} in, {e.usage.output_tokens} out tokens"


def _text(text: str) -> list[str]:
    return [BODY + line for line in text.splitlines()] or [BODY]


def _cut(text: str, full: bool) -> list[str]:
    """``text`` as body lines, cut to MAX_LINES/MAX_CHARS unless ``full``."""
    if full or (len(text) <= MAX_CHARS and text.count("\n") < MAX_LINES):
        return _text(text)
    lines = text.splitlines()
    kept, size = [], 0
    for line in lines[:MAX_LINES]:
        if size + len(line) > MAX_CHARS:
            kept.append(line[: max(MAX_CHARS - size, 0)])
            break
        kept.append(line)
        size += len(line) + 1
    shown = sum(len(x) + 1 for x in kept)
    more_lines = len(lines) - len(kept)
    rest = f"{more_lines} more lines, " if more_lines > 0 else ""
    return [*_text("\n".join(kept)), f"{BODY}… ({rest}{max(len(text) - shown, 0)} more characters; --full shows all)"]


def _args(arguments: dict[str, Any], full: bool) -> str:
    parts = []
    for k, v in arguments.items():
        text = repr(v) if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        if not full and len(text) > MAX_ARG:
            text = text[: MAX_ARG - 1] + "…"
        parts.append(f"{k}={text}")
    return ", ".join(parts)


def _system_summary(data: dict[str, Any] | None) -> str:
    """What a system entry changed: prompt sections and tools."""
    if not data:
        return "(no change recorded)"
    parts = []
    sections = data.get("sections")
    if isinstance(sections, dict) and sections:
        set_ = [k for k, v in sections.items() if v is not None]
        gone = [k for k, v in sections.items() if v is None]
        if set_:
            parts.append("prompt sections " + ", ".join(set_))
        if gone:
            parts.append("removed sections " + ", ".join(gone))
    added, removed = data.get("tools_added") or [], data.get("tools_removed") or []
    if added or removed:
        parts.append("tools " + " ".join([*(f"+{t}" for t in added), *(f"-{t}" for t in removed)]))
    if "order" in data and not parts:
        parts.append("sections reordered")
    return "; ".join(parts) or "(no change recorded)"


def _system_body(data: dict[str, Any] | None, full: bool) -> list[str]:
    sections = (data or {}).get("sections")
    if not isinstance(sections, dict):
        return []
    out: list[str] = []
    for key, text in sections.items():
        if isinstance(text, str):
            out.append(f"{BODY}[{key}]")
            out.extend(BODY + line for line in _cut(text, full))
    return out
