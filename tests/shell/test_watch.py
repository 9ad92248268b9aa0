"""Watches (issue 10, item 3): ``conv.watch()`` and ``harness.watch_task_graph()``.

Views are committed state only, their ``seq`` never goes backwards, a slow
consumer gets the newest view (never a backlog), watchers that leave are
removed and every watcher ends when the harness closes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from pidurable.core.effects import PutEntry, Write as PutWrite
from pidurable.core.events import Event
from pidurable.shell import (
    AgentConfig,
    ConversationView,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    StorageError,
    Write,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "m"))


def tools(*names: str, delay: float = 0.0) -> Registry:
    registry = Registry()

    async def run(call, args):  # type: ignore[no-untyped-def]
        await trio.sleep(delay)
        return "ok"

    for name in names:
        registry.install(define_tool(name, "a tool", {"type": "object"}, run, replay="safe"))
    return registry


async def collect_until_idle_after(views, answer_text: str) -> list[ConversationView]:  # type: ignore[no-untyped-def]
    """Views until one is idle and shows ``answer_text``."""
    seen: list[ConversationView] = []
    async for view in views:
        seen.append(view)
        if view.idle and any(e.text == answer_text for e in view.entries):
            break
    return seen


async def test_views_follow_commits_and_never_go_backwards(autojump_clock: trio.testing.MockClock) -> None:
    """A watcher opened before a two-round run sees the current state first,
    then views with strictly increasing ``seq`` whose entries only grow, and
    finally the idle conversation with the answer and no live progress."""
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("t"), tool_call("t")]), reply(tool_calls=[tool_call("t")]), reply(text="done")]
    )
    async with Harness.open(MemoryStorage(), models=models, registry=tools("t", delay=1)) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            first = await views.__anext__()
            assert first.idle and first.entries == () and first.live is None
            assert first.conversation is not None and first.conversation.owner_task_id is None
            assert first.documents["pi.agent"] == await conv.agent()
            await conv.submit(Input("go"))
            with trio.fail_after(60):
                seen = [first, *await collect_until_idle_after(views, "done")]
    seqs = [v.seq for v in seen]
    assert seqs == sorted(set(seqs)), seqs  # strictly increasing
    for earlier, later in zip(seen, seen[1:]):
        ids = [e.id for e in later.entries]
        assert [e.id for e in earlier.entries] == ids[: len(earlier.entries)]
    assert any(not v.idle and v.live is not None for v in seen)
    last = seen[-1]
    assert last.idle and last.live is None
    assert [e.kind for e in last.entries] == [  # the system entry records the tools offered (issue 17 item 4)
        "user", "system", "assistant", "tool_result", "tool_result", "assistant", "tool_result", "assistant",
    ]


async def test_a_slow_consumer_skips_to_the_newest_view(autojump_clock: trio.testing.MockClock) -> None:
    """A consumer that sleeps through a whole run gets, next, the newest view
    (the answered, idle conversation), not the dozens of views in between."""
    models = ScriptedModels([reply(tool_calls=[tool_call("t")]) for _ in range(5)] + [reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=tools("t", delay=0.5)) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            first = await views.__anext__()
            sub = await conv.submit(Input("go"))
            with trio.fail_after(60):
                await sub.wait()
                await conv.wait_idle()
            commits_during_run = h.runtime.state.next_seq - 1 - first.seq
            nxt = await views.__anext__()
            newest_seq = h.runtime.state.next_seq - 1
    assert commits_during_run > 10
    assert nxt.seq == newest_seq
    assert nxt.idle and nxt.entries[-1].text == "done"
    assert len(nxt.entries) == 13  # user, system (the tools offered), 5 x (assistant, tool_result), answer


async def test_a_watcher_that_leaves_is_removed(autojump_clock: trio.testing.MockClock) -> None:
    """Breaking out of the loop, or being cancelled while waiting, removes the
    watcher; the harness keeps nothing for it and keeps working."""
    async with Harness.open(MemoryStorage(), models=ScriptedModels([reply(text="a")]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            async for _ in views:
                break
        assert not h.runtime.watches.active
        with trio.move_on_after(5):
            async with conv.watch() as views:
                async for _ in views:
                    pass  # waits for a commit that never comes: cancelled
        assert not h.runtime.watches.active
        async with h.watch_task_graph() as graphs:
            async for _ in graphs:
                break
        assert not h.runtime.watches.active
        sub = await conv.submit(Input("still works"))
        assert (await sub.wait()).status == "done"


async def test_watchers_end_when_the_harness_closes(autojump_clock: trio.testing.MockClock) -> None:
    """Watchers running in the host's nursery (outside the harness block) stop
    cleanly when the harness closes: their loops end, nothing hangs; a watch
    opened after the close raises HarnessClosed."""
    ended: list[str] = []

    async def consume(views, name: str) -> None:  # type: ignore[no-untyped-def]
        async for _ in views:
            pass
        ended.append(name)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with Harness.open(MemoryStorage(), models=ScriptedModels([reply(text="a")]), registry=Registry()) as h:
                conv = await h.root(agent=AGENT)
                for i in range(3):
                    views = await nursery.start(_watching, conv.watch(), consume, f"conv{i}")
                await nursery.start(_watching, h.watch_task_graph(), consume, "graph")
                await trio.sleep(1)
    assert sorted(ended) == ["conv0", "conv1", "conv2", "graph"]
    from pidurable.shell import HarnessClosed

    with pytest.raises(HarnessClosed):
        conv.watch()


async def _watching(cm, consume, name: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
    async with cm as views:
        task_status.started(views)
        await consume(views, name)


async def test_streamed_tool_output_and_partial_answer_are_live(autojump_clock: trio.testing.MockClock) -> None:
    """While a tool streams its output in chunks, views show the slot's output
    growing; while the model streams its answer, views show the partial text;
    both are gone once the run ends."""
    registry = Registry()

    async def streamer(call, args):  # type: ignore[no-untyped-def]
        for piece in ("one ", "two ", "three"):
            call.report_output(piece)
            await trio.sleep(1)
        return "streamed"

    registry.install(define_tool("stream", "streams", {"type": "object"}, streamer, replay="safe"))
    answer = "The answer comes in several pieces."
    models = ScriptedModels([reply(tool_calls=[tool_call("stream")]), reply(text=answer, stream=5, delay=5)])
    outputs: list[str] = []
    partials: list[str] = []
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            await conv.submit(Input("go"))
            with trio.fail_after(60):
                async for view in views:
                    if view.live is not None:
                        for slot in view.live.tools or ():
                            if slot.output and (not outputs or outputs[-1] != slot.output):
                                outputs.append(slot.output)
                        if view.live.partial and (not partials or partials[-1] != view.live.partial):
                            partials.append(view.live.partial)
                    if view.idle and view.entries[-1].text == answer:
                        assert view.live is None
                        break
    assert outputs == ["one ", "one two ", "one two three"]
    assert len(partials) >= 3 and all(answer.startswith(p) for p in partials)
    assert len(set(partials)) == len(partials)


class SlowDurableStorage(MemoryStorage):
    """Records which seqs are durable; can fail the commit holding an entry
    with a chosen text (nothing of it is stored, the harness stops)."""

    def __init__(self, fail_on: str | None = None) -> None:
        super().__init__()
        self.durable = 0
        self.fail_on = fail_on

    def commit_many(self, batch: Sequence[tuple[int, Sequence[PutWrite], Sequence[Event]]]) -> None:
        for _, writes, _ in batch:
            for w in writes:
                if isinstance(w, PutEntry) and self.fail_on is not None and w.entry.text == self.fail_on:
                    raise StorageError("Store memory: commit failed, nothing was written (disk full)")
        super().commit_many(batch)
        self.durable = max(seq for seq, _, _ in batch)


async def test_views_show_only_durable_commits(autojump_clock: trio.testing.MockClock) -> None:
    """Every view's seq is durable when the watcher receives it, and every
    entry it shows is in the store; a commit that fails is never shown: the
    watcher stops instead."""
    storage = SlowDurableStorage(fail_on="secret answer")
    models = ScriptedModels([reply(tool_calls=[tool_call("t")]), reply(text="first"), reply(text="secret answer")])
    checked: list[int] = []

    async def watch(conv, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        async with conv.watch() as views:
            task_status.started()
            async for view in views:
                assert view.seq <= storage.durable
                stored = {e.id for e in storage.entries(conv.id)}
                assert all(e.id in stored for e in view.entries)
                assert all(e.text != "secret answer" for e in view.entries)
                checked.append(view.seq)

    failed = []
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                async with Harness.open(storage, models=models, registry=tools("t", delay=1)) as h:
                    conv = await h.root(agent=AGENT)
                    await nursery.start(watch, conv)
                    assert (await (await conv.submit(Input("one"))).wait()).status == "done"
                    # once everything is idle the watcher has caught up with the first
                    # run (how many views it saw on the way depends on scheduling: a
                    # watcher skips to the newest view)
                    await trio.testing.wait_all_tasks_blocked()
                    assert checked and checked[-1] == storage.durable
                    await conv.submit(Input("two"))
                    await trio.sleep(100)
    except* StorageError as group:
        failed.append(group)
    assert failed  # the failed commit stopped the harness; the watcher ended without an error


async def test_entries_window_and_documents(autojump_clock: trio.testing.MockClock) -> None:
    """``watch(entries=3)`` holds the 3 newest entries; the default holds 50;
    ``documents`` carries the built-in documents; a bad count is refused."""
    async with Harness.open(MemoryStorage(), models=None, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        for i in range(60):
            await (await conv.submit(Write(f"note {i}"))).wait()
        async with conv.watch(entries=3) as small, conv.watch() as default:
            a = await small.__anext__()
            b = await default.__anext__()
            assert [e.text for e in a.entries] == ["note 57", "note 58", "note 59"]
            assert len(b.entries) == 50 and b.entries[-1].text == "note 59"
            await (await conv.submit(Write("note 60"))).wait()
            a2 = await small.__anext__()
            assert [e.text for e in a2.entries] == ["note 58", "note 59", "note 60"]
            assert a2.seq > a.seq
        assert set(b.documents) >= {"pi.agent", "pi.inbox", "pi.usage", "pi.context"}
        for bad in (0, -1, "3", True):
            with pytest.raises(InvalidInput):
                async with conv.watch(entries=bad):  # type: ignore[arg-type]
                    pass


async def test_task_graph_shows_live_tasks_with_owner_links(autojump_clock: trio.testing.MockClock) -> None:
    """While a tool round runs, the task graph holds the generation and its
    tool tasks (owner = the generation); once the run ends it is empty."""
    models = ScriptedModels([reply(tool_calls=[tool_call("t"), tool_call("t")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=tools("t", delay=5)) as h:
        conv = await h.root(agent=AGENT)
        async with h.watch_task_graph() as graphs:
            first = await graphs.__anext__()
            assert dict(first.tasks) == {}
            await conv.submit(Input("go"))
            with trio.fail_after(60):
                rounds = None
                async for g in graphs:
                    tool_tasks = [t for t in g.tasks.values() if t.kind == "pi.tool"]
                    if len(tool_tasks) == 2 and rounds is None:
                        rounds = g
                    if rounds is not None and not g.tasks:
                        break
    assert rounds is not None
    owners = {t.owner for t in rounds.tasks.values() if t.kind == "pi.tool"}
    (gen,) = [t for t in rounds.tasks.values() if t.kind == "pi.generation"]
    assert owners == {gen.id}
    assert {t.id for t in rounds.children(gen.id)} == {t.id for t in rounds.tasks.values() if t.kind == "pi.tool"}


async def test_many_watchers_share_the_newest_view(autojump_clock: trio.testing.MockClock) -> None:
    """100 watchers of one conversation all end on the same final view object
    (it is built once and shared)."""
    models = ScriptedModels([reply(tool_calls=[tool_call("t")]), reply(text="done")])
    finals: list[ConversationView] = []

    async def watcher(conv, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        async with conv.watch() as views:
            task_status.started()
            finals.append((await collect_until_idle_after(views, "done"))[-1])

    async with Harness.open(MemoryStorage(), models=models, registry=tools("t", delay=1)) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(100):
                    await nursery.start(watcher, conv)
                await conv.submit(Input("go"))
        assert not h.runtime.watches.active
    assert len(finals) == 100
    assert len({id(v) for v in finals}) == 1


async def test_interval_throttles_views_and_still_ends_on_the_newest(autojump_clock: trio.testing.MockClock) -> None:
    """``watch(interval_ms=10_000)`` yields at most one view per 10 s: over a
    run of many commits within a few seconds it sees few views, the last one
    the answered conversation; a close during the wait still ends the loop."""
    models = ScriptedModels([reply(tool_calls=[tool_call("t")]) for _ in range(5)] + [reply(text="done")])
    counts = {"throttled": 0, "every": 0}
    async with Harness.open(MemoryStorage(), models=models, registry=tools("t", delay=0.1)) as h:
        conv = await h.root(agent=AGENT)

        async def count(name: str, interval: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
            async with conv.watch(interval_ms=interval) as views:
                task_status.started()
                seqs = []
                async for view in views:
                    seqs.append(view.seq)
                    counts[name] += 1
                    if view.idle and view.entries and view.entries[-1].text == "done":
                        break
                assert seqs == sorted(set(seqs))

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                await nursery.start(count, "throttled", 10_000)
                await nursery.start(count, "every", 0)
                await conv.submit(Input("go"))
        # unthrottled: at least one view per round (each tool takes 0.1 s) and the
        # answer - a slow consumer skips to the newest, so not one per commit
        assert counts["every"] >= 6 and 2 <= counts["throttled"] <= 3 < counts["every"]
        for bad in (-1, 1.5, "10"):
            with pytest.raises(InvalidInput):
                async with conv.watch(interval_ms=bad):  # type: ignore[arg-type]
                    pass

    ended = []
    with trio.fail_after(5):  # closing ends a watcher that waits out its interval
        async with trio.open_nursery() as nursery:
            async with Harness.open(MemoryStorage(), models=None, registry=Registry()) as h:
                conv = await h.root(agent=AGENT)

                async def slow(*, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
                    async with conv.watch(interval_ms=3_600_000) as views:
                        task_status.started()
                        async for _ in views:
                            pass
                    ended.append(True)

                await nursery.start(slow)
                await (await conv.submit(Write("a note"))).wait()
                await trio.sleep(0.1)
    assert ended == [True]


async def test_a_host_document_update_is_a_new_view(autojump_clock: trio.testing.MockClock) -> None:
    """``conv.update_document`` touches the conversation: watchers get a view
    whose ``documents`` hold the new value (as stored JSON)."""
    from pidurable.shell import define_doc

    todo = define_doc("app.todo", {"type": "array", "items": {"type": "string"}}, [])
    registry = Registry()
    registry.install(todo)
    async with Harness.open(MemoryStorage(), models=None, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            first = await views.__anext__()
            assert "app.todo" not in first.documents
            await conv.update_document(todo, lambda items: [*items, "buy milk"])
            with trio.fail_after(10):
                view = await views.__anext__()
            assert view.seq > first.seq
            assert view.documents["app.todo"] == ["buy milk"]


async def test_a_retry_being_waited_out_is_live(autojump_clock: trio.testing.MockClock) -> None:
    """While a retryable model error is waited out, views show ``live.retry_at``
    and ``live.retry_error``; the answer then clears them."""
    from pidurable.core.model import RetryPolicy
    from pidurable.shell import Settings

    models = ScriptedModels([reply(error="503 overloaded", retryable=True), reply(text="done")])
    settings = Settings(retry=RetryPolicy(base_delay_ms=10_000))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AGENT)
        async with conv.watch() as views:
            await conv.submit(Input("go"))
            with trio.fail_after(60):
                seen = await collect_until_idle_after(views, "done")
    retrying = [v for v in seen if v.live is not None and v.live.retry_at is not None]
    assert retrying and retrying[0].live is not None and retrying[0].live.retry_error == "503 overloaded"
    assert seen[-1].live is None
