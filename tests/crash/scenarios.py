"""The conformance scenarios every crash test runs (issue 2's list)."""

from __future__ import annotations

from typing import Any

import trio

from pidurable.core.model import AgentConfig, CompactionSettings, ModelRef, RetryPolicy, Settings
from pidurable.shell import Input, Progress, ToolResult, Write, define_extension, define_subagent_tool, define_task, define_tool
from pidurable.shell.providers import reply, tool_call

from harness import Scenario, World, counting_tool, register_script, until


def _read(world: World, args: dict[str, Any]) -> str:
    return world.files.get(args["path"], f"File not found: {args['path']}")


def _edit(world: World, args: dict[str, Any]) -> str:
    text = world.files[args["path"]]
    world.files[args["path"]] = text.replace(args["old"], args["new"], 1)
    return f"Edited {args['path']}"


def _path_props() -> dict[str, Any]:
    return {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}


CONFIG_FIX = Scenario(
    name="config_fix",
    script=(
        reply(tool_calls=[tool_call("read", path="config/dev.json")]),
        reply(tool_calls=[tool_call("edit", path="config/dev.json", old="8080", new="8081")]),
        reply(tool_calls=[tool_call("read", path="config/dev.json")]),
        reply(text="Fixed the port."),
    ),
    tools=lambda w: [
        counting_tool(w, "read", replay="safe", body=_read, properties=_path_props()),
        counting_tool(w, "edit", replay="unsafe", body=_edit, properties=_path_props()),
    ],
    inputs=("Read and fix the config",),
    files=(("config/dev.json", '{"port": 8080}'),),
    unsafe=("edit",),
)

VIENNA = Scenario(
    name="vienna",
    script=(
        reply(
            tool_calls=[
                tool_call("weather", city="Vienna"),
                tool_call("museums", city="Vienna"),
                tool_call("trains", destination="Vienna"),
            ]
        ),
        reply(text="Itinerary: Day 1 Belvedere (sunny), Day 2 Kunsthistorisches; train 08:12 Railjet."),
    ),
    tools=lambda w: [
        counting_tool(w, "weather", replay="safe"),
        counting_tool(w, "museums", replay="safe"),
        counting_tool(w, "trains", replay="safe"),
    ],
    inputs=("Check weather, museums and trains, then plan the Vienna trip.",),
)

SERIAL = Scenario(
    name="serial",
    script=(
        reply(tool_calls=[tool_call("step", n=1), tool_call("step", n=2), tool_call("step", n=3)]),
        reply(text="All three steps done in order."),
    ),
    tools=lambda w: [counting_tool(w, "step", replay="safe")],
    agent=AgentConfig(model=ModelRef("scripted", "test"), tool_execution="sequential"),
)

UNSAFE = Scenario(
    name="unsafe",
    script=(
        reply(tool_calls=[tool_call("deploy", service="api"), tool_call("status", service="api")]),
        reply(tool_calls=[tool_call("deploy", service="web")]),
        reply(text="Deployed."),
    ),
    tools=lambda w: [
        counting_tool(w, "deploy", replay="unsafe"),
        counting_tool(w, "status", replay="safe"),
    ],
    unsafe=("deploy",),
)

RAISES = Scenario(
    name="raises",
    script=(
        reply(tool_calls=[tool_call("flaky"), tool_call("fine")]),
        reply(text="One tool failed; I carried on."),
    ),
    tools=lambda w: [
        counting_tool(w, "flaky", replay="safe", raises=True),
        counting_tool(w, "fine", replay="safe"),
    ],
)

MODEL_ERROR = Scenario(
    name="model_error",
    script=(
        reply(tool_calls=[tool_call("lookup", q="x")]),
        reply(error="400 invalid request: context too odd"),
    ),
    tools=lambda w: [counting_tool(w, "lookup", replay="safe")],
)

BAD_CALLS = Scenario(
    name="bad_calls",
    script=(
        reply(tool_calls=[tool_call("nope"), tool_call("typed", n="not a number")]),
        reply(text="Handled the bad calls."),
    ),
    tools=lambda w: [counting_tool(w, "typed", replay="safe", properties={"n": {"type": "integer"}})],
)

FOLLOW_UP = Scenario(
    name="follow_up",
    script=(
        reply(tool_calls=[tool_call("lookup", q="a")]),
        reply(text="First answer."),
        reply(text="Second answer."),
    ),
    tools=lambda w: [counting_tool(w, "lookup", replay="safe")],
    inputs=("first question", "second question"),
)

ALL = (CONFIG_FIX, VIENNA, SERIAL, UNSAFE, RAISES, MODEL_ERROR, BAD_CALLS, FOLLOW_UP)


# --- issue 3: queues, abort, sub-agents (host-driven) --------------------------


def _blocking_tool(world: World, name: str, *, replay: str, release: str | None = None) -> Any:
    """A tool that records its start in ``world.flags`` and then blocks until
    the flag ``release`` is set (forever when None: only an abort ends it)."""

    async def execute(ctx: Any, args: dict[str, Any]) -> str:
        world.runs[(name, ctx.task_id)] += 1
        world.flags[f"{name}_started"] = True
        if release is None:
            await trio.sleep_forever()
        await until(lambda: world.flags.get(release))
        return f"{name} done"

    return define_tool(name, f"blocking {name}", {"type": "object"}, execute, replay=replay)


