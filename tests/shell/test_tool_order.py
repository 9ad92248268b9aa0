"""Parallel tool bodies start in call order (issue 17 item 3).

Trio starts the tasks spawned in one pass in an arbitrary order (it reverses
or, under Hypothesis, shuffles each batch), so before the fix the last call of
a round could start first. Each round below has calls with different delays,
so the completion order differs from the call order: the bodies must start in
call order, the transcript holds the results in completion order, and the
next request lists them in call order (§3.15.1). Several rounds make an
accidental pass of a broken ordering vanishingly unlikely.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pidurable.core.model import EntryKind, SubmissionStatus
from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, ModelRef, Registry, ToolCallContext, define_tool
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "demo"), cwd=".")
WAIT = 60  # seconds of virtual time

#: per round: (label, delay in seconds) in call order
ROUNDS: list[list[tuple[str, int]]] = [
    [("a", 3), ("b", 1), ("c", 4), ("d", 2)],
    [("e", 1), ("f", 2), ("g", 3)],
    [("h", 4), ("i", 3), ("j", 2), ("k", 1)],
    [("l", 2), ("m", 4), ("n", 1), ("o", 3)],
    [("p", 1), ("q", 3), ("r", 2)],
]


def by_delay(calls: list[tuple[str, int]]) -> list[str]:
    return [label for label, _ in sorted(calls, key=lambda c: c[1])]


async def test_issue_17_parallel_bodies_start_in_call_order(autojump_clock: trio.testing.MockClock) -> None:
    """Every parallel round starts its bodies in call order while its results land in completion order and the next request lists them in call order."""
    started: list[str] = []
    finished: list[str] = []

    async def wait(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        started.append(args["label"])  # before any checkpoint: this is the body's start
        await trio.sleep(args["delay"])
        finished.append(args["label"])
        return f"done {args['label']}"

    registry = Registry()
    schema = {"type": "object", "properties": {"label": {"type": "string"}, "delay": {"type": "number"}}}
    registry.install(define_tool("wait", "Wait a while.", schema, wait, replay="safe"))
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("wait", label=label, delay=delay) for label, delay in calls]) for calls in ROUNDS]
        + [reply(text="all done")]
    )
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=None) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(WAIT):
            settled = await handle.wait()
        transcript = await conv.transcript()

    assert settled.status == SubmissionStatus.DONE
    assert started == [label for calls in ROUNDS for label, _ in calls]
    assert finished == [label for calls in ROUNDS for label in by_delay(calls)]
    # the transcript: each round's results in completion order
    results = [e.text for e in transcript if e.kind == EntryKind.TOOL_RESULT]
    assert results == [f"done {label}" for calls in ROUNDS for label in by_delay(calls)]
    # the request after each round: its results in call order
    for k, calls in enumerate(ROUNDS):
        request = models.requests[k + 1]
        tool_messages = [m.text for m in request.messages if m.role == "tool"]
        assert tool_messages[-len(calls) :] == [f"done {label}" for label, _ in calls]


async def test_a_cancelled_wait_lets_the_next_body_start(autojump_clock: trio.testing.MockClock) -> None:
    """Aborting a conversation while its round's bodies are starting leaves no body waiting forever: the abort returns and the submission settles."""
    entered = trio.Event()

    async def block(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        entered.set()
        await trio.sleep_forever()
        return "never"

    registry = Registry()
    registry.install(define_tool("block", "Block.", {"type": "object"}, block, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("block") for _ in range(3)])])
    async with Harness.open(MemoryStorage(), models=models, registry=registry, env=None) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(WAIT):
            await entered.wait()
            await conv.abort()
            settled = await handle.wait()
    assert settled.status == SubmissionStatus.UNANSWERED


async def test_a_body_cancelled_before_it_starts_never_runs_and_the_next_starts() -> None:
    """The loop spawns only a round's first task; the bodies after it run
    in that task or in one a suspending body hands them to. A ``Cancel`` that reaches a later body before its task
    started (its scope is in ``inflight`` from act time on) keeps its body
    from running at all, and the bodies after it still start, in call order;
    every scope leaves ``inflight``."""
    from pidurable.core.effects import RunTool
    from pidurable.core.model import ConversationId, TaskId
    from pidurable.shell.loop import Loop

    loop = Loop(storage=MemoryStorage(), store_id="test")
    ran: list[int] = []

    def body(k: int) -> Any:
        async def job() -> None:
            ran.append(k)  # before any checkpoint: the body's start
            await trio.sleep(0)

        return job

    async with trio.open_nursery() as nursery:
        loop.nursery = nursery
        for k in range(1, 5):
            effect = RunTool(task_id=TaskId(k), conversation_id=ConversationId(1), call_id=f"c{k}", name="t", arguments={})
            loop._spawn_in_call_order(effect, body(k))
        assert set(loop.inflight) == {1, 2, 3, 4}
        loop.inflight[TaskId(2)].cancel()  # acted in the same flush, before any task ran
    assert ran == [1, 3, 4]
    assert loop.inflight == {}


