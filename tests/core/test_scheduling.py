"""Scheduling and recovery: what runs after Opened/Resumed, and what never runs."""

from __future__ import annotations

from pidurable.core import State, step
from pidurable.core.effects import CallModel, Commit, PrepareTool, PutTask, RunTool
from pidurable.core.events import RegistryChanged, Resumed
from pidurable.core.model import (
    GENERATION,
    TOOL,
    ConversationId,
    Outcome,
    OutcomeStatus,
    Task,
    TaskId,
    TaskStatus,
    ToolInfo,
)
from pidurable.core.state import Live, RunInfo

from .helpers import (
    MODEL,
    ROOT,
    conv_state,
    effects_of,
    finished,
    kinds,
    only,
    opened_event,
    opened_state,
    put_tasks,
    the_commit,
    writes_of,
)

CID = ConversationId(ROOT)
REQUEST_CP = {"phase": "request", "attempt": 1, "model": {"provider": MODEL.provider, "model_id": MODEL.model_id}, "cutoff": 3}


def gen_task(tid: int, status: TaskStatus, checkpoint: dict[str, object], **kw: object) -> Task:
    return Task(id=TaskId(tid), conversation_id=CID, kind=GENERATION, status=status, checkpoint=checkpoint, **kw)  # type: ignore[arg-type]


def tool_task(tid: int, status: TaskStatus, checkpoint: dict[str, object], owner: int = 10, **kw: object) -> Task:
    return Task(
        id=TaskId(tid), conversation_id=CID, kind=TOOL, status=status, owner=TaskId(owner),
        input={"assistant": 4, "call_id": f"c{tid}", "name": "ls"}, checkpoint=checkpoint, **kw,  # type: ignore[arg-type]
    )


def busy_conv(gen_id: int = 10) -> object:
    return conv_state(live=Live(run=RunInfo(task_id=TaskId(gen_id), inputs=())))


def test_opened_turns_running_into_pending_with_the_checkpoint_unchanged() -> None:
    """Opened writes every running task back to pending in one commit, keeping its checkpoint; waiting tasks stay waiting."""
    gen = gen_task(10, TaskStatus.WAITING, {"phase": "tools", "assistant": 4, "tools": [11, 12], "pending": []},
                   on=(TaskId(11), TaskId(12)))
    t1 = tool_task(11, TaskStatus.RUNNING, {"phase": "execute", "arguments": {"a": 1}, "replay": "safe"})
    t2 = tool_task(12, TaskStatus.RUNNING, {"phase": "execute", "arguments": {"b": 2}, "replay": "safe"})
    ev = opened_event(conversations=[busy_conv()], tasks=[gen, t1, t2], resume=False,
                      catalog=[ToolInfo(name="ls", replay="safe")])
    st = step(State(), ev)

    assert kinds(st) == [Commit]
    the_commit(st)
    written = put_tasks(st)
    assert set(written) == {11, 12}  # the waiting generation is not rewritten
    for tid, original in ((11, t1), (12, t2)):
        assert written[tid].status is TaskStatus.PENDING
        assert written[tid].checkpoint == original.checkpoint
        assert st.state.tasks[tid] == written[tid]
    assert st.state.tasks[10] == gen
    assert st.state.tasks[10].status is TaskStatus.WAITING


def test_opened_with_nothing_running_writes_nothing() -> None:
    """Opening a store where no task was running needs no commit."""
    gen = gen_task(10, TaskStatus.PENDING, {"phase": "prepare", "attempt": 1})
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen], resume=False))
    assert st.effects == ()
    assert st.state.opened and not st.state.scheduling


def test_opened_keeps_the_stored_counters() -> None:
    """Opened takes next_id/next_seq from the store, so new ids and commit numbers continue after the stored ones."""
    st = step(State(), opened_event(next_id=500, next_seq=77, tasks=[
        gen_task(10, TaskStatus.RUNNING, REQUEST_CP)], conversations=[busy_conv()], resume=False))
    assert the_commit(st).seq == 77
    assert st.state.next_seq == 78 and st.state.next_id == 500


def test_without_resume_nothing_is_dispatched_until_resumed() -> None:
    """With ``resume=False`` Opened only recovers; the first Resumed dispatches the pending work."""
    gen = gen_task(10, TaskStatus.RUNNING, REQUEST_CP)
    opened = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen], resume=False))
    assert kinds(opened) == [Commit]
    assert not effects_of(opened, CallModel)
    assert opened.state.tasks[10].status is TaskStatus.PENDING

    resumed = step(opened.state, Resumed(now=5))
    assert kinds(resumed) == [CallModel]  # the request intent is stored already: no commit
    assert only(effects_of(resumed, CallModel)).cutoff == 3
    assert resumed.state.tasks[10].status is TaskStatus.RUNNING

    again = step(resumed.state, Resumed(now=6))
    assert again.effects == ()  # a running task is not dispatched twice


def test_opened_with_resume_dispatches_in_the_same_step() -> None:
    """With ``resume=True`` the recovery commit is followed by the dispatch of the recovered work."""
    gen = gen_task(10, TaskStatus.RUNNING, REQUEST_CP)
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen]))
    assert kinds(st) == [Commit, CallModel]