async def _abort_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Start a run whose unsafe tool blocks; queue a follow-up and a write;
    abort the conversation while the tool runs; then submit one more input
    (which places the surviving write)."""
    sub = await conv.submit(Input("deploy everything", request_id="abort-0"))
    queued = await conv.submit(Input("and then report", request_id="abort-1"))
    note = await conv.submit(Write("operator note", request_id="abort-2"))
    await until(lambda: world.flags.get("deploy_started") or world.flags.get("aborted") or _settled(sub))
    if not world.flags.get("aborted"):
        await conv.abort()
        assert await conv.idle(), "NothingLiveAfterAbort: the aborted conversation is not idle"
        world.flags["aborted"] = True
    after = await conv.submit(Input("status please", request_id="abort-3"))
    return [sub, queued, note, after]


def _settled(handle: Any) -> bool:
    rec = handle._rt.storage.submission(handle.id)
    return rec is not None and rec.settled


def _by_request(storage: Any) -> dict[str, Any]:
    return {s.request_id: s for s in storage.submissions()}


def _check_abort(storage: Any) -> None:
    subs = _by_request(storage)
    assert (subs["abort-0"].status, subs["abort-0"].reason) == ("unanswered", "aborted")
    assert (subs["abort-1"].status, subs["abort-1"].reason) == ("unanswered", "aborted")
    assert subs["abort-1"].entry_id is None  # withdrawn, never placed
    assert subs["abort-2"].status == "done"  # the write survived the abort
    assert subs["abort-3"].status == "done"
    texts = [e.text for e in storage.entries(1)]
    assert "<harness>\n[error] Tool deploy was aborted\n</harness>" in texts and "operator note" in texts


ABORT_TOOL = Scenario(
    name="abort_tool",
    script=(
        reply(tool_calls=[tool_call("deploy"), tool_call("probe")]),
        reply(text="Deploy reported."),
        reply(text="Status: nothing running."),
        reply(text="Extra answer."),
    ),
    tools=lambda w: [_blocking_tool(w, "deploy", replay="unsafe"), counting_tool(w, "probe", replay="safe")],
    host=_abort_host,
    unsafe=("deploy",),
    same_outcome=False,
    baseline_check=_check_abort,
)


async def _steer_host(h: Any, conv: Any, world: World) -> list[Any]:
    """While the first tool round runs, steer the run with a second input."""
    sub = await conv.submit(Input("look it up", request_id="steer-0"))
    await until(lambda: world.flags.get("lookup_started") or _settled(sub))
    steer = await conv.submit(Input("also check the date", request_id="steer-1", when_busy="steer"))
    world.flags["steered"] = True
    return [sub, steer]


def _check_steer(storage: Any) -> None:
    subs = _by_request(storage)
    assert subs["steer-0"].status == subs["steer-1"].status == "done"
    assert subs["steer-0"].answer_entry_id == subs["steer-1"].answer_entry_id  # one run answered both


STEER = Scenario(
    name="steer",
    script=(
        reply(tool_calls=[tool_call("lookup")]),
        reply(text="Looked it up, and the date is today."),
        reply(text="Second run answer."),
    ),
    tools=lambda w: [_blocking_tool(w, "lookup", replay="safe", release="steered")],
    host=_steer_host,
    same_outcome=False,
    baseline_check=_check_steer,
)


async def _write_host(h: Any, conv: Any, world: World) -> list[Any]:
    """A passive write arrives while the run works; it is appended at the
    next boundary without starting a run of its own."""
    sub = await conv.submit(Input("count to three", request_id="write-0"))
    await until(lambda: world.flags.get("count_started") or _settled(sub))
    note = await conv.submit(Write("remember: be brief", request_id="write-1"))
    world.flags["written"] = True
    return [sub, note]


def _check_write(storage: Any) -> None:
    kinds = [(e.kind, e.text) for e in storage.entries(1)]
    assert ("user", "remember: be brief") in kinds
    assert len([t for t in storage.tasks() if t.kind == "pi.generation"]) == 2  # no run of its own
    assert kinds[-1] == ("assistant", "One, two, three.")


WRITE_DURING_RUN = Scenario(
    name="write_during_run",
    script=(
        reply(tool_calls=[tool_call("count")]),
        reply(text="One, two, three."),
    ),
    tools=lambda w: [_blocking_tool(w, "count", replay="safe", release="written")],
    host=_write_host,
    same_outcome=False,
    baseline_check=_check_write,
)


def _subagent_script(request: Any) -> Any:
    users = [m.text for m in request.messages if m.role == "user"]
    assistants = sum(1 for m in request.messages if m.role == "assistant")
    if users and users[0].startswith("child:"):
        if assistants == 0:
            return reply(tool_calls=[tool_call("fetch", what="facts")])
        return reply(text="child found: " + request.messages[-1].text)
    if assistants == 0:
        return reply(tool_calls=[tool_call("delegate", prompt="child: find the facts")])
    return reply(text="parent summary of " + request.messages[-1].text)


def _check_subagent(storage: Any) -> None:
    convs = storage.conversations()
    assert len(convs) == 2
    child = convs[1]
    owner = storage.task(child.owner_task_id)
    assert owner is not None and owner.kind == "pi.tool" and owner.input["name"] == "delegate"
    assert storage.entries(1)[-1].text.startswith("parent summary of child found:")


SUBAGENT = Scenario(
    name="subagent",
    script=(),
    baseline_check=_check_subagent,
    tools=lambda w: [define_subagent_tool("delegate", "ask a helper"), counting_tool(w, "fetch", replay="safe")],
    inputs=("research this",),
)

register_script("subagent", _subagent_script)

ISSUE3 = (ABORT_TOOL, STEER, WRITE_DURING_RUN, SUBAGENT)
ALL = ALL + ISSUE3


# --- custom tasks with sleep and memo; the approval hook ------------------------


def _countdown_tasks(world: World) -> list[Any]:
    async def start(task: Any, rt: Any) -> None:
        child = await rt.create_task("pidtest_child", {"x": task.input["n"]})
        until = rt.now() + 20
        await rt.commit("waiting", checkpoint={"phase": "sleeping", "until": until, "child": child}, on=[child])

    async def sleeping(task: Any, rt: Any) -> None:
        await rt.sleep(task.checkpoint["until"])
        world.runs[("sleeping", task.id)] += 1
        token = await rt.memo("token")
        if token is None:
            world.flags["token_draws"] = world.flags.get("token_draws", 0) + 1
            token = await rt.memo("token", f"token-{world.flags['token_draws']}")
        world.flags["token_seen"] = token
        await rt.commit(checkpoint={"phase": "finish", "until": task.checkpoint["until"], "token": token})

    async def finish(task: Any, rt: Any) -> None:
        assert await rt.memo("token") == task.checkpoint["token"], "MemoNeverChanges"
        await rt.commit("terminal", outcome={"status": "completed", "result": {"token": task.checkpoint["token"]}})

    async def child(task: Any, rt: Any) -> Any:
        world.runs[("child", task.id)] += 1
        return Progress(status="terminal", outcome={"status": "completed", "result": {"x2": task.input["x"] * 2}})

    return [
        define_task("pidtest_countdown", lambda i: {"phase": "start"}, {"start": start, "sleeping": sleeping, "finish": finish}),
        define_task("pidtest_child", lambda i: {"phase": "run"}, {"run": child}),
    ]


class _TaskWait:
    def __init__(self, h: Any, task_id: int) -> None:
        self.h, self.task_id = h, task_id

    async def wait(self) -> Any:
        return await self.h.wait_for_task(self.task_id)


async def _custom_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Create the countdown task once (a host checks the store before it
    creates again after a restart), then wait for it."""
    existing = [t for t in await h.tasks() if t.kind == "pidtest_countdown"]
    task_id = existing[0].id if existing else await h.create_task("pidtest_countdown", {"n": 21})
    return [_TaskWait(h, task_id)]


