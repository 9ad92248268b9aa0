"""``pidurable inspect`` answers "why is this stuck?" (issue 11 item 6): for
each live task what it waits on, what blocks it, the last error near it, and
usage per model and tool, as text and as ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.model import Usage
from pidurable.core.state import LIVE_DOC
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Progress,
    Registry,
    ToolResult,
    Write,
    define_task,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.cli import main
from pidurable.shell.providers import ScriptedModels, reply, tool_call

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
AGENT = AgentConfig(model=ModelRef("scripted", "m"))
WAIT = 10


def inspect_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["inspect", "--db", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def inspect_text(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["inspect", "--db", str(path), *extra]) == 0
    return capsys.readouterr().out


def live_tasks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Live tasks by kind (tools by ``pi.tool NAME``)."""
    return {
        (t["kind"] + (f" {t['tool']}" if t["tool"] else "")): t
        for c in report["conversations"]
        for t in c["tasks"]
        if t["status"] != "terminal"
    }


def store_with_a_tool_in_flight(path: Path) -> None:
    """A run whose tool round waits on two tools: ``read`` failed, ``slow``
    was running when the process left (usage recorded for the model)."""
    started = trio.Event()

    async def read(call: Any, args: dict[str, Any]) -> ToolResult:
        raise FileNotFoundError("no such file")

    async def slow(call: Any, args: dict[str, Any]) -> ToolResult:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    registry = Registry()
    registry.install(define_tool("read", "read", SCHEMA, read, replay="safe"))
    registry.install(define_tool("slow", "slow", SCHEMA, slow))
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("read", path="a"), tool_call("slow", path="b")], usage=Usage(input_tokens=100, output_tokens=7))]
    )

    async def life() -> None:
        async with Harness.open(open_sqlite_storage(path), models=models, registry=registry) as h:
            conv = await h.root(agent=AGENT)
            await conv.submit(Input("go", request_id="q1"))
            with trio.fail_after(WAIT):
                await started.wait()
                while not any(t.status.value == "terminal" for t in await h.tasks() if t.input.get("name") == "read"):
                    await trio.sleep(0.01)

    trio.run(life)


def test_inspect_says_what_a_waiting_run_waits_on_and_that_its_process_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The generation waits on the tool still running and names its failed
    tool as its last error; the running tool is flagged as left by a dead
    process; usage per model, per conversation and in total."""
    db = tmp_path / "s.sqlite"
    store_with_a_tool_in_flight(db)
    report = inspect_json(db, capsys)
    assert report["report"] == 1 and report["store"]["held_by_pid"] is None
    assert report["last_process"]["divergence"] is None
    tasks = live_tasks(report)
    assert set(tasks) == {"pi.generation", "pi.tool slow"}
    gen, slow = tasks["pi.generation"], tasks["pi.tool slow"]
    assert gen["state"] == "waiting" and gen["phase"] == "tools"
    assert [(w["id"], w["tool"], w["status"]) for w in gen["waiting_on"]] == [(slow["id"], "slow", "running")]
    assert slow["state"] == "running" and "process is gone" in slow["note"]
    assert slow["replay"] == "unsafe"
    assert all(t["tool"] != "read" for t in report["conversations"][0]["tasks"])  # terminal: shown with --all
    assert gen["last_error"]["source"].endswith("pi.tool read")
    assert gen["last_error"]["message"].startswith("Tool read")
    assert "no such file" in gen["last_error"]["result"]  # the error result the model was shown
    usage = {"scripted:m": {"input_tokens": 100, "output_tokens": 7, "calls": 1}}
    assert report["conversations"][0]["usage"]["models"] == usage
    assert report["usage"]["models"] == usage
    assert {t["name"]: t["replay"] for t in report["installed"]["tools"]} == {"read": "safe", "slow": "unsafe"}

    text = inspect_text(db, capsys)
    assert f"waiting on #{slow['id']} slow (running)" in text
    assert "its process is gone: the next open (pidurable resume) recovers it" in text
    assert "usage: scripted:m 1 call (100 in, 7 out tokens)" in text
    assert "usage in total: scripted:m 1 call (100 in, 7 out tokens)" in text
    assert f"last error ({gen['last_error']['source']}): Tool read" in text


def _task_store(path: Path, *, first_version: int, second: Registry) -> None:
    """A custom task left running by a process with version ``first_version``
    of its definition; a second process opens with ``second``'s definitions."""
    started = trio.Event()

    async def hang(task: Any, rt: Any) -> Progress:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    first = Registry()
    first.install(define_task("crawl", lambda i: {"phase": "go"}, {"go": hang}, version=first_version))

    async def life1() -> None:
        async with Harness.open(open_sqlite_storage(path), models=None, registry=first) as h:
            await h.root()
            await h.create_task("crawl", {})
            with trio.fail_after(WAIT):
                await started.wait()

    async def life2() -> None:
        # a process that commits nothing leaves no trace in the journal: this one writes a note
        async with Harness.open(open_sqlite_storage(path), models=None, registry=second) as h:
            await (await (await h.root()).submit(Write("second life"))).wait()

    trio.run(life1)
    trio.run(life2)


