"""The durability invariants, written once and reused by every test layer.

Each function takes what can be observed after a run (the storage, the
per-life effect logs, the world's tool-body run counts) and raises
``AssertionError`` with a readable story when a rule is broken. Names match
the invariants in specs/ and the TLA+ model.

- ``SubmissionsSettleOnce``: every submission ends settled, and the journal
  shows exactly one settling write for it.
- ``TerminalNeverRuns``: a task terminal in storage when a process life began
  gets no effect (model call, tool preparation, tool run) in that life.
- ``UnsafeToolRunsAtMostOnce``: an unsafe tool body runs at most once for a
  tool task across all process lives.
- ``OneResultPerCall``: every tool call in the transcript has exactly one
  tool result, after it.
- ``NothingLiveAfterSettlement``: once all submissions settled, no task is
  live, no conversation has a run or queued input.
- ``SameOutcomeAsUninterrupted``: the final transcript equals the
  uninterrupted run's, except tool results the rules allow to be
  "interrupted".
- ``QueuedInputPlacedAtMostOnce``: a submission is written ``placed`` at most
  once (a queued input is never placed twice), and none is lost (see
  ``SubmissionsSettleOnce``).
- ``WithdrawnInputNeverPlaced``: a queued input withdrawn by an abort never
  gets a user entry.
- ``OneChildPerOwner``: a task owns at most one child conversation made by the
  sub-agent tool, and each child submission is unique.
- ``MemoNeverChanges``: once a task's memo holds a value, every later version
  of that task (while live) holds the same value.
- ``DeferredNeverRequestedAgain``: once a deferred handle is committed (the
  generation is at ``poll``), no later process life sends that request again:
  it polls the same handle.
- ``ReplayIsDeterministic``: re-running the journal's events through ``step``
  from an empty state reproduces every stored commit byte for byte.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pidurable.core import State, step
from pidurable.core.effects import CallModel, Commit, PrepareTool, RunTool
from pidurable.core.model import Entry, EntryKind, TaskStatus
from pidurable.core.state import INBOX_DOC, LIVE_DOC
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import writes_json

INTERRUPTED_SUFFIX = "was interrupted and may have partially run"


def submissions_settle_once(storage: Any) -> None:
    subs = storage.submissions()
    for s in subs:
        assert s.settled, f"SubmissionsSettleOnce: submission {s.id} ended {s.status} ({s.reason})"
    settles: Counter[int] = Counter()
    for row in storage.journal():
        for w in json.loads(row.writes):
            if w["type"] == "submission" and w["submission"]["status"] in ("done", "unanswered"):
                settles[w["submission"]["id"]] += 1
    for s in subs:
        assert settles[s.id] == 1, f"SubmissionsSettleOnce: submission {s.id} settled {settles[s.id]} times"


def terminal_never_runs(lives: Sequence[tuple[frozenset[int], Sequence[Any]]]) -> None:
    """``lives``: for each process life, (ids terminal at its start, effects it ran)."""
    for n, (terminal, effects) in enumerate(lives):
        for e in effects:
            if isinstance(e, (CallModel, PrepareTool, RunTool)):
                assert e.task_id not in terminal, (
                    f"TerminalNeverRuns: life {n} ran {type(e).__name__} for task {e.task_id}, "
                    "which was already terminal"
                )


def unsafe_tool_runs_at_most_once(runs: Mapping[tuple[str, int], int], unsafe: Iterable[str]) -> None:
    """``runs``: (tool name, task id) -> body runs across all lives."""
    unsafe = set(unsafe)
    for (name, task_id), n in runs.items():
        if name in unsafe:
            assert n <= 1, f"UnsafeToolRunsAtMostOnce: unsafe tool {name} (task {task_id}) ran {n} times"


def one_result_per_call(entries: Sequence[Entry]) -> None:
    calls: dict[str, int] = {}
    results: Counter[str] = Counter()
    for e in entries:
        if e.kind == EntryKind.ASSISTANT:
            for c in e.tool_calls:
                assert c.id not in calls, f"OneResultPerCall: call id {c.id} appears twice"
                calls[c.id] = e.id
        elif e.kind == EntryKind.TOOL_RESULT:
            assert e.tool_call_id in calls, f"OneResultPerCall: result {e.id} answers unknown call {e.tool_call_id}"
            assert calls[e.tool_call_id] < e.id, f"OneResultPerCall: result {e.id} precedes its call"
            results[e.tool_call_id] += 1
    for cid in calls:
        assert results[cid] == 1, f"OneResultPerCall: call {cid} has {results[cid]} results"


def nothing_live_after_settlement(storage: Any) -> None:
    live = storage.tasks(live_only=True)
    assert not live, "NothingLiveAfterSettlement: live tasks remain: " + ", ".join(
        f"{t.id} {t.kind} {t.status} {t.checkpoint.get('phase')}" for t in live
    )
    for c in storage.conversations():
        lv = storage.document(c.id, LIVE_DOC)
        assert lv is None or lv.run is None, f"NothingLiveAfterSettlement: conversation {c.id} still has a run"
        inbox = storage.document(c.id, INBOX_DOC)
        assert not inbox, f"NothingLiveAfterSettlement: conversation {c.id} still has queued input"


def _normal(entries: Sequence[Entry]) -> list[tuple[Any, ...]]:
    """The transcript with each round's tool results in call order (parallel
    tools may finish in any order)."""
    out: list[tuple[Any, ...]] = []
    pending: list[tuple[Any, ...]] = []
    for e in entries:
        if e.kind == EntryKind.TOOL_RESULT:
            pending.append(("tool_result", e.tool_call_id, e.tool_name, e.text, e.is_error))
            continue
        out.extend(sorted(pending))
        pending = []
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in e.tool_calls)
        out.append((str(e.kind), e.text, calls, e.stop_reason))
    out.extend(sorted(pending))
    return out


def same_outcome_as_uninterrupted(
    actual: Sequence[Entry], expected: Sequence[Entry], may_interrupt: Iterable[str] = ()
) -> None:
    """Equal transcripts, except that a result of a tool in ``may_interrupt``
    (unsafe tools) may be the "interrupted" error instead of its result.

    An interrupted tool may or may not have changed the world, so once one is
    seen, later tool results are compared by call (id and tool) only: what they
    read may legitimately differ. Model turns must stay identical."""
    may = set(may_interrupt)
    # A crash mid-stream leaves the committed partial as an ``aborted``
    # assistant entry (the rules say so); it must be a prefix of the answer
    # the re-sent request then produced.
    kept = []
    for i, e in enumerate(actual):
        if e.kind == EntryKind.ASSISTANT and e.stop_reason == "aborted":
            after = next((x for x in actual[i + 1 :] if x.kind == EntryKind.ASSISTANT and x.stop_reason != "aborted"), None)
            assert after is not None and after.text.startswith(e.text), (
                f"SameOutcomeAsUninterrupted: partial {e.text!r} is not a prefix of the answer"
            )
            continue
        kept.append(e)
    actual = kept
    a, b = _normal(actual), _normal(expected)
    assert len(a) == len(b), f"SameOutcomeAsUninterrupted: {len(a)} entries, expected {len(b)}:\n{a}\n{b}"
    diverged = False
    for x, y in zip(a, b):
        if x == y:
            continue
        if x[0] == "tool_result" and y[0] == "tool_result" and x[1:3] == y[1:3]:
            if x[2] in may and x[4] and x[3].endswith(INTERRUPTED_SUFFIX):
                diverged = True
                continue
            if diverged:
                continue
        raise AssertionError(f"SameOutcomeAsUninterrupted: {x} != {y}")


def _submission_history(storage: Any) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in storage.journal():
        for w in json.loads(row.writes):
            if w["type"] == "submission":
                out.setdefault(w["submission"]["id"], []).append(w["submission"])
    return out


def queued_input_placed_at_most_once(storage: Any) -> None:
    for sid, versions in _submission_history(storage).items():
        placed = sum(1 for v in versions if v["status"] == "placed")
        assert placed <= 1, f"QueuedInputPlacedAtMostOnce: submission {sid} placed {placed} times"


def withdrawn_input_never_placed(storage: Any) -> None:
    for sid, versions in _submission_history(storage).items():
        statuses = [v["status"] for v in versions]
        if statuses and statuses[0] == "queued" and versions[-1].get("reason") == "aborted":
            if "placed" not in statuses:
                assert versions[-1]["entry_id"] is None, f"WithdrawnInputNeverPlaced: submission {sid} has an entry"


def one_child_per_owner(storage: Any) -> None:
    owners: Counter[int] = Counter(c.owner_task_id for c in storage.conversations() if c.owner_task_id is not None)
    for owner, n in owners.items():
        assert n == 1, f"OneChildPerOwner: task {owner} owns {n} conversations"
    seen: set[tuple[int, str]] = set()
    for s in storage.submissions():
        if s.request_id is not None:
            key = (s.conversation_id, s.request_id)
            assert key not in seen, f"OneChildPerOwner: request {s.request_id} submitted twice"
            seen.add(key)


def memo_never_changes(storage: Any) -> None:
    memos: dict[int, dict[str, Any]] = {}
    for row in storage.journal():
        for w in json.loads(row.writes):
            if w["type"] != "task":
                continue
            t = w["task"]
            current = t.get("memos") or {}
            earlier = memos.setdefault(t["id"], {})
            for name, value in current.items():
                if name in earlier:
                    assert earlier[name] == value, (
                        f"MemoNeverChanges: task {t['id']} memo {name!r} went {earlier[name]!r} -> {value!r}"
                    )
                earlier[name] = value


def deferred_never_requested_again(storage: Any, lives: Sequence[tuple[int, Sequence[Any]]]) -> None:
    """``lives``: (commits in the store when the life began, its effects)."""
    polled_at: dict[int, int] = {}
    for n, row in enumerate(storage.journal(), start=1):
        for w in json.loads(row.writes):
            if w["type"] == "task" and w["task"]["checkpoint"].get("phase") == "poll":
                polled_at.setdefault(w["task"]["id"], n)
    for start, effects in lives:
        for e in effects:
            if isinstance(e, CallModel) and e.task_id in polled_at and polled_at[e.task_id] <= start:
                raise AssertionError(
                    f"DeferredNeverRequestedAgain: task {e.task_id} sent a new request after its handle was stored"
                )


def replay_is_deterministic(storage: Any) -> int:
    """Feed the journal's events to ``step`` from an empty state; every stored
    commit must come out again with the same bytes. Returns commits checked."""
    state = State()
    checked = 0
    for row in storage.journal():
        events = [codec.event_from_data(d) for d in json.loads(row.events)]
        assert events, f"ReplayIsDeterministic: commit {row.seq} journals no event"
        for i, ev in enumerate(events):
            result = step(state, ev)
            state = result.state
            commits = [e for e in result.effects if isinstance(e, Commit)]
            if i < len(events) - 1:
                assert not commits, f"ReplayIsDeterministic: event {i} of commit {row.seq} committed early"
            else:
                assert len(commits) == 1, f"ReplayIsDeterministic: commit {row.seq} not reproduced"
                c = commits[0]
                assert c.seq == row.seq, f"ReplayIsDeterministic: seq {c.seq} != stored {row.seq}"
                got = writes_json(c.writes, c.seq)
                assert got == row.writes, (
                    f"ReplayIsDeterministic: commit {row.seq} differs\n got: {got}\nstored: {row.writes}"
                )
                checked += 1
    return checked


def terminal_ids(storage: Any) -> frozenset[int]:
    return frozenset(t.id for t in storage.tasks() if t.status == TaskStatus.TERMINAL)
