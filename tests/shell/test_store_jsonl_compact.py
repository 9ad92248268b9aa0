"""Compacting a JSONL store (issue 11, a lean store; jsonl_snapshot.py):
``JsonlStorage.compact(journal_retention=...)`` rewrites ``main.jsonl`` as
the store's table rows (snapshot rows) and the journal rows retention keeps,
and deletes every sidecar. Every record reads back the same (through the
public reads, and as a memory store given the same commits holds them), the
store takes commits and resumes live work after it, a store of schema 7
(the fixtures written by e254d59) opens and compacts, and damage to the new
lines is named. The crash cases: tests/crash/test_jsonl_file_operations.py;
the command: tests/shell/test_cli_jsonl.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.model import ConversationId, TaskId, TaskStatus
from pidurable.core.state import DocScope
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Registry,
    ToolResult,
    define_doc,
    define_tool,
    open_jsonl_storage,
)
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import JsonlStorage, MemoryStorage, jsonl, jsonl_snapshot
from pidurable.shell.storage.base import DamagedRecord, JournalRow, StorageError
from pidurable.shell.storage.readonly import ReadOnlyJsonl, open_view

FIXTURES = Path(__file__).parent / "fixtures"
LIVES7 = FIXTURES / "jsonl_schema7_lives_store"
RUNNING7 = FIXTURES / "jsonl_schema7_running_task_store"
NOTES = define_doc("notes", {"type": "object"}, {"lines": []})
LATEST = define_doc("todo", {"type": "object"}, {"items": []}, history="latest", fork="current")


def _files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n not in ("lock", "lock.owner"))


def state(store: Any) -> dict[str, Any]:
    """Everything the public reads give of a store: the live state, every
    record, every document (now and as of each commit), the journal."""
    convs = store.conversations()
    seqs = [r.seq for r in store.journal()]
    docs = {}
    for c in convs:
        for kind in ("notes", "todo", "pi.live", "pi.agent", "pi.usage", "pi.inbox"):
            docs[(c.id, kind)] = store.document_state(DocScope.CONVERSATION, c.id, kind)
            if kind == "notes":  # rewindable: every revision kept
                docs[(c.id, kind, "at")] = [store.document_at(c.id, kind, q) for q in range(1, max(seqs, default=0) + 1)]
    entries = {c.id: store.entries(c.id) for c in convs}
    return {
        "loaded": attrs.evolve(store._loaded(), store_id=""),
        "conversations": convs,
        "tasks": store.tasks(),
        "submissions": store.submissions(),
        "entries": entries,
        "entry_seqs": {e.id: store.entry_seq(e.id) for es in entries.values() for e in es},
        "documents": docs,
    }


def _life(path: Path, text: str, request_id: str | None = None) -> None:
    async def main() -> None:
        registry = Registry()
        registry.install(NOTES)
        async with Harness.open(open_jsonl_storage(path), models=ScriptedModels(lambda r: reply(text="here")), registry=registry) as h:
            conv = await h.root()
            assert (await (await conv.submit(Input(text, request_id=request_id))).wait()).status == "done"

    trio.run(main)


def _opened_from(journal: list[JournalRow]) -> list[JournalRow]:
    """The journal from its first process life's start (a pruned one starts inside a life)."""
    starts = [i for i, r in enumerate(journal) if json.loads(r.events)[0]["type"] == "opened"]
    return journal[starts[0] :]


def test_a_schema7_store_opens_upgrades_compacts_and_reads_back_the_same(tmp_path: Path) -> None:
    """The schema-7 fixture (three lives) opens with its lines as they were
    and its header says 8; compacted with every journal row kept, it holds
    main.jsonl only - snapshot rows, then commit lines without writes - and
    every read (the writable store's, a new open's, the read-only view's)
    gives what it gave; its journal replays (3 lives); a new life commits
    after the snapshot and all of it replays (4 lives)."""
    path = tmp_path / "store"
    shutil.copytree(LIVES7, path)
    old = (path / jsonl.MAIN).read_bytes()
    assert json.loads(old.split(b"\n", 1)[0])["schema"] == 7
    store = open_jsonl_storage(path)
    try:
        new = (path / jsonl.MAIN).read_bytes()
        assert json.loads(new.split(b"\n", 1)[0])["schema"] == 8 and new.split(b"\n", 1)[1] == old.split(b"\n", 1)[1]
        before, journal = state(store), store.journal()
        assert check(journal).lives == 3 and any(n.startswith("doc-") for n in _files(path))
        sidecars = len(_files(path)) - 1
        done = store.compact()
        assert done.dropped == 0 and done.kept == (1, journal[-1].seq) and done.sidecars == sidecars
        assert _files(path) == ["main.jsonl"]
        assert state(store) == before and store.journal() == journal
    finally:
        store.close()
    lines = [json.loads(line) for line in (path / jsonl.MAIN).read_text(encoding="utf-8").splitlines()]
    rows = [x for x in lines[1:] if isinstance(x[0], str)]
    commits = lines[1 + len(rows) :]
    assert len(rows) == done.rows and {r[1] for r in rows} == set(jsonl_snapshot.COLUMNS)
    assert [c[0] for c in commits] == [r.seq for r in journal] and all(c[4] == [] for c in commits)
    store = open_jsonl_storage(path)
    try:
        assert state(store) == before and store.journal() == journal
    finally:
        store.close()
    view = open_view(path)
    try:
        assert view.journal() == journal and view.schema_version == 8
        assert view.conversations() == before["conversations"] and view.tasks() == before["tasks"]
        assert {c: view.entries(c) for c in before["entries"]} == before["entries"]
    finally:
        view.close()
    _life(path, "Are you there?", "after-compaction")
    store = open_jsonl_storage(path)
    try:
        result = check(store.journal())
        assert result.ok and result.lives == 4
        assert store.tasks()[: len(before["tasks"])] == before["tasks"]
        assert store.entries(ConversationId(1))[: len(before["entries"][1])] == before["entries"][1]
    finally:
        store.close()


