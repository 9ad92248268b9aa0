"""The generation task: prepare pins the request, answers end the run, tool rounds and hand-overs are atomic."""

from __future__ import annotations

import attrs
import pytest

from pidurable.core import State, Step, step
from pidurable.core.effects import CallModel, Commit, PrepareTool, PutInbox, Respond
from pidurable.core.events import Resumed
from pidurable.core.model import (
    GENERATION,
    TOOL,
    ConversationId,
    EntryKind,
    ModelRef,
    OutcomeStatus,
    SubmissionStatus,
    TaskStatus,
    ToolInfo,
)
from pidurable.core.state import Live

from .helpers import (
    MODEL,
    ROOT,
    Store,
    answer,
    calls,
    effects_of,
    finished,
    generation,
    kinds,
    model_failed,
    only,
    opened_state,
    prepared,
    put_entries,
    put_live,
    put_subs,
    put_tasks,
    run_events,
    submit,
    the_commit,
    tools,
    writes_of,
)


def started(state: State | None = None, content: str = "hi") -> tuple[Step, int, int]:
    """Submit one input on an idle conversation; return the step, the generation id and the submission id."""
    st = step(state if state is not None else opened_state(), submit(content))
    return st, generation(st.state).id, only(put_subs(st))


def settle_tool(state: State, tid: int, text: str = "ok") -> list[Step]:
    """Prepare and finish one tool task."""
    return run_events(state, prepared(tid, path=f"/{tid}"), finished(tid, text))


# --- prepare -------------------------------------------------------------------


def test_prepare_pins_model_and_cutoff_before_calling_the_model() -> None:
    """Reserving at ``prepare`` commits ``running request{model, cutoff = next_id - 1}`` and only then emits CallModel."""
    idle = step(opened_state(resume=False), submit("hi"))
    gen = generation(idle.state)
    assert gen.status is TaskStatus.PENDING and gen.phase == "prepare"
    user = only(put_entries(idle))

    st = step(idle.state, Resumed(now=50))
    assert kinds(st) == [Commit, CallModel]
    task = only(put_tasks(st).values())
    cutoff = idle.state.next_id - 1
    assert task.id == gen.id and task.status is TaskStatus.RUNNING
    assert task.checkpoint == {
        "phase": "request",
        "attempt": 1,
        "model": {"provider": MODEL.provider, "model_id": MODEL.model_id},
        "cutoff": cutoff,
    }
    assert task.started_at == 50
    assert cutoff >= user.id  # the request sees the input it answers
    call = only(effects_of(st, CallModel))
    assert call == CallModel(task_id=gen.id, conversation_id=ConversationId(ROOT), attempt=1, model=MODEL, cutoff=cutoff)
    live = put_live(st)
    assert live is not None and live.attempt == 1 and live.run is not None and live.run.task_id == gen.id


def test_recovered_request_resends_the_pinned_request_even_after_the_agent_changed() -> None:
    """A generation found running at ``request`` re-sends the stored model and cutoff, never re-preparing."""
    first, gen_id, _ = started()
    store = Store(opened_state())
    store.apply(first)
    pinned = only(effects_of(first, CallModel))

    reopened = store.opened(now=100)
    other = ModelRef("other", "m2")
    reopened = attrs.evolve(
        reopened,
        next_id=reopened.next_id + 5,  # later ids exist now; the pinned cutoff must not move
        conversations=tuple(
            attrs.evolve(c, agent=attrs.evolve(c.agent, model=other)) for c in reopened.conversations
        ),
    )
    st = step(opened_state(), reopened)

    assert kinds(st) == [Commit, CallModel]
    recovered = only(put_tasks(st).values())
    assert recovered.status is TaskStatus.PENDING  # the durable record: running -> pending, checkpoint unchanged
    assert recovered.checkpoint == first.state.tasks[gen_id].checkpoint
    assert only(effects_of(st, CallModel)) == pinned
    assert st.state.tasks[gen_id].status is TaskStatus.RUNNING  # reserved in memory only


