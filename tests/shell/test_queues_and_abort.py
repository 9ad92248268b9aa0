"""Queues and cancellation through the host API: passive writes, queue modes, abort_submission, conv.abort, abort_task and sub-agents.

Runs on ``MemoryStorage`` with ``ScriptedModels`` under Trio's autojump clock;
every wait is bounded with ``fail_after`` so a hang fails fast.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.model import GENERATION, TOOL, EntryKind, OutcomeStatus, SubmissionStatus, TaskStatus
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    NotFound,
    Progress,
    Registry,
    Settings,
    ToolCallContext,
    Write,
    define_subagent_tool,
    define_task,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.providers.base import ModelRequest

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
WAIT = 10  # seconds (virtual under the autojump clock)
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


# --- helpers -------------------------------------------------------------------------


class Gate:
    """A tool that blocks until released and records whether Trio cancelled it."""

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self.entered = trio.Event()
        self.release = trio.Event()
        self.task_ids: list[int] = []
        self.cancelled: list[int] = []

    def tool(self) -> Any:
        async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
            self.task_ids.append(ctx.task_id)
            self.entered.set()
            try:
                await self.release.wait()
            except trio.Cancelled:
                self.cancelled.append(ctx.task_id)
                raise
            return "released"

        return define_tool(self.name, "Block until the test releases it.", NO_ARGS, execute, replay="safe")

    async def wait_entered(self) -> None:
        with trio.fail_after(WAIT):
            await self.entered.wait()


def registry_with(*tools: Any) -> Registry:
    registry = Registry()
    for t in tools:
        registry.install(t)
    return registry


@asynccontextmanager
async def opened(
    storage: MemoryStorage, models: ScriptedModels, registry: Registry, **kw: Any
) -> AsyncIterator[Harness]:
    async with Harness.open(storage, models=models, registry=registry, **kw) as h:
        yield h


async def settle(handle: Any) -> Any:
    with trio.fail_after(WAIT):
        return await handle.wait()


def per_conversation(parent: Sequence[Any], child: Sequence[Any]) -> ScriptedModels:
    """A model that answers the root conversation from ``parent`` and any other conversation from ``child``
    (the k-th reply for a context holding k assistant messages)."""

    def answer(request: ModelRequest) -> Any:
        script = parent if request.conversation_id == 1 else child
        k = sum(1 for m in request.messages if m.role == "assistant")
        return script[k]

    return ScriptedModels(answer)


def texts(entries: list[Any], kind: str = EntryKind.USER) -> list[str]:
    return [e.text for e in entries if e.kind == kind]


# --- passive writes ------------------------------------------------------------------


async def test_write_on_an_idle_conversation_is_done_at_once_and_starts_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An idle Write appends its entry (kind and data kept), settles done right away, and neither creates a task nor asks the model."""
    models = ScriptedModels([reply(text="never")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with()) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Write("remember: port 8081", kind="memo", data={"port": 8081}))
        record = await handle.record()
        transcript = await conv.transcript()
        assert await conv.idle()

    assert record.type == "write" and record.status == SubmissionStatus.DONE
    [entry] = transcript
    assert (entry.kind, entry.text, entry.data) == ("memo", "remember: port 8081", {"port": 8081})
    assert record.entry_id == entry.id
    assert storage.tasks() == [] and models.requests == []


async def test_write_while_busy_is_queued_then_placed_at_the_next_boundary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Write submitted during a tool call stays queued, is appended after the tool result at the round's boundary, and the model's next request sees it."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="noted")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("go"))
        await gate.wait_entered()
        note = await conv.submit(Write("the user stepped away"))
        queued = await note.record()
        assert queued.status == SubmissionStatus.QUEUED and queued.entry_id is None
        gate.release.set()
        written = await settle(note)
        done = await settle(first)
        transcript = await conv.transcript()

    assert written.status == SubmissionStatus.DONE and done.status == SubmissionStatus.DONE
    kinds = [(e.kind, e.text) for e in transcript]
    assert kinds == [
        ("user", "go"),
        ("system", ""),  # the tools offered (issue 17 item 4)
        ("assistant", ""),
        ("tool_result", "released"),
        ("user", "the user stepped away"),
        ("assistant", "noted"),
    ]
    assert any(m.role == "user" and m.text == "the user stepped away" for m in models.requests[1].messages)
    assert len(models.requests) == 2