def test_terminal_tasks_are_never_dispatched() -> None:
    """A terminal task handed to Opened is not live and is never run, even with a runnable-looking checkpoint."""
    done = gen_task(10, TaskStatus.TERMINAL, REQUEST_CP, outcome=Outcome(status=OutcomeStatus.COMPLETED))
    done_tool = tool_task(11, TaskStatus.TERMINAL, {"phase": "execute", "arguments": {}, "replay": "safe"},
                          outcome=Outcome(status=OutcomeStatus.FAILED))
    st = step(State(), opened_event(tasks=[done, done_tool], catalog=[ToolInfo(name="ls", replay="safe")]))
    assert st.effects == ()
    assert dict(st.state.tasks) == {}
    assert step(st.state, Resumed(now=1)).effects == ()


def test_waiting_task_runs_only_when_every_awaited_task_is_terminal() -> None:
    """A waiting generation stays parked while any task in ``on`` is live and is reserved once all are terminal."""
    gen = gen_task(10, TaskStatus.WAITING, {"phase": "tools", "assistant": 4, "tools": [11, 12], "pending": []},
                   on=(TaskId(11), TaskId(12)))
    t1 = tool_task(11, TaskStatus.RUNNING, {"phase": "execute", "arguments": {}, "replay": "safe"})
    t2 = tool_task(12, TaskStatus.RUNNING, {"phase": "execute", "arguments": {}, "replay": "safe"})
    state = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen, t1, t2],
                                       catalog=[ToolInfo(name="ls", replay="safe")])).state
    assert state.tasks[10].status is TaskStatus.WAITING

    s1 = step(state, finished(11))
    assert s1.state.tasks[10].status is TaskStatus.WAITING  # 12 is still live
    assert not effects_of(s1, CallModel)
    s2 = step(s1.state, finished(12))
    g = put_tasks(s2)[10]
    assert g.status is TaskStatus.TERMINAL  # reserved, then handed over
    assert only(effects_of(s2, CallModel)).task_id not in (10, 11, 12)


def test_waiting_task_whose_awaited_tasks_are_already_terminal_runs_at_open() -> None:
    """A waiting task whose ``on`` names no live task (they finished before the crash) is released at open."""
    gen = gen_task(10, TaskStatus.WAITING, {"phase": "tools", "assistant": 4, "tools": [11], "pending": []},
                   on=(TaskId(11),))
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen]))
    assert put_tasks(st)[10].status is TaskStatus.TERMINAL
    assert len(effects_of(st, CallModel)) == 1


def test_task_of_unknown_kind_stays_pending_and_blocks_nothing_else() -> None:
    """A task whose kind has no handler stays pending (blocked, never dropped) while other work proceeds."""
    custom = Task(id=TaskId(20), conversation_id=CID, kind="acme.custom", checkpoint={"phase": "start"})
    gen = gen_task(10, TaskStatus.RUNNING, REQUEST_CP)
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[custom, gen]))
    assert kinds(st) == [Commit, CallModel]
    assert st.state.tasks[20] == custom
    assert 20 not in put_tasks(st)
    # a waiter on the blocked task stays waiting
    waiter = gen_task(30, TaskStatus.WAITING, {"phase": "tools", "assistant": 4, "tools": [20], "pending": []},
                      on=(TaskId(20),))
    st2 = step(State(), opened_event(conversations=[busy_conv(30)], tasks=[custom, waiter]))
    assert st2.effects == ()
    assert st2.state.tasks[30].status is TaskStatus.WAITING and st2.state.tasks[20] == custom
    assert step(st2.state, RegistryChanged(now=1, catalog=())).effects == ()


def test_unknown_phase_faults_the_task() -> None:
    """A generation at a phase nobody knows ends ``faulted`` and its run's inputs are settled, instead of crashing."""
    gen = gen_task(10, TaskStatus.PENDING, {"phase": "dance"})
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen]))
    task = put_tasks(st)[10]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status is OutcomeStatus.FAULTED
    assert not st.state.conversations[ROOT].busy


def test_registry_change_replaces_the_catalog() -> None:
    """RegistryChanged swaps the tool catalog used by later decisions."""
    state = opened_state(catalog=[ToolInfo(name="ls")])
    st = step(state, RegistryChanged(now=1, catalog=(ToolInfo(name="cat", replay="safe"),)))
    assert st.effects == ()
    assert dict(st.state.catalog) == {"cat": ToolInfo(name="cat", replay="safe")}


def test_recovered_safe_tool_reruns_without_preparing_again() -> None:
    """A recovered ``execute`` tool goes straight to RunTool (its prepared arguments are stored), never to PrepareTool."""
    t = tool_task(11, TaskStatus.RUNNING, {"phase": "execute", "arguments": {"x": 1}, "replay": "safe"})
    gen = gen_task(10, TaskStatus.WAITING, {"phase": "tools", "assistant": 4, "tools": [11], "pending": []},
                   on=(TaskId(11),))
    st = step(State(), opened_event(conversations=[busy_conv()], tasks=[gen, t],
                                    catalog=[ToolInfo(name="ls", replay="safe")]))
    assert kinds(st) == [Commit, RunTool]
    assert not effects_of(st, PrepareTool)
    assert [w.task.id for w in writes_of(st, PutTask)] == [11]
