"""``pidurable.aio`` under ``asyncio.run``: Trio in guest mode inside the
asyncio loop, the shell's API as asyncio coroutines (docs/asyncio.md).

Each test is a sync function calling ``asyncio.run`` (pytest-asyncio is not a
dependency; pytest-trio's trio mode leaves sync tests alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import pidurable.aio as aio
from pidurable.shell import (
    AgentConfig,
    ConversationBusy,
    HarnessClosed,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    NotFound,
    Registry,
    StoreLocked,
    Write,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(main(), 30))


def opening(models: ScriptedModels, storage: Any = None, registry: Registry | None = None) -> Any:
    return aio.Harness.open(
        storage if storage is not None else MemoryStorage(), models=models, registry=registry or Registry()
    )


def test_submit_wait_and_read_under_asyncio_run() -> None:
    """A submission is accepted, answered and read back through asyncio
    coroutines; results are the shell's records and facade handles."""

    async def main() -> None:
        async with opening(ScriptedModels([reply(text="hello")])) as harness:
            conv = await harness.root(agent=AGENT)
            assert isinstance(conv, aio.Conversation) and conv.id == 1
            handle = await conv.submit(Input("hi", request_id="r-1"))
            assert isinstance(handle, aio.SubmissionHandle)
            record = await handle.wait()
            assert (record.status, record.request_id) == ("done", "r-1")
            assert [e.text for e in await conv.transcript()] == ["hi", "hello"]
            assert (await conv.submit(Input("hi", request_id="r-1"))).id == handle.id  # idempotent
            assert await harness.conversations() == [conv]
            assert await harness.conversation(99) is None
            assert (await harness.submission(handle.id)) == handle
            assert (await conv.agent()).model == AGENT.model
            assert await conv.idle()
            await harness.wait_idle()
            write = await conv.submit(Write("a note"))
            assert (await write.wait()).status == "done"

    run(main)


def test_a_cancelled_wait_cancels_only_the_wait() -> None:
    """``asyncio.timeout`` around ``handle.wait()`` and ``task.cancel()`` stop
    the waiting, never the durable run, which still finishes."""

    async def main() -> None:
        async with opening(ScriptedModels([reply(text="slow answer", delay=0.3)])) as harness:
            conv = await harness.root(agent=AGENT)
            handle = await conv.submit(Input("take your time"))
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await handle.wait()
            waiter = asyncio.create_task(handle.wait())
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert not await conv.idle()  # the run goes on
            record = await handle.wait()
            assert record.status == "done"
            assert (await conv.transcript())[-1].text == "slow answer"

    run(main)


def test_watch_is_an_asyncio_async_iterator() -> None:
    """``async with conv.watch() as views: async for view in views`` yields
    committed views with increasing seq until the run is idle; leaving the
    block (``break``) ends the watch, and a new one starts from now."""

    async def main() -> None:
        async with opening(ScriptedModels([reply(text="one", delay=0.05), reply(text="two")])) as harness:
            conv = await harness.root(agent=AGENT)
            await conv.submit(Input("go"))
            seqs = []
            async with conv.watch(entries=10) as views:
                async for view in views:
                    assert isinstance(view, aio.ConversationView)
                    seqs.append(view.seq)
                    if view.idle:
                        break
            assert seqs == sorted(set(seqs)) and len(seqs) >= 2
            assert [e.text for e in view.entries] == ["go", "one"]
            async with harness.watch_task_graph() as graphs:
                async for graph in graphs:
                    assert isinstance(graph, aio.TaskGraphView)
                    assert not graph.tasks  # nothing live
                    break
            with pytest.raises(InvalidInput):
                async with conv.watch(entries=0):
                    pass

    run(main)


def test_closing_the_harness_ends_its_watches_and_calls() -> None:
    """A watcher in another asyncio task stops when the harness closes (its
    ``async for`` ends), a pending wait raises ``HarnessClosed``, and so does
    any call after the close."""

    async def main() -> None:
        seen: list[int] = []

        async def watch(conv: aio.Conversation) -> None:
            async with conv.watch() as views:
                async for view in views:
                    seen.append(view.seq)

        async with opening(ScriptedModels([reply(text="never", delay=60)])) as harness:
            conv = await harness.root(agent=AGENT)
            handle = await conv.submit(Input("hang"))
            watcher = asyncio.create_task(watch(conv))
            waiter = asyncio.create_task(handle.wait())
            await asyncio.sleep(0.05)
        await watcher  # ended, no error
        assert seen
        with pytest.raises(HarnessClosed):
            await waiter
        with pytest.raises(HarnessClosed):
            await conv.transcript()

    run(main)


