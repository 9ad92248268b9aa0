"""``pidurable inspect --db STORE [--all] [--json]``: conversations, their
submissions and usage, and the live tasks as a tree with why each one is
where it is (what it waits on, what blocks it, the last error near it).

``STORE`` is a SQLite file or a JSONL store's directory. Strictly
read-only: the store is opened through :mod:`..storage.readonly` and its
lock is never taken, so a store held by a live process can be inspected
too (a consistent snapshot: one read transaction of SQLite, the complete
commits of a JSONL store's files as read; nothing is repaired). What
is shown is built once, as the report of :mod:`.diagnose`; ``--json`` prints
it as it is, the text view renders it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..storage.readonly import StoreView, open_view
from .common import Subparsers, existing_store, short, task_tree
from .diagnose import Diagnosis


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="conversations, submissions, usage and live tasks of a store, and why they wait (read-only)",
        description="Print a store's conversations, their submissions and usage, and the live tasks as a tree "
        "with why each waits (on which tasks, blocked by what, the last error). Read-only; works on a store "
        "held by a live process. The store is a SQLite file or a JSONL store's directory.",
    )
    p.add_argument("--db", metavar="STORE", required=True, help="the store: a SQLite file or a JSONL store's directory")
    p.add_argument("--all", action="store_true", help="show finished (terminal) tasks too")
    p.add_argument("--json", action="store_true", help="print the report as JSON (machine-readable)")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    store = open_view(existing_store(args.db))
    try:
        holder = store.holder()
        store.begin()
        try:
            if args.json:
                text = json.dumps(Diagnosis(store, holder).report(show_all=args.all), indent=2, ensure_ascii=False)
            else:
                text = "\n".join(inspect_lines(store, show_all=args.all, holder=holder))
        finally:
            store.end()
    finally:
        store.close()
    print(text)
    return 0


def inspect_lines(store: StoreView, *, show_all: bool, holder: int | None) -> list[str]:
    """What ``inspect`` prints, read from ``store`` (in a read transaction)."""
    diagnosis = Diagnosis(store, holder)
    report = diagnosis.report(show_all=show_all)
    meta = report["store"]
    out = [f"store {meta['path']} (schema {meta['schema']}, {meta['commits']} commits, id {meta['store_id']})"]
    if holder is not None:
        out.append(f"  in use by process {holder}: this is a read-only snapshot of a live store")
    last = report["last_process"]
    if last is not None and last["divergence"]:
        out.append(
            f"  note: the last process's journal does not replay exactly under this code ({last['divergence']}); "
            "see pidurable replay --check"
        )
    if not report["conversations"]:
        out.append("no conversations")
        return out
    for conv in report["conversations"]:
        out.extend(_conversation_lines(conv))
        shown = {t["id"]: t for t in conv["tasks"]}
        label = "tasks" if show_all else "live tasks"
        if not shown:
            out.append(f"  {label}: none")
            continue
        out.append(f"  {label} ({len(shown)}):")
        tasks = [diagnosis.tasks[i] for i in shown]
        out.extend(task_tree(tasks, indent="    ", extra=lambda t: why_lines(shown[t.id])))
    if any(report["usage"].values()):
        out.append("usage in total: " + usage_text(report["usage"]))
    return out


def _conversation_lines(conv: dict[str, Any]) -> list[str]:
    """A conversation's title, state, agent, submissions, inbox and usage."""
    cid = conv["id"]
    title = f"conversation {cid}" + (" (root)" if conv["root"] else "")
    if conv["owner_task_id"] is not None:
        title += f" (owned by task #{conv['owner_task_id']})"
    if conv.get("parent_id") is not None:
        title += f" (fork of {conv['parent_id']} at entry #{conv['fork_at']})"
    out = [f"{title}: {'busy' if conv['busy'] else 'idle'}, {conv['entries']} entries"]
    agent = conv["agent"]
    if agent is not None and agent["model"] is not None:
        out.append(f"  model {agent['model']}" + (f", cwd {agent['cwd']}" if agent["cwd"] else ""))
    run = conv["run"]
    if run is not None:
        inputs = ", ".join(f"#{s}" for s in run["inputs"])
        out.append(f"  run: generation #{run['task_id']} answering [{inputs}]")
    if conv["retry"] is not None:
        out.append(f"  retrying after a model error: {short(conv['retry']['error'] or '', 100)}")
    subs = conv["submissions"]
    out.append(f"  submissions ({len(subs)}):" if subs else "  submissions: none")
    for s in subs:
        line = f"    #{s['id']} {s['type']} {s['status']}"
        if s["reason"]:
            line += f" reason={s['reason']}"
        if s["request_id"]:
            line += f" request={s['request_id']}"
        if s["answer_entry_id"] is not None:
            line += f" answer=entry #{s['answer_entry_id']}"
        if s["detail"]:
            line += f" — {short(s['detail'], 60)}"
        out.append(line)
    if conv["inbox"]:
        out.append(f"  inbox: {len(conv['inbox'])} waiting")
        for item in conv["inbox"]:
            out.append(f"    submission #{item['submission_id']} {item['mode']}: {short(item['content'], 60)}")
    if any(conv["usage"].values()):
        out.append("  usage: " + usage_text(conv["usage"]))
    return out


def usage_text(usage: dict[str, Any]) -> str:
    """``scripted:m 2 calls (320 in, 42 out tokens); tools: read 1 call``."""

    def one(name: str, t: dict[str, int]) -> str:
        text = f"{name} {t['calls']} call{'' if t['calls'] == 1 else 's'}"
        if t["input_tokens"] or t["output_tokens"]:
            text += f" ({t['input_tokens']} in, {t['output_tokens']} out tokens)"
        return text

    parts = [", ".join(one(k, v) for k, v in usage["models"].items())] if usage["models"] else []
    if usage["tools"]:
        parts.append("tools: " + ", ".join(one(k, v) for k, v in usage["tools"].items()))
    return "; ".join(parts)


def why_lines(task: dict[str, Any]) -> list[str]:
    """Why a live task is where it is, as lines under its tree line (for a
    tool call settled by its ``reconcile``: the verdict)."""
    if task["status"] == "terminal":
        verdict = task.get("reconciled")
        return [f"settled by reconcile: {verdict}"] if verdict else []
    out: list[str] = []
    state = task.get("state")
    if task.get("blocked"):
        out.append(f"blocked ({task['blocked']['reason']}): {task['blocked']['detail']}")
    elif state == "waiting" and task["waiting_on"]:
        waited = ", ".join(_waited(w) for w in task["waiting_on"])
        out.append(f"waiting on {waited}")
    elif state == "ready":
        out.append("ready: runs at the next scheduling pass (or when the store is opened again)")
    elif state == "completing":
        out.append("completing: waits for the work it owns to settle")
    if task.get("note"):
        out.append(task["note"])
    error = task.get("last_error")
    if error is not None:
        text = error["message"] or ""
        if error.get("result"):
            text += f" — {error['result']}"
        out.append(f"last error ({error['source']}): {short(text, 120)}")
    return out


def _waited(w: dict[str, Any]) -> str:
    name = f" {w['tool']}" if w.get("tool") else ""
    state = w.get("state") or w["status"]
    return f"#{w['id']}{name} ({state})"