def test_a_compacted_store_resumes_its_running_task(tmp_path: Path) -> None:
    """The schema-7 fixture stopped in its first life (the ``edit`` tool task
    13 running, its generation 9 waiting, their versions in task sidecars):
    compacted with ``journal_retention=1``, the journal keeps the rows from
    the commit of the newest entry older than the oldest live work (the
    SQLite rule), the live tasks' versions are snapshot rows and their
    sidecars are gone; a new life settles them (the edit interrupted, q1
    answered once), and the journal replays from that life's start."""
    path = tmp_path / "store"
    shutil.copytree(RUNNING7, path)
    store = open_jsonl_storage(path)
    try:
        before, journal = state(store), store.journal()
        live = {t.id: t for t in store.tasks(live_only=True)}
        assert sorted(live) == [9, 13] and {"task-9.jsonl", "task-13.jsonl"} <= set(_files(path))
        oldest = min([*live, *(s.id for s in store.submissions() if s.status.value in ("queued", "placed"))])
        newest_older = max(e.id for es in before["entries"].values() for e in es if e.id < oldest)
        done = store.compact(journal_retention=1)
        start = store.entry_seq(newest_older)
        assert start is not None and 1 < start < journal[-1].seq
        assert done.kept == (start, journal[-1].seq) and done.dropped == start - 1
        assert store.journal() == [r for r in journal if r.seq >= start]
        assert _files(path) == ["main.jsonl"] and state(store) == before
    finally:
        store.close()
    store = open_jsonl_storage(path)
    try:
        assert state(store) == before and {t.id: t for t in store.tasks(live_only=True)} == live
    finally:
        store.close()

    _life(path, "What is the port?", "q1")  # the same submission: answered once the edit is settled
    store = open_jsonl_storage(path)
    try:
        edit = store.task(TaskId(13))
        assert edit is not None and edit.status is TaskStatus.TERMINAL and edit.outcome is not None
        assert edit.outcome.error == {"message": "Tool edit was interrupted and may have partially run"}
        assert store.tasks(live_only=True) == []
        answers = [s for s in store.submissions() if s.request_id == "q1"]
        assert len(answers) == 1 and answers[0].status.value == "done"
        got = store.journal()
        assert got[0].seq == start and check(_opened_from(got)).ok
        assert not any(n.startswith("task-") for n in _files(path))
        again = store.compact(journal_retention=3)  # nothing live now: the newest 3 rows
        assert again.kept == (got[-1].seq - 2, got[-1].seq)
    finally:
        store.close()


