"""The host API of ``Harness`` over ``MemoryStorage`` and ``ScriptedModels``.

Every bad input has a clear outcome and loses no submission: an error result
the model sees, an unanswered submission with a reason, or a refusal raised to
the host with nothing stored. Tests run under Trio's autojump clock (virtual
time), except the one that needs a real subprocess timeout; every wait is
bounded with ``fail_after`` so a hang fails fast instead of stalling the suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.model import GENERATION, TOOL, EntryKind, OutcomeStatus, SubmissionStatus, TaskStatus
from pidurable.shell import (
    AgentConfig,
    ConversationBusy,
    Harness,
    Input,
    InvalidInput,
    LocalEnv,
    MemoryStorage,
    ModelRef,
    NotFound,
    Registry,
    ToolCallContext,
    ToolResult,
    coding_tools,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "demo"), cwd=".")
WAIT = 10  # seconds (virtual under the autojump clock)
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


# --- helpers -------------------------------------------------------------------


def registry_with(*tools: Any, coding: bool = True) -> Registry:
    registry = Registry()
    if coding:
        registry.install(coding_tools())
    for t in tools:
        registry.install(t)
    return registry


@asynccontextmanager
async def harness(
    storage: MemoryStorage, models: ScriptedModels, registry: Registry, env: Any = None
) -> AsyncIterator[Harness]:
    async with Harness.open(storage, models=models, registry=registry, env=env) as h:
        yield h


async def ask(conv: Any, text: str, **kw: Any) -> Any:
    """Submit an input and wait (bounded) for its settled record."""
    handle = await conv.submit(Input(text, **kw))
    with trio.fail_after(WAIT):
        return await handle.wait()


def tool_results(entries: list[Any]) -> list[Any]:
    """Tool-result entries in CALL order (the transcript has them in finishing order)."""
    results = [e for e in entries if e.kind == EntryKind.TOOL_RESULT]
    calls = [c.id for e in entries if e.kind == EntryKind.ASSISTANT for c in e.tool_calls]
    return sorted(results, key=lambda e: calls.index(e.tool_call_id))


def assert_nothing_lost(storage: MemoryStorage) -> None:
    """Every submission settled and no task is left live."""
    assert storage.submissions(), "expected at least one submission"
    assert all(s.settled for s in storage.submissions()), storage.submissions()
    assert storage.tasks(live_only=True) == []


class Gate:
    """A replay-safe tool that records its calls and blocks until released."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.task_ids: list[int] = []

    def tool(self) -> Any:
        async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
            self.task_ids.append(ctx.task_id)
            self.entered.set()
            await self.release.wait()
            return "released"

        return define_tool("gate", "Block until the test releases it.", NO_ARGS, execute, replay="safe")

    async def wait_entered(self) -> None:
        with trio.fail_after(WAIT):
            await self.entered.wait()


# --- the API.md example ------------------------------------------------------------