def _check_custom(storage: Any) -> None:
    task = next(t for t in storage.tasks() if t.kind == "pidtest_countdown")
    assert task.status == "terminal" and task.outcome.status == "completed"
    assert task.outcome.result == {"token": "token-1"}
    assert task.memos is None  # dropped at terminal
    child = next(t for t in storage.tasks() if t.kind == "pidtest_child")
    assert child.owner == task.id and child.outcome.result == {"x2": 42}


def _check_custom_any(storage: Any) -> None:
    task = next(t for t in storage.tasks() if t.kind == "pidtest_countdown")
    assert task.outcome is not None and task.outcome.status == "completed", task.outcome
    assert str(task.outcome.result["token"]).startswith("token-")


CUSTOM_TASK = Scenario(
    name="custom_task",
    script=(),
    tools=_countdown_tasks,
    host=_custom_host,
    same_outcome=False,
    baseline_check=_check_custom,
    final_check=_check_custom_any,
)
register_script("custom_task", lambda request: reply(text="unused"))


def _approval_tools(world: World) -> list[Any]:
    async def approve(ctx: Any, call: Any) -> Any:
        if call.name != "deploy":
            return None
        decision = await ctx.memo("approval:decision")
        if decision is None:
            assert not world.flags.get("approved"), "an approval given before a crash was asked again"
            world.flags["asks"] = world.flags.get("asks", 0) + 1
            decision = await ctx.memo("approval:decision", "approved")
            world.flags["approved"] = True
        if decision != "approved":
            raise RuntimeError(f"deploy not approved ({decision})")
        return None

    guard = define_extension("approval", hooks={"before_tool": approve})
    return [counting_tool(world, "deploy", replay="unsafe"), guard]


def _check_approval(storage: Any) -> None:
    results = [e for e in storage.entries(1) if e.kind == "tool_result"]
    assert [r.text for r in results] == ["deploy ok []"]


APPROVAL = Scenario(
    name="approval_hook",
    script=(reply(tool_calls=[tool_call("deploy")]), reply(text="Deployed after approval.")),
    tools=_approval_tools,
    unsafe=("deploy",),
    baseline_check=_check_approval,
)

ALL = ALL + (CUSTOM_TASK, APPROVAL)



# --- issue 4: streaming partials, durable retry, deferred polling ----------------

STREAMING = Scenario(
    name="streaming",
    script=(
        reply(tool_calls=[tool_call("lookup", q="x")]),
        reply(text="A long streamed answer that arrives in several pieces.", stream=5, delay=0.05),
    ),
    tools=lambda w: [counting_tool(w, "lookup", replay="safe")],
    settings=Settings(partial_interval_ms=5),
)


def _check_retry(storage: Any) -> None:
    kinds = [(e.kind, e.stop_reason) for e in storage.entries(1)]
    assert ("assistant", "error") in kinds and kinds[-1] == ("assistant", "stop")


RETRY = Scenario(
    name="retry_429",
    script=(
        reply(error="429 Too Many Requests", retryable=True),
        reply(text="Answered after one retry."),
    ),
    tools=lambda w: [],
    settings=Settings(retry=RetryPolicy(base_delay_ms=20)),
    baseline_check=_check_retry,
)


def _check_deferred(storage: Any) -> None:
    assert storage.entries(1)[-1].text == "Deferred answer."
    polls = [row for row in storage.journal() if '"type":"model_deferred"' in row.events]
    assert len(polls) == 3  # created deferred, then still deferred twice


DEFERRED = Scenario(
    name="deferred",
    script=(reply(text="Deferred answer.", deferred=3, poll_after_ms=5),),
    tools=lambda w: [],
    baseline_check=_check_deferred,
)

ALL = ALL + (STREAMING, RETRY, DEFERRED)


# --- issue 7: poison values from outside, the agent's tool filter -----------------

POISON_TEXT = "bad \ud800 text \udcff end"


def _check_poison(storage: Any) -> None:
    entries = storage.entries(1)
    for e in entries:
        assert "\ufffd" not in e.text or "\ud800" not in e.text
        e.text.encode("utf-8")  # valid UTF-8 everywhere
    assert any(e.kind == "tool_result" and "\ufffd" in e.text for e in entries)
    subs = sorted(storage.submissions(1), key=lambda s: s.id)
    assert [(s.status, s.reason) for s in subs] == [("done", None), ("unanswered", "model_error")]
    assert "nan" in (subs[1].detail or "").lower()


POISON = Scenario(
    name="poison",
    script=(
        reply(text=POISON_TEXT, tool_calls=[tool_call("leak", q="x")]),
        reply(text="streamed " + POISON_TEXT, stream=3, delay=0.03),
        reply(tool_calls=[tool_call("leak", q=float("nan"))]),
    ),
    tools=lambda w: [counting_tool(w, "leak", replay="safe", body=lambda world, args: "leak " + POISON_TEXT)],
    inputs=("go", "again"),
    settings=Settings(partial_interval_ms=5),
    final_check=_check_poison,
)


def _check_filter(storage: Any) -> None:
    results = {e.tool_name: e for e in storage.entries(1) if e.kind == "tool_result"}
    assert results["write"].text == "<harness>\n[error] Tool write is not available\n</harness>" and results["write"].is_error
    assert results["read"].text == "read ok [('path', 'a')]"


TOOL_FILTER = Scenario(
    name="tool_filter",
    script=(
        reply(tool_calls=[tool_call("write", path="a"), tool_call("read", path="a")]),
        reply(text="Only read was offered."),
    ),
    tools=lambda w: [counting_tool(w, "read", replay="safe"), counting_tool(w, "write", replay="unsafe")],
    agent=AgentConfig(model=ModelRef("scripted", "test"), tools=("read",)),
    unsafe=("write",),
    final_check=_check_filter,
)

ALL = ALL + (POISON, TOOL_FILTER)


# --- issue 9 item 2: tool output limits ----------------------------------------------

#: 4000 lines of 30 bytes (120 KB), then the error a tail keeps.
BIG_OUTPUT = "".join(f"build step {i:08d} ........\n" for i in range(4000)) + "error: link failed\n"


