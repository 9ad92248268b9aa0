"""Custom tasks and hooks through the public API (``MemoryStorage``, ``ScriptedModels``).

Tests run under Trio's autojump clock (virtual time) and bound every wait with
``fail_after``; "reopen" means closing the harness and opening a new one on the
same ``MemoryStorage`` object (what a restarted process would load).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.model import EntryKind, OutcomeStatus, SubmissionStatus, TaskStatus
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Progress,
    Registry,
    ToolResult,
    define_extension,
    define_task,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

import invariants

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
WAIT = 30  # seconds of virtual time
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}
NO_MODELS = ScriptedModels([])


def registry_with(*items: Any) -> Registry:
    registry = Registry()
    for item in items:
        registry.install(item)
    return registry


def opened(storage: MemoryStorage, registry: Registry, models: Any = NO_MODELS, **kw: Any) -> Any:
    return Harness.open(storage, models=models, registry=registry, **kw)


async def run_task(h: Harness, kind: str, input: dict[str, Any] | None = None) -> Any:
    """Create a task in the root conversation and wait (bounded) for its terminal record."""
    await h.root()
    tid = await h.create_task(kind, input or {})
    with trio.fail_after(WAIT):
        return await h.wait_for_task(tid)


def done_phase(result: dict[str, Any] | None = None) -> Callable[..., Any]:
    async def finish(task: Any, rt: Any) -> Progress:
        return Progress(status="terminal", outcome={"status": "completed", "result": result})

    return finish


# --- define_task ---------------------------------------------------------------------------


def test_define_task_rejects_bad_definitions() -> None:
    """define_task raises for a bad or built-in kind, a bad version, no phases, a non-callable phase or initial."""
    phases = {"start": done_phase()}
    start = lambda i: {"phase": "start"}  # noqa: E731
    with pytest.raises(ValueError, match="must match"):
        define_task("bad kind!", start, phases)
    with pytest.raises(ValueError, match="pi\\."):
        define_task("pi.mine", start, phases)
    with pytest.raises(ValueError, match="version"):
        define_task("report", start, phases, version=0)
    with pytest.raises(ValueError, match="phases"):
        define_task("report", start, {})
    with pytest.raises(ValueError, match="phases"):
        define_task("report", start, {"start": "not a function"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="initial"):
        define_task("report", {"phase": "start"}, phases)  # type: ignore[arg-type]
    ok = define_task("report", start, phases, version=2)
    assert ok.info().phases == ("start",) and ok.info().version == 2


def test_a_task_kind_defined_twice_is_refused_at_install() -> None:
    """Installing a second extension defining an already installed task kind raises and keeps the first."""
    first = define_task("report", lambda i: {"phase": "start"}, {"start": done_phase()})
    registry = registry_with(first)
    with pytest.raises(ValueError, match="defined twice"):
        registry.install(define_extension("other", tasks=[define_task("report", lambda i: {"phase": "x"},
                                                                       {"x": done_phase()})]))
    assert registry.task("report") is first


async def test_create_task_refuses_unknown_kinds_and_bad_initial_checkpoints(autojump_clock: trio.testing.MockClock) -> None:
    """harness.create_task refuses an uninstalled kind, non-JSON input and an initial phase the definition lacks, storing nothing."""
    bad_initial = define_task("odd", lambda i: {"phase": "nowhere"}, {"start": done_phase()})
    storage = MemoryStorage()
    async with opened(storage, registry_with(bad_initial)) as h:
        await h.root()
        with pytest.raises(InvalidInput, match="No task definition 'ghost'"):
            await h.create_task("ghost")
        with pytest.raises(InvalidInput, match="strict JSON"):
            await h.create_task("odd", {"s": {1, 2}})
        with pytest.raises(InvalidInput, match="does not define"):
            await h.create_task("odd")
        assert await h.tasks() == []


# --- phases ---------------------------------------------------------------------------------


async def test_phases_progress_through_commit_and_a_returned_progress(autojump_clock: trio.testing.MockClock) -> None:
    """A phase committing a new checkpoint leads to the next phase, and a phase returning Progress ends the task with its outcome."""
    seen: list[tuple[str, dict[str, Any]]] = []

    async def start(task: Any, rt: Any) -> None:
        seen.append(("start", dict(task.checkpoint)))
        await rt.commit(checkpoint={"phase": "count", "n": task.input["n"]})

    async def count(task: Any, rt: Any) -> Progress:
        seen.append(("count", dict(task.checkpoint)))
        return Progress(status="terminal", outcome={"status": "completed", "result": {"double": task.checkpoint["n"] * 2}})

    definition = define_task("doubler", lambda i: {"phase": "start"}, {"start": start, "count": count})
    storage = MemoryStorage()
    async with opened(storage, registry_with(definition)) as h:
        end = await run_task(h, "doubler", {"n": 21})

    assert seen == [("start", {"phase": "start"}), ("count", {"phase": "count", "n": 21})]
    assert end.status == TaskStatus.TERMINAL and end.kind == "doubler" and end.conversation_id == 1
    assert end.outcome.status == OutcomeStatus.COMPLETED and end.outcome.result == {"double": 42}
    assert end.memos is None


async def test_create_task_child_and_wait_on_it(autojump_clock: trio.testing.MockClock) -> None:
    """A phase creates an owned child with runtime.create_task, waits on it, and resumes once the child ended, reading its outcome."""
    async def child(task: Any, rt: Any) -> Progress:
        await trio.sleep(1)
        return Progress(status="terminal", outcome={"status": "completed", "result": {"part": task.input["i"] * 10}})

    async def start(task: Any, rt: Any) -> None:
        ids = [await rt.create_task("part", {"i": i}) for i in (1, 2)]
        await rt.commit("waiting", checkpoint={"phase": "collect", "parts": ids}, on=ids)

    async def collect(task: Any, rt: Any) -> Progress:
        parts = [await rt.harness.task(t) for t in task.checkpoint["parts"]]
        assert all(p.status == TaskStatus.TERMINAL for p in parts), "resumed before its children ended"
        total = sum(p.outcome.result["part"] for p in parts)
        return Progress(status="terminal", outcome={"status": "completed", "result": {"total": total}})

    registry = registry_with(
        define_task("part", lambda i: {"phase": "run"}, {"run": child}),
        define_task("report", lambda i: {"phase": "start"}, {"start": start, "collect": collect}),
    )
    async with opened(MemoryStorage(), registry) as h:
        end = await run_task(h, "report")
        children = [t for t in await h.tasks() if t.kind == "part"]

    assert end.outcome.result == {"total": 30}
    assert [c.owner for c in children] == [end.id, end.id]
    assert all(c.outcome.status == OutcomeStatus.COMPLETED for c in children)


async def test_a_phase_that_raises_faults_with_the_message(autojump_clock: trio.testing.MockClock) -> None:
    """A phase raising an exception ends the task faulted with the exception's type and message."""
    async def start(task: Any, rt: Any) -> None:
        raise ValueError("the parts server is down")

    async with opened(MemoryStorage(), registry_with(define_task("report", lambda i: {"phase": "start"}, {"start": start}))) as h:
        end = await run_task(h, "report")
    assert end.outcome.status == OutcomeStatus.FAULTED
    assert end.outcome.error == {"message": "ValueError: the parts server is down"}


