"""The tool task: prepare without writing, store the intent before running, settle once, recover by replay policy."""

from __future__ import annotations

import pytest

from pidurable.core import State, step
from pidurable.core.effects import Accepted, Refusal, Refused
from pidurable.core.effects import CallModel, Commit, PrepareTool, RunTool
from pidurable.core.events import Resumed, ToolFailed, ToolFinished, ToolRejected
from pidurable.core.model import (
    TOOL,
    AgentConfig,
    ConversationId,
    Diagnostic,
    EntryKind,
    OutcomeStatus,
    Severity,
    TaskStatus,
    ToolInfo,
)
from pidurable.core.diagnostics import interrupted_message

from .helpers import (
    MODEL,
    ROOT,
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
    put_live,
    put_subs,
    put_tasks,
    respond,
    run_events,
    submit,
    the_commit,
    tools,
)


def in_round(*names: str, resume: bool = True, catalog: tuple[ToolInfo, ...] = ()) -> tuple[State, int, list[int]]:
    """A conversation in a tool round calling ``names``; return state, generation id and tool ids (in call order)."""
    state = opened_state(catalog=catalog)
    first = step(state, submit("go"))
    gen_id = generation(first.state).id
    round_ = step(first.state, calls(gen_id, *names))
    return round_.state, gen_id, [t.id for t in tools(round_.state)]


# --- call phase ----------------------------------------------------------------


def test_reserve_at_call_keeps_the_reservation_in_memory_only() -> None:
    """The round's commit stores tool tasks ``pending`` at ``call``; the reservation to ``running`` exists only in memory."""
    state = opened_state()
    first = step(state, submit("go"))
    round_ = step(first.state, calls(generation(first.state).id, "ls", "cat"))
    stored = [t for t in put_tasks(round_).values() if t.kind == TOOL]
    assert [t.status for t in stored] == [TaskStatus.PENDING, TaskStatus.PENDING]
    assert all(t.phase == "call" for t in stored)
    assert [round_.state.tasks[t.id].status for t in stored] == [TaskStatus.RUNNING, TaskStatus.RUNNING]
    assert [p.task_id for p in effects_of(round_, PrepareTool)] == [t.id for t in stored]


