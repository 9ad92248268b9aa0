"""Controls, ``after_tools``, ``on_yield`` and ``on_abort`` in the core
(issue 9 item 3, reference §3.7, §3.9, §3.10): a tool round's controls end
or extend the run; the hooks the core must ask for are asked before the
commit that consumes their answer; an aborted call's result may be replaced."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from pidurable.core import controls
from pidurable.core.effects import RunAbortHooks, RunAfterTools
from pidurable.core.events import AfterToolsRan, ModelResponded, TaskAbortRequested, ToolAbortHooked, ToolFinished
from pidurable.core.model import (
    GENERATION,
    Diagnostic,
    EntryKind,
    ExtensionInfo,
    OutcomeStatus,
    ResultCode,
    Severity,
    SubmissionStatus,
    TaskId,
    TaskStatus,
)
from pidurable.core.state import State

from .helpers import (
    ROOT,
    Driver,
    answer,
    calls,
    effects_of,
    generation,
    live_tasks,
    opened_state,
    prepared,
    put_entries,
    put_subs,
    put_tasks,
    submit,
    tools,
)


def finished(task_id: int, text: str = "ok", **control: Any) -> ToolFinished:
    return ToolFinished(now=40, task_id=TaskId(task_id), text=text, control=control or None)


def with_hooks(state: State, *hooks: str) -> State:
    return attrs.evolve(state, extensions=(ExtensionInfo(name="ext", hooks=hooks),))


def round_of(d: Driver, *names: str) -> tuple[int, list[int]]:
    """Submit, answer with tool calls ``names``, prepare them; returns the
    input id and the tool task ids (call order)."""
    sid = d.value(submit("work"))
    d(calls(generation(d.state).id, *names))
    ids = [t.id for t in sorted(tools(d.state), key=lambda t: str(t.input["call_id"]))]
    for tid in ids:
        d(prepared(tid))
    return sid, ids


# --- decide (pure) -----------------------------------------------------------


def test_terminate_needs_every_call() -> None:
    """Terminate holds only if every call completed with terminate; a hook's terminate is enough."""
    yes = {"terminate": True}
    assert controls.decide([yes, yes], None).terminate
    assert not controls.decide([yes, {}], None).terminate
    assert not controls.decide([yes, None], None).terminate
    assert not controls.decide([], None).terminate
    assert controls.decide([{}, None], yes).terminate


def test_last_handoff_in_call_order_and_the_hook_wins() -> None:
    d = controls.decide([{"handoff": "a"}, {}, {"handoff": "b"}], None)
    assert d.handoff == "b" and d.ends_run
    assert controls.decide([{"handoff": "a"}], {"handoff": "h"}).handoff == "h"
    assert controls.decide([{"handoff": "a"}, None], None).handoff == "a"


def test_added_tools_once_in_call_order() -> None:
    d = controls.decide([{"add_tools": ["x", "y"]}, {"add_tools": ["y", "z"]}], {"add_tools": ["w"]})
    assert d.added == ("x", "y", "z", "w") and not d.ends_run


# --- rows --------------------------------------------------------------------


def test_every_call_terminating_ends_the_run_with_the_tool_calling_entry() -> None:
    """(tools, round_done) with terminate on every result: inputs done, answered by the assistant entry; no successor."""
    d = Driver(opened_state())
    sid, (a, b) = round_of(d, "read", "write")
    assistant = int(tools(d.state)[0].input["assistant"])
    d(finished(a, terminate=True))
    st = d(finished(b, terminate=True))
    sub = put_subs(st)[sid]
    assert sub.status == SubmissionStatus.DONE and sub.answer_entry_id == assistant
    assert live_tasks(d.state, GENERATION) == []
    assert d.state.conversations[ROOT].live.run is None


def test_one_call_not_terminating_continues_the_run() -> None:
    d = Driver(opened_state())
    sid, (a, b) = round_of(d, "read", "write")
    gen = generation(d.state)
    d(finished(a, terminate=True))
    st = d(finished(b))
    assert sid not in put_subs(st)
    successor = generation(d.state)
    assert successor.id != gen.id and d.state.conversations[ROOT].live.run.task_id == successor.id