async def test_api_example_reads_edits_and_answers(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """The API.md flow reads a file, edits it on disk, answers, and settles the submission done with the answer entry."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "dev.json").write_text('{"port": 8080}\n')
    models = ScriptedModels(
        [
            reply(tool_calls=[tool_call("read", path="config/dev.json")]),
            reply(tool_calls=[tool_call("edit", path="config/dev.json", old="8080", new="8081")]),
            reply(text="Fixed the port."),
        ]
    )
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(), env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "Read and fix the config", request_id="fix-config-1")
        transcript = await conv.transcript()

    assert settled.status == SubmissionStatus.DONE
    assert settled.request_id == "fix-config-1"
    assert (tmp_path / "config" / "dev.json").read_text() == '{"port": 8081}\n'
    assert [e.kind for e in transcript] == [
        EntryKind.USER,
        EntryKind.SYSTEM,  # what the model was offered (issue 17 item 4)
        EntryKind.ASSISTANT,
        EntryKind.TOOL_RESULT,
        EntryKind.ASSISTANT,
        EntryKind.TOOL_RESULT,
        EntryKind.ASSISTANT,
    ]
    assert transcript[0].text == "Read and fix the config" and transcript[0].id == settled.entry_id
    offered = transcript[1].data
    assert transcript[1].text == "" and offered is not None and offered["tools_added"] == [t.name for t in models.requests[0].tools]
    assert transcript[3].text == '{"port": 8080}\n' and not transcript[3].is_error
    assert transcript[5].text == "Edited config/dev.json: replaced 1 occurrence" and not transcript[5].is_error
    assert transcript[-1].text == "Fixed the port." and transcript[-1].id == settled.answer_entry_id
    assert len(models.requests) == 3
    assert {"read", "write", "edit", "bash"} <= {t.name for t in models.requests[0].tools}
    assert any(m.role == "tool" and "8080" in m.text for m in models.requests[1].messages)
    assert_nothing_lost(storage)


# --- bad input, each with a clear outcome ---------------------------------------------


async def test_unknown_tool_gets_an_error_result_and_the_run_answers(autojump_clock: trio.testing.MockClock) -> None:
    """A call to a tool that is not installed gets the error result "Tool nope is not available" and the run goes on to its answer."""
    models = ScriptedModels([reply(tool_calls=[tool_call("nope", x=1)]), reply(text="ok without it")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with()) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "use nope")
        transcript = await conv.transcript()

    [result] = tool_results(transcript)
    assert result.text == "<harness>\n[error] Tool nope is not available\n</harness>"
    assert result.is_error and result.tool_name == "nope"
    assert settled.status == SubmissionStatus.DONE
    assert transcript[-1].text == "ok without it"
    assert_nothing_lost(storage)


async def test_invalid_arguments_get_an_error_result_naming_the_problem(autojump_clock: trio.testing.MockClock) -> None:
    """Arguments that break the tool's schema give an error result naming the argument, the body never runs, and the run answers."""
    runs: list[dict[str, Any]] = []

    async def count(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        runs.append(args)
        return "counted"

    counter = define_tool(
        "count",
        "Count to n.",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        count,
    )
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("count"), tool_call("count", n="many")]), reply(text="gave up")]
    )
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(counter)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "count")
        transcript = await conv.transcript()

    missing, wrong_type = tool_results(transcript)
    assert missing.is_error and wrong_type.is_error
    # the wording of the reference (shell/arguments.py; specs/tools.md "Strings the model reads")
    assert 'Validation failed for tool "count":\n  - n: must have required properties n\n\nReceived arguments:\n{}' in missing.text
    assert 'Validation failed for tool "count":\n  - n: must be integer\n\nReceived arguments:\n{\n  "n": "many"\n}' in wrong_type.text
    assert runs == []
    assert settled.status == SubmissionStatus.DONE
    assert transcript[-1].text == "gave up"
    assert_nothing_lost(storage)


async def test_raising_tool_gives_an_error_result_and_the_round_continues(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool body that raises becomes an is_error result with its message, its sibling call still runs, and the run answers."""

    async def boom(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        raise RuntimeError("kaput: disk on fire")

    async def echo(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text=args["text"])

    tools = [
        define_tool("boom", "Always fails.", NO_ARGS, boom),
        define_tool("echo", "Echo text.", {"type": "object", "properties": {"text": {"type": "string"}}}, echo),
    ]
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("boom"), tool_call("echo", text="still here")]), reply(text="handled")]
    )
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(*tools)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "try both")
        transcript = await conv.transcript()
        tasks = await h.tasks()

    boom_result, echo_result = tool_results(transcript)
    assert boom_result.is_error and boom_result.text == "<harness>\n[error] kaput: disk on fire\n</harness>"
    assert not echo_result.is_error and echo_result.text == "still here"
    outcomes = {t.input["name"]: t.outcome.status for t in tasks if t.kind == TOOL and t.outcome}
    assert outcomes == {"boom": OutcomeStatus.FAILED, "echo": OutcomeStatus.COMPLETED}
    # The model's second request saw both results.
    assert [m.text for m in models.requests[1].messages if m.role == "tool"] == [boom_result.text, "still here"]
    assert settled.status == SubmissionStatus.DONE
    assert transcript[-1].text == "handled"
    assert_nothing_lost(storage)


async def test_model_past_its_script_leaves_the_submission_unanswered(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A scripted model asked for a reply it does not have settles the submission unanswered/model_error with a detail about the script."""
    (tmp_path / "a.txt").write_text("alpha")
    models = ScriptedModels([reply(tool_calls=[tool_call("read", path="a.txt")])])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(), env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "read a.txt")
        idle = await conv.idle()

    assert settled.status == SubmissionStatus.UNANSWERED
    assert settled.reason == "model_error"
    assert settled.detail is not None
    assert "ScriptedModels has no reply #2" in settled.detail and "script has 1" in settled.detail
    assert settled.answer_entry_id is None
    assert idle
    assert_nothing_lost(storage)


