"""Issue 7, items 2, 5 (closed harness) and 9: bad host input raises
``InvalidInput``, stores nothing, and the harness keeps working; every call
after close raises ``HarnessClosed``; ``memo(name, None)`` only reads.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.shell import (
    AgentConfig,
    Harness,
    HarnessClosed,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    Settings,
    Write,
    define_extension,
    define_task,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

WAIT = 10
AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


class Opaque:
    pass


BAD_SUBMISSIONS = [
    Input("lone \ud800 surrogate"),
    Input("ok", request_id="id-\udcff"),
    Input("ok", request_id=42),  # type: ignore[arg-type]
    Input("ok", request_id=""),
    Input("ok", request_id="x" * 10_000),
    Input("ok", when_busy="bogus"),
    Input(b"bytes"),  # type: ignore[arg-type]
    Input("   "),
    Write("w", data={"x": math.nan}),
    Write("w", data={"x": math.inf}),
    Write("w", data={"x": Opaque()}),
    Write("w", data={"k\ud800": 1}),
    Write("w", data=["not", "an", "object"]),  # type: ignore[arg-type]
    Write("w", kind=""),
    Write("w", kind="k\ud800"),
    Write("\ud800"),
    "plain string",
]


@pytest.mark.parametrize("item", BAD_SUBMISSIONS, ids=[repr(i)[:40] for i in BAD_SUBMISSIONS])
async def test_bad_submissions_raise_invalid_input_and_store_nothing(
    item: Any, autojump_clock: trio.testing.MockClock
) -> None:
    """Each bad input is refused with InvalidInput on an IDLE conversation;
    nothing is stored and the same harness then answers a good input."""
    storage = MemoryStorage()
    models = ScriptedModels([reply(text="fine")])
    async with Harness.open(storage, models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        with pytest.raises(InvalidInput):
            await conv.submit(item)
        assert storage.submissions() == []
        handle = await conv.submit(Input("good"))
        with trio.fail_after(WAIT):
            assert (await handle.wait()).status == "done"


async def test_bad_input_on_a_busy_conversation_does_not_disturb_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While a run works, a bad input is refused and the run still answers."""
    models = ScriptedModels([reply(text="slow", delay=5)])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("first"))
        with pytest.raises(InvalidInput, match="when_busy"):
            await conv.submit(Input("x", when_busy="bogus"))
        with pytest.raises(InvalidInput, match="surrogate"):
            await conv.submit(Input("x\ud800"))
        with trio.fail_after(WAIT):
            assert (await handle.wait()).status == "done"


@pytest.mark.parametrize(
    "agent",
    [
        AgentConfig(model=("scripted", "x")),  # type: ignore[arg-type]
        AgentConfig(model=ModelRef("scripted", "")),
        AgentConfig(model=ModelRef("scripted", "m\ud800")),
        AgentConfig(tools="read"),  # type: ignore[arg-type]
        AgentConfig(tools=("read", "read")),
        AgentConfig(tools=(1,)),  # type: ignore[arg-type]
        AgentConfig(instructions=5),  # type: ignore[arg-type]
        AgentConfig(cwd=""),
        AgentConfig(tool_execution="sometimes"),
        {"model": "x"},
    ],
)
async def test_bad_agent_configs_are_refused_everywhere(agent: Any, autojump_clock: trio.testing.MockClock) -> None:
    """root(), create_conversation() and configure() refuse a bad agent
    config with InvalidInput; nothing is stored."""
    storage = MemoryStorage()
    async with Harness.open(storage, models=ScriptedModels([]), registry=Registry()) as h:
        with pytest.raises(InvalidInput):
            await h.root(agent=agent)
        with pytest.raises(InvalidInput):
            await h.create_conversation(agent=agent)
        assert storage.conversations() == []
        conv = await h.root(agent=AGENT)
        if isinstance(agent, AgentConfig):
            changes = {f: getattr(agent, f) for f in ("model", "tools", "instructions", "cwd", "tool_execution")}
            changes = {k: v for k, v in changes.items() if v != getattr(AgentConfig(), k)}
            with pytest.raises(InvalidInput):
                await conv.configure(**changes)
        assert await conv.agent() == AGENT


async def test_non_integer_ids_are_refused(autojump_clock: trio.testing.MockClock) -> None:
    """Ids must be ints: a string id is InvalidInput, not a deep error."""
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry()) as h:
        for call in (h.task("1"), h.submission("1"), h.conversation("1"), h.abort_task("1"), h.entry(None)):
            with pytest.raises(InvalidInput):
                await call  # type: ignore[misc]