def test_no_model_fails_the_run_with_no_model() -> None:
    """Without a configured model the input settles ``unanswered/no_model``, the task fails and no model is called."""
    st = step(opened_state(model=None), submit("hi"))
    sid = only(put_subs(st))
    gen_id = only(t.id for t in put_tasks(st).values() if t.kind == GENERATION)

    assert kinds(st) == [Commit, Respond]
    sub = put_subs(st)[sid]
    assert sub.status is SubmissionStatus.UNANSWERED and sub.reason == "no_model"
    assert sub.detail == "No model is configured"
    task = put_tasks(st)[gen_id]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status is OutcomeStatus.FAILED
    assert task.outcome.error == {"message": "No model is configured", "detail": {"reason": "no_model"}}
    assert put_live(st) == Live()
    assert [e.kind for e in put_entries(st)] == [EntryKind.USER]  # no error assistant entry
    assert not st.state.tasks and not st.state.submissions
    assert not st.state.conversations[ROOT].busy


# --- answer --------------------------------------------------------------------


def test_answer_settles_the_run_in_one_commit() -> None:
    """A reply without tool calls appends the answer, settles the input done, clears the run and completes the task in one commit."""
    first, gen_id, sid = started()
    st = step(first.state, answer(gen_id, "the answer", now=33))

    assert kinds(st) == [Commit]
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.ASSISTANT and entry.text == "the answer"
    assert entry.stop_reason == "stop" and entry.by_task_id == gen_id and entry.at == 33
    sub = put_subs(st)[sid]
    assert sub.status is SubmissionStatus.DONE and sub.answer_entry_id == entry.id
    assert put_live(st) == Live()
    task = put_tasks(st)[gen_id]
    assert task.status is TaskStatus.TERMINAL and task.ended_at == 33
    assert task.outcome is not None and task.outcome.status is OutcomeStatus.COMPLETED
    assert task.outcome.result == {"entry_id": entry.id}
    assert dict(st.state.tasks) == {} and st.state.submissions == {}


# --- tool rounds ---------------------------------------------------------------


def test_tool_calls_start_a_round_in_one_commit() -> None:
    """A reply with calls writes the assistant entry, one tool task per call and the generation waiting on them, in one commit, then prepares each call."""
    first, gen_id, _ = started()
    st = step(first.state, calls(gen_id, "ls", "cat", "grep"))

    assert kinds(st) == [Commit, PrepareTool, PrepareTool, PrepareTool]
    the_commit(st)
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.ASSISTANT and entry.stop_reason == "tool_use"
    assert [c.id for c in entry.tool_calls] == ["c1", "c2", "c3"]
    written = put_tasks(st)
    tool_tasks = [t for t in written.values() if t.kind == TOOL]
    assert [t.input for t in tool_tasks] == [
        {"assistant": entry.id, "call_id": f"c{i}", "name": n} for i, n in enumerate(["ls", "cat", "grep"], 1)
    ]
    assert all(t.owner == gen_id and t.phase == "call" and t.status is TaskStatus.PENDING for t in tool_tasks)
    gen = written[gen_id]
    assert gen.status is TaskStatus.WAITING and gen.policy == "allSettled"
    assert gen.on == tuple(t.id for t in tool_tasks)
    assert gen.checkpoint == {"phase": "tools", "assistant": entry.id, "tools": list(gen.on), "pending": []}
    live = put_live(st)
    assert live is not None and live.tools is not None
    assert [(s.call_id, s.task_id, s.status) for s in live.tools] == [
        (f"c{i}", t.id, "pending") for i, t in enumerate(tool_tasks, 1)
    ]
    assert live.run is not None and live.run.task_id == gen_id
    assert [p.task_id for p in effects_of(st, PrepareTool)] == [t.id for t in tool_tasks]