def _round_loop() -> Any:
    from pidurable.shell.loop import Loop

    return Loop(storage=MemoryStorage(), store_id="test")


def _start_round(loop: Any, nursery: trio.Nursery, body: Any, ks: tuple[int, ...] = (1, 2, 3)) -> None:
    """Act one round of tool bodies ``body(k)`` (task ids ``ks``) as one flush would."""
    from pidurable.core.effects import RunTool
    from pidurable.core.model import ConversationId, TaskId

    loop.nursery = nursery
    for k in ks:
        effect = RunTool(task_id=TaskId(k), conversation_id=ConversationId(1), call_id=f"c{k}", name="t", arguments={})
        loop._spawn_in_call_order(effect, body(k))


async def test_bodies_that_never_wait_share_one_task_and_a_waiting_one_hands_the_rest_on() -> None:
    """A body that finishes without suspending is followed by the next one
    in the same task (a task fewer per such body); one that suspends hands
    the rest of the round to a new task before it does, so the next body
    starts while it waits (here body 3 sets what body 2 waits for: run one
    after the other, the round would never end)."""
    loop = _round_loop()
    tasks: dict[int, object] = {}
    release = trio.Event()

    def body(k: int) -> Any:
        async def job() -> None:
            tasks[k] = trio.lowlevel.current_task()
            if k == 2:
                await release.wait()
            if k == 3:
                release.set()

        return job

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            _start_round(loop, nursery, body, (1, 2, 3, 4))
    assert tasks[1] is tasks[2]  # 1 never waited: 2 ran in its task
    assert tasks[3] is not tasks[2] and tasks[4] is tasks[3]  # 2 waited: 3 and 4 in a new task
    assert loop.inflight == {}


async def test_each_body_of_a_shared_task_sees_the_context_of_its_own_start() -> None:
    """Bodies run one after the other in one task each get a copy of the
    task's context as it started: a context variable one sets is not seen
    by the next (as when each had a task of its own)."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    loop = _round_loop()
    seen: list[str] = []

    def body(k: int) -> Any:
        async def job() -> None:
            seen.append(var.get())
            var.set(f"set by {k}")

        return job

    async with trio.open_nursery() as nursery:
        _start_round(loop, nursery, body)
    assert seen == ["unset", "unset", "unset"]


async def test_a_body_that_raises_does_not_stop_the_round() -> None:
    """A body raising (a bug in its interpreter) faults its own task only;
    the next bodies of the round still run."""
    loop = _round_loop()
    ran: list[int] = []
    failed: list[Any] = []
    loop._invocation_failed = lambda effect, error: failed.append((effect.task_id, str(error)))  # type: ignore[method-assign]

    def body(k: int) -> Any:
        async def job() -> None:
            ran.append(k)
            if k == 1:
                raise ValueError("boom")

        return job

    async with trio.open_nursery() as nursery:
        _start_round(loop, nursery, body)
    assert ran == [1, 2, 3]
    assert failed == [(1, "boom")]
    assert loop.inflight == {}


async def test_a_cancelled_nursery_still_settles_every_body_of_the_round() -> None:
    """The harness closing (its nursery cancelled) while a round's bodies
    are queued: the first body runs (as a first body always starts), the
    later ones never do, and every scope leaves ``inflight``."""
    loop = _round_loop()
    ran: list[int] = []

    def body(k: int) -> Any:
        async def job() -> None:
            ran.append(k)

        return job

    async with trio.open_nursery() as nursery:
        _start_round(loop, nursery, body)
        nursery.cancel_scope.cancel()
    assert ran == [1]
    assert loop.inflight == {}


async def test_cancelling_a_waiting_body_cancels_it_alone() -> None:
    """Bodies run in one task share its cancel scope; by the time one can be
    cancelled (it waits) it is the only one left in it: cancelling it stops
    it and no other body, and a first body cancelled before it started
    starts in a cancelled scope (its first checkpoint stops it)."""
    from pidurable.core.model import TaskId

    loop = _round_loop()
    done: list[int] = []
    stopped: list[int] = []
    waiting = trio.Event()

    def body(k: int) -> Any:
        async def job() -> None:
            try:
                if k in (1, 3):
                    await trio.sleep(1 if k == 1 else 0)
                if k == 3:
                    waiting.set()
                    await trio.sleep_forever()
                if k == 4:
                    await trio.sleep(0)
                done.append(k)
            except trio.Cancelled:
                stopped.append(k)
                raise

        return job

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            _start_round(loop, nursery, body, (1, 2, 3, 4))
            loop.inflight[TaskId(1)].cancel()  # before any task ran: body 1 starts cancelled
            await waiting.wait()
            loop.inflight[TaskId(3)].cancel()
    assert stopped == [1, 3]
    assert done == [2, 4]
    assert loop.inflight == {}