async def test_every_call_after_close_raises_harness_closed(autojump_clock: trio.testing.MockClock) -> None:
    """After the block ends, harness, conversation and handle calls raise
    HarnessClosed (resume() and update_settings() used to do nothing)."""
    models = ScriptedModels([reply(text="fine")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("hi"))
        with trio.fail_after(WAIT):
            await handle.wait()
    calls = [
        h.resume(),
        h.update_settings(Settings()),
        h.root(),
        h.conversations(),
        h.conversation(1),
        h.tasks(),
        h.task(1),
        h.submission(1),
        h.entry(1),
        h.inspect(),
        h.usage(),
        h.wait_idle(),
        h.create_conversation(),
        h.abort_submission(1),
        conv.submit(Input("again")),
        conv.transcript(),
        conv.context(),
        conv.agent(),
        conv.configure(instructions="x"),
        conv.abort(),
        conv.idle(),
        conv.usage(),
        handle.wait(),
        handle.record(),
        handle.abort(),
    ]
    for call in calls:
        with pytest.raises(HarnessClosed):
            await call


async def test_memo_with_none_only_reads(autojump_clock: trio.testing.MockClock) -> None:
    """``memo(name, None)`` returns the stored value (or None) and stores
    nothing, so a later real value is still taken (first writer wins)."""
    seen: list[Any] = []

    async def approve(ctx: Any, call: Any) -> None:
        seen.append(await ctx.memo("approval", None))
        seen.append(await ctx.memo("approval", "granted"))
        seen.append(await ctx.memo("approval", None))
        seen.append(await ctx.memo("approval", "other"))
        return None

    async def act(call: Any, args: dict[str, Any]) -> str:
        return "acted"

    registry = Registry()
    registry.install(define_tool("act", "act", {"type": "object"}, act))
    registry.install(define_extension("approval", hooks={"before_tool": approve}))
    models = ScriptedModels([reply(tool_calls=[tool_call("act")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        with trio.fail_after(WAIT):
            assert (await handle.wait()).status == "done"
    assert seen == [None, "granted", "granted", "granted"]


async def test_custom_task_memo_none_reads_too(autojump_clock: trio.testing.MockClock) -> None:
    """The same rule in a custom task phase."""
    seen: list[Any] = []

    async def only(task: Any, runtime: Any) -> None:
        seen.append(await runtime.memo("k", None))
        seen.append(await runtime.memo("k", 7))
        await runtime.commit("terminal", outcome={"status": "completed"})

    registry = Registry()
    registry.install(define_task("memo-test", lambda inp: {"phase": "only"}, {"only": only}))
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=registry) as h:
        await h.root(agent=AGENT)
        tid = await h.create_task("memo-test")
        with trio.fail_after(WAIT):
            await h.wait_for_task(tid)
    assert seen == [None, 7]


async def test_a_failed_open_releases_the_store(tmp_path: Any) -> None:
    """Harness.open refusing its arguments or a damaged store closes the
    storage it was given: the next open is not StoreLocked."""
    import sqlite3

    from pidurable.shell import StorageError, open_sqlite_storage

    db = tmp_path / "s.sqlite"
    with pytest.raises(InvalidInput):
        async with Harness.open(open_sqlite_storage(db), models=None, registry="nope"):  # type: ignore[arg-type]
            pass
    async with Harness.open(open_sqlite_storage(db), models=ScriptedModels([]), registry=Registry(), resume=False) as h:
        await (await h.root(agent=AGENT)).submit(Input("hi"))  # a pending run: live work
    conn = sqlite3.connect(db)
    # open reads only live work (a settled conversation is read when named): damage what it reads
    conn.execute("UPDATE tasks SET record = '{broken'")
    conn.commit()
    conn.close()
    for _ in range(2):  # the second attempt sees the same damage, not a held lock
        with pytest.raises(StorageError, match="damaged record in tasks"):
            async with Harness.open(open_sqlite_storage(db), models=ScriptedModels([]), registry=Registry()):
                pass


async def test_compact_instructions_are_checked_like_any_host_text(autojump_clock: trio.testing.MockClock) -> None:
    """Issue 9: ``conv.compact(instructions)`` refuses a lone surrogate or a
    non-string with InvalidInput and stores nothing."""
    storage = MemoryStorage()
    async with Harness.open(storage, models=ScriptedModels([]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        for bad in ("focus \ud800", 5):
            with pytest.raises(InvalidInput):
                await conv.compact(instructions=bad)  # type: ignore[arg-type]
        assert storage.tasks() == []


@pytest.mark.parametrize("storage", ["session.sqlite", None, object()], ids=["a path", "None", "an object"])
async def test_open_refuses_what_is_not_a_store(storage: Any) -> None:
    """A path or anything else where a store belongs is InvalidInput (it was
    AttributeError: 'str' object has no attribute 'close', from inside)."""
    with pytest.raises(InvalidInput, match="storage must be a pidurable store"):
        async with Harness.open(storage, models=ScriptedModels([]), registry=Registry()):
            pass  # pragma: no cover


@pytest.mark.parametrize("resume", ["no", 0, None])
async def test_open_refuses_a_resume_that_is_not_a_bool(resume: Any) -> None:
    """resume="no" was truthy and resumed; now refused, and the store is closed again (reopenable)."""
    storage = MemoryStorage()
    with pytest.raises(InvalidInput, match="resume must be True or False"):
        async with Harness.open(storage, models=ScriptedModels([]), registry=Registry(), resume=resume):
            pass  # pragma: no cover
    async with Harness.open(storage, models=ScriptedModels([]), registry=Registry(), resume=False) as h:
        assert await h.tasks() == []


@pytest.mark.parametrize("option", ["fsync", "create"])
def test_jsonl_flags_must_be_bools(option: str, tmp_path: Any) -> None:
    """open_jsonl_storage(fsync="no") was truthy (fsync on); now a ValueError, and nothing is created."""
    from pidurable.shell import open_jsonl_storage

    with pytest.raises(ValueError, match=f"{option} must be True or False, not 'no'"):
        open_jsonl_storage(tmp_path / "j", **{option: "no"})
    assert not (tmp_path / "j").exists()