@pytest.mark.parametrize(
    "case, words",
    [
        ("missing", ["missing_task", "no definition of task kind 'crawl' is installed (installed kinds: none)"]),
        ("too_old", ["task_too_old", "the installed definition of 'crawl' is version 1, older than the task's 2"]),
        ("no_migrate", ["migration_failed", "the task is version 1, the installed definition 2 has no migrate function"]),
    ],
)
def test_inspect_names_what_blocks_a_custom_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, words: list[str]
) -> None:
    """A task whose definition the last process lacked, had in an older version, or could not migrate: blocked, with the reason and what was installed."""
    second = Registry()
    phases = {"go": lambda task, rt: None}
    if case == "too_old":
        second.install(define_task("crawl", lambda i: {"phase": "go"}, phases, version=1))  # type: ignore[dict-item]
    if case == "no_migrate":
        second.install(define_task("crawl", lambda i: {"phase": "go"}, phases, version=2))  # type: ignore[dict-item]
    db = tmp_path / f"{case}.sqlite"
    _task_store(db, first_version=2 if case == "too_old" else 1, second=second)
    report = inspect_json(db, capsys)
    crawl = live_tasks(report)["crawl"]
    assert crawl["state"] == "blocked"
    assert crawl["blocked"]["reason"] == words[0]
    assert crawl["blocked"]["detail"] == words[1]
    text = inspect_text(db, capsys)
    assert f"blocked ({words[0]}): {words[1]}" in text


def test_inspect_shows_a_retry_error_as_the_runs_last_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run waiting out a retryable model error: the conversation says it is retrying, the generation's last error is the model's message."""
    db = tmp_path / "r.sqlite"
    models = ScriptedModels([reply(error="rate limited, slow down", retryable=True), reply(text="ok")])

    async def life() -> None:
        async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry()) as h:
            conv = await h.root(agent=AGENT)
            await conv.submit(Input("go"))
            with trio.fail_after(WAIT):
                while not h.runtime.storage.document(conv.id, LIVE_DOC).retry_error:
                    await trio.sleep(0.01)

    trio.run(life)
    report = inspect_json(db, capsys)
    gen = live_tasks(report)["pi.generation"]
    assert gen["last_error"]["source"] == "retry"
    assert gen["last_error"]["message"] == "rate limited, slow down"
    assert report["conversations"][0]["retry"]["error"] == "rate limited, slow down"
    text = inspect_text(db, capsys)
    assert "retrying after a model error: rate limited, slow down" in text
    assert "last error (retry): rate limited, slow down" in text


def test_inspect_shows_a_failed_childs_error_and_the_finished_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--all shows terminal tasks with their outcome; a failed tool's message is its outcome error in the JSON."""
    db = tmp_path / "f.sqlite"

    async def boom(call: Any, args: dict[str, Any]) -> ToolResult:
        raise RuntimeError("disk on fire")

    registry = Registry()
    registry.install(define_tool("boom", "boom", SCHEMA, boom, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("boom", path="x")]), reply(text="it failed")])

    async def life() -> None:
        async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
            conv = await h.root(agent=AGENT)
            await (await conv.submit(Input("go"))).wait()

    trio.run(life)
    report = inspect_json(db, capsys, "--all")
    tasks = report["conversations"][0]["tasks"]
    tool = next(t for t in tasks if t["tool"] == "boom")
    assert tool["status"] == "terminal" and tool["outcome"]["status"] == "failed"
    assert tool["outcome"]["error"].startswith("Tool boom")
    assert "state" not in tool  # why-fields are for live tasks only
    assert live_tasks(report) == {}


def test_inspect_json_of_an_empty_store_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty store reports no conversations; a missing store or a non-store is one line and exit 2."""
    db = tmp_path / "e.sqlite"
    open_sqlite_storage(db).close()
    report = inspect_json(db, capsys)
    assert report["conversations"] == [] and report["last_process"] is None and report["installed"] is None
    assert main(["inspect", "--json", "--db", str(tmp_path / "nope.sqlite")]) == 2
    (tmp_path / "junk").write_text("junk")
    assert main(["inspect", "--json", "--db", str(tmp_path / "junk")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("pidurable: error: ") for line in err)


def test_inspect_of_a_store_held_by_this_process_is_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store held open (its lock taken) is inspected read-only; the JSON names the holder."""
    db = tmp_path / "h.sqlite"
    store_with_a_tool_in_flight(db)
    held = open_sqlite_storage(db)
    try:
        report = inspect_json(db, capsys)
    finally:
        held.close()
    assert report["store"]["held_by_pid"] is not None
    slow = live_tasks(report)["pi.tool slow"]
    assert slow["note"] is None  # a live holder: not called gone