def test_reserve_at_call_prepares_without_a_commit() -> None:
    """Reserving a tool task at ``call`` emits PrepareTool alone: nothing is written."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    store.apply(first)
    gen_id = generation(first.state).id
    round_ = step(first.state, calls(gen_id, "ls"))
    store.apply(round_)
    tid = only(t.id for t in store.tasks() if t.kind == TOOL)
    assistant = only(put_entries(round_)).id

    reopened = step(opened_state(), store.opened(now=50, resume=False))
    assert reopened.effects == ()  # nothing was running in storage: no recovery commit
    st = step(reopened.state, Resumed(now=60))

    assert kinds(st) == [PrepareTool]
    assert only(effects_of(st, PrepareTool)) == PrepareTool(
        task_id=tid, conversation_id=ConversationId(ROOT), assistant_entry_id=assistant, call_id="c1", name="ls"
    )
    task = st.state.tasks[tid]
    assert task.status is TaskStatus.RUNNING and task.phase == "call" and task.started_at == 60
    assert st.state.next_seq == reopened.state.next_seq


def test_tool_prepared_commits_the_intent_before_running() -> None:
    """ToolPrepared commits ``running execute{arguments, replay}`` and only then emits RunTool with those arguments."""
    state, _, (tid,) = in_round("write")
    st = step(state, prepared(tid, replay="safe", path="/a", text="x"))

    assert kinds(st) == [Commit, RunTool]
    task = only(put_tasks(st).values())
    assert task.id == tid and task.status is TaskStatus.RUNNING
    assert task.checkpoint == {"phase": "execute", "arguments": {"path": "/a", "text": "x"}, "replay": "safe"}
    run = only(effects_of(st, RunTool))
    assert run == RunTool(
        task_id=tid, conversation_id=ConversationId(ROOT), call_id="c1", name="write",
        arguments={"path": "/a", "text": "x"},
    )
    live = put_live(st)
    assert live is not None and live.tools is not None and live.tools[0].status == "running"


def test_tool_prepared_with_a_bad_replay_faults_the_task() -> None:
    """A replay promise other than safe/unsafe is a broken contract: the task ends faulted and nothing runs."""
    state, _, (tid,) = in_round("ls")
    st = step(state, prepared(tid, replay="maybe"))
    assert not effects_of(st, RunTool)
    task = put_tasks(st)[tid]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status is OutcomeStatus.FAULTED


def test_tool_rejected_settles_an_error_result_as_completed() -> None:
    """ToolRejected appends an error result with the message and completes the task (nothing ran)."""
    state, _, (tid,) = in_round("nope")
    st = step(state, ToolRejected(now=31, task_id=tid, code="tool_unavailable", message="Tool nope is not available"))

    assert not effects_of(st, RunTool)
    the_commit(st)
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.TOOL_RESULT and entry.is_error
    assert entry.text == "<harness>\n[error] Tool nope is not available\n</harness>"
    assert entry.tool_call_id == "c1" and entry.tool_name == "nope"
    assert entry.data == {
        "code": "tool_unavailable",
        "diagnostics": [{"severity": "error", "message": "Tool nope is not available", "code": "tool_unavailable"}],
    }
    task = put_tasks(st)[tid]
    assert task.outcome is not None and task.outcome.status is OutcomeStatus.COMPLETED
    assert task.outcome.result == {"entry_id": entry.id}


def test_tool_finished_settles_result_task_and_slot_in_one_commit() -> None:
    """ToolFinished writes the result entry, the task terminal ``completed`` and the slot ``done`` in one commit."""
    state, gen_id, (t1, t2) = in_round("ls", "cat")
    running = step(state, prepared(t1)).state
    st = step(running, finished(t1, "file.txt", now=44))

    assert kinds(st) == [Commit]  # T2 still open: no hand-over yet
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.TOOL_RESULT and not entry.is_error and entry.text == "file.txt"
    assert entry.tool_call_id == "c1" and entry.by_task_id == t1 and entry.at == 44
    task = put_tasks(st)[t1]
    assert task.status is TaskStatus.TERMINAL and task.ended_at == 44
    assert task.outcome is not None and task.outcome.status is OutcomeStatus.COMPLETED
    assert task.outcome.result == {"entry_id": entry.id}
    live = put_live(st)
    assert live is not None and live.tools is not None
    assert [(s.status, s.entry_id) for s in live.tools] == [("done", entry.id), ("pending", None)]
    assert t1 not in st.state.tasks and st.state.tasks[gen_id].status is TaskStatus.WAITING


def test_tool_finished_with_is_error_is_an_error_result_but_completed() -> None:
    """A tool that returns an error result still completes; the entry is marked ``is_error``."""
    state, _, (tid,) = in_round("ls")
    running = step(state, prepared(tid)).state
    st = step(running, ToolFinished(now=40, task_id=tid, text="no such dir", is_error=True))
    entry = [e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT][0]
    assert entry.is_error
    assert put_tasks(st)[tid].outcome.status is OutcomeStatus.COMPLETED  # type: ignore[union-attr]


def test_tool_failed_is_an_error_result_and_the_round_continues() -> None:
    """ToolFailed (the body raised) settles an ``is_error`` result with outcome ``failed``; the generation still hands over."""
    state, gen_id, (tid,) = in_round("ls")
    running = step(state, prepared(tid)).state
    st = step(running, ToolFailed(now=41, task_id=tid, message="permission denied"))

    entry = only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)
    assert entry.is_error and entry.text == "<harness>\n[error] permission denied\n</harness>"
    assert entry.data == {
        "code": "tool_error",
        "diagnostics": [{"severity": "error", "message": "permission denied", "code": "tool_error"}],
    }
    task = put_tasks(st)[tid]
    assert task.outcome is not None and task.outcome.status is OutcomeStatus.FAILED
    assert task.outcome.error == {"message": "Tool ls threw"}
    # allSettled: a failed tool releases the generation like any other outcome
    assert put_tasks(st)[gen_id].status is TaskStatus.TERMINAL
    assert only(effects_of(st, CallModel)).task_id == generation(st.state).id


@pytest.mark.parametrize("kind", ["finished", "failed"])
def test_tool_results_before_execute_are_stale(kind: str) -> None:
    """A body result for a tool task still at ``call`` (no intent stored) is stale and ignored."""
    state, _, (tid,) = in_round("ls")
    ev = finished(tid, "early") if kind == "finished" else ToolFailed(now=40, task_id=tid, message="x")
    st = step(state, ev)
    assert st.effects == () and st.state == state


def test_prepare_answers_after_execute_are_stale() -> None:
    """ToolPrepared/ToolRejected for a task already in ``execute`` are stale and ignored."""
    state, _, (tid,) = in_round("ls")
    running = step(state, prepared(tid)).state
    for ev in (prepared(tid, replay="safe"), ToolRejected(now=1, task_id=tid, code="x", message="y")):
        st = step(running, ev)
        assert st.effects == () and st.state == running, ev


def test_second_settlement_of_a_tool_is_ignored() -> None:
    """After a tool settled, a duplicate ToolFinished/ToolPrepared/ToolRejected produces nothing (one result per call)."""
    state, _, (t1, t2) = in_round("ls", "cat")
    done = run_events(state, prepared(t1), finished(t1))[-1].state
    for ev in (finished(t1, "again"), prepared(t1), ToolRejected(now=1, task_id=t1, code="x", message="y"),
               ToolFailed(now=1, task_id=t1, message="z")):
        st = step(done, ev)
        assert st.effects == () and st.state == done, ev
    running = step(state, prepared(t2)).state
    st = step(running, prepared(t2))  # prepared twice: the second is stale
    assert st.effects == () and st.state == running


# --- recovery in execute: the replay matrix ------------------------------------------


@pytest.mark.parametrize(
    ("stored", "current", "reruns"),
    [
        ("safe", "safe", True),
        ("safe", "unsafe", False),
        ("unsafe", "safe", False),
        ("unsafe", "unsafe", False),
        ("safe", None, False),  # the tool is no longer installed
        ("unsafe", None, False),
    ],
)
def test_replay_matrix(stored: str, current: str | None, reruns: bool) -> None:
    """On reopen a tool found in ``execute`` re-runs only if stored AND current replay are ``safe``; otherwise it settles 'interrupted, may have partially run'."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    gid = generation(first.state).id
    store.apply(first)
    round_ = step(first.state, calls(gid, "edit"))
    store.apply(round_)
    tid = only(t.id for t in tools(round_.state))
    store.apply(step(round_.state, prepared(tid, replay=stored, file="a.txt")))
    assert only(t for t in store.tasks() if t.id == tid).phase == "execute"
    catalog = () if current is None else (ToolInfo(name="edit", replay=current),)

    st = step(opened_state(), store.opened(now=90, catalog=catalog))
    commit = the_commit(st)
    if reruns:
        assert kinds(st) == [Commit, RunTool]
        run = only(effects_of(st, RunTool))
        assert run.task_id == tid and run.arguments == {"file": "a.txt"}
        # the commit only recovers running -> pending with the checkpoint unchanged
        recovered = only(w.task for w in commit.writes if hasattr(w, "task"))
        assert recovered.status is TaskStatus.PENDING and recovered.checkpoint["phase"] == "execute"
        assert st.state.tasks[tid].status is TaskStatus.RUNNING
    else:
        assert not effects_of(st, RunTool)
        message = interrupted_message("edit")
        assert message == "Tool edit was interrupted and may have partially run"
        entry = only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)
        assert entry.is_error and entry.text == f"<harness>\n[error] {message}\n</harness>" and entry.tool_call_id == "c1"
        assert entry.data == {"code": "interrupted", "diagnostics": [{"severity": "error", "message": message, "code": "interrupted"}]}
        task = put_tasks(st)[tid]
        assert task.status is TaskStatus.TERMINAL and task.outcome is not None
        assert task.outcome.status is OutcomeStatus.FAILED
        assert task.outcome.error == {"message": message}
        # the round is over, so the same commit hands the run over
        assert put_tasks(st)[gid].status is TaskStatus.TERMINAL
        assert only(effects_of(st, CallModel)).task_id == generation(st.state).id