def test_handoff_writes_a_reset_marker_and_ends_the_run() -> None:
    """A handoff: a ``reset`` entry carrying its text becomes the context head; the run ends done."""
    d = Driver(opened_state())
    sid, (a,) = round_of(d, "read")
    st = d(finished(a, handoff="start over with the plan"))
    marker = [e for e in put_entries(st) if e.kind == EntryKind.RESET]
    assert [m.text for m in marker] == ["start over with the plan"]
    assert d.state.conversations[ROOT].context.head == marker[0].id
    assert put_subs(st)[sid].status == SubmissionStatus.DONE


def test_add_tools_extends_the_agent_tools_list() -> None:
    d = Driver(attrs.evolve(opened_state(), catalog={}))
    cid = ROOT
    conv = d.state.conversations[cid]
    d.state = attrs.evolve(
        d.state, conversations={**d.state.conversations, cid: attrs.evolve(conv, agent=attrs.evolve(conv.agent, tools=("read",)))}
    )
    _, (a,) = round_of(d, "read")
    d(finished(a, add_tools=["write", "read"]))
    assert d.state.conversations[cid].agent.tools == ("read", "write")


def test_after_tools_hooks_are_asked_before_the_round_commits() -> None:
    """With ``after_tools`` hooks selected the settled round asks RunAfterTools (nothing committed for the generation); AfterToolsRan finishes it with the hook's control."""
    d = Driver(with_hooks(opened_state(), "after_tools"))
    sid, (a,) = round_of(d, "read")
    st = d(finished(a))
    (ask,) = effects_of(st, RunAfterTools)
    gen = d.state.tasks[ask.task_id]
    assert gen.status is TaskStatus.RUNNING and gen.kind == GENERATION
    assert gen.id not in put_tasks(st) or put_tasks(st)[gen.id].status is not TaskStatus.RUNNING
    assert len(ask.result_entry_ids) == 1 and ask.extensions == ("ext",)
    st = d(AfterToolsRan(now=50, task_id=gen.id, control={"terminate": True}))
    assert put_subs(st)[sid].status == SubmissionStatus.DONE
    assert put_tasks(st)[gen.id].outcome is not None


def test_after_tools_without_control_hands_over() -> None:
    d = Driver(with_hooks(opened_state(), "after_tools"))
    _, (a,) = round_of(d, "read")
    (ask,) = effects_of(d(finished(a)), RunAfterTools)
    st = d(AfterToolsRan(now=50, task_id=ask.task_id))
    assert put_tasks(st)[ask.task_id].outcome.status is OutcomeStatus.COMPLETED
    assert generation(d.state).id != ask.task_id


def continued(task_id: int, text: str = "partly", continuation: str = "Continue.") -> ModelResponded:
    return ModelResponded(now=20, task_id=TaskId(task_id), attempt=1, text=text, continuation=continuation)


def test_on_yield_continuation_keeps_the_run_going() -> None:
    """An answer with a continuation: the user message follows it, a successor takes the run, the input stays placed."""
    d = Driver(opened_state())
    sid = d.value(submit("work"))
    gen = generation(d.state)
    st = d(continued(gen.id, continuation="keep going"))
    entries = put_entries(st)
    assert [e.kind for e in entries] == [EntryKind.ASSISTANT, EntryKind.USER] and entries[1].text == "keep going"
    assert sid not in put_subs(st)
    successor = generation(d.state)
    assert successor.id != gen.id and d.state.conversations[ROOT].live.run.task_id == successor.id
    st = d(answer(successor.id, "all done"))
    assert put_subs(st)[sid].status == SubmissionStatus.DONE


def test_on_yield_continuation_is_dropped_for_a_queued_follow_up() -> None:
    """Reference checklist 11: a follow-up selected by the final boundary wins; the continuation is not retried."""
    d = Driver(opened_state())
    first = d.value(submit("work"))
    gen = generation(d.state)
    follow = d.value(submit("next", when_busy="follow_up"))
    st = d(continued(gen.id))
    texts = [e.text for e in put_entries(st) if e.kind == EntryKind.USER]
    assert texts == ["next"]
    subs = put_subs(st)
    assert subs[first].status == SubmissionStatus.DONE and subs[follow].status == SubmissionStatus.PLACED


def aborted_round(*hooks: str) -> tuple[Driver, int]:
    d = Driver(with_hooks(opened_state(), *hooks))
    _, (a,) = round_of(d, "edit")
    d(TaskAbortRequested(now=45, ticket=77, task_id=TaskId(a)))
    return d, a