# --- conv.abort ----------------------------------------------------------------------


async def test_conv_abort_during_a_blocking_tool_cancels_it_and_returns_once_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """conv.abort() during a blocking tool cancels the tool's Trio scope, returns only when idle, aborts the run and withdraws the queued input while the queued write survives and is placed by the next submission."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="fresh start")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("long job"))
        await gate.wait_entered()
        follow = await conv.submit(Input("and then this"))
        note = await conv.submit(Write("context for later"))

        with trio.fail_after(WAIT):
            await conv.abort()
        assert await conv.idle()
        assert gate.cancelled == gate.task_ids and len(gate.cancelled) == 1  # the body has left already
        aborted = await first.record()
        withdrawn = await follow.record()
        kept = await note.record()
        tool_task = await h.task(gate.task_ids[0])

        again = await conv.submit(Input("new question"))
        answered = await settle(again)
        placed_note = await note.record()
        transcript = await conv.transcript()

    assert (aborted.status, aborted.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert aborted.entry_id is not None and aborted.answer_entry_id is None
    assert (withdrawn.status, withdrawn.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert withdrawn.entry_id is None
    assert kept.status == SubmissionStatus.QUEUED
    assert tool_task is not None and tool_task.outcome.status == OutcomeStatus.ABORTED
    [result] = [e for e in transcript if e.kind == EntryKind.TOOL_RESULT]
    assert result.text == "<harness>\n[error] Tool gate was aborted\n</harness>" and result.is_error
    # the queued write is placed by the next submission's boundary, before the new input
    assert placed_note.status == SubmissionStatus.DONE
    assert texts(transcript) == ["long job", "context for later", "new question"]
    assert "and then this" not in [e.text for e in transcript]
    assert answered.status == SubmissionStatus.DONE
    assert storage.entry(answered.answer_entry_id).text == "fresh start"
    assert storage.tasks(live_only=True) == []


async def test_conv_abort_waits_for_slow_abort_handlers_and_skips_background_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """conv.abort() returns only after a foreground task's 5 s abort handler committed, leaves a background task running, and abort(background=True) ends that one too."""
    log: list[tuple[str, int, float]] = []

    async def forever(task: Any, rt: Any) -> None:
        await trio.sleep_forever()

    async def slow_abort(task: Any, rt: Any) -> Progress:
        await trio.sleep(5)
        log.append(("abort handler", task.id, trio.current_time()))
        return Progress(status="terminal", outcome={"status": "aborted"})

    job = define_task("job", lambda i: {"phase": "work"}, {"work": forever}, abort=slow_abort)
    models = ScriptedModels([reply(text="x")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(job)) as h:
        conv = await h.root(agent=AGENT)
        fg = await h.create_task("job", conversation_id=conv.id)
        bg = await h.create_task("job", conversation_id=conv.id, background=True)
        await trio.testing.wait_all_tasks_blocked()
        assert not await conv.idle()
        start = trio.current_time()
        with trio.fail_after(WAIT):
            await conv.abort()
        returned = trio.current_time()
        fg_end, bg_now = await h.task(fg), await h.task(bg)
        bg_in_flight = bg in h.runtime.inflight
        with trio.fail_after(WAIT):
            await conv.abort(background=True)
        bg_end = await h.task(bg)

    assert [(what, tid) for what, tid, _ in log] == [("abort handler", fg), ("abort handler", bg)]
    assert returned - start >= 5 and log[0][2] <= returned
    assert fg_end.status == TaskStatus.TERMINAL and fg_end.outcome.status == OutcomeStatus.ABORTED
    assert bg_now.status != TaskStatus.TERMINAL and not bg_now.abort_requested and bg_in_flight
    assert bg_end.status == TaskStatus.TERMINAL and bg_end.outcome.status == OutcomeStatus.ABORTED


async def test_conv_abort_returns_only_after_the_cancelled_tool_body_has_finished(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When conv.abort() returns, the aborted tool's body has already left (its shielded cleanup is over) and no invocation is in flight."""
    cleanup: list[str] = []
    entered = trio.Event()

    async def slow_cleanup(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)  # e.g. killing a subprocess, removing a temp dir
                cleanup.append("done")
        return "unreachable"  # pragma: no cover

    models = ScriptedModels([reply(tool_calls=[tool_call("slow")]), reply(text="unused")])
    async with opened(MemoryStorage(), models, registry_with(define_tool("slow", "s", NO_ARGS, slow_cleanup))) as h:
        conv = await h.root(agent=AGENT)
        await conv.submit(Input("go"))
        with trio.fail_after(WAIT):
            await entered.wait()
            await conv.abort()
        in_flight = dict(h.runtime.inflight)
        finished_cleanup = list(cleanup)

    assert in_flight == {}
    assert finished_cleanup == ["done"]


async def test_conv_abort_on_an_idle_conversation_is_a_no_op(autojump_clock: trio.testing.MockClock) -> None:
    """Aborting an idle conversation returns at once and stores nothing: no journal row, no submission, no entry."""
    models = ScriptedModels([reply(text="hi")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with()) as h:
        conv = await h.root(agent=AGENT)
        await settle(await conv.submit(Input("hello")))
        before = (storage.journal(), storage.submissions(), storage.entries(conv.id), storage.tasks())
        with trio.fail_after(WAIT):
            await conv.abort()
            await conv.abort(background=True)
        after = (storage.journal(), storage.submissions(), storage.entries(conv.id), storage.tasks())
        assert await conv.idle()

    assert after == before


# --- abort_task ------------------------------------------------------------------------


async def test_abort_task_unknown_terminal_and_live(autojump_clock: trio.testing.MockClock) -> None:
    """abort_task raises NotFound naming an unknown id, answers "marked" for a running tool (which ends aborted) and "terminal" once it ended."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="went on")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        await h.root(agent=AGENT)
        with pytest.raises(NotFound, match="Task 424242 does not exist"):
            await h.abort_task(424242)

        conv = await h.root()
        handle = await conv.submit(Input("go"))
        await gate.wait_entered()
        [tool_id] = gate.task_ids
        assert await h.abort_task(tool_id) == "marked"
        with trio.fail_after(WAIT):
            ended = await h.wait_for_task(tool_id)
        assert await h.abort_task(tool_id) == "terminal"
        settled = await settle(handle)

    assert gate.cancelled == [tool_id]
    assert ended.outcome.status == OutcomeStatus.ABORTED and ended.abort_requested
    # aborting one tool answers its call and lets the run go on
    assert settled.status == SubmissionStatus.DONE
    assert storage.entry(settled.answer_entry_id).text == "went on"


# --- abort_submission ----------------------------------------------------------------


async def test_harness_abort_submission_results(autojump_clock: trio.testing.MockClock) -> None:
    """abort_submission answers aborted for a queued input (withdrawn), already_placed for the running one, settled afterwards and not_found for unknown ids or another conversation."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="one"), reply(text="two")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("first"))
        await gate.wait_entered()
        dropped = await conv.submit(Input("drop me"))
        kept = await conv.submit(Input("keep me"))

        assert await h.abort_submission(first.id) == "already_placed"
        assert await h.abort_submission(dropped.id, conversation_id=conv.id + 1000) == "not_found"
        assert await h.abort_submission(987654) == "not_found"
        assert await h.abort_submission(dropped.id, conversation_id=conv.id) == "aborted"
        assert await h.abort_submission(dropped.id) == "settled"
        withdrawn = await dropped.record()

        gate.release.set()
        done = await settle(kept)
        assert await h.abort_submission(first.id) == "settled"
        transcript = await conv.transcript()

    assert (withdrawn.status, withdrawn.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert done.status == SubmissionStatus.DONE and storage.entry(done.answer_entry_id).text == "two"
    assert texts(transcript) == ["first", "keep me"]


async def test_submission_handle_abort(autojump_clock: trio.testing.MockClock) -> None:
    """SubmissionHandle.abort() withdraws a queued input ("aborted", wait() settles unanswered/aborted) and reports "already_placed" / "settled" for the others."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="done")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("first"))
        await gate.wait_entered()
        queued = await conv.submit(Input("queued"))
        assert await first.abort() == "already_placed"
        assert await queued.abort() == "aborted"
        withdrawn = await settle(queued)
        assert await queued.abort() == "settled"
        gate.release.set()
        await settle(first)
        assert await first.abort() == "settled"
        assert await conv.idle()

    assert (withdrawn.status, withdrawn.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert len(models.requests) == 2  # the withdrawn input never got a run


# --- settings ------------------------------------------------------------------------


async def test_follow_up_mode_all_at_open_answers_every_follow_up_in_one_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Harness.open(settings=Settings(follow_up_mode="all")) places both queued follow-ups in one successor run: one shared answer, three model calls in all."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="first"), reply(text="both")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool()), settings=Settings(follow_up_mode="all")) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("first"))
        await gate.wait_entered()
        a = await conv.submit(Input("a"))
        b = await conv.submit(Input("b"))
        gate.release.set()
        rf, ra, rb = await settle(first), await settle(a), await settle(b)

    assert rf.status == ra.status == rb.status == SubmissionStatus.DONE
    assert storage.entry(rf.answer_entry_id).text == "first"
    assert ra.answer_entry_id == rb.answer_entry_id
    assert storage.entry(ra.answer_entry_id).text == "both"
    assert len(models.requests) == 3
    assert [m.text for m in models.requests[2].messages if m.role == "user"][-2:] == ["a", "b"]


async def test_update_settings_changes_the_queue_mode_for_the_next_boundary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """harness.update_settings(follow_up_mode="all") while follow-ups wait makes the next boundary place them together."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="first"), reply(text="both")])
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        await conv.submit(Input("first"))
        await gate.wait_entered()
        a = await conv.submit(Input("a"))
        b = await conv.submit(Input("b"))
        await h.update_settings(Settings(follow_up_mode="all"))
        gate.release.set()
        ra, rb = await settle(a), await settle(b)

    assert ra.answer_entry_id == rb.answer_entry_id
    assert len(models.requests) == 3


async def test_default_mode_answers_each_follow_up_by_its_own_run(autojump_clock: trio.testing.MockClock) -> None:
    """Without settings, two queued follow-ups get two runs and two different answers (the control for the tests above)."""
    gate = Gate()
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("gate")]), reply(text="first"), reply(text="for a"), reply(text="for b")]
    )
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        await conv.submit(Input("first"))
        await gate.wait_entered()
        a = await conv.submit(Input("a"))
        b = await conv.submit(Input("b"))
        gate.release.set()
        ra, rb = await settle(a), await settle(b)

    assert storage.entry(ra.answer_entry_id).text == "for a"
    assert storage.entry(rb.answer_entry_id).text == "for b"


