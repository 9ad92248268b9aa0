"""The JSONL store's sidecar files (jsonl.py, jsonl_sidecars.py; pi-durable-spec
§2.8 and its jsonl-storage checklist): which writes go to ``task-<id>.jsonl``
and ``doc-<id>.jsonl``, the commit protocol's order, reclamation, and open's
repairs and refusals after a crash or a fault at every step."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.effects import DocumentRevision, PutConversation, PutDocument, PutEntry, PutTask, RevisionAction
from pidurable.core.model import Conversation, ConversationId, Entry, EntryId, EntryKind, Task, TaskId, TaskStatus
from pidurable.core.state import DocHistory, DocScope, ForkPolicy
from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, ToolResult, define_tool, open_jsonl_storage
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import DamagedRecord, JsonlStorage, MemoryStorage, StorageError
from pidurable.shell.storage import jsonl

C1 = ConversationId(1)
FIXTURE = Path(__file__).parent / "fixtures" / "jsonl_schema5_lives_store"
#: Schema 6 (06c17dc, tests/shell/fixtures/make_lives_store.py): object lines, markers with ordinals.
FIXTURE_6 = Path(__file__).parent / "fixtures" / "jsonl_schema6_lives_store"
FIXTURE_6_RUNNING = Path(__file__).parent / "fixtures" / "jsonl_schema6_running_task_store"


def _entry(i: int, text: str = "hi") -> PutEntry:
    return PutEntry(entry=Entry(id=EntryId(i), conversation_id=C1, kind=EntryKind.USER, text=text))


def _task(status: TaskStatus = TaskStatus.RUNNING, phase: str = "a", tid: int = 5) -> PutTask:
    return PutTask(task=Task(id=TaskId(tid), conversation_id=C1, kind="custom", status=status, checkpoint={"phase": phase}))


def _doc(action: RevisionAction, history: DocHistory = DocHistory.LATEST, did: int = 16, kind: str = "todo", **kw: Any) -> PutDocument:
    revision = DocumentRevision(
        scope=DocScope.CONVERSATION, owner=C1, kind=kind, version=1, history=history,
        fork=ForkPolicy.INITIAL if history is DocHistory.LATEST else ForkPolicy.AS_OF, action=action, **kw,
    )
    return PutDocument(document_id=did, revision=revision)


def _base(items: list[str], history: DocHistory = DocHistory.LATEST) -> PutDocument:
    return _doc(RevisionAction.BASE, history, value={"items": items})


def _delta(item: str, at: int, history: DocHistory = DocHistory.LATEST) -> PutDocument:
    return _doc(RevisionAction.DELTA, history, ops=(["p", ["items"], at, 0, [item]],))


def _store(path: Path, **kw: Any) -> JsonlStorage:
    store = open_jsonl_storage(path, **kw)
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    return store


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _sidecars(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith(("task-", "doc-")))


def _todo(store: JsonlStorage) -> Any:
    doc = store.document_state(DocScope.CONVERSATION, C1, "todo")
    return None if doc is None else doc.value


def _reopen(store: JsonlStorage, **kw: Any) -> JsonlStorage:
    store.close()
    return open_jsonl_storage(store.path, **kw)


# --- layout --------------------------------------------------------------------


def test_live_task_versions_and_revisions_go_to_sidecars_and_the_journal_is_unchanged(tmp_path: Path) -> None:
    """A running task's record and a document revision are markers in
    main.jsonl (``["T",5]``: the write's place is its ordinal) and records in
    task-<id>.jsonl / doc-<id>.jsonl; a terminal task (its row: without its
    checkpoint) and entries stay inline; the journal (seq, format, events,
    digest) is the memory store's, byte for byte, before and after a reopen."""
    commits = [
        (1, [PutConversation(conversation=Conversation(id=C1))], []),
        (2, [_entry(10), _task(), _base(["milk"])], []),
        (3, [_task(phase="b"), _delta("eggs", 1), _task(tid=6)], []),
        (4, [_task(TaskStatus.TERMINAL, "c"), _entry(11)], []),
    ]
    memory = MemoryStorage()
    store = open_jsonl_storage(tmp_path / "s")
    for seq, writes, events in commits:
        memory.commit(seq, writes, events)
        store.commit(seq, writes, events)
    assert store.journal() == memory.journal()
    main = _lines(tmp_path / "s" / jsonl.MAIN)
    assert main[0]["schema"] == jsonl.LAYOUT == 8
    assert main[2][4] == [["e", 10, 1, {"kind": "user", "text": "hi"}], ["T", 5], ["D", 16]]
    assert main[3][4] == [["T", 5], ["D", 16], ["T", 6]]
    assert main[4][4] == [["t", 5, 1, "custom", None, {}], ["e", 11, 1, {"kind": "user", "text": "hi"}]]
    # task 5 is terminal: its sidecar is gone; task 6 is live; the document's file holds base and delta
    assert _sidecars(tmp_path / "s") == ["doc-16.jsonl", "task-6.jsonl"]
    doc = _lines(tmp_path / "s" / "doc-16.jsonl")
    assert [(r["seq"], r["ordinal"], r["write"]["revision"]["action"]) for r in doc] == [(2, 2, "base"), (3, 1, "delta")]
    store = _reopen(store)
    try:
        assert store.journal() == memory.journal()
        assert attrs.evolve(store.load(), store_id="") == attrs.evolve(memory.load(), store_id="")
        assert store.task(TaskId(5)) == memory.task(TaskId(5))
    finally:
        store.close()


def test_several_versions_of_a_task_in_one_batch_are_ordered(tmp_path: Path) -> None:
    """commit_many of several commits writing one task: its sidecar holds
    them in (seq, ordinal) order, and open rebuilds the last."""
    store = _store(tmp_path / "s")
    store.commit_many([(2, [_task(phase="a"), _task(tid=6)], []), (3, [_entry(12), _task(phase="b")], [])])
    assert [(r["seq"], r["ordinal"]) for r in _lines(tmp_path / "s" / "task-5.jsonl")] == [(2, 0), (3, 1)]
    store = _reopen(store)
    try:
        assert [t.checkpoint for t in store.load().tasks] == [{"phase": "b"}, {"phase": "a"}]
    finally:
        store.close()


def _run(path: Path) -> None:
    """A harness run: a model step calling three tools, then an answer."""

    async def tool(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text="ok")

    def answer(request: Any) -> Any:
        if request.messages[-1].role == "user":
            return reply(tool_calls=[tool_call("t", i=i) for i in range(3)])
        return reply(text="done")

    registry = Registry()
    registry.install(define_tool("t", "a tool", {"type": "object"}, tool, replay="safe"))

    async def main() -> None:
        async with Harness.open(open_jsonl_storage(path), models=ScriptedModels(answer), registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            for n in range(3):
                assert (await (await conv.submit(Input(f"go {n}"))).wait()).status == "done"

    trio.run(main)


def test_after_a_run_terminal_tasks_leave_no_sidecar_and_current_only_documents_one_base(tmp_path: Path) -> None:
    """After a run with tool calls, every task is terminal and none has a
    sidecar; an idle conversation's pi.live file holds one base; the store
    reopens to the same state and its journal replays."""
    path = tmp_path / "s"
    _run(path)
    store = open_jsonl_storage(path)
    try:
        assert store.tasks() and not store.tasks(live_only=True)
        names = _sidecars(path)
        assert not [n for n in names if n.startswith("task-")]
        live = _lines(path / "doc--10.jsonl")  # pi.live of conversation 1 (core/builtins.py)
        assert len(live) == 1 and live[0]["write"]["revision"]["action"] == "base"
        for name in names:  # a current-only document's file starts at its newest base
            first = _lines(path / name)[0]["write"]["revision"]
            assert first["action"] == "base" or first["history"] == "rewindable"
        assert check(store.journal()).ok
    finally:
        store.close()


# --- the commit protocol ------------------------------------------------------


def _record_ops(monkeypatch: pytest.MonkeyPatch, store: JsonlStorage) -> list[str]:
    """Log os.write/fsync/replace/unlink of the store's files by name."""
    ops: list[str] = []
    names: dict[int, str] = {store._descriptor(): jsonl.MAIN, **{fd: n for n, fd in store._side_fds.items()}}
    real_open, real_write, real_fsync, real_replace, real_unlink = os.open, os.write, os.fsync, os.replace, os.unlink

    def opened(file: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = real_open(file, flags, mode, **kw)
        names[fd] = Path(file).name
        return fd

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "write", lambda fd, data: (ops.append(f"write {names.get(fd)}"), real_write(fd, data))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (ops.append(f"fsync {names.get(fd)}"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (ops.append(f"rename {Path(a).name}"), real_replace(a, b))[1])
    monkeypatch.setattr(os, "unlink", lambda a: (ops.append(f"unlink {Path(a).name}"), real_unlink(a))[1])
    return ops


@pytest.mark.parametrize("fsync", [False, True])
def test_the_exact_order_of_operations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool) -> None:
    """Sidecars (flushed with fsync, the directory too for a new file), then
    main (flushed with fsync), then reclamation: a terminal task's sidecar
    removed, a current-only document's file replaced by its base via
    <file>.reclaim (flushed with fsync) and a rename."""
    store = _store(tmp_path / "s", fsync=fsync)
    store.commit(2, [_task(), _base(["a"])], [])
    ops = _record_ops(monkeypatch, store)
    store.commit(3, [_task(TaskStatus.TERMINAL), _base(["b"])], [])
    store.commit(4, [_task(tid=7)], [])
    sync = fsync
    expected = [
        "write doc-16.jsonl",
        *(["fsync doc-16.jsonl"] if sync else []),
        "write main.jsonl",
        *(["fsync main.jsonl"] if sync else []),
        "unlink task-5.jsonl",
        "write doc-16.jsonl.reclaim",
        *(["fsync doc-16.jsonl.reclaim"] if sync else []),
        "rename doc-16.jsonl.reclaim",
        "write task-7.jsonl",
        *(["fsync task-7.jsonl", "fsync s"] if sync else []),  # a new file: its directory too
        "write main.jsonl",
        *(["fsync main.jsonl"] if sync else []),
    ]
    assert ops == expected
    monkeypatch.undo()
    assert [r["seq"] for r in _lines(tmp_path / "s" / "doc-16.jsonl")] == [3]
    store.close()


def test_a_batch_of_more_sidecars_than_open_descriptors_flushes_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fsync, every sidecar a commit touches is flushed, even when
    writing the later ones closed the earlier ones' descriptors
    (OPEN_SIDECARS), before main is written; all are read back."""
    monkeypatch.setattr(jsonl, "OPEN_SIDECARS", 2)
    store = _store(tmp_path / "s", fsync=True)
    ops = _record_ops(monkeypatch, store)
    store.commit(2, [_task(tid=t) for t in (5, 6, 7, 8)], [])
    monkeypatch.undo()
    files = [f"task-{t}.jsonl" for t in (5, 6, 7, 8)]
    assert ops == [op for f in files for op in (f"write {f}", f"fsync {f}")] + [
        "fsync s", "write main.jsonl", "fsync main.jsonl",
    ]
    store = _reopen(store)
    try:
        assert [t.id for t in store.load().tasks] == [5, 6, 7, 8]
    finally:
        store.close()


def test_later_deltas_append_to_the_replaced_file(tmp_path: Path) -> None:
    """After a base replaced a document's file, the next deltas go to the
    new file (not to a descriptor of the old one), and open reads them."""
    store = _store(tmp_path / "s")
    store.commit(2, [_base([])], [])
    store.commit(3, [_delta("a", 0)], [])
    store.commit(4, [_base(["x"])], [])  # replaces the file
    store.commit(5, [_delta("y", 1)], [])
    store.commit(6, [_delta("z", 2)], [])
    assert [r["seq"] for r in _lines(tmp_path / "s" / "doc-16.jsonl")] == [4, 5, 6]
    store = _reopen(store)
    try:
        assert _todo(store) == {"items": ["x", "y", "z"]}
    finally:
        store.close()


def test_rewindable_documents_are_never_reclaimed(tmp_path: Path) -> None:
    """A rewindable document keeps every revision (document_at reads any
    past value after a reopen) even past a new base."""
    store = _store(tmp_path / "s")
    rw = DocHistory.REWINDABLE
    store.commit(2, [_base(["a"], rw)], [])
    store.commit(3, [_delta("b", 1, rw)], [])
    store.commit(4, [_base(["c"], rw)], [])
    assert [r["seq"] for r in _lines(tmp_path / "s" / "doc-16.jsonl")] == [2, 3, 4]
    store = _reopen(store)
    try:
        then = store.document_at(C1, "todo", 3)
        assert then is not None and then.value == {"items": ["a", "b"]}
        assert _todo(store) == {"items": ["c"]}
    finally:
        store.close()


def test_a_retired_current_only_document_loses_its_file_and_keeps_its_record(tmp_path: Path) -> None:
    """Retiring a current-only document deletes its sidecar; after a reopen
    its record (created at its first revision, retired at the retirement)
    is what it was, though none of its revisions is left."""
    store = _store(tmp_path / "s")
    store.commit(2, [_base(["a"])], [])
    store.commit(3, [_base(["b"])], [])  # the first base is reclaimed
    store.commit(4, [_doc(RevisionAction.RETIRE)], [])
    assert _sidecars(tmp_path / "s") == []
    record = store._tables["document_records"][(16,)]
    assert record["created_seq"] == 2 and record["retired_seq"] == 4
    store = _reopen(store)
    try:
        assert store._tables["document_records"][(16,)] == record
        assert _todo(store) is None
        assert store.load().next_id == 17
    finally:
        store.close()


def test_a_refused_commit_does_no_io_consumes_no_seq_and_leaves_the_store_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails to encode (NaN) or to validate (an entry written
    twice) writes no file, and the next commit takes its seq."""
    store = _store(tmp_path / "s")
    store.commit(2, [_entry(10)], [])
    before = {n: (tmp_path / "s" / n).read_bytes() for n in os.listdir(tmp_path / "s")}
    ops = _record_ops(monkeypatch, store)
    nan = PutTask(task=Task(id=TaskId(5), conversation_id=C1, kind="custom", checkpoint={"x": float("nan")}))
    with pytest.raises(ValueError):
        store.commit(3, [_task(tid=6), _base(["a"]), nan], [])
    with pytest.raises(StorageError, match="written once"):
        store.commit(3, [_task(tid=6), _entry(10)], [])
    assert ops == []
    monkeypatch.undo()
    assert {n: (tmp_path / "s" / n).read_bytes() for n in os.listdir(tmp_path / "s")} == before
    store.commit(3, [_task(tid=6)], [])
    store = _reopen(store)
    assert [r.seq for r in store.journal()] == [1, 2, 3]
    store.close()


# --- faults while committing ----------------------------------------------------


def _failing_write(monkeypatch: pytest.MonkeyPatch, nth: int, short: bool) -> None:
    """The nth os.write fails: before writing anything, or after 7 bytes."""
    real, calls = os.write, [0]

    def write(fd: int, data: Any) -> int:
        calls[0] += 1
        if calls[0] == nth:
            if short:
                real(fd, bytes(data)[:7])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize(
    ("nth", "short", "counts"),
    [(1, False, False), (1, True, False), (2, False, False), (2, True, False), (3, False, False), (3, True, False)],
)
def test_an_append_failure_poisons_and_open_keeps_the_commit_only_if_main_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int, short: bool, counts: bool
) -> None:
    """A failure at any of a commit's appends (two sidecars, then main),
    before it writes or after a short write, poisons the store (every later
    call refuses until a reopen); the reopened store has cut the partial and
    unconfirmed records at their exact offsets and does not hold the commit,
    whose seq the next commit takes."""
    path = tmp_path / "s"
    store = _store(path)
    store.commit(2, [_task(), _base(["a"])], [])
    sizes = {n: (path / n).stat().st_size for n in (jsonl.MAIN, "task-5.jsonl", "doc-16.jsonl")}
    _failing_write(monkeypatch, nth, short)
    with pytest.raises(StorageError, match="whether it counts is known at the next open"):
        store.commit(3, [_task(phase="b"), _delta("ü", 1), _entry(20)], [])
    monkeypatch.undo()
    with pytest.raises(StorageError, match="reopen the store"):
        store.commit(3, [_entry(21)], [])
    store = _reopen(store)
    try:
        assert {n: (path / n).stat().st_size for n in sizes} == sizes
        assert store.entry(EntryId(20)) is None and store.task(TaskId(5)).checkpoint == {"phase": "a"}  # type: ignore[union-attr]
        store.commit(3, [_task(phase="c"), _delta("d", 1)], [])
    finally:
        store.close()
    store = open_jsonl_storage(path)
    assert _todo(store) == {"items": ["a", "d"]} and store.task(TaskId(5)).checkpoint == {"phase": "c"}  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize("which", ["task-5.jsonl", "main.jsonl"])
def test_a_flush_failure_poisons_and_a_failed_sidecar_flush_writes_no_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """With fsync, a failed sidecar flush stops the commit before main is
    written; a failed main flush leaves the line, which the next open keeps.
    Either poisons the store."""
    path = tmp_path / "s"
    store = _store(path, fsync=True)
    store.commit(2, [_task()], [])
    main_size = (path / jsonl.MAIN).stat().st_size
    real, target = os.fsync, os.stat(path / which).st_ino

    def fsync(fd: int) -> None:
        if os.fstat(fd).st_ino == target:
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(StorageError, match="fsync"):
        store.commit(3, [_task(phase="b")], [])
    monkeypatch.undo()
    with pytest.raises(StorageError, match="reopen the store"):
        store.commit(4, [_entry(21)], [])
    if which == "task-5.jsonl":
        assert (path / jsonl.MAIN).stat().st_size == main_size
    store = _reopen(store)
    try:
        assert [r.seq for r in store.journal()][-1] == (2 if which == "task-5.jsonl" else 3)
    finally:
        store.close()


def test_reclamation_failures_never_fail_a_commit_and_open_finishes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sidecar that cannot be deleted, a replacement that cannot be renamed:
    the commit still counts (logged); the next open deletes the terminal
    task's sidecar and cuts the document's file to its newest base, and the
    store reads the same."""
    path = tmp_path / "s"
    store = _store(path)
    store.commit(2, [_task(), _base(["a"])], [])
    store.commit(3, [_delta("b", 1)], [])

    def refuse(*args: Any) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "unlink", refuse)
    monkeypatch.setattr(os, "replace", refuse)
    store.commit(4, [_task(TaskStatus.TERMINAL), _base(["c"])], [])
    store.commit(5, [_delta("d", 1)], [])
    monkeypatch.undo()
    assert _sidecars(path) == ["doc-16.jsonl", "doc-16.jsonl.reclaim", "task-5.jsonl"]
    assert [r["seq"] for r in _lines(path / "doc-16.jsonl")] == [2, 3, 4, 5]
    store = _reopen(store)
    try:
        assert _sidecars(path) == ["doc-16.jsonl"]
        assert [r["seq"] for r in _lines(path / "doc-16.jsonl")] == [4, 5]
        assert _todo(store) == {"items": ["c", "d"]}
        assert store.task(TaskId(5)).status is TaskStatus.TERMINAL  # type: ignore[union-attr]
    finally:
        store.close()


# --- open: torn, unconfirmed, missing, corrupt ------------------------------------


def _two_commits(path: Path) -> None:
    store = _store(path)
    store.commit(2, [_task(), _base(["a"])], [])
    store.commit(3, [_task(phase="b"), _delta("b", 1)], [])
    store.close()


def _record(seq: int, ordinal: int, write: PutTask | PutDocument) -> bytes:
    from pidurable.shell.storage import codec

    return jsonl.sidecars.record_line(seq, ordinal, codec.encode_write(write)[1])


@pytest.mark.parametrize("cut", [3, "mid-utf8", "all-but-newline"])
def test_a_torn_sidecar_tail_is_truncated_at_its_exact_offset(tmp_path: Path, cut: int | str) -> None:
    """A sidecar record cut anywhere (a crash mid-append, even inside a
    UTF-8 character) is cut off at the byte its line began; the next commit
    reuses the seq."""
    path = tmp_path / "s"
    _two_commits(path)
    side = path / "task-5.jsonl"
    good = side.stat().st_size
    line = _record(4, 0, attrs.evolve(_task(), task=attrs.evolve(_task().task, checkpoint={"phase": "üü"})))
    n = {"mid-utf8": line.index("ü".encode()) + 1, "all-but-newline": len(line) - 1}.get(cut, cut)  # type: ignore[call-overload]
    with open(side, "ab") as f:
        f.write(line[:n])
    store = open_jsonl_storage(path)
    try:
        assert side.stat().st_size == good
        assert store.load().next_seq == 4
        store.commit(4, [_task(phase="c")], [])
    finally:
        store.close()
    store = open_jsonl_storage(path)
    assert store.task(TaskId(5)).checkpoint == {"phase": "c"}  # type: ignore[union-attr]
    store.close()


def test_unconfirmed_complete_records_are_cut_without_resurrecting_a_terminal_task(tmp_path: Path) -> None:
    """Whole records of a commit main never got (a crash between the two
    appends) are cut; a sidecar left only with such records is deleted, and
    a task terminal in main stays terminal."""
    path = tmp_path / "s"
    _two_commits(path)
    store = open_jsonl_storage(path)
    store.commit(4, [_task(TaskStatus.TERMINAL)], [])
    store.close()
    assert not (path / "task-5.jsonl").exists()
    good = (path / "doc-16.jsonl").stat().st_size
    (path / "task-5.jsonl").write_bytes(_record(5, 0, _task(phase="zombie")))
    with open(path / "doc-16.jsonl", "ab") as f:
        f.write(_record(5, 1, _delta("x", 2)))
    store = open_jsonl_storage(path)
    try:
        assert not (path / "task-5.jsonl").exists()
        assert (path / "doc-16.jsonl").stat().st_size == good
        assert store.task(TaskId(5)).status is TaskStatus.TERMINAL  # type: ignore[union-attr]
        assert _todo(store) == {"items": ["a", "b"]} and store.load().next_seq == 5
    finally:
        store.close()


def test_a_missing_confirmed_record_fails_open_naming_the_file(tmp_path: Path) -> None:
    """A record main refers to, not reclaimed, missing from its sidecar (or
    the sidecar gone) is DamagedRecord naming the file, seq and main line;
    nothing is repaired."""
    path = tmp_path / "s"
    _two_commits(path)
    side = path / "task-5.jsonl"
    data = side.read_bytes()
    side.write_bytes(data[: data.index(b"\n") + 1])  # seq 3's record gone
    before = {n: (path / n).read_bytes() for n in os.listdir(path)}
    with pytest.raises(DamagedRecord, match=r"task-5\.jsonl: missing confirmed sidecar record \(seq 3, ordinal 0\) that .*main\.jsonl line 4"):
        open_jsonl_storage(path)
    assert {n: (path / n).read_bytes() for n in os.listdir(path)} == before
    side.write_bytes(data)
    os.unlink(path / "doc-16.jsonl")
    with pytest.raises(DamagedRecord, match=r"doc-16\.jsonl: missing confirmed sidecar record \(seq 2"):
        open_jsonl_storage(path)


def test_a_confirmed_record_after_an_unconfirmed_one_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _two_commits(path)
    side = path / "task-5.jsonl"
    first, second = side.read_bytes().splitlines(keepends=True)
    side.write_bytes(first + _record(9, 0, _task(phase="stray")) + second)
    with pytest.raises(DamagedRecord, match=r"task-5\.jsonl line 3: confirmed record \(seq 3\) after an unconfirmed one \(line 2\)"):
        open_jsonl_storage(path)


def test_malformed_and_misplaced_sidecar_records_are_corruption(tmp_path: Path) -> None:
    """A sidecar line that is not a record (not the last line), a record of
    another file, a schema-7 line in a store whose header says 6, and a
    marker in a store of the one-file layout are DamagedRecord naming the
    file and line."""
    path = tmp_path / "s"
    _two_commits(path)
    side = path / "task-5.jsonl"
    good = side.read_bytes()
    side.write_bytes(b"#" + good)
    with pytest.raises(DamagedRecord, match=r"task-5\.jsonl line 1 is not a sidecar record"):
        open_jsonl_storage(path)
    side.write_bytes(good.replace(b'"id":5', b'"id":6', 1))
    with pytest.raises(DamagedRecord, match=r"task-5\.jsonl line 1: a record of another file"):
        open_jsonl_storage(path)
    side.write_bytes(good)
    main = path / jsonl.MAIN
    text = main.read_bytes()
    main.write_bytes(text.replace(b'"schema":8', b'"schema":6', 1))
    with pytest.raises(DamagedRecord, match=r"main\.jsonl line 2: an array line in a store of schema 6"):
        open_jsonl_storage(path)
    main.write_bytes(text)
    shutil.rmtree(path)
    shutil.copytree(FIXTURE_6, path)  # object lines with markers
    main.write_bytes(main.read_bytes().replace(b'"schema":6', b'"schema":5', 1))
    with pytest.raises(DamagedRecord, match=r"main\.jsonl line 2: damaged record in commit 1: .*marker in a store of schema 5"):
        open_jsonl_storage(path)


def test_stray_reclaim_files_are_deleted_at_open(tmp_path: Path) -> None:
    """A <file>.reclaim left by a crash before its rename is deleted; the
    file it was to replace is read as it is."""
    path = tmp_path / "s"
    _two_commits(path)
    (path / "doc-16.jsonl.reclaim").write_bytes(b'{"seq":2,"ordi')
    store = open_jsonl_storage(path)
    try:
        assert not (path / "doc-16.jsonl.reclaim").exists()
        assert _todo(store) == {"items": ["a", "b"]}
    finally:
        store.close()


# --- the one-file layout (schema 5) --------------------------------------------------


def test_a_store_of_the_one_file_layout_opens_upgrades_and_takes_sidecar_commits(tmp_path: Path) -> None:
    """The schema-5 fixture (every write inline, a task left running in its
    first life) opens with today's code: same journal (it replays), same
    state; its header now says schema 8; a new process life commits with
    sidecars, and the whole journal still replays."""
    path = tmp_path / "store"
    shutil.copytree(FIXTURE, path)
    old = (path / jsonl.MAIN).read_bytes()
    rows = _lines(path / jsonl.MAIN)
    assert rows[0]["schema"] == 5 and _sidecars(path) == []
    store = open_jsonl_storage(path)
    try:
        journal, loaded = store.journal(), store.load()
        assert [(r.seq, r.format, r.writes) for r in journal] == [(c["seq"], c["format"], c["digest"]) for c in rows[1:]]
        result = check(journal)
        assert result.ok and result.lives == 3
        edit = [t for t in store.tasks() if t.kind == "pi.tool"]
        assert edit and all(t.status is TaskStatus.TERMINAL for t in edit)
    finally:
        store.close()
    new = (path / jsonl.MAIN).read_bytes()
    assert json.loads(new.split(b"\n", 1)[0])["schema"] == 8
    assert new.split(b"\n", 1)[1] == old.split(b"\n", 1)[1]  # the commits as they were
    store = open_jsonl_storage(path)
    try:
        assert store.journal() == journal and store.load() == loaded
    finally:
        store.close()

    async def resume() -> None:
        models = ScriptedModels(lambda request: reply(text="still here"))
        async with Harness.open(open_jsonl_storage(path), models=models, registry=Registry()) as h:
            conv = await h.root()
            assert (await (await conv.submit(Input("Are you there?"))).wait()).status == "done"

    trio.run(resume)
    assert any(isinstance(w, list) and w[0] in ("T", "D") for c in _lines(path / jsonl.MAIN)[len(rows) :] for w in c[4])
    store = open_jsonl_storage(path)
    try:
        result = check(store.journal())
        assert result.ok and result.lives == 4
    finally:
        store.close()


# --- any sequence of commits, reopened after each ------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: (action, which): task versions (running or terminal) of tasks 5-7, revisions
#: of document 16 (current-only) and 17 (rewindable): base, delta, retire.
ACTIONS = st.lists(
    st.lists(st.tuples(st.sampled_from(["run", "end", "base", "delta", "retire", "entry"]), st.integers(0, 2)), min_size=1, max_size=3),
    min_size=1,
    max_size=12,
)


def _writes(actions: list[tuple[str, int]], state: dict[str, Any]) -> list[Any]:
    """Valid writes for ``actions`` (one revision per document per commit,
    a delta only after a base, nothing after a retirement)."""
    writes: list[Any] = []
    touched: set[int] = set()
    for action, which in actions:
        tid, did = 5 + which, 16 + which % 2
        history, kind = (DocHistory.LATEST, "todo") if did == 16 else (DocHistory.REWINDABLE, "log")
        if action in ("run", "end") and tid not in state["ended"]:
            status = TaskStatus.TERMINAL if action == "end" else TaskStatus.RUNNING
            state["phase"] += 1
            writes.append(_task(status, f"p{state['phase']}", tid))
            if action == "end":
                state["ended"].add(tid)
        elif action == "entry":
            state["entry"] += 1
            writes.append(_entry(state["entry"]))
        elif did in touched or did in state["retired"]:
            continue
        elif action == "base" or (action == "delta" and did not in state["based"]):
            writes.append(_doc(RevisionAction.BASE, history, did=did, kind=kind, value={"items": []}))
            state["based"].add(did)
            touched.add(did)
        elif action == "delta":
            writes.append(_doc(RevisionAction.DELTA, history, did=did, kind=kind, ops=(["p", ["items"], 0, 0, [state["entry"]]],)))
            touched.add(did)
        elif action == "retire" and did in state["based"]:
            writes.append(_doc(RevisionAction.RETIRE, history, did=did, kind=kind))
            state["retired"].add(did)
            touched.add(did)
    return writes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=ACTIONS)
def test_any_commits_reopened_after_each_read_as_the_memory_store(tmp_path_factory: pytest.TempPathFactory, commits: list[Any]) -> None:
    """Whatever the sequence of task versions, entries and revisions, a
    JSONL store reopened after every commit reads as a memory store given
    the same commits (load, tasks, journal, current and past documents), and
    no terminal task or retired current-only document keeps a sidecar."""
    path = tmp_path_factory.mktemp("any") / "s"
    memory = MemoryStorage()
    memory.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    store = _store(path)
    state: dict[str, Any] = {"ended": set(), "based": set(), "retired": set(), "phase": 0, "entry": 100}
    try:
        for seq, actions in enumerate(commits, start=2):
            writes = _writes(actions, state)
            memory.commit(seq, writes, [])
            store.commit(seq, writes, [])
            store = _reopen(store)
            assert attrs.evolve(store.load(), store_id="") == attrs.evolve(memory._loaded(), store_id="")
            assert store.tasks() == memory.tasks() and store.journal() == memory.journal()
            assert store._tables["document_records"] == memory._tables["document_records"]
            revisions = lambda s: {d: r for d, r in s._by_document.items() if r}  # noqa: E731 (an emptied index is no revision)
            assert revisions(store) == revisions(memory)
            for at in range(1, seq + 1):  # the rewindable document's whole history
                assert store.document_at(C1, "log", at) == memory.document_at(C1, "log", at)
        names = _sidecars(path)
        assert not {f"task-{t}.jsonl" for t in state["ended"]} & set(names)
        assert not ("doc-16.jsonl" in names and 16 in state["retired"])
    finally:
        store.close()