def _sequential_round(state: State) -> None:
    """Drive a 3-call round on ``state`` and check it runs one tool at a time, then hands over."""
    first, gen_id, sid = started(state)
    round_ = step(first.state, calls(gen_id, "a", "b", "c"))
    t1 = only(t for t in put_tasks(round_).values() if t.kind == TOOL)
    gen = put_tasks(round_)[gen_id]
    assert gen.on == (t1.id,) and gen.checkpoint["pending"] == ["c2", "c3"]
    assert [p.task_id for p in effects_of(round_, PrepareTool)] == [t1.id]
    live = put_live(round_)
    assert live is not None and live.tools is not None
    assert [(s.call_id, s.task_id is None) for s in live.tools] == [("c1", False), ("c2", True), ("c3", True)]

    state = round_.state
    expected_calls = ["c2", "c3"]
    done_tools = [t1.id]
    current = t1.id
    while expected_calls:
        steps = settle_tool(state, current)
        fin = steps[-1]
        new_tool = only(t for t in put_tasks(fin).values() if t.kind == TOOL and t.status is TaskStatus.PENDING)
        assert new_tool.input["call_id"] == expected_calls[0]
        assert put_tasks(fin)[current].status is TaskStatus.TERMINAL
        g = put_tasks(fin)[gen_id]
        assert g.status is TaskStatus.WAITING and g.on == (new_tool.id,)
        assert g.checkpoint["pending"] == expected_calls[1:]
        assert [p.task_id for p in effects_of(fin, PrepareTool)] == [new_tool.id]
        done_tools.append(new_tool.id)
        assert g.checkpoint["tools"] == done_tools
        expected_calls.pop(0)
        current = new_tool.id
        state = fin.state
    last = settle_tool(state, current)[-1]
    assert put_tasks(last)[gen_id].status is TaskStatus.TERMINAL  # the round is over: hand-over
    assert only(effects_of(last, CallModel)).task_id != gen_id


def test_sequential_agent_runs_tools_one_at_a_time() -> None:
    """With ``tool_execution='sequential'`` only the first call gets a task; the rest are created one by one as each finishes."""
    _sequential_round(opened_state(tool_execution="sequential"))


def test_a_sequential_tool_in_the_catalog_makes_the_round_sequential() -> None:
    """A called tool whose catalog entry says ``execution_mode='sequential'`` makes the whole round sequential."""
    _sequential_round(opened_state(catalog=[ToolInfo(name="b", execution_mode="sequential"), ToolInfo(name="a")]))


def test_parallel_catalog_tools_all_start_at_once() -> None:
    """Parallel tools on a parallel agent all get tasks in the round's commit."""
    first, gen_id, _ = started(opened_state(catalog=[ToolInfo(name="a"), ToolInfo(name="b")]))
    st = step(first.state, calls(gen_id, "a", "b"))
    assert len([t for t in put_tasks(st).values() if t.kind == TOOL]) == 2


def test_handover_after_the_round_is_one_commit() -> None:
    """When every tool task is terminal, G ends, G2 is created and prepared, and live.run switches to G2, all in one commit."""
    first, gen_id, sid = started()
    round_ = step(first.state, calls(gen_id, "ls", "cat"))
    t1, t2 = (t.id for t in tools(round_.state))
    assistant = only(put_entries(round_)).id
    s1 = settle_tool(round_.state, t1)[-1]
    assert put_tasks(s1).keys() == {t1}  # G still waits on T2: no hand-over yet
    assert not effects_of(s1, CallModel)

    fin = settle_tool(s1.state, t2, "second")[-1]
    assert kinds(fin) == [Commit, CallModel]
    written = put_tasks(fin)
    g = written[gen_id]
    assert g.status is TaskStatus.TERMINAL and g.outcome is not None
    assert g.outcome.status is OutcomeStatus.COMPLETED and g.outcome.result == {"entry_id": assistant}
    g2 = only(t for t in written.values() if t.kind == GENERATION and t.id != gen_id)
    assert g2.status is TaskStatus.RUNNING and g2.phase == "request"
    result = only(put_entries(fin))
    assert result.kind is EntryKind.TOOL_RESULT
    assert g2.checkpoint["cutoff"] >= result.id  # the successor sees every result of the round
    live = put_live(fin)
    assert live is not None and live.run is not None
    assert live.run.task_id == g2.id and live.run.inputs == (sid,) and live.tools is None
    assert only(effects_of(fin, CallModel)).task_id == g2.id
    assert generation(fin.state).id == g2.id
    assert fin.state.submissions[sid].status is SubmissionStatus.PLACED  # the run goes on

    done = step(fin.state, answer(g2.id, "final"))
    sub = put_subs(done)[sid]
    assert sub.status is SubmissionStatus.DONE and sub.answer_entry_id == only(put_entries(done)).id


