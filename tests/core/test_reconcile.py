"""Reconcile (issue 15): an interrupted unsafe call whose installed tool has a
``reconcile`` stores the intent to ask, asks, and settles by the verdict:
each row of the ``reconcile`` phase, plus replay determinism."""

from __future__ import annotations

from typing import Any

import pytest

from pidurable.core import step
from pidurable.core.checkpoints import ExecuteCheckpoint, ReconcileCheckpoint, parse_tool, to_dict
from pidurable.core.effects import CallModel, Commit, RunReconcile, RunTool
from pidurable.core.events import ConversationAbortRequested, ToolFailed
from pidurable.core.model import (
    Diagnostic,
    EntryKind,
    OutcomeStatus,
    Replay,
    Severity,
    TaskId,
    TaskStatus,
    ToolInfo,
    Usage,
)
from pidurable.core.reconcile_events import ToolReconciled, Verdict
from pidurable.core.step import Step

from .helpers import (
    Store,
    calls,
    effects_of,
    finished,
    generation,
    kinds,
    only,
    opened_state,
    prepared,
    put_entries,
    put_tasks,
    submit,
    the_commit,
    tools,
)

PAY = ToolInfo(name="pay", replay=Replay.UNSAFE, reconcile=True)


def interrupted_store(*, replay: str = "unsafe") -> tuple[Store, int, int]:
    """A store whose one ``pay`` call was stored at ``execute`` (the body was
    running when the process died): the store, generation id, tool id."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    gid = generation(first.state).id
    store.apply(first)
    round_ = step(first.state, calls(gid, "pay"))
    store.apply(round_)
    tid = only(t.id for t in tools(round_.state))
    store.apply(step(round_.state, prepared(tid, replay=replay, amount=42)))
    return store, gid, tid


def reopened(store: Store, catalog: tuple[ToolInfo, ...] = (PAY,), now: int = 90) -> Step:
    st = step(opened_state(), store.opened(now=now, catalog=catalog))
    store.apply(st)
    return st


def verdict(tid: int, v: Verdict, **kw: Any) -> ToolReconciled:
    return ToolReconciled(now=100, task_id=TaskId(tid), verdict=v, **kw)


def result(st: Step) -> Any:
    return only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)


def test_an_interrupted_call_whose_tool_reconciles_stores_the_intent_then_asks() -> None:
    """(execute, reserve_reconcile): commit ``running reconcile{arguments,
    replay}``, then ``RunReconcile`` with the stored arguments."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    assert kinds(st) == [Commit, RunReconcile]
    stored = put_tasks(st)[tid]
    assert stored.status is TaskStatus.RUNNING
    assert stored.checkpoint == {"phase": "reconcile", "arguments": {"amount": 42}, "replay": "unsafe"}
    ask = only(effects_of(st, RunReconcile))
    assert (ask.task_id, ask.name, ask.call_id, ask.arguments) == (tid, "pay", "c1", {"amount": 42})
    assert not effects_of(st, RunTool) and not [e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT]


@pytest.mark.parametrize("catalog", [(), (ToolInfo(name="pay"),)], ids=["gone", "no-reconcile"])
def test_without_a_reconcile_installed_now_the_call_is_interrupted(catalog: tuple[ToolInfo, ...]) -> None:
    """The installed tool decides: gone or without reconcile -> the interrupted result."""
    store, _, _ = interrupted_store()
    st = reopened(store, catalog)
    assert not effects_of(st, RunReconcile)
    entry = result(st)
    assert entry.is_error and "may have partially run" in entry.text and "reconciled" not in (entry.data or {})


def test_a_safe_rerun_wins_over_reconcile() -> None:
    """A call stored ``safe`` under a tool still safe re-runs (reconcile is for unsafe calls)."""
    store, _, _ = interrupted_store(replay="safe")
    st = reopened(store, (ToolInfo(name="pay", replay=Replay.SAFE, reconcile=True),))
    assert kinds(st) == [Commit, RunTool]


def test_done_settles_with_reconciles_result_as_if_execute_returned_it() -> None:
    """(reconcile, reconciled_done): the result (diagnostics as usual, usage
    counted), outcome completed, ``data.reconciled = "done"``."""
    store, gid, tid = interrupted_store()
    st = reopened(store)
    warn = Diagnostic(Severity.WARN, "card nearly expired")
    done = step(st.state, verdict(tid, Verdict.DONE, text="Charged 42 EUR", usage=Usage(input_tokens=3, output_tokens=4), diagnostics=(warn,)))
    entry = result(done)
    assert not entry.is_error
    assert entry.text == "Charged 42 EUR\n<harness>\n[warn] card nearly expired\n</harness>"
    assert entry.data == {
        "diagnostics": [{"severity": "warn", "message": "card nearly expired"}],
        "reconciled": "done",
    }
    task = put_tasks(done)[tid]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status is OutcomeStatus.COMPLETED
    usage = done.state.conversations[entry.conversation_id].usage
    assert usage.tools["pay"].calls == 1 and usage.tools["pay"].input_tokens == 3
    assert only(effects_of(done, CallModel)).task_id != gid  # the round is over: handed over