async def test_empty_input_is_refused_and_nothing_is_stored(autojump_clock: trio.testing.MockClock) -> None:
    """Empty or blank input, or an unknown when_busy, raises InvalidInput and stores no submission, entry or journal row."""
    models = ScriptedModels([reply(text="never")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with()) as h:
        conv = await h.root(agent=AGENT)
        journal = storage.journal()
        for bad in (Input(""), Input("   \n\t"), Input("hello", when_busy="sometimes")):
            with pytest.raises(InvalidInput):
                await conv.submit(bad)
        assert storage.journal() == journal
        assert storage.submissions() == []
        assert await conv.transcript() == []
        assert models.requests == []


async def test_same_request_id_returns_the_same_submission(autojump_clock: trio.testing.MockClock) -> None:
    """Re-submitting with the same request_id, while the first is running and after it settled, returns the same submission and starts no run."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="answered once")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("do it", request_id="req-1"))
        await gate.wait_entered()
        while_running = await conv.submit(Input("do it", request_id="req-1"))
        assert while_running.id == first.id
        assert (await first.record()).status == SubmissionStatus.PLACED
        gate.release.set()
        with trio.fail_after(WAIT):
            settled = await first.wait()
        after = await conv.submit(Input("do it (retry)", request_id="req-1"))
        assert after.id == first.id
        # A different request id in the same conversation is a new submission.
        other = await conv.submit(Input("other", request_id="req-2"))
        assert other.id != first.id

    assert settled.status == SubmissionStatus.DONE
    assert [s.id for s in storage.submissions() if s.request_id == "req-1"] == [first.id]
    assert [e.text for e in storage.entries(conv.id) if e.kind == EntryKind.USER][:1] == ["do it"]
    assert len([e for e in storage.entries(conv.id) if e.text.startswith("do it")]) == 1


async def test_reject_while_busy_raises_and_stores_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """when_busy="reject" on a busy conversation raises ConversationBusy and stores nothing; once idle, the same input is accepted."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="first"), reply(text="second")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("first"))
        await gate.wait_entered()
        before = (storage.journal(), storage.submissions(), storage.entries(conv.id))
        with pytest.raises(ConversationBusy) as info:
            await conv.submit(Input("interrupt!", when_busy="reject", request_id="rej"))
        assert info.value.conversation_id == conv.id
        assert (storage.journal(), storage.submissions(), storage.entries(conv.id)) == before
        assert storage.submission_by_request(conv.id, "rej") is None

        gate.release.set()
        with trio.fail_after(WAIT):
            assert (await first.wait()).status == SubmissionStatus.DONE
        again = await ask(conv, "interrupt!", when_busy="reject", request_id="rej")

    assert again.status == SubmissionStatus.DONE
    assert storage.entry(again.answer_entry_id).text == "second"
    assert_nothing_lost(storage)


async def test_follow_up_while_busy_is_answered_by_its_own_run(autojump_clock: trio.testing.MockClock) -> None:
    """An input submitted while a run is busy is queued, then placed after that run's answer and answered by a run of its own."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="first answer"), reply(text="second answer")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        first = await conv.submit(Input("first"))
        await gate.wait_entered()
        second = await conv.submit(Input("second"))
        queued = await second.record()
        assert queued.status == SubmissionStatus.QUEUED and queued.entry_id is None
        assert not await conv.idle()
        gate.release.set()
        with trio.fail_after(WAIT):
            one = await first.wait()
            two = await second.wait()
        transcript = await conv.transcript()
        tasks = await h.tasks()

    assert one.status == two.status == SubmissionStatus.DONE
    by_id = {e.id: e for e in transcript}
    assert by_id[one.answer_entry_id].text == "first answer"
    assert by_id[two.answer_entry_id].text == "second answer"
    assert by_id[two.entry_id].text == "second"
    # Placed after the first run answered, then answered by a later run.
    assert one.answer_entry_id < two.entry_id < two.answer_entry_id
    gens = [t for t in tasks if t.kind == GENERATION]
    answering = {t.outcome.result["entry_id"]: t.id for t in gens if t.outcome and t.outcome.result}
    assert answering[one.answer_entry_id] != answering[two.answer_entry_id]
    assert_nothing_lost(storage)


# --- the local environment ---------------------------------------------------------


async def test_local_env_refuses_paths_outside_the_root(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """read/write with a path escaping the env root (../x or an absolute path elsewhere) get an error result and touch nothing outside."""
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    models = ScriptedModels(
        [
            reply(
                tool_calls=[
                    tool_call("read", path="../secret.txt"),
                    tool_call("read", path=str(secret)),
                    tool_call("write", path="../escaped.txt", content="x"),
                    tool_call("write", path="inside.txt", content="fine"),
                ]
            ),
            reply(text="done"),
        ]
    )
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(), env=LocalEnv(root)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "escape")
        results = tool_results(await conv.transcript())

    rel, absolute, write_out, write_in = results
    for r in (rel, absolute, write_out):
        assert r.is_error
        assert "outside the working directory" in r.text
        assert "top secret" not in r.text
    assert not write_in.is_error
    assert not (tmp_path / "escaped.txt").exists()
    assert (root / "inside.txt").read_text() == "fine"
    assert settled.status == SubmissionStatus.DONE


async def test_bash_timeout_gives_an_error_result(tmp_path: Path) -> None:
    """A bash command that outlives its timeout is killed and becomes an error result saying it timed out."""
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("bash", command="sleep 20; echo late", timeout=0.2)]), reply(text="too slow")]
    )
    storage = MemoryStorage()
    start = trio.current_time()
    async with harness(storage, models, registry_with(), env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=AGENT)
        settled = await ask(conv, "run it")
        [result] = tool_results(await conv.transcript())

    assert trio.current_time() - start < 10
    assert result.is_error
    assert result.text == "<harness>\n[error] Command timed out after 0.2 seconds\n</harness>"
    assert result.data == {
        "diagnostics": [{"severity": "error", "message": "Command timed out after 0.2 seconds", "code": "tool_error"}]
    }
    assert settled.status == SubmissionStatus.DONE


# --- restarts ------------------------------------------------------------------------


async def test_idempotency_key_is_stable_across_reopen(autojump_clock: trio.testing.MockClock) -> None:
    """A safe tool interrupted by closing the harness is re-run after reopen with the same task id and idempotency key."""
    seen: list[tuple[int, str]] = []
    entered = trio.Event()

    async def probe(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        seen.append((ctx.task_id, ctx.idempotency_key))
        if len(seen) == 1:  # first process life: block until the harness closes
            entered.set()
            await trio.sleep_forever()
        return "probed"

    tool = define_tool("probe", "Record the idempotency key.", NO_ARGS, probe, replay="safe")
    models = ScriptedModels([reply(tool_calls=[tool_call("probe")]), reply(text="probed it")])
    storage = MemoryStorage()

    async with harness(storage, models, registry_with(tool)) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("probe"))
        with trio.fail_after(WAIT):
            await entered.wait()
        first_store_id = h.runtime.store_id
    # Closed mid-tool: the tool task stays live in storage for the next life.
    [stuck] = [t for t in storage.tasks(live_only=True) if t.kind == TOOL]
    assert stuck.status == TaskStatus.RUNNING and stuck.phase == "execute"

    async with harness(storage, models, registry_with(tool)) as h:
        again = await h.submission(handle.id)
        assert again is not None
        with trio.fail_after(WAIT):
            settled = await again.wait()
        assert h.runtime.store_id == first_store_id

    assert settled.status == SubmissionStatus.DONE
    assert len(seen) == 2
    (task_1, key_1), (task_2, key_2) = seen
    assert task_1 == task_2 == stuck.id
    assert key_1 == key_2
    assert str(stuck.id) in key_1 and first_store_id in key_1
    assert_nothing_lost(storage)


# --- task reads -----------------------------------------------------------------------


async def test_task_reads_and_wait_for_task(autojump_clock: trio.testing.MockClock) -> None:
    """harness.task, tasks(live_only=True) and wait_for_task show a running tool task and return its terminal record once it ends."""
    gate = Gate()
    models = ScriptedModels([reply(tool_calls=[tool_call("gate")]), reply(text="done")])
    storage = MemoryStorage()
    async with harness(storage, models, registry_with(gate.tool())) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("go"))
        await gate.wait_entered()
        [tool_id] = gate.task_ids

        running = await h.task(tool_id)
        assert running is not None
        assert running.kind == TOOL and running.status == TaskStatus.RUNNING and running.outcome is None
        live = await h.tasks(live_only=True)
        assert {t.kind for t in live} == {GENERATION, TOOL}
        [gen] = [t for t in live if t.kind == GENERATION]
        assert running.owner == gen.id and gen.status == TaskStatus.WAITING and tool_id in gen.on
        assert {t.id for t in await h.tasks(conversation_id=conv.id, live_only=True)} == {gen.id, tool_id}
        assert await h.tasks(conversation_id=999) == []
        assert await h.task(999_999) is None
        with pytest.raises(NotFound):
            await h.wait_for_task(999_999)

        got: list[Any] = []

        async def waiter() -> None:
            got.append(await h.wait_for_task(tool_id))

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()
                assert got == []  # still running: wait_for_task waits
                gate.release.set()
            await handle.wait()
        remaining = await h.tasks(live_only=True)
        everything = await h.tasks()

    [terminal] = got
    assert terminal.id == tool_id and terminal.status == TaskStatus.TERMINAL
    assert terminal.outcome is not None and terminal.outcome.status == OutcomeStatus.COMPLETED
    assert storage.entry(terminal.outcome.result["entry_id"]).text == "released"
    assert remaining == []
    assert everything and all(t.status == TaskStatus.TERMINAL for t in everything)


# --- definitions ------------------------------------------------------------------------


def test_define_tool_rejects_bad_definitions() -> None:
    """define_tool raises ValueError for an invalid JSON schema, an unknown replay value or a bad name, and accepts a good one."""

    async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        return ""

    good = define_tool("fine", "ok", {"type": "object", "properties": {"a": {"type": "string"}}}, execute, replay="safe")
    assert good.replay == "safe" and good.validate({"a": "x"}) is None

    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        define_tool("bad_schema", "x", {"type": "nonsense"}, execute)
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        define_tool("bad_schema", "x", {"type": "object", "properties": {"a": {"type": 5}}}, execute)
    with pytest.raises(ValueError, match="replay"):
        define_tool("bad_replay", "x", NO_ARGS, execute, replay="sometimes")
    with pytest.raises(ValueError, match="must match"):
        define_tool("bad name!", "x", NO_ARGS, execute)


async def test_scripted_models_keep_only_the_newest_requests(autojump_clock: trio.testing.MockClock) -> None:
    """``ScriptedModels(keep_requests=2)`` holds the last two requests and
    counts them all (a long run's memory does not grow with its rounds)."""
    models = ScriptedModels(lambda req: reply(text=f"answer {len(req.messages)}"), keep_requests=2)
    async with harness(MemoryStorage(), models, registry_with()) as h:
        conv = await h.root(agent=AGENT)
        for i in range(4):
            assert (await ask(conv, f"q{i}")).status == "done"
    assert models.request_count == 4 and len(models.requests) == 2
    assert [m.text for m in models.requests[-1].messages if m.role == "user"][-1] == "q3"
    with pytest.raises(ValueError):
        ScriptedModels([], keep_requests=-1)