def test_recovery_at_call_prepares_again() -> None:
    """A tool task that never stored its intent (still ``call``) is simply prepared again after a restart."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    gid = generation(first.state).id
    store.apply(first)
    round_ = step(first.state, calls(gid, "ls"))
    store.apply(round_)
    tid = only(t.id for t in store.tasks() if t.kind == TOOL)

    st = step(opened_state(), store.opened(now=90))
    assert kinds(st) == [PrepareTool]  # the stored record is pending: no recovery commit needed
    assert only(effects_of(st, PrepareTool)).task_id == tid


def test_a_prepared_call_is_born_at_execute_in_the_round_commit() -> None:
    """A call the shell already validated (ModelResponded.prepared) gets its
    tool task at ``execute {arguments, replay}`` in the round's one commit, and
    RunTool follows that commit; an unprepared call (None) still starts at ``call``."""
    from pidurable.core.effects import Commit, PrepareTool, PutTask, RunTool
    from pidurable.core.events import ModelResponded, PreparedCall
    from pidurable.core.model import ToolCall

    state = opened_state()
    (s0,) = run_events(state, submit("go"))
    gen = next(t for t in s0.state.tasks.values() if t.kind == "pi.generation")
    ev = ModelResponded(
        now=20,
        task_id=gen.id,
        attempt=1,
        tool_calls=(ToolCall(id="a", name="t", arguments={"x": 1}), ToolCall(id="b", name="nope")),
        prepared=(PreparedCall(arguments={"x": 1}, replay="safe"), None),
    )
    (s1,) = run_events(s0.state, ev)
    kinds = [type(e) for e in s1.effects]
    assert kinds[0] is Commit and kinds.count(Commit) == 1
    assert kinds.index(RunTool) > 0 and PrepareTool in kinds
    born = {w.task.input["call_id"]: w.task for w in s1.effects[0].writes if isinstance(w, PutTask) and w.task.kind == "pi.tool"}
    assert born["a"].checkpoint == {"phase": "execute", "arguments": {"x": 1}, "replay": "safe"}
    assert born["a"].status == "running"
    assert born["b"].checkpoint == {"phase": "call"}
    slots = {s.call_id: s.status for s in s1.state.conversations[1].live.tools}
    assert slots["a"] == "running"
    # built once, as the row's store would leave a task born pending at call
    import attrs
    from pidurable.core.lifecycle import TaskMove, task_to

    pending = attrs.evolve(born["a"], status=TaskStatus.PENDING, checkpoint={"phase": "call"}, started_at=None)
    assert born["a"] == task_to(pending, TaskMove.RESERVE, checkpoint=born["a"].checkpoint, started_at=20)
    assert pending == attrs.evolve(born["b"], id=born["a"].id, input={**born["b"].input, "call_id": "a", "name": "t"})
    assert f"pi.tool:call,prepared #{born['a'].id}" in s1.rules


# --- issue 7: process records, the agent's tool filter, failed invocations --------


def test_process_started_is_recorded_in_the_execute_checkpoint_before_the_reply() -> None:
    """Row (execute, process_started): the process group is committed into the
    ``execute`` checkpoint, then the tool is answered (Respond after Commit)."""
    from pidurable.core.effects import Respond
    from pidurable.core.events import ToolProcessStarted

    state, _, (tid,) = in_round("bash")
    running = step(state, prepared(tid, replay="unsafe", command="sleep 1")).state
    process = {"pid": 42, "pgid": 42, "host": "h", "start": 7}
    st = step(running, ToolProcessStarted(now=35, ticket=3, task_id=tid, process=process))
    assert kinds(st) == [Commit, Respond]
    task = only(put_tasks(st).values())
    assert task.status is TaskStatus.RUNNING and task.phase == "execute"
    assert task.checkpoint["process"] == process and task.checkpoint["arguments"] == {"command": "sleep 1"}
    assert isinstance(respond(st).reply, Accepted)


def test_process_started_for_a_task_not_executing_is_refused() -> None:
    """A process report for a task at ``call`` (or gone) writes nothing and answers an error."""
    from pidurable.core.effects import Respond
    from pidurable.core.events import ToolProcessStarted

    state, _, (tid,) = in_round("bash")
    st = step(state, ToolProcessStarted(now=35, ticket=3, task_id=tid, process={"pid": 1}))
    assert kinds(st) == [Respond] and respond(st).reply.kind == "invalid"


def test_the_agent_tool_filter_travels_with_prepare_and_the_cwd_with_run() -> None:
    """PrepareTool carries the agent's tool filter (the shell resolves only
    those names) and RunTool the conversation's cwd."""
    from pidurable.core.events import AgentConfigurationRequested

    state = opened_state()
    agent = AgentConfig(model=MODEL, tools=("read",), cwd="sub")
    state = step(state, AgentConfigurationRequested(now=5, ticket=1, conversation_id=ConversationId(ROOT), agent=agent)).state
    first = step(state, submit("go"))
    round_ = step(first.state, calls(generation(first.state).id, "write"))
    prepare = only(effects_of(round_, PrepareTool))
    assert prepare.tools == ("read",)
    tid = prepare.task_id
    run = only(effects_of(step(round_.state, prepared(tid, path="a")), RunTool))
    assert run.cwd == "sub"


