"""What the demo's parent says: the store as it stood at the crash, what
recovery did with each call, and whether that is what the part expects.

Everything is read from the store (read-only, never through the lock, in one
read transaction) and from the runs file the tool bodies append to; nothing
is hard-coded.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from pidurable.core.model import (
    ConversationId,
    Entry,
    EntryKind,
    OutcomeStatus,
    Submission,
    SubmissionStatus,
    Task,
    TaskId,
    ToolCall,
)

from ...storage.readonly import open_view
from ..common import short, task_tree
from .child import demo_tools
from .scenarios import SCENARIOS, Part

ROOT = ConversationId(1)

#: Stands in for a tool call's task that is not in the store.
_NO_TASK = Task(id=TaskId(0), conversation_id=ROOT, kind="-")


@attrs.frozen(kw_only=True)
class Snapshot:
    """What the store holds for one part (read-only, one read transaction)."""

    submission: Submission | None
    tasks: tuple[Task, ...]
    entries: tuple[Entry, ...]

    def calls(self) -> list[ToolCall]:
        return [c for e in self.entries if e.kind is EntryKind.ASSISTANT for c in e.tool_calls]

    def result(self, call_id: str) -> Entry | None:
        return next((e for e in self.entries if e.kind is EntryKind.TOOL_RESULT and e.tool_call_id == call_id), None)

    def tool_task(self, call_id: str) -> Task | None:
        return next((t for t in self.tasks if t.kind == "pi.tool" and t.input.get("call_id") == call_id), None)

    def answer(self) -> Entry | None:
        if self.submission is None or self.submission.answer_entry_id is None:
            return None
        return next((e for e in self.entries if e.id == self.submission.answer_entry_id), None)


def read_snapshot(db: Path, part: str) -> Snapshot:
    """The store's records of ``part`` (a SQLite file or a JSONL directory)."""
    store = open_view(db)
    try:
        store.begin()
        try:
            request = SCENARIOS.part(part).request_id
            sub = next((s for s in store.submissions(ROOT) if s.request_id == request), None)
            if sub is None:
                return Snapshot(submission=None, tasks=(), entries=())
            tasks = tuple(t for t in store.tasks(ROOT) if t.id > sub.id)
            first = sub.entry_id if sub.entry_id is not None else sub.id
            entries = tuple(e for e in store.entries(ROOT) if e.id >= first)
            return Snapshot(submission=sub, tasks=tasks, entries=entries)
        finally:
            store.end()
    finally:
        store.close()


def read_runs(work: Path) -> list[tuple[int, str, str]]:
    """The tool body runs so far: (life, tool name, call id), in order."""
    path = work / SCENARIOS.runs_file
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        life, name, call_id = line.split("\t")
        out.append((int(life), name, call_id))
    return out


def _args_text(call: ToolCall) -> str:
    return ", ".join(f"{k}={v}" for k, v in call.arguments.items())


def _lives(n: int) -> str:
    return "once" if n == 1 else ("twice" if n == 2 else f"{n} times")


def installed_replay(work: Path, name: str) -> str:
    """The replay promise of the tool the resuming process installs."""
    tool = next((t for t in demo_tools(work, 2).tools if t.name == name), None)
    return tool.replay if tool is not None else "not installed"


def print_stored(snap: Snapshot) -> None:
    sub = snap.submission
    assert sub is not None
    print("  Stored at the crash (read from the store by the parent, read-only):")
    print(f"    submission #{sub.id} (request {sub.request_id}): {sub.status.value}")
    print("    tasks (owner -> children):")
    for line in task_tree(snap.tasks, indent="      "):
        print(line)
    print("    tool calls:")
    for call in snap.calls():
        res = snap.result(call.id)
        head = f"      {call.name}({_args_text(call)})"
        if res is not None:
            print(f"{head} -> result stored: {short(res.text, 60)}")
        else:
            task = snap.tool_task(call.id)
            where = f"task #{task.id} {task.status.value}, phase {task.phase}" if task else "no task"
            print(f"{head} -> NO result stored ({where})")


@attrs.frozen(kw_only=True)
class Recovery:
    """The calls of the crash, by what recovery did with them."""

    kept: tuple[str, ...]
    rerun: tuple[str, ...]
    interrupted: tuple[str, ...]
    reconciled: tuple[str, ...] = ()