async def test_invalid_settings_raise_invalid_input(autojump_clock: trio.testing.MockClock) -> None:
    """An unknown queue mode or a non-Settings object is refused with InvalidInput, at open and in update_settings."""
    models = ScriptedModels([reply(text="x")])
    with pytest.raises(InvalidInput, match="follow_up_mode"):
        async with opened(MemoryStorage(), models, registry_with(), settings=Settings(follow_up_mode="sometimes")):
            pass  # pragma: no cover
    with pytest.raises(InvalidInput, match="Settings"):
        async with opened(MemoryStorage(), models, registry_with(), settings={"follow_up_mode": "all"}):
            pass  # pragma: no cover
    async with opened(MemoryStorage(), models, registry_with()) as h:
        with pytest.raises(InvalidInput, match="steering_mode"):
            await h.update_settings(Settings(steering_mode="bogus"))


# --- owned conversations and sub-agents ------------------------------------------------


async def test_create_conversation_owned_by_a_tool_task(autojump_clock: trio.testing.MockClock) -> None:
    """A tool creates a child owned by its task: the child copies the parent's agent, is answered, and an unknown owner is refused."""
    made: list[Any] = []

    async def spawn(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        child = await ctx.harness.create_conversation(owner_task_id=ctx.task_id)
        made.append((ctx.task_id, child.id, await child.owned_by(), await child.agent()))
        record = await (await child.submit(Input("child task"))).wait()
        return ctx.harness.runtime.storage.entry(record.answer_entry_id).text

    agent = AgentConfig(model=ModelRef("scripted", "demo"), instructions="be terse", cwd="/srv")
    models = per_conversation(
        [reply(tool_calls=[tool_call("spawn")]), reply(text="parent done")], [reply(text="child done")]
    )
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(define_tool("spawn", "Spawn a child.", NO_ARGS, spawn))) as h:
        conv = await h.root(agent=agent)
        settled = await settle(await conv.submit(Input("go")))
        with pytest.raises(InvalidInput, match="Owner task 999999"):
            await h.create_conversation(owner_task_id=999999)
        transcript = await conv.transcript()

    [(task_id, child_id, owner, child_agent)] = made
    assert owner == task_id and child_agent == agent
    assert [e.text for e in transcript if e.kind == EntryKind.TOOL_RESULT] == ["child done"]
    assert settled.status == SubmissionStatus.DONE
    child_entries = storage.entries(child_id)
    assert [e.text for e in child_entries if e.kind != EntryKind.SYSTEM] == ["child task", "child done"]
    # the copied instructions are what the child's model was shown: recorded (issue 9)
    [shown] = [e.data for e in child_entries if e.kind == EntryKind.SYSTEM]
    assert shown["sections"] == {"instructions": "<instructions>\nbe terse\n</instructions>"}