async def test_a_phase_returning_without_progress_faults(autojump_clock: trio.testing.MockClock) -> None:
    """A phase that returns without committing anything ends faulted 'returned without durable progress', and runs once."""
    runs = Counter[str]()

    async def start(task: Any, rt: Any) -> None:
        runs["start"] += 1

    async with opened(MemoryStorage(), registry_with(define_task("report", lambda i: {"phase": "start"}, {"start": start}))) as h:
        end = await run_task(h, "report")
    assert end.outcome.status == OutcomeStatus.FAULTED
    assert end.outcome.error == {"message": f"Task {end.id} phase start returned without durable progress"}
    assert runs == {"start": 1}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("set", "checkpoint must be strict JSON"),
        ("progress_set", "checkpoint must be strict JSON"),
        ("unknown_phase", "report has no phase 'nowhere'"),
        ("no_phase", "'phase'"),
    ],
)
async def test_an_invalid_checkpoint_faults_readably_and_the_store_stays_usable(
    bad: str, message: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A non-JSON checkpoint or one naming an undefined phase faults the task with a readable message; the store reopens and loads."""
    async def start(task: Any, rt: Any) -> Any:
        if bad == "set":
            await rt.commit(checkpoint={"phase": "start", "seen": {1, 2}})
        elif bad == "progress_set":
            return Progress(status="running", checkpoint={"phase": "start", "seen": {1, 2}})
        elif bad == "unknown_phase":
            await rt.commit(checkpoint={"phase": "nowhere"})
        else:
            await rt.commit(checkpoint={"step": 2})
        return None

    registry = registry_with(define_task("report", lambda i: {"phase": "start"}, {"start": start}))
    storage = MemoryStorage()
    async with opened(storage, registry) as h:
        end = await run_task(h, "report")
    assert end.outcome.status == OutcomeStatus.FAULTED
    assert message in end.outcome.error["message"]
    async with opened(storage, registry) as h:  # the store loads and works
        reread = await h.task(end.id)
        assert reread == end
        assert await h.inspect() == []
        conv = await h.root()
        assert await conv.idle()


# --- versions ------------------------------------------------------------------------------


def _versioned(version: int, migrate: Any = None, ran: list[Any] | None = None) -> Any:
    async def start(task: Any, rt: Any) -> Progress:
        if ran is not None:
            ran.append((task.version, dict(task.input), dict(task.checkpoint)))
        return Progress(status="terminal", outcome={"status": "completed", "result": {"v": version}})

    async def collect(task: Any, rt: Any) -> Progress:
        return await start(task, rt)

    phases = {"start": start} if version == 1 else {"start": start, "collect": collect}
    return define_task("report", lambda i: {"phase": "start"}, phases, version=version, migrate=migrate)


async def test_a_task_stored_by_a_newer_version_stays_blocked_task_too_old(autojump_clock: trio.testing.MockClock) -> None:
    """A task created under version 2 and reopened with version 1 installed never runs and inspect shows it blocked task_too_old."""
    storage = MemoryStorage()
    async with opened(storage, registry_with(_versioned(2)), resume=False) as h:
        await h.root()
        tid = await h.create_task("report")
    ran: list[Any] = []
    async with opened(storage, registry_with(_versioned(1, ran=ran))) as h:
        await h.root()
        await trio.sleep(5)
        [seen] = await h.inspect()
        task = await h.task(tid)
        conv = await h.root()
        idle = await conv.idle()
    assert (seen.task_id, seen.state, seen.reason) == (tid, "blocked", "task_too_old")
    assert task.status == TaskStatus.PENDING and task.version == 2
    assert ran == [] and not idle


async def test_migrate_runs_on_reopen_with_the_newer_version(autojump_clock: trio.testing.MockClock) -> None:
    """A task stored at version 1 is migrated by version 2's migrate() on reopen and then runs at version 2 from the migrated checkpoint."""
    storage = MemoryStorage()
    async with opened(storage, registry_with(_versioned(1)), resume=False) as h:
        await h.root()
        tid = await h.create_task("report", {"n": 1})
    calls: list[Any] = []

    def migrate(input: dict[str, Any], checkpoint: dict[str, Any], from_version: int) -> Any:
        calls.append((input, checkpoint, from_version))
        return {**input, "migrated": True}, {"phase": "collect", "from": from_version}

    ran: list[Any] = []
    async with opened(storage, registry_with(_versioned(2, migrate=migrate, ran=ran))) as h:
        with trio.fail_after(WAIT):
            end = await h.wait_for_task(tid)
    assert calls == [({"n": 1}, {"phase": "start"}, 1)]
    assert ran == [(2, {"n": 1, "migrated": True}, {"phase": "collect", "from": 1})]
    assert end.version == 2 and end.outcome.result == {"v": 2}


async def test_a_failing_migrate_blocks_the_task(autojump_clock: trio.testing.MockClock) -> None:
    """A migrate() that raises leaves the task pending at its stored version, blocked migration_failed."""
    storage = MemoryStorage()
    async with opened(storage, registry_with(_versioned(1)), resume=False) as h:
        await h.root()
        tid = await h.create_task("report")

    def migrate(input: Any, checkpoint: Any, from_version: int) -> Any:
        raise RuntimeError("v1 checkpoints are unreadable")

    async with opened(storage, registry_with(_versioned(2, migrate=migrate))) as h:
        await h.root()
        await trio.sleep(5)
        [seen] = await h.inspect()
        task = await h.task(tid)
    assert (seen.state, seen.reason) == ("blocked", "migration_failed")
    assert task.version == 1 and task.status == TaskStatus.PENDING


async def test_aborting_a_task_whose_definition_is_missing_orphans_it(autojump_clock: trio.testing.MockClock) -> None:
    """A task whose kind is not installed is blocked missing_task; abort_task ends it orphaned without running any code."""
    storage = MemoryStorage()
    async with opened(storage, registry_with(_versioned(1)), resume=False) as h:
        await h.root()
        tid = await h.create_task("report")
    async with opened(storage, Registry()) as h:
        await h.root()  # a reducer round trip: the store is loaded
        [seen] = await h.inspect()
        assert (seen.state, seen.reason) == ("blocked", "missing_task")
        await h.abort_task(tid)
        with trio.fail_after(WAIT):
            end = await h.wait_for_task(tid)
        assert await h.inspect() == []
    assert end.outcome.status == OutcomeStatus.ORPHANED
    assert end.outcome.error == {"message": "missing_task"}


async def test_an_abort_handler_runs_when_a_running_task_is_aborted(autojump_clock: trio.testing.MockClock) -> None:
    """abort_task cancels the running phase, then the definition's abort handler runs and its outcome is stored."""
    entered = trio.Event()
    cancelled: list[bool] = []

    async def start(task: Any, rt: Any) -> None:
        entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise

    async def on_abort(task: Any, rt: Any) -> Progress:
        return Progress(status="terminal", outcome={"status": "aborted", "result": {"cleaned": task.checkpoint["phase"]}})

    definition = define_task("report", lambda i: {"phase": "start"}, {"start": start}, abort=on_abort)
    async with opened(MemoryStorage(), registry_with(definition)) as h:
        await h.root()
        tid = await h.create_task("report")
        with trio.fail_after(WAIT):
            await entered.wait()
            assert await h.abort_task(tid) == "marked"
            end = await h.wait_for_task(tid)
    assert cancelled == [True]
    assert end.outcome.status == OutcomeStatus.ABORTED and end.outcome.result == {"cleaned": "start"}


# --- sleep -------------------------------------------------------------------------------


async def test_sleep_after_a_restart_waits_only_the_remaining_time(autojump_clock: trio.testing.MockClock) -> None:
    """A deadline stored at t=1000+5000 and a restart at t=4000 make the sleeping phase wait only ~2000 ms more."""
    base = [0]

    def clock() -> int:  # the harness clock follows trio's (virtual) time, shifted by base
        return base[0] + int(trio.current_time() * 1000)

    sleeping = trio.Event()
    slept: list[float] = []

    async def start(task: Any, rt: Any) -> None:
        await rt.commit(checkpoint={"phase": "wait", "until": rt.now() + 5000})

    async def wait(task: Any, rt: Any) -> Progress:
        began = trio.current_time()
        sleeping.set()
        await rt.sleep(task.checkpoint["until"])
        slept.append(trio.current_time() - began)
        return Progress(status="terminal", outcome={"status": "completed", "result": {"woke": rt.now()}})

    registry = registry_with(define_task("timer", lambda i: {"phase": "start"}, {"start": start, "wait": wait}))
    storage = MemoryStorage()
    base[0] = 1000 - int(trio.current_time() * 1000)
    async with opened(storage, registry, clock=clock) as h:
        await h.root()
        tid = await h.create_task("timer")
        with trio.fail_after(WAIT):
            await sleeping.wait()
        stored = await h.task(tid)
    assert stored.checkpoint == {"phase": "wait", "until": 6000}
    assert slept == []  # closed mid-sleep

    base[0] = 4000 - int(trio.current_time() * 1000)  # 3 s passed while the process was down
    async with opened(storage, registry, clock=clock) as h:
        with trio.fail_after(WAIT):
            end = await h.wait_for_task(tid)
    [delta] = slept
    assert 1.9 <= delta <= 2.1, delta
    assert end.outcome.result["woke"] >= 6000


# --- hooks -------------------------------------------------------------------------------


async def _chat(h: Harness, text: str = "go") -> Any:
    conv = await h.root(agent=AGENT)
    handle = await conv.submit(Input(text))
    with trio.fail_after(WAIT):
        settled = await handle.wait()
    return conv, settled


def _tool_task(storage: MemoryStorage) -> Any:
    return next(t for t in storage.tasks() if t.kind == "pi.tool")


def _result_entries(storage: MemoryStorage) -> list[Any]:
    return [e for e in storage.entries(1) if e.kind == EntryKind.TOOL_RESULT]


async def test_before_tool_rewrites_the_arguments(autojump_clock: trio.testing.MockClock) -> None:
    """A before_tool hook's new arguments are what the tool receives and what the tool task's checkpoint stores."""
    got: list[dict[str, Any]] = []

    async def echo(ctx: Any, args: dict[str, Any]) -> str:
        got.append(args)
        return f"echo {args['text']}"

    async def shout(ctx: Any, call: Any) -> dict[str, Any] | None:
        return {**call.arguments, "text": call.arguments["text"].upper()} if call.name == "echo" else None

    tool = define_tool("echo", "echo", {"type": "object", "properties": {"text": {"type": "string"}}}, echo)
    models = ScriptedModels([reply(tool_calls=[tool_call("echo", text="hi")]), reply(text="ok")])
    storage = MemoryStorage()
    async with opened(storage, registry_with(tool, define_extension("shout", hooks={"before_tool": shout})), models) as h:
        _, settled = await _chat(h)
    assert settled.status == SubmissionStatus.DONE
    assert got == [{"text": "HI"}]
    # the tool's execute intent (the live task's checkpoint, as journaled; a
    # store keeps a terminal task without it) holds the new arguments
    intents = [w["task"]["checkpoint"] for _, _, ws in invariants.journal_history(storage) for w in ws if w["type"] == "task"]
    assert {"phase": "execute", "arguments": {"text": "HI"}, "replay": "unsafe"} in intents
    assert [e.text for e in _result_entries(storage)] == ["echo HI"]


async def test_a_raising_before_tool_blocks_the_call(autojump_clock: trio.testing.MockClock) -> None:
    """A before_tool hook that raises turns the call into the error result 'Tool call blocked: <message>' and the tool never runs."""
    ran: list[Any] = []

    async def deploy(ctx: Any, args: Any) -> str:
        ran.append(args)
        return "deployed"

    async def deny(ctx: Any, call: Any) -> None:
        raise PermissionError("production is frozen")

    registry = registry_with(define_tool("deploy", "deploy", NO_ARGS, deploy),
                             define_extension("freeze", hooks={"before_tool": deny}))
    models = ScriptedModels([reply(tool_calls=[tool_call("deploy")]), reply(text="could not deploy")])
    storage = MemoryStorage()
    async with opened(storage, registry, models) as h:
        _, settled = await _chat(h)
    assert ran == []
    [result] = _result_entries(storage)
    assert result.is_error and result.text == "<harness>\n[error] Tool call blocked: production is frozen\n</harness>"
    assert settled.status == SubmissionStatus.DONE
    assert any(m.role == "tool" and m.text == result.text for m in models.requests[1].messages)


async def test_after_tool_replaces_the_result(autojump_clock: trio.testing.MockClock) -> None:
    """An after_tool hook's ToolResult replaces what the tool returned, in the transcript and for the model."""
    async def secret(ctx: Any, args: Any) -> str:
        return "password=hunter2"

    async def redact(ctx: Any, call: Any, result: ToolResult) -> ToolResult | None:
        return ToolResult(text=result.text.replace("hunter2", "***"))

    registry = registry_with(define_tool("secret", "secret", NO_ARGS, secret),
                             define_extension("redact", hooks={"after_tool": redact}))
    models = ScriptedModels([reply(tool_calls=[tool_call("secret")]), reply(text="ok")])
    storage = MemoryStorage()
    async with opened(storage, registry, models) as h:
        await _chat(h)
    assert [e.text for e in _result_entries(storage)] == ["password=***"]
    assert not any("hunter2" in m.text for m in models.requests[1].messages)


async def test_before_request_replaces_messages_for_that_request_only(autojump_clock: trio.testing.MockClock) -> None:
    """A before_request hook's messages are what the model receives; the stored transcript keeps the original text."""
    async def rewrite(ctx: Any, messages: list[Any]) -> list[Any]:
        import attrs

        return [attrs.evolve(m, text=f"[redacted] {m.text}") if m.role == "user" else m for m in messages]

    models = ScriptedModels([reply(text="fine")])
    storage = MemoryStorage()
    async with opened(storage, registry_with(define_extension("r", hooks={"before_request": rewrite})), models) as h:
        conv, settled = await _chat(h, "my secret plan")
        transcript = await conv.transcript()
        context = await conv.context()
    assert settled.status == SubmissionStatus.DONE
    [request] = models.requests
    assert [(m.role, m.text) for m in request.messages if m.role == "user"] == [("user", "[redacted] my secret plan")]
    assert [e.text for e in transcript] == ["my secret plan", "fine"]
    assert [m.text for m in context if m.role == "user"] == ["my secret plan"]


async def test_hook_memos_are_the_tool_tasks_memos(autojump_clock: trio.testing.MockClock) -> None:
    """A memo written by before_tool is stored on the tool task, read by after_tool, and dropped when the tool task ends."""
    during: list[Any] = []
    read_back: list[Any] = []

    async def tool_body(ctx: Any, args: Any) -> str:
        during.append((ctx.task_id, (await ctx.harness.task(ctx.task_id)).memos))
        return "ran"

    async def before(ctx: Any, call: Any) -> None:
        assert await ctx.memo("audit:ticket", "T-1") == "T-1"
        assert await ctx.memo("audit:ticket", "T-2") == "T-1"  # first writer wins
        return None

    async def after(ctx: Any, call: Any, result: ToolResult) -> None:
        read_back.append((ctx.task_id, await ctx.memo("audit:ticket")))
        return None

    registry = registry_with(define_tool("work", "work", NO_ARGS, tool_body),
                             define_extension("audit", hooks={"before_tool": before, "after_tool": after}))
    models = ScriptedModels([reply(tool_calls=[tool_call("work")]), reply(text="ok")])
    storage = MemoryStorage()
    async with opened(storage, registry, models) as h:
        await _chat(h)
    tool_task = _tool_task(storage)
    assert during == [(tool_task.id, {"audit:ticket": "T-1"})]
    assert read_back == [(tool_task.id, "T-1")]
    assert tool_task.status == TaskStatus.TERMINAL and tool_task.memos is None


async def test_approval_hook_interrupted_after_its_memo_is_not_asked_again(autojump_clock: trio.testing.MockClock) -> None:
    """Closed while the approval hook awaits after storing its decision, the reopened harness re-runs the hook, which reads the memo, asks nobody, and the deploy runs once."""
    asks = Counter[str]()
    hook_runs: list[Any] = []
    deploys: list[Any] = []
    in_hook = trio.Event()
    first_life = [True]

    async def deploy(ctx: Any, args: Any) -> str:
        deploys.append(args)
        return f"deployed {args['version']}"

    async def approval(ctx: Any, call: Any) -> None:
        if call.name != "deploy":
            return None
        decision = await ctx.memo("approval:decision")
        hook_runs.append(decision)
        if decision is None:
            asks["human"] += 1  # the slow, expensive question
            decision = await ctx.memo("approval:decision", "approved")
            if first_life[0]:
                in_hook.set()
                await trio.sleep_forever()  # the process dies here, after the decision was stored
        if decision != "approved":
            raise RuntimeError(f"deploy not approved ({decision})")
        return None

    registry = registry_with(
        define_tool("deploy", "deploy", {"type": "object", "properties": {"version": {"type": "string"}}}, deploy),
        define_extension("approval", hooks={"before_tool": approval}),
    )
    models = ScriptedModels([reply(tool_calls=[tool_call("deploy", version="1.2")]), reply(text="Deployed.")])
    storage = MemoryStorage()
    async with opened(storage, registry, models) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("ship it"))
        with trio.fail_after(WAIT):
            await in_hook.wait()
    assert _tool_task(storage).memos == {"approval:decision": "approved"}
    assert _tool_task(storage).checkpoint["phase"] == "call"  # interrupted before the intent

    first_life[0] = False
    async with opened(storage, registry, models) as h:
        with trio.fail_after(WAIT):
            settled = await (await h.submission(handle.id)).wait()
    assert hook_runs == [None, "approved"]
    assert asks == {"human": 1}
    assert deploys == [{"version": "1.2"}]
    assert settled.status == SubmissionStatus.DONE
    assert [e.text for e in _result_entries(storage)] == ["deployed 1.2"]


async def test_inspect_right_after_open_shows_the_stored_tasks(autojump_clock: trio.testing.MockClock) -> None:
    """inspect() called first thing after opening a store lists the live tasks it holds."""
    storage = MemoryStorage()
    async with opened(storage, registry_with(_versioned(1)), resume=False) as h:
        await h.root()
        tid = await h.create_task("report")
    async with opened(storage, Registry(), resume=False) as h:
        seen = await h.inspect()
    assert [(i.task_id, i.state, i.reason) for i in seen] == [(tid, "blocked", "missing_task")]