def test_on_abort_hooks_replace_the_aborted_result() -> None:
    d, a = aborted_round("on_abort")
    task = d.state.tasks[a]
    assert task.status is TaskStatus.RUNNING and task.abort_requested
    st = d(ToolAbortHooked(now=50, task_id=TaskId(a), text="edit stopped; file untouched"))
    (entry,) = [e for e in put_entries(st) if e.kind == EntryKind.TOOL_RESULT]
    assert entry.text == "edit stopped; file untouched" and entry.is_error
    assert entry.data == {"code": ResultCode.ABORTED}
    assert put_tasks(st)[a].outcome.status is OutcomeStatus.ABORTED


def test_on_abort_hooks_keeping_the_result() -> None:
    """The hooks get the handler's result (no partial output: empty text, the
    ``aborted`` diagnostic); kept, it settles as the handler built it."""
    d = Driver(with_hooks(opened_state(), "on_abort"))
    _, (a,) = round_of(d, "edit")
    st = d(TaskAbortRequested(now=45, ticket=77, task_id=TaskId(a)))
    (asked,) = effects_of(st, RunAbortHooks)
    assert asked.text == "" and asked.diagnostics == (Diagnostic(Severity.ERROR, "Tool edit was aborted", "aborted"),)
    st = d(ToolAbortHooked(now=50, task_id=TaskId(a)))
    (entry,) = [e for e in put_entries(st) if e.kind == EntryKind.TOOL_RESULT]
    assert entry.text == "<harness>\n[error] Tool edit was aborted\n</harness>"


def test_an_on_abort_replacement_is_a_whole_result_with_its_diagnostics() -> None:
    """A replacement's own diagnostics (and the shell's cut, last) are rendered after its text."""
    d, a = aborted_round("on_abort")
    cut = {"total_bytes": 30, "total_lines": 3, "kept_bytes": 10, "kept_lines": 1, "retain": "head"}
    note = Diagnostic(Severity.INFO, "nothing was written", "note")
    st = d(ToolAbortHooked(now=50, task_id=TaskId(a), text="stopped\n", truncated=cut, diagnostics=(note,)))
    (entry,) = [e for e in put_entries(st) if e.kind == EntryKind.TOOL_RESULT]
    assert entry.text == (
        "stopped\n\n<harness>\n[info] nothing was written\n"
        "[warn] Output truncated to its beginning: 2 lines, 20 bytes dropped\n</harness>"
    )
    assert entry.is_error and entry.data is not None and entry.data["truncated"] == cut


def test_a_body_report_for_an_abort_marked_task_is_stale() -> None:
    """The abort handler's invocation runs now: the cancelled body's late ToolFinished changes nothing."""
    d, a = aborted_round("on_abort")
    st = d(finished(a, "late"))
    assert put_entries(st) == [] and d.state.tasks[a].status is TaskStatus.RUNNING


def test_without_on_abort_hooks_the_handler_settles_at_once() -> None:
    d = Driver(opened_state())
    _, (a,) = round_of(d, "edit")
    st = d(TaskAbortRequested(now=45, ticket=77, task_id=TaskId(a)))
    assert effects_of(st, RunAbortHooks) == []
    assert put_tasks(st)[a].outcome.status is OutcomeStatus.ABORTED
    assert put_entries(d(ToolAbortHooked(now=50, task_id=TaskId(a), text="x"))) == []


@pytest.mark.parametrize("hook", [None, {}, {"terminate": True}, {"add_tools": ["x"]}])
@pytest.mark.parametrize(
    "controls_",
    [(), (None,), (None, None), ({"terminate": True},), (None, {"handoff": "h"}), ({}, {"add_tools": ["y"]})],
)
def test_of_round_is_decide_of_the_round_controls(controls_: tuple[Any, ...], hook: Any) -> None:
    """``of_round`` (the common case told without a list) decides as ``decide(round_controls(...))``."""
    from pidurable.core.state import ToolSlot

    slots = [ToolSlot(call_id=f"c{i}", name="t", task_id=TaskId(10 + i), entry_id=20 + i, control=c) for i, c in enumerate(controls_)]  # type: ignore[arg-type]
    slots.append(ToolSlot(call_id="open", name="t"))  # a call that never completed: no terminate
    for every in (slots, slots[:-1]):
        assert controls.of_round(every, hook) == controls.decide(controls.round_controls(every), hook)
