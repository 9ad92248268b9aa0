"""What ``pidurable inspect`` knows about a store, as one JSON-ready report:
conversations, submissions, usage, and for each live task why it is where it
is ("why is this stuck?").

Why a task waits is the core's own answer, ``scheduling.inspect_tasks`` (the
same as ``harness.inspect()``), asked of the state the store's last process
had at its last commit: the journal from that process's ``opened`` on,
replayed through the core (``journal.last_state``). That state holds what
the tables do not - the tool and task definitions that process had
installed (so "blocked: no definition of X" names what was missing), which
tasks it had in flight - and costs one process life of replay, not the
whole history. Without a replayable life (an empty journal), the tasks'
stored ``on`` lists stand in.

Everything is read in the caller's read transaction; nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pidurable.core.model import ConversationId, Reason, Task
from pidurable.core.scheduling import TaskInspection, inspect_tasks
from pidurable.core.state import AGENT_DOC, INBOX_DOC, LIVE_DOC, USAGE_DOC, InboxItem, Live, State, UsageDoc, UsageTotals

from ..journal import last_state
from ..storage.readonly import StoreView

#: Report layout version (the ``--json`` output's ``"report"`` field).
REPORT_VERSION = 1


def _totals(t: UsageTotals) -> dict[str, int]:
    return {"input_tokens": t.input_tokens, "output_tokens": t.output_tokens, "calls": t.calls}


def usage_json(usage: UsageDoc) -> dict[str, Any]:
    return {
        "models": {k: _totals(v) for k, v in sorted(usage.models.items())},
        "tools": {k: _totals(v) for k, v in sorted(usage.tools.items())},
    }


def _add(total: dict[str, dict[str, UsageTotals]], usage: UsageDoc) -> None:
    for group, items in (("models", usage.models), ("tools", usage.tools)):
        for k, v in items.items():
            total[group][k] = total[group].get(k, UsageTotals()) + v


def _error_message(task: Task) -> str | None:
    if task.outcome is None or not task.outcome.error:
        return None
    message = task.outcome.error.get("message")
    return str(message) if message is not None else str(task.outcome.error)


def _tool_name(task: Task) -> str | None:
    name = task.input.get("name") if task.kind == "pi.tool" else None
    return str(name) if name is not None else None


def _label(task: Task) -> str:
    name = _tool_name(task)
    return f"#{task.id} {task.kind}" + (f" {name}" if name else "")


def _blocked_detail(task: Task, reason: str, state: State) -> str:
    info = state.task_catalog.get(task.kind)
    installed = ", ".join(sorted(state.task_catalog)) or "none"
    if reason == Reason.MISSING_TASK or info is None:
        return f"no definition of task kind {task.kind!r} is installed (installed kinds: {installed})"
    if reason == Reason.TASK_TOO_OLD:
        return f"the installed definition of {task.kind!r} is version {info.version}, older than the task's {task.version}"
    if not info.has_migrate:
        return f"the task is version {task.version}, the installed definition {info.version} has no migrate function"
    return f"migrating the task from version {task.version} to {info.version} failed; install another version to retry"


class Diagnosis:
    """Builds the report; ``tasks`` are every task of the store (by id)."""

    def __init__(self, store: StoreView, holder: int | None) -> None:
        self.store = store
        self.holder = holder
        self.tasks: dict[int, Task] = {t.id: t for t in store.tasks()}
        self.children: dict[int, list[Task]] = {}
        for t in self.tasks.values():
            if t.owner is not None:
                self.children.setdefault(t.owner, []).append(t)
        self.state: State | None = None
        self.state_note: dict[str, Any] | None = None
        rows = store.last_life()
        found = last_state(rows) if rows else None
        if found is not None:
            self.state, divergence = found
            self.state_note = {"opened_at": rows[0].seq, "replayed_to": rows[-1].seq, "divergence": None}
            if divergence is not None:
                self.state_note["divergence"] = f"commit {divergence.seq}: {divergence.message}"
        self.why: Mapping[int, TaskInspection] = (
            {i.task_id: i for i in inspect_tasks(self.state)} if self.state is not None else {}
        )

    def report(self, *, show_all: bool) -> dict[str, Any]:
        s = self.store
        total: dict[str, dict[str, UsageTotals]] = {"models": {}, "tools": {}}
        conversations = []
        for c in s.conversations():
            conv = self.conversation(c.id, c.owner_task_id, show_all=show_all)
            conv["parent_id"] = getattr(c, "parent_id", None)
            conv["fork_at"] = getattr(c, "fork_at", None)
            usage: UsageDoc = s.document(c.id, USAGE_DOC) or UsageDoc()
            _add(total, usage)
            conversations.append(conv)
        catalog = None
        if self.state is not None:
            catalog = {
                "tools": [{"name": i.name, "replay": i.replay.value} for _, i in sorted(self.state.catalog.items())],
                "task_kinds": [
                    {"kind": i.kind, "version": i.version, "migrate": i.has_migrate}
                    for _, i in sorted(self.state.task_catalog.items())
                ],
            }
        return {
            "report": REPORT_VERSION,
            "store": {
                "path": str(s.path),
                "schema": s.schema_version,
                "commits": s.commits(),
                "store_id": s.store_id(),
                "held_by_pid": self.holder,
            },
            "last_process": self.state_note,
            "installed": catalog,
            "usage": {
                "models": {k: _totals(v) for k, v in sorted(total["models"].items())},
                "tools": {k: _totals(v) for k, v in sorted(total["tools"].items())},
            },
            "conversations": conversations,
        }

    def conversation(self, cid: ConversationId, owner_task_id: int | None, *, show_all: bool) -> dict[str, Any]:
        s = self.store
        live: Live = s.document(cid, LIVE_DOC) or Live()
        inbox: tuple[InboxItem, ...] = s.document(cid, INBOX_DOC) or ()
        agent = s.document(cid, AGENT_DOC)
        usage: UsageDoc = s.document(cid, USAGE_DOC) or UsageDoc()
        tasks = sorted((t for t in self.tasks.values() if t.conversation_id == cid), key=lambda t: t.id)
        shown = tasks if show_all else [t for t in tasks if t.live]
        return {
            "id": cid,
            "root": cid == 1,
            "owner_task_id": owner_task_id,
            "busy": live.run is not None,
            "entries": s.entry_count(cid),
            "agent": None
            if agent is None
            else {"model": str(agent.model) if agent.model is not None else None, "cwd": agent.cwd},
            "run": None
            if live.run is None
            else {"task_id": live.run.task_id, "inputs": list(live.run.inputs), "attempt": live.attempt},
            "retry": None
            if live.retry_at is None and live.retry_error is None
            else {"at": live.retry_at, "error": live.retry_error},
            "submissions": [
                {
                    "id": x.id,
                    "type": x.type.value,
                    "status": x.status.value,
                    "reason": x.reason,
                    "detail": x.detail,
                    "request_id": x.request_id,
                    "entry_id": x.entry_id,
                    "answer_entry_id": x.answer_entry_id,
                }
                for x in s.submissions(cid)
            ],
            "inbox": [{"submission_id": i.submission_id, "mode": i.mode.value, "content": i.content} for i in inbox],
            "usage": usage_json(usage),
            "tasks": [self.task(t, live) for t in shown],
        }

    def task(self, t: Task, live: Live) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": t.id,
            "kind": t.kind,
            "tool": _tool_name(t),
            "owner": t.owner,
            "background": t.background,
            "status": t.status.value,
            "phase": t.phase,
            "version": t.version,
            "replay": t.checkpoint.get("replay") if t.kind == "pi.tool" else None,
            "abort_requested": t.abort_requested,
            "outcome": None
            if t.outcome is None
            else {"status": t.outcome.status.value, "error": _error_message(t)},
        }
        if t.kind == "pi.tool" and t.outcome is not None:
            out["reconciled"] = self._reconciled(t)
        if t.live:
            out.update(self._why(t, live))
        return out

    def _why(self, t: Task, live: Live) -> dict[str, Any]:
        """Why a live task is where it is: state, what it waits on, what
        blocks it, and the last error around it."""
        why = self.why.get(t.id)
        on = why.on if why is not None else tuple(i for i in t.on if (o := self.tasks.get(i)) is not None and o.live)
        state = why.state if why is not None else ("waiting" if on else None)
        out: dict[str, Any] = {"state": state, "note": None}
        out["waiting_on"] = [self._waited(i) for i in on]
        out["blocked"] = None
        if why is not None and why.reason is not None and self.state is not None:
            out["blocked"] = {"reason": str(why.reason), "detail": _blocked_detail(t, str(why.reason), self.state)}
        if state == "running" and self.holder is None:
            out["note"] = "its process is gone: the next open (pidurable resume) recovers it"
        out["last_error"] = self._last_error(t, live)
        return out

    def _waited(self, task_id: int) -> dict[str, Any]:
        o = self.tasks.get(task_id)
        if o is None:
            return {"id": task_id, "kind": None, "status": "unknown"}
        waited = self.why.get(task_id)
        return {
            "id": task_id,
            "kind": o.kind,
            "tool": _tool_name(o),
            "status": o.status.value,
            "state": waited.state if waited is not None else None,
            "phase": o.phase,
        }

    def _last_error(self, t: Task, live: Live) -> dict[str, Any] | None:
        if live.run is not None and live.run.task_id == t.id and live.retry_error:
            return {"source": "retry", "message": live.retry_error, "retry_at": live.retry_at}
        failed = [
            c
            for c in self.children.get(t.id, ())
            if c.outcome is not None and c.outcome.status.value in ("failed", "faulted") and _error_message(c)
        ]
        if failed:
            c = max(failed, key=lambda c: c.id)
            return {
                "source": _label(c),
                "status": c.outcome.status.value if c.outcome else None,
                "message": _error_message(c),
                "result": self._result_text(c),
            }
        return None

    def _reconciled(self, t: Task) -> str | None:
        """How a settled tool call's ``reconcile`` decided it (its result
        entry's ``data["reconciled"]``: done / not_done / unknown), if it did."""
        entry_id = (t.outcome.result or {}).get("entry_id") if t.outcome is not None else None
        entry = self.store.entry(entry_id) if isinstance(entry_id, int) else None
        verdict = (entry.data or {}).get("reconciled") if entry is not None else None
        return str(verdict) if verdict is not None else None

    def _result_text(self, t: Task) -> str | None:
        """The text of the error result entry a failed tool left (what the
        model was shown: the exception's message, diagnostics), if any."""
        entry_id = (t.outcome.result or {}).get("entry_id") if t.outcome is not None else None
        if not isinstance(entry_id, int):
            return None
        entry = self.store.entry(entry_id)
        return entry.text if entry is not None and entry.is_error else None