def _noisy_bash(world: World) -> list[Any]:
    """An unsafe ``bash`` stand-in: it streams two chunks of running output
    (each a throttled progress commit) and returns 120 KB, which its tail
    limits cut (no env: nothing is spilled)."""

    async def execute(ctx: Any, args: dict[str, Any]) -> Any:
        world.runs[("bash", ctx.task_id)] += 1
        ctx.report_output("build step 00000000 ........\n")
        await trio.sleep(0.03)
        ctx.report_output("build step 00000001 ........\n")
        await trio.sleep(0.03)
        return ToolResult(text=BIG_OUTPUT, is_error=True)

    return [define_tool("bash", "noisy bash", {"type": "object"}, execute, output_limits=(4096, 100, "tail"))]


def _check_truncated(storage: Any) -> None:
    (result,) = [e for e in storage.entries(1) if e.kind == "tool_result"]
    assert len(result.text.encode()) < 5000
    if not result.text.endswith("was interrupted and may have partially run\n</harness>"):
        cut = result.data["truncated"]
        assert cut["total_lines"] == 4001 and cut["kept_lines"] == 100 and "full_output" not in cut  # no env: no spill
        dropped = cut["total_bytes"] - cut["kept_bytes"]
        assert result.text.endswith(
            f"error: link failed\n\n<harness>\n[warn] Output truncated to its end: 3901 lines, {dropped} bytes dropped\n</harness>"
        )
    for row in storage.journal():
        assert len(row.events) + len(row.writes) < 20_000  # the 120 KB never reached the store
    live = storage.document(1, "pi.live")
    assert live.tools is None  # settled: no running output left behind


TRUNCATED_BASH = Scenario(
    name="truncated_bash_output",
    script=(reply(tool_calls=[tool_call("bash", command="make")]), reply(text="The link step failed.")),
    tools=_noisy_bash,
    unsafe=("bash",),
    settings=Settings(partial_interval_ms=5),
    final_check=_check_truncated,
)

ALL = ALL + (TRUNCATED_BASH,)


# --- issue 9: compaction and reset --------------------------------------------------


def _compaction_script(request: Any) -> Any:
    """Summarization requests get a summary; turns get a long answer to the
    newest user message (deterministic whatever the crash timing)."""
    from pidurable.core.compaction import SUMMARY_SYSTEM_PROMPT

    if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
        return reply(text="SUMMARY of the early questions")
    users = [m.text for m in request.messages if m.role == "user"]
    return reply(text=f"answer to {users[-1][:12]} " + "x" * 120)


