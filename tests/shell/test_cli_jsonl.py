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
import shutil
import subprocess
import sys
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
from pidurable.shell.storage.base import DamagedRecord
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


@pytest.mark.parametrize("name", [
    "jsonl_schema5_lives_store", "jsonl_schema6_lives_store", "jsonl_schema6_running_task_store",
    "jsonl_schema7_lives_store", "jsonl_schema7_running_task_store",
])
def test_fixture_stores_of_older_layouts_replay_exactly_and_are_left_untouched(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay --check, inspect and transcript on a JSONL store written by an
    earlier commit (schema 5: all inline; 6: sidecars; a task left running)
    match exactly and leave its directory byte for byte as it was (no lock
    file, no upgrade of its header, no sidecar reclaimed)."""
    store = FIXTURES / name
    before = snapshot(store)
    out = run(capsys, "replay", "--check", "--db", str(store))
    assert "reproduced byte for byte" in out and "process li" in out
    report = json.loads(run(capsys, "inspect", "--json", "--db", str(store)))
    assert report["store"]["schema"] == int(name.split("schema")[1][0]) and report["store"]["held_by_pid"] is None
    assert report["last_process"]["divergence"] is None
    assert "conversation 1 (root)" in run(capsys, "transcript", "--db", str(store / "main.jsonl"))
    assert snapshot(store) == before


def test_compact_store_on_both_kinds_then_every_command_prints_the_same(
    stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compact-store --journal-retention 1`` on copies of the SQLite and
    the JSONL store of the same run (a tool left running: its run's journal
    rows stay): the JSONL directory is compacted (its bytes before and after
    printed, its sidecars gone), and inspect, transcript and ``replay
    --check`` (the journal now partial: said so, then checked from the first
    process life kept) print the same for both; the store is then refused
    while another process holds it."""
    sqlite, jsonl = tmp_path / "s.sqlite", copy_store(stores[1], tmp_path / "store")
    for suffix in ("", "-wal"):
        if Path(f"{stores[0]}{suffix}").exists():
            shutil.copyfile(f"{stores[0]}{suffix}", f"{sqlite}{suffix}")
    copies = (sqlite, jsonl)
    before = sum(p.stat().st_size for p in jsonl.iterdir() if p.name != "lock")
    assert any(p.name.startswith(("task-", "doc-")) for p in jsonl.iterdir())
    out = run(capsys, "compact-store", "--db", str(jsonl), "--journal-retention", "1")
    after = (jsonl / "main.jsonl").stat().st_size
    assert f"compacted {jsonl}: {before:,} -> {after:,} bytes, {before - after:,} reclaimed" in out
    assert "journal: " in out and " rows dropped, commits " in out and "sidecar files deleted" in out
    assert sorted(p.name for p in jsonl.iterdir()) == ["lock", "main.jsonl"]
    run(capsys, "compact-store", "--db", str(sqlite), "--journal-retention", "1")
    ids = {}
    for store in copies:
        view = open_view(store)
        try:
            ids[store] = (view.store_id(), view.schema_version, [r.seq for r in view.journal()])
        finally:
            view.close()
    assert ids[sqlite][2] == ids[jsonl][2] and ids[jsonl][2][0] > 1  # the same rows kept, by the same rule

    def same(*argv: str, status: int = 0) -> str:
        outs = []
        for store in copies:
            text = run(capsys, *(str(store) if a == "STORE" else a for a in argv), status=status)
            sid, schema, _ = ids[store]
            text = text.replace(str(store), "STORE").replace(str(sid), "STORE-ID").replace(f"(schema {schema},", "(schema N,")
            outs.append(text)
        assert outs[0] == outs[1], argv
        return outs[0]

    check = same("replay", "--check", "--db", "STORE")
    assert "is partial: it starts at commit" in check and "reproduced byte for byte" in check
    assert "waiting on" in same("inspect", "--db", "STORE")
    assert "The port is 8080." in same("transcript", "--db", "STORE")
    assert json.loads(same("transcript", "--db", "STORE", "--json"))["entries"]
    holder = open_jsonl_storage(jsonl)
    try:
        assert "is in use by" in run(capsys, "compact-store", "--db", str(jsonl), status=1)
    finally:
        holder.close()
    out = run(capsys, "compact-store", "--db", str(jsonl / "main.jsonl"))  # its main.jsonl names it too
    assert f"compacted {jsonl}: " in out and "journal:" not in out


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def writable_journal(store: Path, tmp_path: Path) -> list[Any]:
    """What a writable open of a copy of ``store`` keeps (it repairs the copy)."""
    s = JsonlStorage(copy_store(store, tmp_path / "writable"), create=False)
    try:
        return s.journal()
    finally:
        s.close()


def view_journal(store: Path) -> list[Any]:
    view = open_view(store)
    try:
        return view.journal()
    finally:
        view.close()


def test_a_torn_tail_is_not_counted_and_not_repaired(stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crash mid-append: half a line at the end of main.jsonl and an
    unconfirmed record at a sidecar's end. The view counts exactly the
    commits a writable open keeps, says nothing is wrong, and the files stay
    as they are (the writable open then truncates them)."""
    store = copy_store(stores[1], tmp_path / "torn")
    clean = view_journal(store)
    sidecar = next(p for p in sorted(store.iterdir()) if p.name.startswith("task-"))
    with sidecar.open("ab") as f:
        f.write(b'{"seq":999,"ordinal":0,"write":{"type":"task","task":{}}}\n{"seq":1000,"ord')
    with (store / "main.jsonl").open("ab") as f:
        f.write(b'[999,4,"b3:')
    before = snapshot(store)
    assert view_journal(store) == clean
    assert writable_journal(store, tmp_path) == clean
    assert "reproduced byte for byte" in run(capsys, "replay", "--check", "--db", str(store))
    assert run(capsys, "inspect", "--db", str(store)).startswith(f"store {store} ")
    run(capsys, "transcript", "--db", str(store))
    assert snapshot(store) == before
    assert (tmp_path / "writable" / "main.jsonl").stat().st_size < (store / "main.jsonl").stat().st_size  # the writable open cut it


def test_a_batch_without_its_last_line_is_not_counted(stores: tuple[Path, Path], tmp_path: Path) -> None:
    """A batch whose last line never landed (its lines say ``more``) did not
    count: the view leaves its commits out, as a writable open does."""
    store = copy_store(stores[1], tmp_path / "batch")
    main_file = store / "main.jsonl"
    lines = main_file.read_bytes().splitlines(keepends=True)
    assert lines[-1].endswith(b"]\n")
    lines[-1] = lines[-1][:-2] + b",true]\n"  # the last commit now says a line follows it
    main_file.write_bytes(b"".join(lines))
    kept = view_journal(store)
    assert [r.seq for r in kept] == [r.seq for r in view_journal(stores[1])][:-1]
    assert writable_journal(store, tmp_path) == kept


def damaged_copies(src: Path, tmp_path: Path) -> dict[str, Path]:
    """Copies of ``src`` with real damage: a line in the middle of main.jsonl
    that is not JSON, and a live task's sidecar gone."""
    garbled = copy_store(src, tmp_path / "garbled")
    lines = (garbled / "main.jsonl").read_bytes().splitlines(keepends=True)
    lines[3] = b"{not json\n"
    (garbled / "main.jsonl").write_bytes(b"".join(lines))
    gone = copy_store(src, tmp_path / "gone")
    task = next(p for p in sorted(gone.iterdir()) if p.name.startswith("task-"))
    task.unlink()
    return {"not JSON": garbled, "missing confirmed sidecar record": gone}


def test_real_damage_is_the_writable_opens_one_line_error(stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged store: every command exits 1 with the message a writable
    open gives (naming the file and line), no traceback, nothing changed."""
    for words, store in damaged_copies(stores[1], tmp_path).items():
        with pytest.raises(DamagedRecord) as writable:
            JsonlStorage(store, create=False)
        with pytest.raises(DamagedRecord) as view:
            ReadOnlyJsonl(store)
        assert str(view.value) == str(writable.value) and words in str(view.value)
        before = snapshot(store)
        for argv in (["replay", "--check"], ["inspect"], ["inspect", "--json"], ["transcript"]):
            assert main([*argv, "--db", str(store)]) == 1
            captured = capsys.readouterr()
            assert captured.out == "" and captured.err == f"pidurable: error: {writable.value}\n"
        assert snapshot(store) == before


def test_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory that is not a JSONL store, or whose main.jsonl is not one:
    exit 2 with the writable open's message; nothing is created in it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "does not exist (no main.jsonl)" in run(capsys, "inspect", "--db", str(empty), status=2)
    assert "does not exist (no main.jsonl)" in run(capsys, "replay", "--check", str(empty), status=2)
    assert list(empty.iterdir()) == []
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "main.jsonl").write_text('{"hello": 1}\n')
    assert "is not a pidurable JSONL store" in run(capsys, "transcript", "--db", str(stranger), status=2)
    assert [p.name for p in stranger.iterdir()] == ["main.jsonl"]


def test_a_store_being_created_reads_as_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """main.jsonl holding only a piece of its header (a crash while creating
    the store): no commits, no conversations; not an error."""
    store = tmp_path / "new"
    store.mkdir()
    (store / "main.jsonl").write_bytes(b'{"pidurable":"jsonl",')
    assert "has no commits" in run(capsys, "replay", "--check", "--db", str(store))
    assert "no conversations" in run(capsys, "inspect", "--db", str(store))
    assert (store / "main.jsonl").read_bytes() == b'{"pidurable":"jsonl",'


def test_a_live_store_is_read_without_its_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """While a harness holds a JSONL store (its lock taken), inspect names
    the holding process and the commands read the commits so far."""
    store = tmp_path / "live"
    models = ScriptedModels([reply(text="one"), reply(text="two")])

    async def life() -> None:
        async with Harness.open(open_jsonl_storage(store), models=models, registry=Registry()) as h:
            conv = await h.root(agent=AGENT)
            assert (await (await conv.submit(Input("first"))).wait()).status == "done"
            report = json.loads(run(capsys, "inspect", "--json", "--db", str(store)))
            assert report["store"]["held_by_pid"] == os.getpid()
            assert "in use by process" in run(capsys, "inspect", "--db", str(store))
            assert "reproduced byte for byte" in run(capsys, "replay", "--check", "--db", str(store))
            assert "one" in run(capsys, "transcript", "--db", str(store))
            assert (await (await conv.submit(Input("second"))).wait()).status == "done"
            assert "two" in run(capsys, "transcript", "--db", str(store))

    trio.run(life)
    assert json.loads(run(capsys, "inspect", "--json", "--db", str(store)))["store"]["held_by_pid"] is None


def test_main_is_read_again_when_a_live_writer_reclaimed_a_sidecar_between_the_reads(
    stores: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main.jsonl read just before the commit that ended a task, its sidecar
    read after the writer deleted it: the view reads main.jsonl again and
    sees the whole store; if main.jsonl does not grow, the record is really
    missing (DamagedRecord)."""
    store = stores[1]
    data = (store / "main.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    stale = None
    for n in range(2, len(lines)):  # the first prefix that refers to a reclaimed record
        prefix = b"".join(lines[:n])
        scan = readonly.recovery.scan_main(store, store / "main.jsonl", prefix)
        try:
            readonly.recovery.read_sidecars(store, store / "main.jsonl", scan.commits)
        except DamagedRecord:
            stale = prefix
            break
    assert stale is not None, "the scenario reclaims a sidecar"
    reads = iter([stale, data])
    monkeypatch.setattr(ReadOnlyJsonl, "_read_main", lambda self: next(reads))
    assert view_journal(store) == view_journal_unpatched(store, monkeypatch)
    monkeypatch.setattr(ReadOnlyJsonl, "_read_main", lambda self: stale)
    with pytest.raises(DamagedRecord, match="missing confirmed sidecar record"):
        ReadOnlyJsonl(store)


def test_a_view_outlasts_a_writer_that_reclaims_between_its_reads_many_times(
    stores: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load a fast writer can reclaim a sidecar record inside the
    view's window several times in a row (CI saw it): while main.jsonl keeps
    growing the view reads both again (here 12 times: each read a stale
    prefix with a different torn tail, which is not counted), then reads the
    whole store."""
    store = stores[1]
    data = (store / "main.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    stale = next(
        prefix
        for prefix in (b"".join(lines[:n]) for n in range(2, len(lines)))
        if _refers_to_a_reclaimed_record(store, prefix)
    )
    reads = iter([stale + b"{" * k for k in range(12)] + [data])
    monkeypatch.setattr(ReadOnlyJsonl, "_read_main", lambda self: next(reads))
    assert view_journal(store) == view_journal_unpatched(store, monkeypatch)


def _refers_to_a_reclaimed_record(store: Path, prefix: bytes) -> bool:
    scan = readonly.recovery.scan_main(store, store / "main.jsonl", prefix)
    try:
        readonly.recovery.read_sidecars(store, store / "main.jsonl", scan.commits)
    except DamagedRecord:
        return True
    return False


def view_journal_unpatched(store: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.undo()
    return view_journal(store)


WRITER = """
import sys, trio
from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, open_jsonl_storage
from pidurable.shell.providers import ScriptedModels, reply

async def life():
    models = ScriptedModels([reply(text=f"answer {i}") for i in range(int(sys.argv[2]))])
    async with Harness.open(open_jsonl_storage(sys.argv[1]), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
        print("open", flush=True)
        for i in range(int(sys.argv[2])):
            assert (await (await conv.submit(Input(f"question {i}"))).wait()).status == "done"

trio.run(life)
"""


def test_views_of_a_store_a_live_process_is_writing(tmp_path: Path) -> None:
    """Another process commits (its generations' sidecars created and
    reclaimed) while views are opened over and over: every view reads a
    prefix of the final journal that replays exactly; no view fails."""
    store = tmp_path / "busy"
    rounds = 40
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(rounds)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "open\n"
        seen = []
        while writer.poll() is None:
            seen.append(view_journal(store))
        assert writer.wait() == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    final = view_journal(store)
    assert final == writable_journal(store, tmp_path)
    assert len(final) > rounds and seen
    for rows in seen:
        assert rows == final[: len(rows)]
        assert check_rows(rows)


def check_rows(rows: list[Any]) -> bool:
    from pidurable.shell.journal import check

    return not rows or check(rows, "a view").ok


@pytest.mark.parametrize("name", ["config_fix_crash", "subagent", "fork_mid_run"])
def test_golden_scenarios_written_to_jsonl_export_their_golden_journal(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A golden scenario run onto a JSONL store by today's code (one with a
    crash and a second life, one with a sub-agent, one with a fork): replay
    --check of the directory matches, and replay --export prints its golden
    file byte for byte - the view reads the journal every adapter keeps."""
    import golden_scenarios as goldens

    golden = next(g for g in goldens.GOLDEN if g.name == name)
    scenario, store = golden.scenario, tmp_path / name
    crash_at = None
    if golden.crash_before is not None:
        probe, _ = goldens._life(goldens.MemoryStorage(), scenario, goldens._world(scenario), None, goldens.EPOCH_MS)
        crash_at = golden.crash_before(probe.effects)
    world = goldens._world(scenario)
    first, end = goldens._life(open_jsonl_storage(store), scenario, world, crash_at, goldens.EPOCH_MS)
    assert first.crashed == (crash_at is not None)
    if crash_at is not None:
        goldens._life(open_jsonl_storage(store), scenario, world, None, end + goldens.RESTART_GAP_MS)
    assert "reproduced byte for byte" in run(capsys, "replay", "--check", "--db", str(store))
    assert run(capsys, "replay", "--export", "-", "--db", str(store)) == goldens.path(golden).read_text(encoding="utf-8")