def test_invocation_failed_faults_the_generation_and_its_run() -> None:
    """InvocationFailed (the shell could not interpret an effect): the task
    ends faulted and its inputs unanswered/faulted with the message."""
    from pidurable.core.events import InvocationFailed

    state = opened_state()
    first = step(state, submit("go"))
    gen = generation(first.state)
    st = step(first.state, InvocationFailed(now=20, task_id=gen.id, message="Internal error: boom"))
    task = put_tasks(st)[gen.id]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status.value == "faulted"
    sub = only(put_subs(st).values())
    assert (sub.status.value, sub.reason, sub.detail) == ("unanswered", "faulted", "Internal error: boom")
    assert kinds(step(st.state, InvocationFailed(now=30, task_id=gen.id, message="late"))) == []


# --- issue 9 item 2: tool output limits (running output, truncation diagnostic) ---------


def _progressed(tid: int, output: str, now: int = 35) -> "ToolProgressed":
    from pidurable.core.events import ToolProgressed

    return ToolProgressed(now=now, task_id=tid, output=output)


def test_tool_progressed_writes_the_running_output_into_the_slot() -> None:
    """ToolProgressed at ``execute`` commits only pi.live: the slot's ``output``
    is the reported tail; the task itself is not written and nothing else runs."""
    state, _, (t1, t2) = in_round("bash", "ls")
    running = step(state, prepared(t1)).state
    st = step(running, _progressed(t1, "line 1\nline 2\n"))
    assert kinds(st) == [Commit]
    assert not put_tasks(st) and not put_entries(st)
    live = put_live(st)
    assert live is not None and live.tools is not None
    assert [(s.status, s.output) for s in live.tools] == [("running", "line 1\nline 2\n"), ("pending", None)]
    again = step(st.state, _progressed(t1, "line 1\nline 2\n"))  # no change: no commit
    assert again.effects == () and again.state == st.state