def print_recovery(work: Path, crash: Snapshot, final: Snapshot) -> Recovery:
    runs = read_runs(work)
    kept: list[str] = []
    rerun: list[str] = []
    interrupted: list[str] = []
    reconciled: list[str] = []
    print("  What recovery did (from the store and the tool-run log):")
    crash_ids = set()
    for call in crash.calls():
        crash_ids.add(call.id)
        n_before = sum(1 for life, _, c in runs if c == call.id and life == 1)
        n_after = sum(1 for life, _, c in runs if c == call.id and life == 2)
        had = crash.result(call.id)
        res = final.result(call.id)
        task = final.tool_task(call.id)
        ran = f"body ran {_lives(n_before)} in life 1" if n_before else "body never ran in life 1"
        if had is not None:
            if n_after:
                rerun.append(call.name)
                print(f"    {call.name}: RE-RUN although its result was stored ({ran}, {_lives(n_after)} in life 2)")
            else:
                kept.append(call.name)
                print(f"    {call.name}: kept - its stored result was reused, not run again ({ran})")
            continue
        stored_replay = (crash.tool_task(call.id) or task or _NO_TASK).checkpoint.get("replay", "?")
        installed = installed_replay(work, call.name)
        verdict = (res.data or {}).get("reconciled") if res is not None else None
        if res is not None and verdict == "done" and not n_after:
            reconciled.append(call.name)
            print(
                f"    {call.name}: settled by its reconcile, NOT run again (stored replay={stored_replay}; the "
                f"installed tool's reconcile looked its idempotency key up: done); {ran}, 0 times in life 2"
            )
            print(f"      result the model sees: {json.dumps(res.text, ensure_ascii=False)}")
        elif n_after:
            rerun.append(call.name)
            print(
                f"    {call.name}: re-run in the new process (stored replay={stored_replay}, installed tool "
                f"replay={installed}); {ran}, {_lives(n_after)} in life 2"
            )
            if res is not None:
                print(f"      new result: {short(res.text, 70)}")
        elif res is not None and res.is_error and task is not None and task.outcome is not None:
            if task.outcome.status is OutcomeStatus.FAILED:
                interrupted.append(call.name)
                print(
                    f"    {call.name}: reported interrupted, NOT run again (stored replay={stored_replay}, "
                    f"installed tool replay={installed}); {ran}, 0 times in life 2"
                )
            else:
                print(f"    {call.name}: settled with an error without running again ({ran})")
            print(f"      result the model sees: {json.dumps(res.text, ensure_ascii=False)}")  # newlines shown as \\n
        else:
            print(f"    {call.name}: no result after recovery ({ran})")
    for call in final.calls():
        if call.id in crash_ids:
            continue
        res = final.result(call.id)
        n_after = sum(1 for life, _, c in runs if c == call.id and life == 2)
        shown = short(res.text, 50) if res is not None else "no result"
        print(f"    new call by the model: {call.name}({_args_text(call)}) -> ran {_lives(n_after)} in life 2: {shown}")
    return Recovery(kept=tuple(kept), rerun=tuple(rerun), interrupted=tuple(interrupted), reconciled=tuple(reconciled))


def problems(part: Part, work: Path, crash: Snapshot, final: Snapshot, recovery: Recovery) -> list[str]:
    """How the outcome differs from what ``part`` expects (empty: as expected)."""
    out = []
    sub = final.submission
    if sub is None or sub.status is not SubmissionStatus.DONE:
        status = "missing" if sub is None else f"{sub.status.value} ({sub.reason}: {sub.detail})"
        out.append(f"the submission did not end done: {status}")
    if crash.submission is not None and crash.submission.status is not SubmissionStatus.PLACED:
        out.append(f"at the crash the submission was {crash.submission.status.value}, not placed")
    expect = part.expect
    for what, got, want in (
        ("kept", recovery.kept, expect.kept),
        ("re-run", recovery.rerun, expect.rerun),
        ("reported interrupted", recovery.interrupted, expect.interrupted),
        ("settled by reconcile", recovery.reconciled, expect.reconciled),
    ):
        if sorted(got) != sorted(want):
            out.append(f"expected {list(want) or 'no call'} to be {what}, got {list(got)}")
    runs = read_runs(work)
    for name, count in expect.body_runs.items():
        n = sum(1 for r in runs if r[1] == name)
        if n != count:
            out.append(f"the {name} body ran {n} times, not {_lives(count)}")
    for path, text in expect.file_contains.items():
        content = (work / path).read_text()
        if text not in content:
            out.append(f"{path} is {content.strip()!r}; it should contain {text!r}")
    return out