# --- failures --------------------------------------------------------------------


def test_model_failed_ends_the_run_unanswered_with_the_message() -> None:
    """ModelFailed appends an error assistant entry, settles the input ``unanswered/model_error`` with the message, and fails the task."""
    first, gen_id, sid = started()
    st = step(first.state, model_failed(gen_id, "rate limited"))

    assert kinds(st) == [Commit]
    entry = only(put_entries(st))
    assert entry.kind is EntryKind.ASSISTANT and entry.is_error and entry.stop_reason == "error"
    assert entry.text == "rate limited"
    sub = put_subs(st)[sid]
    assert sub.status is SubmissionStatus.UNANSWERED and sub.reason == "model_error" and sub.detail == "rate limited"
    task = put_tasks(st)[gen_id]
    assert task.status is TaskStatus.TERMINAL and task.outcome is not None
    assert task.outcome.status is OutcomeStatus.FAILED
    assert task.outcome.error == {"message": "rate limited", "detail": {"reason": "model_error"}}
    assert put_live(st) == Live()


def test_model_failed_leaves_queued_input_in_the_inbox() -> None:
    """A failed run settles only its own inputs: a queued follow-up stays queued (the inbox is left alone)."""
    first, gen_id, _ = started()
    q = step(first.state, submit("later"))
    queued = only(put_subs(q))
    st = step(q.state, model_failed(gen_id))
    assert queued not in put_subs(st)
    assert st.state.submissions[queued].status is SubmissionStatus.QUEUED
    assert [i.submission_id for i in st.state.conversations[ROOT].inbox] == [queued]
    assert not st.state.conversations[ROOT].busy


# --- stale events ------------------------------------------------------------------


def _stale_cases(gen_id: int) -> list[object]:
    return [
        answer(gen_id, attempt=2),
        model_failed(gen_id, attempt=2),
        answer(9999),
        model_failed(9999),
        calls(gen_id, "ls", attempt=0),
    ]


def test_stale_model_events_are_ignored() -> None:
    """Model events for another attempt or an unknown task produce no effects and leave the state unchanged."""
    first, gen_id, _ = started()
    for ev in _stale_cases(gen_id):
        st = step(first.state, ev)  # type: ignore[arg-type]
        assert st.effects == (), ev
        assert st.state == first.state, ev


def test_model_events_for_a_task_that_is_not_running_are_ignored() -> None:
    """A reply for a pending generation (not reserved yet) or one already answered is stale and ignored."""
    idle = step(opened_state(resume=False), submit("hi"))
    gen_id = generation(idle.state).id
    st = step(idle.state, answer(gen_id))
    assert st.effects == () and st.state == idle.state

    first, gen_id, _ = started()
    done = step(first.state, answer(gen_id))
    again = step(done.state, answer(gen_id, "twice"))
    assert again.effects == () and again.state == done.state
    waiting = step(first.state, calls(gen_id, "ls"))
    dup = step(waiting.state, answer(gen_id))
    assert dup.effects == () and dup.state == waiting.state


# --- boundaries ----------------------------------------------------------------------