async def _compaction_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Three long turns, one manual compaction (started once across lives),
    then a turn that must see the summary."""
    for i in range(3):
        await (await conv.submit(Input(f"question {i} " + "q" * 80, request_id=f"compact-{i}"))).wait()
    started = [t for t in await h.tasks() if t.kind == "pi.compaction"]
    task_id = started[0].id if started else await conv.compact()
    await h.wait_for_task(task_id)
    return [await conv.submit(Input("after the summary", request_id="compact-3"))]


def _check_compaction(storage: Any) -> None:
    entries = storage.entries(1)
    markers = [e for e in entries if e.kind == "compaction"]
    assert len(markers) == 1 and "SUMMARY of the early questions" in markers[0].text
    assert entries[-1].kind == "assistant" and entries[-1].text.startswith("answer to after the su")


def _check_compaction_any(storage: Any) -> None:
    assert len([e for e in storage.entries(1) if e.kind == "compaction"]) <= 1


MANUAL_COMPACTION = Scenario(
    name="manual_compaction",
    script=(),
    tools=lambda w: [],
    host=_compaction_host,
    settings=Settings(compaction=CompactionSettings(keep_recent_tokens=40)),
    baseline_check=_check_compaction,
    final_check=_check_compaction_any,
)
register_script("manual_compaction", _compaction_script)


async def _reset_host(h: Any, conv: Any, world: World) -> list[Any]:
    """A reset and a follow-up queued behind a tool round: the reset ends the
    run ``unanswered/reset``; the follow-up runs in the new context."""
    sub = await conv.submit(Input("count to three", request_id="reset-0"))
    await until(lambda: world.flags.get("count_started") or _settled(sub))
    queued = [sub]
    if not any(e.kind == "reset" for e in await conv.transcript()):
        queued.append(await conv.submit(Write("handoff: counting", kind="reset", data={"head": "self"}, request_id="reset-1")))
    queued.append(await conv.submit(Input("what now?", request_id="reset-2")))
    world.flags["written"] = True
    return queued


def _check_reset(storage: Any) -> None:
    subs = _by_request(storage)
    assert subs["reset-0"].status == "unanswered" and subs["reset-0"].reason == "reset"
    assert subs["reset-2"].status == "done"
    kinds = [e.kind for e in storage.entries(1)]
    assert kinds.count("reset") == 1


RESET_QUEUED = Scenario(
    name="reset_queued",
    script=(
        reply(tool_calls=[tool_call("count")]),
        reply(text="Fresh answer."),
    ),
    tools=lambda w: [_blocking_tool(w, "count", replay="safe", release="written")],
    host=_reset_host,
    same_outcome=False,
    baseline_check=_check_reset,
)

ALL = ALL + (MANUAL_COMPACTION, RESET_QUEUED)


def _overflow_script(request: Any) -> Any:
    """A small window: a turn whose messages exceed ``OVERFLOW_CHARS`` (or
    that holds "huge") is refused as a context overflow; summarization
    requests get a summary; other turns a long answer."""
    from pidurable.core.compaction import SUMMARY_SYSTEM_PROMPT

    if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
        return reply(text="SUMMARY of the overflowing questions")
    users = [m.text for m in request.messages if m.role == "user"]
    size = sum(len(m.text) for m in request.messages)
    if size > OVERFLOW_CHARS or "huge" in users[-1]:
        return reply(error=f"This model's maximum context length is 125 tokens ({size // 4} sent)", overflow=True)
    return reply(text=f"answer to {users[-1][:12]} " + "x" * 120)


OVERFLOW_CHARS = 500


def _overflow_host(last: str) -> Any:
    async def host(h: Any, conv: Any, world: World) -> list[Any]:
        """Two long turns, then a third that overflows the window."""
        for i in range(2):
            await (await conv.submit(Input(f"question {i} " + "q" * 80, request_id=f"overflow-{i}"))).wait()
        return [await conv.submit(Input(last + " " + "q" * 80, request_id="overflow-2"))]

    return host


def _check_overflow(storage: Any) -> None:
    entries = storage.entries(1)
    markers = [e for e in entries if e.kind == "compaction"]
    assert len(markers) == 1 and (markers[0].data or {}).get("reason") == "overflow"
    assert [e.stop_reason for e in entries if e.kind == "assistant"].count("error") == 1
    assert entries[-1].kind == "assistant" and entries[-1].text.startswith("answer to question 2")
    assert all(s.status == "done" for s in _by_request(storage).values())


def _check_overflow_twice(storage: Any) -> None:
    entries = storage.entries(1)
    assert len([e for e in entries if e.kind == "compaction"]) == 1
    sub = _by_request(storage)["overflow-2"]
    assert sub.status == "unanswered" and sub.reason == "model_error" and "maximum context length" in sub.detail


def _check_one_compaction_at_most(storage: Any) -> None:
    assert len([e for e in storage.entries(1) if e.kind == "compaction"]) <= 1


OVERFLOW = Scenario(
    name="overflow_compact_retry",
    script=(),
    tools=lambda w: [],
    host=_overflow_host("question 2"),
    settings=Settings(compaction=CompactionSettings(keep_recent_tokens=40)),
    baseline_check=_check_overflow,
    final_check=_check_one_compaction_at_most,
)
register_script("overflow_compact_retry", _overflow_script)

OVERFLOW_TWICE = Scenario(
    name="overflow_twice",
    script=(),
    tools=lambda w: [],
    host=_overflow_host("huge question"),
    settings=Settings(compaction=CompactionSettings(keep_recent_tokens=40)),
    baseline_check=_check_overflow_twice,
    final_check=_check_one_compaction_at_most,
)
register_script("overflow_twice", _overflow_script)

ALL = ALL + (OVERFLOW, OVERFLOW_TWICE)


# --- issue 9: a system section that changes mid-conversation -------------------------


def _jot(world: World, args: dict[str, Any]) -> str:
    world.files["notes.txt"] = args["text"]
    return "noted"


def _section_tools(world: World) -> list[Any]:
    from pidurable.shell import section

    def notes(prompt: Any) -> str:
        return "Notes: " + world.files.get("notes.txt", "none")

    jot = counting_tool(world, "jot", replay="unsafe", body=_jot, properties={"text": {"type": "string"}})
    return [define_extension("notes", sections=[section("notes", notes)], tools=[jot])]


def _check_section_change(storage: Any) -> None:
    """Every run: a baseline, then at most the one change the jot made (an
    interrupted jot may not have run: then nothing changed)."""
    shown = [e.data for e in storage.entries(1) if e.kind == "system"]
    assert shown[0]["sections"] == {"notes": "<notes>\nNotes: empty\n</notes>"} and shown[0]["tools_added"] == ["jot"]
    assert shown[1:] in ([], [{"sections": {"notes": "<notes>\nNotes: buy milk\n</notes>"}}])


def _check_section_changed(storage: Any) -> None:
    """The uninterrupted run: the section changed mid-conversation."""
    assert len([e for e in storage.entries(1) if e.kind == "system"]) == 2


SECTION_CHANGE = Scenario(
    name="section_change",
    script=(reply(tool_calls=[tool_call("jot", text="buy milk")]), reply(text="Noted.")),
    tools=_section_tools,
    files=(("notes.txt", "empty"),),
    unsafe=("jot",),
    final_check=_check_section_change,
    baseline_check=_check_section_changed,
    # an interrupted jot may not have run: then the section does not change
    # and the transcript legitimately lacks the second system entry
    same_outcome=False,
)

ALL = ALL + (SECTION_CHANGE,)


# --- issue 9: threshold compaction (a known context window) ---------------------------


def _summarizing(answer_chars: int) -> Any:
    """A script answering turns with ``answer_chars`` characters and
    summarization requests with a fixed summary."""
    from pidurable.core.compaction import SUMMARY_SYSTEM_PROMPT

    def script(request: Any) -> Any:
        if request.messages and request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            return reply(text="SUMMARY: the story so far")
        return reply(text="a" * answer_chars)

    return script


register_script("threshold_blocking", _summarizing(2000))


def _check_threshold(storage: Any) -> None:
    markers = [e for e in storage.entries(1) if e.kind == "compaction"]
    assert markers and all((e.data or {}).get("reason") == "threshold" for e in markers)
    assert all(s.status == "done" for s in storage.submissions(1))


THRESHOLD_BLOCKING = Scenario(
    name="threshold_blocking",
    script=(),
    tools=lambda w: [],
    inputs=tuple(f"question {i} " + "q" * 90 for i in range(3)),
    agent=AgentConfig(model=ModelRef("scripted", "test"), context_window=1000),
    settings=Settings(compaction=CompactionSettings(reserve_tokens=200, background_tokens=0, keep_recent_tokens=30)),
    final_check=_check_threshold,
)

ALL = ALL + (THRESHOLD_BLOCKING,)


register_script("threshold_background", _summarizing(600))


def _check_background(storage: Any) -> None:
    assert all(s.status == "done" or s.reason == "stale" for s in storage.submissions(1))
    inputs = [s for s in storage.submissions(1) if s.type == "input"]
    assert inputs and all(s.status == "done" for s in inputs)


def _check_background_placed(storage: Any) -> None:
    """The uninterrupted run: a background summary was placed at a boundary."""
    writes = [s for s in storage.submissions(1) if (s.request_id or "").startswith("compaction:")]
    assert writes and any(s.status == "done" for s in writes)


async def _background_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Submit the turns, wait for them, then for the background work too (a
    background compaction outlives the run that started it)."""
    handles = [await conv.submit(Input(f"question {i} " + "q" * 90, request_id=f"bg-{i}")) for i in range(4)]
    for handle in handles:
        await handle.wait()
    while live := await h.tasks(live_only=True):
        for task in live:
            await h.wait_for_task(task.id)
    return handles


THRESHOLD_BACKGROUND = Scenario(
    name="threshold_background",
    script=(),
    tools=lambda w: [],
    host=_background_host,
    agent=AgentConfig(model=ModelRef("scripted", "test"), context_window=1000),
    settings=Settings(compaction=CompactionSettings(reserve_tokens=200, background_tokens=300, keep_recent_tokens=30)),
    final_check=_check_background,
    baseline_check=_check_background_placed,
    # where the background summary lands depends on when the crash let it
    # finish relative to the turns: the transcript may differ, never the rules
    same_outcome=False,
)

ALL = ALL + (THRESHOLD_BACKGROUND,)


# --- issue 9: run controls and the hooks that decide before a commit -------------------