def test_done_with_a_cut_result_keeps_the_cut() -> None:
    """A ``done`` result the shell bounded carries ``truncated`` like a ToolFinished."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    cut = {"total_bytes": 10, "total_lines": 3, "kept_bytes": 4, "kept_lines": 1, "retain": "head"}
    entry = result(step(st.state, verdict(tid, Verdict.DONE, text="abcd", truncated=cut)))
    assert entry.data is not None and entry.data["truncated"] == cut and entry.data["reconciled"] == "done"


def test_not_done_commits_a_fresh_execute_intent_then_runs_the_body() -> None:
    """(reconcile, reconciled_not_done): ``execute{arguments, replay,
    reconciled}`` committed, then ``RunTool``; its result says ``not_done``."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    again = step(st.state, verdict(tid, Verdict.NOT_DONE))
    store.apply(again)
    assert kinds(again) == [Commit, RunTool]
    assert put_tasks(again)[tid].checkpoint == {
        "phase": "execute",
        "arguments": {"amount": 42},
        "replay": "unsafe",
        "reconciled": True,
    }
    assert only(effects_of(again, RunTool)).arguments == {"amount": 42}
    entry = result(step(again.state, finished(tid, "Charged 42 EUR")))
    assert not entry.is_error and entry.data == {"reconciled": "not_done"}


def test_a_failing_re_execution_says_not_done_too() -> None:
    """The body re-run after ``not_done`` raised: the error result records the verdict that allowed it."""
    store, _, tid = interrupted_store()
    again = step(reopened(store).state, verdict(tid, Verdict.NOT_DONE))
    entry = result(step(again.state, ToolFailed(now=120, task_id=TaskId(tid), message="card declined")))
    assert entry.is_error and entry.data is not None and entry.data["reconciled"] == "not_done"


def test_a_re_execution_interrupted_again_is_reconciled_again() -> None:
    """A crash during the re-run leaves ``execute`` (marked reconciled): the next open asks again."""
    store, _, tid = interrupted_store()
    again = step(reopened(store).state, verdict(tid, Verdict.NOT_DONE))
    store.apply(again)
    st = reopened(store, now=200)
    assert kinds(st) == [Commit, RunReconcile]


def test_unknown_settles_the_interrupted_result_plus_the_note() -> None:
    """(reconcile, reconciled_unknown): interrupted error, then the note as
    a ``reconcile_unknown`` warning; outcome failed; ``data.reconciled = "unknown"``."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    entry = result(step(st.state, verdict(tid, Verdict.UNKNOWN, note="the service keeps no record")))
    assert entry.is_error
    assert entry.text == (
        "<harness>\n[error] Tool pay was interrupted and may have partially run\n"
        "[warn] Reconcile could not tell whether it ran: the service keeps no record\n</harness>"
    )
    assert entry.data is not None and entry.data["code"] == "interrupted" and entry.data["reconciled"] == "unknown"
    assert entry.data["diagnostics"][1] == {
        "severity": "warn",
        "message": "Reconcile could not tell whether it ran: the service keeps no record",
        "code": "reconcile_unknown",
    }


def test_a_crash_during_reconcile_asks_again_without_a_new_commit() -> None:
    """(reconcile, reserve_reconcile): the intent is stored; the recovery
    commit only makes it pending, then ``RunReconcile`` again."""
    store, _, tid = interrupted_store()
    reopened(store)
    st = reopened(store, now=150)
    assert kinds(st) == [Commit, RunReconcile]
    recovered = only(w.task for w in the_commit(st).writes if hasattr(w, "task") and w.task.id == tid)
    assert recovered.status is TaskStatus.PENDING and recovered.checkpoint["phase"] == "reconcile"


def test_a_crash_during_reconcile_with_the_reconcile_gone_is_interrupted() -> None:
    """(reconcile, reserve_interrupted): the tool lost its reconcile meanwhile."""
    store, _, _ = interrupted_store()
    reopened(store)
    entry = result(reopened(store, (ToolInfo(name="pay"),), now=150))
    assert entry.is_error and entry.text.endswith("may have partially run\n</harness>")


def test_an_abort_during_reconcile_settles_aborted_and_drops_the_late_verdict() -> None:
    """(reconcile, abort): "Tool X was aborted"; the verdict that comes
    after is stale."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    conv = next(iter(st.state.conversations))
    aborted = step(st.state, ConversationAbortRequested(now=110, ticket=1, conversation_id=conv))
    entry = result(aborted)
    assert entry.is_error and "Tool pay was aborted" in entry.text and "reconciled" not in (entry.data or {})
    late = step(aborted.state, verdict(tid, Verdict.DONE, text="Charged"))
    assert not [e for e in put_entries(late) if e.kind is EntryKind.TOOL_RESULT]


def test_a_stale_verdict_is_ignored() -> None:
    """A verdict for a task that is not at ``reconcile`` changes nothing."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    done = step(st.state, verdict(tid, Verdict.DONE, text="Charged"))
    again = step(done.state, verdict(tid, Verdict.DONE, text="Charged twice"))
    assert not again.effects


def test_the_reconcile_checkpoint_round_trips_and_old_execute_bytes_are_kept() -> None:
    """``reconcile{arguments, replay}``; ``execute`` without ``reconciled`` keeps its old shape."""
    cp = ReconcileCheckpoint(arguments={"amount": 42}, replay=Replay.UNSAFE)
    assert parse_tool(to_dict(cp)) == cp
    plain = ExecuteCheckpoint(arguments={}, replay=Replay.UNSAFE)
    assert to_dict(plain) == {"phase": "execute", "arguments": {}, "replay": "unsafe"}
    marked = ExecuteCheckpoint(arguments={}, replay=Replay.UNSAFE, reconciled=True)
    assert parse_tool(to_dict(marked)) == marked


def test_reconcile_steps_are_deterministic() -> None:
    """Same state + same verdict => the same Step."""
    store, _, tid = interrupted_store()
    st = reopened(store)
    ev = verdict(tid, Verdict.UNKNOWN, note="?")
    assert step(st.state, ev) == step(st.state, ev)