def test_follow_up_is_placed_by_the_final_boundary_and_starts_a_new_run() -> None:
    """A follow-up queued during a run is placed in the answer's commit and a new run starts for it."""
    first, gen_id, sid = started()
    q = step(first.state, submit("and then?", when_busy="follow_up"))
    follow = only(put_subs(q))

    st = step(q.state, answer(gen_id, "first answer"))
    assert kinds(st) == [Commit, CallModel]
    subs = put_subs(st)
    assert subs[sid].status is SubmissionStatus.DONE
    assert subs[follow].status is SubmissionStatus.PLACED
    answer_entry, user_entry = put_entries(st)
    assert answer_entry.kind is EntryKind.ASSISTANT and user_entry.kind is EntryKind.USER
    assert user_entry.text == "and then?" and user_entry.id > answer_entry.id
    assert subs[follow].entry_id == user_entry.id
    assert writes_of(st, PutInbox)[-1].items == ()
    g2 = generation(st.state)
    assert g2.id != gen_id and g2.status is TaskStatus.RUNNING
    assert g2.checkpoint["cutoff"] >= user_entry.id
    live = st.state.conversations[ROOT].live
    assert live.run is not None and live.run.task_id == g2.id and live.run.inputs == (follow,)


def test_follow_up_is_not_placed_at_the_post_tools_boundary() -> None:
    """A follow-up waits through a tool round's hand-over and is placed only when the run answers."""
    first, gen_id, sid = started()
    round_ = step(first.state, calls(gen_id, "ls"))
    q = step(round_.state, submit("later", when_busy="follow_up"))
    follow = only(put_subs(q))
    fin = settle_tool(q.state, tools(q.state)[0].id)[-1]
    assert follow not in put_subs(fin)
    live = fin.state.conversations[ROOT].live
    assert live.run is not None and live.run.inputs == (sid,)
    assert [i.submission_id for i in fin.state.conversations[ROOT].inbox] == [follow]


def test_steer_is_placed_after_the_tool_round_and_joins_the_run() -> None:
    """A steer queued during a tool round is placed at the post-tools boundary, joins run.inputs, and is answered with the original input."""
    first, gen_id, sid = started()
    round_ = step(first.state, calls(gen_id, "ls"))
    q = step(round_.state, submit("actually, use cat", when_busy="steer"))
    steer = only(put_subs(q))
    assert q.state.submissions[steer].status is SubmissionStatus.QUEUED

    fin = settle_tool(q.state, tools(q.state)[0].id)[-1]
    subs = put_subs(fin)
    assert subs[steer].status is SubmissionStatus.PLACED
    user = only(e for e in put_entries(fin) if e.kind is EntryKind.USER)
    assert user.text == "actually, use cat" and subs[steer].entry_id == user.id
    g2 = generation(fin.state)
    assert g2.checkpoint["cutoff"] >= user.id  # the successor's request sees the steer
    live = fin.state.conversations[ROOT].live
    assert live.run is not None and live.run.task_id == g2.id and live.run.inputs == (sid, steer)
    assert fin.state.conversations[ROOT].inbox == ()

    done = step(fin.state, answer(g2.id, "ok, cat"))
    ans = only(put_entries(done)).id
    assert {k: (s.status, s.answer_entry_id) for k, s in put_subs(done).items()} == {
        sid: (SubmissionStatus.DONE, ans),
        steer: (SubmissionStatus.DONE, ans),
    }


@pytest.mark.parametrize("n_tools", [1, 2])
def test_each_round_hands_over_to_exactly_one_successor(n_tools: int) -> None:
    """Across several rounds there is always exactly one live generation, and it owns live.run."""
    first, gen_id, _ = started()
    state = first.state
    for _ in range(3):
        st = step(state, calls(gen_id, *["t"] * n_tools))
        state = st.state
        for t in tools(state):
            state = settle_tool(state, t.id)[-1].state
        g = generation(state)
        assert g.id != gen_id
        run = state.conversations[ROOT].live.run
        assert run is not None and run.task_id == g.id
        gen_id = g.id


