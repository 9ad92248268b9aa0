"""``pidurable replay``, ``inspect`` and ``transcript`` read a JSONL store's
directory wherever they read a SQLite file (issue 11 item 6), read-only:
no lock taken, nothing written or repaired (a torn tail is simply not
counted), on a live store too, and a damaged store is the writable open's
one-line error. The same run in a SQLite store and in a JSONL store prints
the same, but for the store's path, id and layout version."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.model import Usage
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Registry,
    ToolResult,
    Write,
    define_tool,
    open_jsonl_storage,
    open_sqlite_storage,
)
from pidurable.shell.cli import main
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import readonly
from pidurable.shell.storage.base import DamagedRecord, StorageError
from pidurable.shell.storage.jsonl import JsonlStorage
from pidurable.shell.storage.readonly import ReadOnlyJsonl, open_view

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
AGENT = AgentConfig(model=ModelRef("scripted", "m"))
FIXTURES = Path(__file__).parent / "fixtures"
WAIT = 10
#: The clock of every run (the two stores' entries and events carry the same times).
NOW = 1_790_000_000_000

Opener = Callable[[Path], Any]


def scenario(path: Path, opener: Opener) -> None:
    """Three process lives: a tool round answered (one tool fails), a second
    input and a fork with a note, then a run left with a tool in flight when
    its process ended."""
    started = trio.Event()

    async def read(call: Any, args: dict[str, Any]) -> ToolResult:
        if args["path"] == "missing":
            raise FileNotFoundError("no such file")
        return ToolResult(text='{"port": 8080}')

    async def slow(call: Any, args: dict[str, Any]) -> ToolResult:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    registry = Registry()
    registry.install(define_tool("read", "read a file", SCHEMA, read, replay="safe"))
    registry.install(define_tool("slow", "slow", SCHEMA, slow))
    models = ScriptedModels(
        [
            reply(tool_calls=[tool_call("read", path="a.json"), tool_call("read", path="missing")], usage=Usage(input_tokens=100, output_tokens=7)),
            reply(text="The port is 8080.", usage=Usage(input_tokens=120, output_tokens=9)),
            reply(text="You are welcome."),
            reply(tool_calls=[tool_call("slow", path="b")]),
        ]
    )

    async def answered(prompt: str, request_id: str) -> None:
        async with Harness.open(opener(path), models=models, registry=registry, clock=lambda: NOW) as h:
            conv = await h.root(agent=AGENT)
            sub = await conv.submit(Input(prompt, request_id=request_id))
            assert (await sub.wait()).status == "done"
            if request_id == "q2":  # a fork after the first answer, with a note of its own
                first_answer = [e for e in await conv.transcript() if e.kind == "assistant"][1]
                fork = await conv.fork(first_answer.id)
                assert (await (await fork.submit(Write("a note on the fork"))).wait()).status == "done"

    async def left_running() -> None:
        async with Harness.open(opener(path), models=models, registry=registry, clock=lambda: NOW) as h:
            conv = await h.root(agent=AGENT)
            await conv.submit(Input("Wait for it", request_id="q3"))
            with trio.fail_after(WAIT):
                await started.wait()

    trio.run(answered, "What is the port?", "q1")
    trio.run(answered, "Thanks", "q2")
    trio.run(left_running)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same scenario in a SQLite store and in a JSONL store."""
    root = tmp_path_factory.mktemp("both")
    sqlite, jsonl = root / "s.sqlite", root / "store"
    scenario(sqlite, open_sqlite_storage)
    scenario(jsonl, open_jsonl_storage)
    return sqlite, jsonl


def run(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    assert main(list(argv)) == status
    captured = capsys.readouterr()
    return captured.out + captured.err


def snapshot(directory: Path) -> dict[str, str]:
    """Every file of ``directory`` by name, as a hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_inspect_transcript_and_replay_print_the_same_for_both_kinds_of_store(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect (text, --json, --all), transcript (text, --json, --full, a
    conversation) and replay (the listing, --check, --export) print the same
    for the JSONL store as for the SQLite store of the same run, but for the
    store's path, id and layout version."""
    sqlite, jsonl = stores
    ids = {}
    for store in stores:
        view = open_view(store)
        try:
            ids[store] = (view.store_id(), view.schema_version)
        finally:
            view.close()
    assert isinstance(open_view(jsonl), ReadOnlyJsonl) and not isinstance(open_view(sqlite), ReadOnlyJsonl)

    def same(*argv: str, status: int = 0) -> str:
        outs = []
        for store in stores:
            text = run(capsys, *(str(store) if a == "STORE" else a for a in argv), status=status)
            sid, schema = ids[store]
            text = text.replace(str(store), "STORE").replace(str(sid), "STORE-ID")
            text = text.replace(f"(schema {schema},", "(schema N,").replace(f'"schema": {schema},', '"schema": "N",')
            outs.append(text)
        assert outs[0] == outs[1], argv
        return outs[0]

    report = json.loads(same("inspect", "--db", "STORE", "--json"))
    tasks = {t["tool"] or t["kind"]: t for c in report["conversations"] for t in c["tasks"]}
    assert tasks["slow"]["state"] == "running" and tasks["pi.generation"]["waiting_on"][0]["tool"] == "slow"
    assert report["usage"]["models"]["scripted:m"]["calls"] == 4
    assert "waiting on" in same("inspect", "--db", "STORE")
    assert "pi.tool read" in same("inspect", "--db", "STORE", "--all")
    text = same("transcript", "--db", "STORE")
    assert "The port is 8080." in text and "-> slow(path='b')" in text
    assert len(json.loads(same("transcript", "--db", "STORE", "--json"))["entries"]) > 5
    same("transcript", "--db", "STORE", "--full")
    forks = [c for c in report["conversations"] if c["parent_id"] is not None]
    assert len(forks) == 1
    text = same("transcript", "--db", "STORE", "--conversation", str(forks[0]["id"]))
    assert "a note on the fork" in text and "The port is 8080." in text and "Thanks" not in text
    assert "does not exist" in same("transcript", "--db", "STORE", "--conversation", "999", status=2)
    assert "reproduced byte for byte" in same("replay", "--check", "--db", "STORE")
    assert "3 process lives" in same("replay", "--check", "STORE")  # the store as the positional argument
    assert "0 different" in same("replay", "--db", "STORE", "-v")
    same("replay", "--export", "-", "--db", "STORE")
    same("replay", "--explain", "--db", "STORE")