def _recorded_run(path: Path, batches: list[Any], compact_after: int | None) -> None:
    """Two lives with tool calls and two host documents (one rewindable, one
    ``latest``); the store compacted after the first life's input
    ``compact_after`` (None: never), then more inputs on the compacted store."""
    async def tool(call: Any, args: dict[str, Any]) -> ToolResult:
        await call.update_document(NOTES, lambda d: {"lines": [*d["lines"], f"tool {args.get('i')}"]})
        await call.update_document(LATEST, lambda d: {"items": [*d["items"], args.get("i")]})
        return ToolResult(text=f"ok {args.get('i')}")

    def answer(request: Any) -> Any:
        if request.messages[-1].role == "user":
            return reply(tool_calls=[tool_call("t", i=i) for i in range(2)])
        return reply(text="done")

    registry = Registry()
    registry.install(NOTES)
    registry.install(LATEST)
    registry.install(define_tool("t", "a tool", {"type": "object"}, tool, replay="safe"))
    storage = open_jsonl_storage(path)
    inner = storage.commit_many

    def recorded(batch: Any) -> None:
        inner(batch)
        batches.append(list(batch))

    storage.commit_many = recorded  # type: ignore[method-assign]

    async def main() -> None:
        async with Harness.open(storage, models=ScriptedModels(answer), registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            for n in range(4):
                assert (await (await conv.submit(Input(f"go {n}"))).wait()).status == "done"
                if n == compact_after:
                    storage.compact()

    trio.run(main)


def test_records_read_back_as_a_memory_store_given_the_same_commits_holds_them(tmp_path: Path) -> None:
    """A run compacted half way (then more commits: sidecars again, a
    ``latest`` document based again over its snapshot revisions), and
    compacted at the end: every public read equals a memory store's given
    the same commits, before and after each reopen."""
    path = tmp_path / "store"
    batches: list[Any] = []
    _recorded_run(path, batches, compact_after=1)
    memory = MemoryStorage()
    for batch in batches:
        memory.commit_many(batch)
    want = state(memory)
    assert want["documents"][(1, "todo")].value == {"items": [0, 1] * 4}
    store = open_jsonl_storage(path)
    try:
        assert state(store) == want and store.journal() == memory.journal()
        assert any(n.startswith("doc-") for n in _files(path))  # written after the compaction
        store.compact()
        assert state(store) == want and store.journal() == memory.journal()
    finally:
        store.close()
    store = open_jsonl_storage(path)
    try:
        assert state(store) == want and store.journal() == memory.journal() and check(store.journal()).ok
    finally:
        store.close()


@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "10", None])
def test_journal_retention_at_open_is_all_or_refused(tmp_path: Path, bad: Any) -> None:
    """A JSONL store drops journal rows only when compacted (a rewrite of
    the whole file): ``journal_retention=N`` at open is refused, saying so;
    a value that is not a retention at all gets SQLite's message; nothing
    is created either way."""
    path = tmp_path / "s"
    with pytest.raises(ValueError, match="journal_retention must be 'all' or a whole number of commits >= 1"):
        open_jsonl_storage(path, journal_retention=bad)
    with pytest.raises(ValueError, match="drops old journal rows only when compacted"):
        open_jsonl_storage(path, journal_retention=5)
    assert not path.exists()
    open_jsonl_storage(path, journal_retention="all").close()
    with pytest.raises(ValueError, match="journal_retention must be"):
        JsonlStorage(path).compact(journal_retention=bad)


def test_a_text_that_does_not_round_trip_is_stored_quoted() -> None:
    """A snapshot row's text column is spliced in as JSON when its parse
    gives it back byte for byte (every text the codec wrote), else stored
    as a JSON string: either way it reads back the same."""
    tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in jsonl_snapshot.COLUMNS}
    tables["entries"][(5,)] = {"id": 5, "conversation_id": 1, "seq": 3, "record": '{"kind":"user","text":"é"}'}
    tables["entries"][(6,)] = {"id": 6, "conversation_id": 1, "seq": 4, "record": '{"kind": "user", "text": "x"}'}
    lines = jsonl_snapshot.row_lines(tables)
    assert [json.loads(line)[0] for line in lines] == ["R", "Q"]
    back = [jsonl_snapshot.read_row("here", json.loads(line)) for line in lines]
    assert back == [("entries", k, r) for k, r in tables["entries"].items()]
    tables["entries"][(7,)] = {"id": 7, "record": "{}"}
    with pytest.raises(ValueError, match=r"a row of entries \(7,\) has columns"):
        jsonl_snapshot.row_lines(tables)