async def test_subagent_tool_end_to_end(autojump_clock: trio.testing.MockClock) -> None:
    """define_subagent_tool runs the prompt in a child owned by the tool task (request id subagent:<task>) and returns the child's answer as the tool result."""
    models = per_conversation(
        [reply(tool_calls=[tool_call("delegate", prompt="Find trains to Vienna")]), reply(text="Take the 9:10")],
        [reply(text="Trains: 9:10, 11:10")],
    )
    storage = MemoryStorage()
    tool = define_subagent_tool("delegate", "Ask a sub-agent.")
    async with opened(storage, models, registry_with(tool)) as h:
        conv = await h.root(agent=AGENT)
        settled = await settle(await conv.submit(Input("Plan my trip")))
        [tool_task] = [t for t in await h.tasks() if t.kind == TOOL]
        [child] = await h.conversations_owned_by(tool_task.id)
        child_subs = storage.submissions(child.id)
        transcript = await conv.transcript()

    assert settled.status == SubmissionStatus.DONE and storage.entry(settled.answer_entry_id).text == "Take the 9:10"
    [result] = [e for e in transcript if e.kind == EntryKind.TOOL_RESULT]
    assert result.text == "Trains: 9:10, 11:10" and not result.is_error
    [child_sub] = child_subs
    assert child_sub.request_id == f"subagent:{tool_task.id}" and child_sub.status == SubmissionStatus.DONE
    assert [e.text for e in storage.entries(child.id) if e.kind == EntryKind.USER] == ["Find trains to Vienna"]
    assert storage.tasks(live_only=True) == []