def test_errors_keep_their_types(tmp_path: Path) -> None:
    """The shell's exceptions reach asyncio callers as they are: InvalidInput,
    NotFound, ConversationBusy, StoreLocked, and a tool or model failure is
    data (a settled record), not an exception."""

    async def main(tmp: Path) -> None:
        path = tmp / "store.sqlite"
        async with opening(ScriptedModels([reply(text="x", delay=0.2)]), open_sqlite_storage(path)) as harness:
            conv = await harness.root(agent=AGENT)
            with pytest.raises(InvalidInput, match="non-empty"):
                await conv.submit(Input(""))
            with pytest.raises(InvalidInput):
                await conv.submit("not an input")  # type: ignore[arg-type]
            with pytest.raises(NotFound):
                await harness.wait_for_task(999)
            await conv.submit(Input("busy now"))
            with pytest.raises(ConversationBusy):
                await conv.submit(Input("no", when_busy="reject"))
            with pytest.raises(StoreLocked):
                async with opening(ScriptedModels([]), open_sqlite_storage(path)):
                    pass
            assert (await conv.transcript())[0].text == "busy now"  # the harness works on
        with pytest.raises(InvalidInput, match="Registry"):
            async with aio.Harness.open(MemoryStorage(), models=None, registry=object()):  # type: ignore[arg-type]
                pass

    run(lambda: main(tmp_path))


def test_two_harnesses_share_one_guest_run() -> None:
    """Two harnesses open at once on one loop (one Trio guest run serves
    both) run independently; closing one leaves the other working; the run
    ends with the last; a harness opened afterwards starts a new run."""

    async def main() -> None:
        async with opening(ScriptedModels([reply(text="a", delay=0.1)])) as first:
            async with opening(ScriptedModels([reply(text="b", delay=0.05)])) as second:
                assert trio.lowlevel.in_trio_run()  # the guest run, in this thread
                a = await (await first.root(agent=AGENT)).submit(Input("to a"))
                b = await (await second.root(agent=AGENT)).submit(Input("to b"))
                done = await asyncio.gather(a.wait(), b.wait())
                assert [r.status for r in done] == ["done", "done"]
            later = await (await first.root()).submit(Write("still open"))
            assert (await later.wait()).status == "done"
        assert not trio.lowlevel.in_trio_run()  # the last close ended the run
        async with opening(ScriptedModels([reply(text="c")])) as third:
            assert (await (await (await third.root(agent=AGENT)).submit(Input("c"))).wait()).status == "done"

    run(main)


def test_tools_run_in_trio_under_asyncio() -> None:
    """A tool body is Trio code (trio.sleep) even though the host is asyncio;
    harnesses opened concurrently from two asyncio tasks both work."""

    async def slow(call: Any, args: Any) -> str:
        await trio.sleep(0.01)
        return "slept"

    registry = Registry()
    registry.install(define_tool("nap", "sleep a bit", {"type": "object"}, slow, replay="safe"))

    async def one(label: str) -> list[str]:
        models = ScriptedModels([reply(tool_calls=[tool_call("nap")]), reply(text=label)])
        async with opening(models, registry=registry) as harness:
            conv = await harness.root(agent=AGENT)
            await (await conv.submit(Input("nap"))).wait()
            return [e.text for e in await conv.transcript()]

    async def main() -> None:
        got = await asyncio.gather(one("x"), one("y"))
        assert [g[-1] for g in got] == ["x", "y"], got
        assert any("slept" in text for text in got[0]), got

    run(main)


def test_outside_asyncio_the_error_says_what_to_use() -> None:
    """Opening ``pidurable.aio`` under Trio (no asyncio loop) raises a
    RuntimeError that names pidurable.shell and pidurable.sync."""

    async def under_trio() -> None:
        async with opening(ScriptedModels([])):
            pass

    with pytest.raises(RuntimeError, match="running asyncio loop.*pidurable.shell"):
        trio.run(under_trio)


def test_fork_returns_a_facade_conversation() -> None:
    """``conv.fork(at=...)`` is bridged like every method: it returns a
    ``pidurable.aio.Conversation`` that sees the parent's transcript up to the
    fork point and knows where it came from."""

    async def main() -> None:
        async with opening(ScriptedModels([reply(text="first"), reply(text="on the fork")])) as harness:
            conv = await harness.root(agent=AGENT)
            await (await conv.submit(Input("start"))).wait()
            answer = (await conv.transcript())[-1]
            fork = await conv.fork(at=answer.id)
            assert isinstance(fork, aio.Conversation) and fork.id != conv.id
            assert await fork.forked_from() == (conv.id, answer.id)
            await (await fork.submit(Input("go on"))).wait()
            assert [e.text for e in await fork.transcript()][-1] == "on the fork"
            with pytest.raises(InvalidInput):
                await conv.fork(at=0)

    run(main)