def test_tool_progressed_before_execute_or_after_settling_is_stale() -> None:
    """Output reported by a call that is not executing (still at ``call``, or
    already settled) changes nothing."""
    state, _, (t1,) = in_round("bash")
    st = step(state, _progressed(t1, "early"))
    assert st.effects == () and st.state == state
    done = run_events(state, prepared(t1), finished(t1))[-1].state
    st = step(done, _progressed(t1, "late"))
    assert st.effects == () and st.state == done


def test_settling_drops_the_slots_running_output() -> None:
    """The result entry holds the result; the slot's running output goes when it settles."""
    state, _, (t1, _t2) = in_round("bash", "ls")
    running = run_events(state, prepared(t1), _progressed(t1, "partial"))[-1].state
    st = step(running, finished(t1, "all of it"))
    live = put_live(st)
    assert live is not None and live.tools is not None
    assert (live.tools[0].status, live.tools[0].output) == ("done", None)


def test_a_truncated_result_keeps_its_cut_in_the_entry_data_and_renders_its_diagnostics() -> None:
    """ToolFinished.truncated (the shell bounded the output) lands in the result
    entry's ``data["truncated"]`` and is rendered after the tool's own
    diagnostics: the spill path first, the cut last (a warn: not an error by
    itself); an untruncated result keeps ``data`` None."""
    state, _, (t1, t2) = in_round("bash", "ls")
    running = run_events(state, prepared(t1), prepared(t2))[-1].state
    diag = {
        "total_bytes": 1_000_000,
        "total_lines": 20_000,
        "kept_bytes": 51_000,
        "kept_lines": 1000,
        "retain": "tail",
        "full_output": "/tmp/s-5.txt",
    }
    exited = Diagnostic(Severity.ERROR, "Command exited with code 2", "exit_code")
    st = step(running, ToolFinished(now=40, task_id=t1, text="tail\n", is_error=True, truncated=diag, diagnostics=(exited,)))
    entry = only(put_entries(st))
    assert entry.text == (
        "tail\n\n<harness>\n[info] Full output: /tmp/s-5.txt\n[error] Command exited with code 2\n"
        "[warn] Output truncated to its end: 19000 lines, 949000 bytes dropped\n</harness>"
    )
    assert entry.is_error and entry.data == {
        "truncated": diag,
        "diagnostics": [
            {"severity": "info", "message": "Full output: /tmp/s-5.txt", "code": "full_output"},
            {"severity": "error", "message": "Command exited with code 2", "code": "exit_code"},
            {"severity": "warn", "message": "Output truncated to its end: 19000 lines, 949000 bytes dropped", "code": "truncated"},
        ],
    }
    st2 = step(st.state, finished(t2, "small"))
    assert only(e for e in put_entries(st2) if e.kind is EntryKind.TOOL_RESULT).data is None