async def test_aborting_the_parent_aborts_the_subagents_run(autojump_clock: trio.testing.MockClock) -> None:
    """conv.abort() on the parent while the sub-agent's tool blocks cancels it and the sub-agent tool, aborts the child's run and the parent's, and leaves everything idle."""
    gate = Gate()
    models = per_conversation(
        [reply(tool_calls=[tool_call("delegate", prompt="Check the museum")]), reply(text="unused")],
        [reply(tool_calls=[tool_call("gate")]), reply(text="unused")],
    )
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(define_subagent_tool("delegate", "Ask."), gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("Plan my trip"))
        await gate.wait_entered()
        [delegate] = [t for t in await h.tasks(live_only=True) if t.kind == TOOL and t.conversation_id == conv.id]
        [child] = await h.conversations_owned_by(delegate.id)
        assert not await child.idle()

        with trio.fail_after(WAIT):
            await conv.abort()
        assert await conv.idle() and await child.idle()
        with trio.fail_after(WAIT):
            await h.wait_idle()
        assert gate.cancelled == gate.task_ids and len(gate.cancelled) == 1
        parent = await first.record()
        [child_sub] = storage.submissions(child.id)
        tasks = {t.id: t for t in await h.tasks()}

    assert gate.cancelled == gate.task_ids and len(gate.cancelled) == 1
    assert (parent.status, parent.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert (child_sub.status, child_sub.reason) == (SubmissionStatus.UNANSWERED, "aborted")
    assert tasks[delegate.id].outcome.status == OutcomeStatus.ABORTED
    assert tasks[gate.task_ids[0]].outcome.status == OutcomeStatus.ABORTED
    child_gens = [t for t in tasks.values() if t.kind == GENERATION and t.conversation_id == child.id]
    assert child_gens and all(t.outcome.status == OutcomeStatus.ABORTED for t in child_gens)
    assert all(t.status == TaskStatus.TERMINAL for t in tasks.values())
    assert storage.document(child.id, "pi.live").run is None
    assert [e.text for e in storage.entries(conv.id) if e.kind == EntryKind.TOOL_RESULT] == [
        "<harness>\n[error] Tool delegate was aborted\n</harness>"
    ]
    assert len(models.requests) == 2  # nothing asked the model after the abort


async def test_aborting_only_the_child_lets_the_parent_run_go_on(autojump_clock: trio.testing.MockClock) -> None:
    """Aborting the sub-agent's conversation (not the parent) settles the child unanswered/aborted; the sub-agent tool reports that as an error result and the parent run still answers."""
    gate = Gate()
    models = per_conversation(
        [reply(tool_calls=[tool_call("delegate", prompt="Check the weather")]), reply(text="I'll check later")],
        [reply(tool_calls=[tool_call("gate")]), reply(text="unused")],
    )
    storage = MemoryStorage()
    async with opened(storage, models, registry_with(define_subagent_tool("delegate", "Ask."), gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("Plan my trip"))
        await gate.wait_entered()
        [delegate] = [t for t in await h.tasks(live_only=True) if t.kind == TOOL and t.conversation_id == conv.id]
        [child] = await h.conversations_owned_by(delegate.id)
        with trio.fail_after(WAIT):
            await child.abort()
        settled = await settle(first)
        transcript = await conv.transcript()
        delegate_end = await h.task(delegate.id)

    assert settled.status == SubmissionStatus.DONE
    assert storage.entry(settled.answer_entry_id).text == "I'll check later"
    [result] = [e for e in transcript if e.kind == EntryKind.TOOL_RESULT]
    assert result.is_error and result.text == "Sub-agent gave no answer (aborted)"
    assert delegate_end.outcome.status == OutcomeStatus.COMPLETED and not delegate_end.abort_requested
    [child_sub] = storage.submissions(child.id)
    assert (child_sub.status, child_sub.reason) == (SubmissionStatus.UNANSWERED, "aborted")


async def test_create_conversation_accepts_the_ownership_forms() -> None:
    """``ownership`` may name a task ({'kind': 'task', 'task_id': N}) or say
    ownerless; anything else is refused with InvalidInput before anything is stored."""
    from pidurable.shell import InvalidInput, MemoryStorage, Registry, define_task

    async def wait_forever(task: Any, rt: Any) -> None:
        await trio.sleep_forever()

    registry = Registry()
    registry.install(define_task("holder", lambda i: {"phase": "hold"}, {"hold": wait_forever}))
    async with Harness.open(MemoryStorage(), models=None, registry=registry) as h:
        await h.root()
        owner = await h.create_task("holder")
        child = await h.create_conversation(ownership={"kind": "task", "task_id": owner})
        assert await child.owned_by() == owner
        free = await h.create_conversation(ownership={"kind": "ownerless"})
        assert await free.owned_by() is None
        with pytest.raises(InvalidInput, match="ownership must be"):
            await h.create_conversation(ownership="mine")
        assert len(await h.conversations()) == 3