def test_damaged_snapshot_lines_are_named(tmp_path: Path) -> None:
    """A snapshot row after a commit line, in a store of schema 7, of an
    unknown table, with other columns, or a header of a newer schema: open
    refuses, naming the file and line (and leaves the store as it was)."""
    path = tmp_path / "store"
    shutil.copytree(LIVES7, path)
    store = open_jsonl_storage(path)
    store.compact()
    store.close()
    main = path / jsonl.MAIN
    good = main.read_bytes()
    header, first, rest = good.split(b"\n", 2)
    cases = {
        header.replace(b'"schema":8', b'"schema":7') + b"\n" + first + b"\n" + rest: r"line 2: a snapshot row in a store of schema 7",
        header + b"\n" + first.replace(b'"conversations"', b'"nope"') + b"\n" + rest: r"line 2: not a snapshot row",
        header + b"\n" + first.replace(b'[1,null,null,null]', b'[1,null,null]') + b"\n" + rest: r"line 2: damaged conversations snapshot row \(its columns\)",
        header + b"\n" + first.replace(b'[1,null', b'["1",null', 1) + b"\n" + rest: r"line 2: damaged conversations snapshot row \(its key",
        header + b"\n" + first[:-1] + b',1]' + b"\n" + rest: r"line 2: a conversations snapshot row of 5 fields",
    }
    for data, message in cases.items():
        main.write_bytes(data)
        with pytest.raises(DamagedRecord, match=message):
            open_jsonl_storage(path)
        assert main.read_bytes() == data
    last_commit = good.rstrip(b"\n").rsplit(b"\n", 1)
    main.write_bytes(last_commit[0] + b"\n" + first + b"\n" + last_commit[1] + b"\n")
    with pytest.raises(DamagedRecord, match="a snapshot row after a commit line"):
        open_jsonl_storage(path)
    main.write_bytes(good.replace(b'"schema":8', b'"schema":9', 1))
    with pytest.raises(StorageError, match="reads versions up to 8. Upgrade pidurable"):
        open_jsonl_storage(path)
    main.write_bytes(good)
    open_jsonl_storage(path).close()


def test_a_sidecar_compaction_cannot_delete_poisons_the_store_until_reopened(tmp_path: Path, monkeypatch: Any) -> None:
    """The rename done, a sidecar that cannot be deleted would have later
    records appended after records no line refers to: the store refuses
    commits until reopened, and the next open deletes the file; a fenced
    or closed store is not compacted."""
    path = tmp_path / "store"
    shutil.copytree(RUNNING7, path)
    store = open_jsonl_storage(path)
    before = state(store)
    real = os.unlink

    def unlink(p: Any, *a: Any, **kw: Any) -> None:
        if Path(p).name == "task-13.jsonl":
            raise PermissionError(13, "Permission denied")
        real(p, *a, **kw)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(StorageError, match="compaction could not delete task-13.jsonl; the next open deletes them"):
        store.compact()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="reopen the store"):
        store.commit(99, [], [])
    store.close()
    assert _files(path) == ["main.jsonl", "task-13.jsonl"]
    store = open_jsonl_storage(path)
    try:
        assert _files(path) == ["main.jsonl"] and state(store) == before
        store.fence()
        with pytest.raises(StorageError, match="fenced"):
            store.compact()
    finally:
        store.close()
    closed = open_jsonl_storage(path)
    closed.close()
    with pytest.raises(StorageError, match="is closed"):
        closed.compact()


def test_the_new_file_is_flushed_before_its_rename_and_the_directory_after_whatever_fsync_says(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A rename that outlived its data (a power loss) would leave an empty
    ``main.jsonl``: with ``fsync=False`` too, compaction flushes
    ``main.jsonl.reclaim`` before renaming it over ``main.jsonl``, then the
    directory, then deletes the sidecars."""
    path = tmp_path / "store"
    shutil.copytree(RUNNING7, path)
    steps: list[str] = []
    real_fsync, real_replace, real_unlink = os.fsync, os.replace, os.unlink

    def fsync(fd: int) -> None:
        steps.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        steps.append(f"rename {Path(src).name} {Path(dst).name}")
        real_replace(src, dst)

    def unlink(p: Any) -> None:
        steps.append(f"delete {Path(p).name}")
        real_unlink(p)

    store = open_jsonl_storage(path, fsync=False)
    try:
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "unlink", unlink)
        store.compact()
    finally:
        monkeypatch.undo()
        store.close()
    assert steps[:3] == ["fsync main.jsonl.reclaim", "rename main.jsonl.reclaim main.jsonl", "fsync store"]
    assert sorted(steps[3:]) == sorted(f"delete {n}" for n in _files(RUNNING7) if n != "main.jsonl")


def test_a_view_that_read_main_before_a_compaction_reads_it_again(tmp_path: Path, monkeypatch: Any) -> None:
    """The read-only view read ``main.jsonl`` just before a live writer
    compacted the store, and its sidecars after they were deleted: the
    records that file refers to are missing, ``main.jsonl`` changed, so it
    reads both again and sees the compacted store, whole."""
    path = tmp_path / "store"
    shutil.copytree(RUNNING7, path)
    store = open_jsonl_storage(path)
    stale = (path / jsonl.MAIN).read_bytes()
    store.compact()
    journal, tasks = store.journal(), store.tasks()
    store.close()
    fresh = (path / jsonl.MAIN).read_bytes()
    reads = iter([stale, fresh])
    monkeypatch.setattr(ReadOnlyJsonl, "_read_main", lambda self: next(reads))
    view = ReadOnlyJsonl(path)
    assert view.journal() == journal and view.tasks() == tasks
    assert next(reads, None) is None  # read twice