def test_a_warn_or_a_cut_never_makes_a_result_an_error() -> None:
    """A result the tool did not mark an error stays one that is not, with a
    ``warn`` of its own and a cut (the ``truncated`` warn) rendered after it."""
    state, _, (tid,) = in_round("ls")
    running = step(state, prepared(tid)).state
    cut = {"total_bytes": 12, "total_lines": 3, "kept_bytes": 4, "kept_lines": 1, "retain": "head"}
    careful = Diagnostic(Severity.WARN, "3 files were skipped", None)
    st = step(running, ToolFinished(now=40, task_id=tid, text="a.c\n", truncated=cut, diagnostics=(careful,)))
    entry = only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)
    assert not entry.is_error
    assert entry.text == (
        "a.c\n\n<harness>\n[warn] 3 files were skipped\n"
        "[warn] Output truncated to its beginning: 2 lines, 8 bytes dropped\n</harness>"
    )
    assert entry.data is not None and entry.data["diagnostics"][0] == {"severity": "warn", "message": "3 files were skipped"}


def test_a_raising_body_keeps_its_durable_partial_output() -> None:
    """A body that raised after reporting running output: that output is the
    content, its message the ``tool_error`` diagnostic (a bounded message's
    cut is rendered last)."""
    state, _, (tid,) = in_round("bash")
    running = run_events(state, prepared(tid), _progressed(tid, "step 1 ok\n"))[-1].state
    cut = {"total_bytes": 90_000, "total_lines": 1, "kept_bytes": 51_200, "kept_lines": 1, "retain": "head"}
    st = step(running, ToolFailed(now=41, task_id=tid, message="disk full", truncated=cut))
    entry = only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)
    assert entry.is_error and entry.text == (
        "step 1 ok\n\n<harness>\n[error] disk full\n"
        "[warn] Output truncated to its beginning: 0 lines, 38800 bytes dropped\n</harness>"
    )


def test_an_interrupted_calls_result_starts_with_its_durable_partial_output() -> None:
    """An unsafe call interrupted by a crash after it reported output settles
    with that output followed by the "interrupted" message (which stays last)."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    gid = generation(first.state).id
    store.apply(first)
    round_ = step(first.state, calls(gid, "bash"))
    store.apply(round_)
    tid = only(t.id for t in tools(round_.state))
    running = step(round_.state, prepared(tid))
    store.apply(running)
    store.apply(step(running.state, _progressed(tid, "compiling...\n")))

    st = step(opened_state(), store.opened(now=90))
    entry = only(e for e in put_entries(st) if e.kind is EntryKind.TOOL_RESULT)
    assert entry.text == "compiling...\n\n<harness>\n[error] " + interrupted_message("bash") + "\n</harness>"


def test_a_rerun_clears_the_last_lifes_running_output() -> None:
    """A safe call re-run after a restart starts with an empty slot output (one
    commit clears it), so a watcher never sees the dead run's output as this one's."""
    store = Store(opened_state())
    first = step(opened_state(), submit("go"))
    gid = generation(first.state).id
    store.apply(first)
    round_ = step(first.state, calls(gid, "grep"))
    store.apply(round_)
    tid = only(t.id for t in tools(round_.state))
    running = step(round_.state, prepared(tid, replay="safe"))
    store.apply(running)
    store.apply(step(running.state, _progressed(tid, "old output")))

    st = step(opened_state(), store.opened(now=90, catalog=(ToolInfo(name="grep", replay="safe"),)))
    assert kinds(st) == [Commit, RunTool]
    live = put_live(st)
    assert live is not None and live.tools is not None
    assert (live.tools[0].status, live.tools[0].output) == ("running", None)