def _control_tool(world: World, name: str, control: Any, *, replay: str = "safe") -> Any:
    """A counted tool whose result carries ``control``."""

    async def execute(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[(name, ctx.task_id)] += 1
        await trio.sleep(0)
        return ToolResult(text=f"{name} done", control=control)

    return define_tool(name, f"control tool {name}", {"type": "object"}, execute, replay=replay)


def _handoff_tools(world: World) -> list[Any]:
    from pidurable.shell import Control

    async def after_tools(ctx: Any, results: Any) -> Any:
        world.flags["after_tools_seen"] = [e.text for e in results]
        return None

    return [
        _control_tool(world, "plan", Control(handoff="Plan saved: continue with step 2.", add_tools=("probe",))),
        counting_tool(world, "probe", replay="safe"),
        define_extension("observer", hooks={"after_tools": after_tools}),
    ]


def _check_handoff(storage: Any) -> None:
    """The handoff ended the first run (answered by the tool-calling entry)
    with one reset marker; the second run's context starts there."""
    entries = storage.entries(1)
    markers = [e for e in entries if e.kind == "reset"]
    assert [m.text for m in markers] == ["Plan saved: continue with step 2."]
    subs = sorted(storage.submissions(), key=lambda s: s.id)
    assert [s.status for s in subs] == ["done", "done"]
    first = next(e for e in entries if e.id == subs[0].answer_entry_id)
    assert first.kind == "assistant" and first.tool_calls and first.tool_calls[0].name == "plan"


HANDOFF_CONTROL = Scenario(
    name="handoff_control",
    script=(
        reply(tool_calls=[tool_call("plan")]),
        reply(tool_calls=[tool_call("probe")]),
        reply(text="Step 2 done."),
    ),
    tools=_handoff_tools,
    inputs=("make a plan", "go on"),
    agent=AgentConfig(model=ModelRef("scripted", "test"), tools=("plan",)),
    final_check=_check_handoff,
)


def _yield_tools(world: World) -> list[Any]:
    async def on_yield(ctx: Any, answer: Any) -> Any:
        return "Double-check the total." if answer.text == "Total: 41." else None

    return [define_extension("checker", hooks={"on_yield": on_yield})]


def _check_yield(storage: Any) -> None:
    """One continuation (never two: a crash before the answer's commit runs
    the hook again, on the same answer), and the input answered by the last."""
    entries = storage.entries(1)
    assert [e.text for e in entries if e.kind == "user"] == ["add them up", "Double-check the total."]
    (sub,) = storage.submissions()
    assert sub.status == "done" and sub.answer_entry_id == entries[-1].id and entries[-1].text == "Total: 42."


ON_YIELD = Scenario(
    name="on_yield_continue",
    script=(reply(text="Total: 41."), reply(text="Total: 42.")),
    tools=_yield_tools,
    inputs=("add them up",),
    final_check=_check_yield,
)


def _abort_hook_tools(world: World) -> list[Any]:
    async def on_abort(ctx: Any, call: Any, result: Any) -> Any:
        return f"{call.name} was stopped; check the deploy log before retrying."

    return [
        _blocking_tool(world, "deploy", replay="unsafe"),
        define_extension("careful", hooks={"on_abort": on_abort}),
    ]


async def _abort_tool_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Abort the blocking deploy call (the task, not the conversation) once it runs."""
    sub = await conv.submit(Input("deploy", request_id="onabort-0"))
    await until(lambda: world.flags.get("deploy_started") or world.flags.get("aborted") or _settled(sub))
    if not world.flags.get("aborted") and not _settled(sub):
        tools = [t for t in await h.tasks(live_only=True) if t.kind == "pi.tool"]
        for t in tools:
            await h.abort_task(t.id)
        world.flags["aborted"] = True
    return [sub]


def _check_on_abort(storage: Any) -> None:
    results = [e for e in storage.entries(1) if e.kind == "tool_result"]
    assert len(results) == 1
    text = results[0].text
    assert text in (
        "deploy was stopped; check the deploy log before retrying.",
        "<harness>\n[error] Tool deploy was interrupted and may have partially run\n</harness>",
    ), text


def _check_on_abort_replaced(storage: Any) -> None:
    (result,) = [e for e in storage.entries(1) if e.kind == "tool_result"]
    assert result.text == "deploy was stopped; check the deploy log before retrying."
    assert result.data == {"code": "aborted"}


ON_ABORT = Scenario(
    name="on_abort_replace",
    script=(reply(tool_calls=[tool_call("deploy")]), reply(text="Deploy was stopped.")),
    tools=_abort_hook_tools,
    host=_abort_tool_host,
    unsafe=("deploy",),
    same_outcome=False,
    final_check=_check_on_abort,
    baseline_check=_check_on_abort_replaced,
)

ALL = ALL + (HANDOFF_CONTROL, ON_YIELD, ON_ABORT)


# --- issue 10 item 1: documents changed by tools and by the host during a run --------

from pidurable.core.state import DocScope  # noqa: E402
from pidurable.shell import define_doc  # noqa: E402

NOTES = define_doc(
    "notes",
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]},
    {"items": []},
)


def _add_note(text: str) -> Any:
    return lambda notes: {"items": [*notes["items"], text]}


def _add_note_once(text: str) -> Any:
    """A host's retried update: a no-op once its item is there."""
    return lambda notes: notes if text in notes["items"] else {"items": [*notes["items"], text]}


def _noting_tool(world: World, name: str, *, replay: str, wait_for: str | None = None) -> Any:
    """A tool whose body stages one note (``call.update_document``), committed
    with its result; it counts its runs like ``counting_tool``. With
    ``wait_for`` it stages only once that world flag is set."""

    async def execute(ctx: Any, args: dict[str, Any]) -> str:
        world.runs[(name, ctx.task_id)] += 1
        world.flags[f"{name}_started"] = True
        await trio.sleep(0)  # a checkpoint: a crash elsewhere may land mid-body
        if wait_for is not None:
            await until(lambda: world.flags.get(wait_for))
        await ctx.update_document(NOTES, _add_note(args["text"]))
        await trio.sleep(0)
        return f"noted {args['text']}"

    return define_tool(
        name, f"note {name}", {"type": "object", "properties": {"text": {"type": "string"}}}, execute, replay=replay
    )


def _notes(storage: Any) -> list[str]:
    doc = storage.document_state(DocScope.CONVERSATION, 1, "notes")
    return [] if doc is None else list(doc.value["items"])


def _interrupted(storage: Any, tool: str) -> bool:
    return any(
        e.kind == "tool_result"
        and e.tool_name == tool
        and ((e.data or {}).get("code") == "interrupted" or "was interrupted and may have partially run" in e.text)
        for e in storage.entries(1)
    )


def _check_tool_notes(storage: Any) -> None:
    """The safe tool's note is applied exactly once (a re-run stages it
    again, never twice); the unsafe one's exactly once, or never when its
    call ended interrupted."""
    notes = _notes(storage)
    assert notes.count("safe note") == 1, notes
    assert notes.count("unsafe note") == (0 if _interrupted(storage, "record") else 1), notes
    assert len(notes) == len(set(notes)), notes


DOC_TOOL = Scenario(
    name="document_tool",
    script=(
        reply(tool_calls=[tool_call("remember", text="safe note"), tool_call("record", text="unsafe note")]),
        reply(text="Both noted."),
    ),
    tools=lambda w: [NOTES, _noting_tool(w, "remember", replay="safe"), _noting_tool(w, "record", replay="unsafe")],
    inputs=("note both",),
    unsafe=("record",),
    final_check=_check_tool_notes,
)


async def _doc_race_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Start a run whose tool notes something, and update the same document
    from the host twice while it runs: once right after the submit (racing
    the model request), once when the tool body has started (racing its
    result). The host retries after a crash; its updates are idempotent."""
    sub = await conv.submit(Input("plan the day", request_id="docrace-0"))
    await conv.update_document(NOTES, _add_note_once("host before"))
    await until(lambda: world.flags.get("remember_started") or _settled(sub))
    await conv.update_document(NOTES, _add_note_once("host during"))
    world.flags["host_updated"] = True  # the tool body stages its note only now
    return [sub]


def _check_race_notes(storage: Any) -> None:
    notes = _notes(storage)
    assert sorted(notes) == ["host before", "host during", "tool note"], notes


DOC_HOST_RACE = Scenario(
    name="document_host_race",
    script=(reply(tool_calls=[tool_call("remember", text="tool note")]), reply(text="Planned.")),
    tools=lambda w: [NOTES, _noting_tool(w, "remember", replay="safe", wait_for="host_updated")],
    host=_doc_race_host,
    final_check=_check_race_notes,
)

ALL = ALL + (DOC_TOOL, DOC_HOST_RACE)


# --- issue 10 item 2: forks (mid-run; a fork of a fork across crashes) ------------------


async def _fork_of(h: Any, parent: int) -> Any:
    """The fork of ``parent`` a previous life made, if any (a host that
    retries looks before it forks again: a fork is one commit)."""
    for c in await h.conversations():
        made = await c.forked_from()
        if made is not None and made[0] == parent:
            return c
    return None


def _forks(storage: Any, parent: int) -> list[Any]:
    return [c for c in storage.conversations() if c.parent_id == parent]


def _notes_of(storage: Any, cid: int) -> list[str]:
    doc = storage.document_state(DocScope.CONVERSATION, cid, "notes")
    return [] if doc is None else list(doc.value["items"])


def _fork_script(request: Any) -> Any:
    if request.conversation_id == 1:
        if any(m.role == "tool" for m in request.messages):
            return reply(text="Survey done.")
        return reply(tool_calls=[tool_call("survey", text="tool note")])
    last = [m for m in request.messages if m.role == "user"][-1].text
    return reply(text=f"Fork answer to {last} after {len(request.messages)} messages.")


register_script("fork_mid_run", _fork_script)


async def _fork_mid_run_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Note something, start a run whose tool blocks, fork at the assistant
    entry of the round while the tool runs, ask the fork; then let the
    parent's tool finish (it notes something too)."""
    await conv.update_document(NOTES, _add_note_once("before the run"))
    sub = await conv.submit(Input("survey everything", request_id="forkrun-0"))
    await until(lambda: world.flags.get("survey_started") or _settled(sub))
    fork = await _fork_of(h, conv.id)
    if fork is None:
        (call,) = [e for e in await conv.transcript() if e.tool_calls]
        fork = await conv.fork(at=call.id)
    world.flags["forked"] = True  # the parent's tool goes on only now
    asked = await fork.submit(Input("what happened so far?", request_id="forkrun-1"))
    return [sub, asked]


def _check_fork_mid_run(storage: Any) -> None:
    (fork,) = _forks(storage, 1)
    entries = storage.entries(fork.id)
    call = next(e for e in entries if e.tool_calls)
    assert fork.fork_at == call.id and not [e for e in entries if e.kind == "tool_result"]
    assert [(e.kind, e.text) for e in entries if e.conversation_id == fork.id] == [
        ("user", "what happened so far?"),
        ("system", ""),  # the fork's baseline of what it offers (issue 17 item 4: its agent has tools)
        ("assistant", "Fork answer to what happened so far? after 4 messages."),
    ]
    assert _notes_of(storage, fork.id) == ["before the run"]  # as of the fork point
    assert sorted(_notes_of(storage, 1)) == ["before the run", "tool note"]
    usage = storage.document(fork.id, "pi.usage")
    assert usage is not None and sum(t.calls for t in usage.models.values()) == 1  # its own request only


FORK_MID_RUN = Scenario(
    name="fork_mid_run",
    script=None,
    tools=lambda w: [NOTES, _noting_tool(w, "survey", replay="safe", wait_for="forked")],
    host=_fork_mid_run_host,
    final_check=_check_fork_mid_run,
)


def _chain_script(request: Any) -> Any:
    last = [m for m in request.messages if m.role == "user"][-1].text
    return reply(text=f"Answer to {last} after {len(request.messages)} messages.")


register_script("fork_of_fork", _chain_script)


async def _fork_chain_host(h: Any, conv: Any, world: World) -> list[Any]:
    """Root answers, A forks it, A answers, B forks A, B answers; documents
    change on the way. Every step is redone idempotently after a crash."""
    await conv.update_document(NOTES, _add_note_once("root note"))
    first = await conv.submit(Input("first", request_id="chain-0"))
    await first.wait()
    a = await _fork_of(h, conv.id) or await conv.fork(at=(await conv.transcript())[-1].id)
    await conv.update_document(NOTES, _add_note_once("late root note"))  # after A's point: not A's
    await a.update_document(NOTES, _add_note_once("A note"))
    second = await a.submit(Input("second", request_id="chain-1"))
    await second.wait()
    b = await _fork_of(h, a.id) or await a.fork(at=(await a.transcript())[-1].id)
    third = await b.submit(Input("third", request_id="chain-2"))
    return [first, second, third]


def _check_fork_chain(storage: Any) -> None:
    (a,) = _forks(storage, 1)
    (b,) = _forks(storage, a.id)
    assert [e.text for e in storage.entries(b.id) if e.kind in ("user", "assistant")] == [
        "first",
        "Answer to first after 1 messages.",
        "second",
        "Answer to second after 3 messages.",
        "third",
        "Answer to third after 5 messages.",
    ]
    assert [e.conversation_id for e in storage.entries(b.id)] == [1, 1, a.id, a.id, b.id, b.id]
    assert sorted(_notes_of(storage, 1)) == ["late root note", "root note"]
    assert _notes_of(storage, a.id) == ["root note", "A note"]
    assert _notes_of(storage, b.id) == ["root note", "A note"]


FORK_OF_FORK = Scenario(
    name="fork_of_fork",
    script=None,
    tools=lambda w: [NOTES],
    host=_fork_chain_host,
    final_check=_check_fork_chain,
)



def _agent_script(request: Any) -> Any:
    last = [m for m in request.messages if m.role == "user"][-1].text
    return reply(text=f"{request.model.model_id} answers {last}")


register_script("fork_agent_as_of", _agent_script)


async def _fork_agent_host(h: Any, conv: Any, world: World) -> list[Any]:
    """The root answers under model ``first``, is reconfigured to ``second``
    and answers again; then a fork at the first answer asks something: it
    runs under the agent as of its fork point (pi.agent is ``rewindable``,
    core/builtins.py), not the parent's current one. Redone idempotently."""
    first = await conv.submit(Input("one", request_id="agent-0"))
    await first.wait()
    await conv.configure(model=ModelRef("scripted", "second"))
    second = await conv.submit(Input("two", request_id="agent-1"))
    await second.wait()
    fork = await _fork_of(h, conv.id)
    if fork is None:
        answer = next(e for e in await conv.transcript() if e.kind == "assistant" and e.text.endswith("one"))
        fork = await conv.fork(at=answer.id)
    third = await fork.submit(Input("three", request_id="agent-2"))
    return [first, second, third]


def _check_fork_agent(storage: Any) -> None:
    (fork,) = _forks(storage, 1)
    assert storage.document(1, "pi.agent").model == ModelRef("scripted", "second")
    assert storage.document(fork.id, "pi.agent").model == ModelRef("scripted", "first")  # as of the fork point
    assert [e.text for e in storage.entries(1) if e.kind == "assistant"] == ["first answers one", "second answers two"]
    assert [e.text for e in storage.entries(fork.id) if e.kind == "assistant"] == [
        "first answers one",
        "first answers three",
    ]
    past = storage.document_at(1, "pi.agent", storage.entry_seq(fork.fork_at))
    assert past is not None and past.value["model"]["model_id"] == "first"


FORK_AGENT_AS_OF = Scenario(
    name="fork_agent_as_of",
    script=None,
    tools=lambda w: [],
    agent=AgentConfig(model=ModelRef("scripted", "first")),
    host=_fork_agent_host,
    final_check=_check_fork_agent,
)

ALL = ALL + (FORK_MID_RUN, FORK_OF_FORK, FORK_AGENT_AS_OF)


# --- issue 15: unsafe tools that can find out (reconcile) ------------------------

from reconciling import SCENARIOS as RECONCILE  # noqa: E402

ALL = ALL + RECONCILE


# --- issue 11: settled conversations are read on demand (core/holding.py) ----------
#
# A life opens with only live work held (Storage.load_live); a crash after a
# conversation settled leaves it unheld in the next life, where the host's
# retried calls name it: each is preceded by ConversationsLoaded (shell/loading.py).

register_script("settled_submit", _chain_script)
register_script("settled_fork", _chain_script)


async def _other(h: Any) -> Any:
    """The second ownerless conversation a previous life made, if any."""
    for c in await h.conversations():
        if c.id != 1 and await c.forked_from() is None:
            return c
    return None


async def _settled_submit_host(h: Any, conv: Any, world: World) -> list[Any]:
    """The root answers, a second conversation answers, then each is asked
    again: after a crash the one that settled is not held, and the retried
    (deduplicated) submits and the new ones load it."""
    first = await conv.submit(Input("one", request_id="ld-0"))
    await first.wait()
    other = await _other(h) or await h.create_conversation(agent=await conv.agent())
    second = await other.submit(Input("two", request_id="ld-1"))
    await second.wait()
    third = await conv.submit(Input("three", request_id="ld-2"))
    await third.wait()
    fourth = await other.submit(Input("four", request_id="ld-3"))
    return [first, second, third, fourth]


def _answers(storage: Any, cid: int) -> list[str]:
    return [e.text.split(" after ")[0] for e in storage.entries(cid) if e.kind == "assistant"]


def _check_settled_submit(storage: Any) -> None:
    (other,) = [c for c in storage.conversations() if c.id != 1]
    assert _answers(storage, 1) == ["Answer to one", "Answer to three"]
    assert _answers(storage, other.id) == ["Answer to two", "Answer to four"]


SETTLED_SUBMIT = Scenario(
    name="settled_submit",
    script=None,
    tools=lambda w: [],
    host=_settled_submit_host,
    final_check=_check_settled_submit,
)


async def _settled_fork_host(h: Any, conv: Any, world: World) -> list[Any]:
    """The root notes something and answers; a second conversation answers;
    then the root - settled, so unheld after a crash - is forked at its answer
    (its notes copied as of that point) and the fork is asked."""
    await conv.update_document(NOTES, _add_note_once("root note"))
    first = await conv.submit(Input("one", request_id="lf-0"))
    await first.wait()
    other = await _other(h) or await h.create_conversation(agent=await conv.agent())
    second = await other.submit(Input("two", request_id="lf-1"))
    await second.wait()
    fork = await _fork_of(h, conv.id)
    if fork is None:
        answer = next(e for e in await conv.transcript() if e.kind == "assistant")
        fork = await conv.fork(at=answer.id)
    third = await fork.submit(Input("three", request_id="lf-2"))
    return [first, second, third]


def _check_settled_fork(storage: Any) -> None:
    (fork,) = _forks(storage, 1)
    assert _answers(storage, fork.id) == ["Answer to one", "Answer to three"]
    assert [e.text for e in storage.entries(fork.id) if e.kind == "user"] == ["one", "three"]
    assert _notes_of(storage, fork.id) == ["root note"] == _notes_of(storage, 1)


SETTLED_FORK = Scenario(
    name="settled_fork",
    script=None,
    tools=lambda w: [NOTES],
    host=_settled_fork_host,
    final_check=_check_settled_fork,
)

ALL = ALL + (SETTLED_SUBMIT, SETTLED_FORK)