def test_repeated_or_empty_call_ids_are_made_unique() -> None:
    """A model reply that repeats a tool-call id (or sends none) still gets one
    slot, one task and one result key per call: ids are replaced deterministically."""
    from pidurable.core.effects import PutEntry
    from pidurable.core.events import ModelResponded
    from pidurable.core.model import ToolCall

    state = opened_state()
    (s0,) = run_events(state, submit("go"))
    state = s0.state
    gen = generation(state)
    dup = (ToolCall(id="dup", name="t"), ToolCall(id="dup", name="t"), ToolCall(id="", name="t"))
    (s1,) = run_events(state, ModelResponded(now=20, task_id=gen.id, attempt=1, tool_calls=dup))
    entry = next(w.entry for w in writes_of(s1, PutEntry))
    ids = [c.id for c in entry.tool_calls]
    assert len(set(ids)) == 3 and ids[0] == "dup"
    assert sorted(s.call_id for s in s1.state.conversations[1].live.tools) == sorted(ids)


def test_call_model_carries_the_instructions_section_and_the_tool_filter() -> None:
    """Issue 7: the agent's instructions become the tagged system section of
    every request, and its tool filter travels with the request."""
    from pidurable.core.events import AgentConfigurationRequested
    from pidurable.core.model import AgentConfig

    from pidurable.core.model import ToolInfo

    state = opened_state(catalog=(ToolInfo(name="write"), ToolInfo(name="edit"), ToolInfo(name="read")))
    agent = AgentConfig(model=MODEL, instructions="Be brief.", tools=("read", "edit"))
    state = step(state, AgentConfigurationRequested(now=5, ticket=1, conversation_id=ConversationId(ROOT), agent=agent)).state
    first = step(state, submit("go"))
    call = only(effects_of(first, CallModel))
    assert call.system == "<instructions>\nBe brief.\n</instructions>"
    assert call.tools == ("read", "edit")
    # what the model was shown is recorded: a system entry before the cutoff
    system = [e for e in put_entries(first) if e.kind == "system"]
    assert len(system) == 1 and system[0].id <= call.cutoff
    assert system[0].data == {
        "sections": {"instructions": "<instructions>\nBe brief.\n</instructions>"},
        "order": ["instructions"],
        "tools_added": ["read", "edit"],
        "tools_removed": [],
    }
    plain = only(effects_of(step(opened_state(), submit("go")), CallModel))
    assert plain.system is None and plain.tools is None


def test_issue_17_an_agent_offered_tools_records_them_without_sections_or_instructions() -> None:
    """Issue 17 item 4 (reference §3.15.2): an agent with neither sections nor
    instructions but offered tools gets a system entry (text "", the tools
    added) at its first prepare, and its requests offer the recorded tools;
    the next prepare, with nothing changed, writes none. No tools, no
    sections, no instructions: no system entry."""
    from pidurable.core.events import ModelResponded
    from pidurable.core.model import ToolInfo

    state = opened_state(catalog=(ToolInfo(name="read"), ToolInfo(name="bash")))
    first = step(state, submit("go"))
    call = only(effects_of(first, CallModel))
    (system,) = [e for e in put_entries(first) if e.kind == "system"]
    assert system.text == "" and system.id <= call.cutoff
    assert system.data == {"sections": {}, "order": [], "tools_added": ["read", "bash"], "tools_removed": []}
    assert call.system is None and call.tools == ("read", "bash")
    gen = generation(first.state)
    answered = step(first.state, ModelResponded(now=20, task_id=gen.id, attempt=1, text="hi"))
    again = step(answered.state, submit("more", now=30))
    assert only(effects_of(again, CallModel)).tools == ("read", "bash")
    assert [e for e in put_entries(again) if e.kind == "system"] == []
    bare = step(opened_state(), submit("go"))
    assert [e for e in put_entries(bare) if e.kind == "system"] == []
