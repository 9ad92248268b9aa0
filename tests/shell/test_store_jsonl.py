"""What only the JSONL store has: its file, its tail repair, its corruption
errors, its lock by directory, and its fsync path (the Storage protocol
itself is checked by test_storage_conformance.py and the kill suite)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from pidurable.core.effects import PutConversation, PutEntry, PutTask
from pidurable.core.model import Conversation, ConversationId, Entry, EntryId, EntryKind, Task, TaskId
from pidurable.shell import open_jsonl_storage
from pidurable.shell.storage import DamagedRecord, JsonlStorage, NotAStore, StorageError, StoreLocked, StoreMissing
from pidurable.shell.storage import jsonl

C1 = ConversationId(1)


def _entry(i: int, text: str = "hi ü") -> PutEntry:
    return PutEntry(entry=Entry(id=EntryId(i), conversation_id=C1, kind=EntryKind.USER, text=text))


def _store(path: Path, commits: int = 3) -> JsonlStorage:
    store = open_jsonl_storage(path)
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    for seq in range(2, commits + 1):
        store.commit(seq, [_entry(10 + seq)], [])
    return store


def _main(path: Path) -> Path:
    return path / jsonl.MAIN


def test_a_store_is_a_header_and_one_line_per_commit(tmp_path: Path) -> None:
    """main.jsonl holds the header and one JSON line per commit (schema 8,
    as 7 for a store never compacted: an array of seq, format, digest, events and writes; an entry as its row:
    id, conversation id, the rest of its record)."""
    store = _store(tmp_path / "s")
    journal = store.journal()
    store.close()
    lines = _main(tmp_path / "s").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["pidurable"] == "jsonl" and header["schema"] == jsonl.LAYOUT == 8
    commits = [json.loads(line) for line in lines[1:]]
    assert [c[0] for c in commits] == [1, 2, 3]
    assert [(c[0], c[1], c[2]) for c in commits] == [(r.seq, r.format, r.writes) for r in journal]
    assert all(len(c) == 5 and c[3] == [] for c in commits)
    assert commits[0][4] == [{"type": "conversation", "conversation": {"id": 1}}]
    assert commits[1][4] == [["e", 12, 1, {"kind": "user", "text": "hi ü"}]]


@pytest.mark.parametrize("cut", [1, 20, "mid-utf8", "all-but-newline"])
def test_a_torn_last_line_is_truncated_at_its_exact_offset(tmp_path: Path, cut: int | str) -> None:
    """A commit line cut anywhere (a crash mid-append, even inside a UTF-8
    character or just before its newline) is dropped on open: the file is cut
    back to the byte where that line began, and the store works on."""
    path = tmp_path / "s"
    _store(path).close()
    main = _main(path)
    good = main.stat().st_size
    line = _next_lines(path, 4, [_entry(20, "ü" * 10)])  # what the next commit would append
    if cut == "mid-utf8":
        n = line.index("ü".encode()) + 1
    elif cut == "all-but-newline":
        n = len(line) - 1
    else:
        assert isinstance(cut, int)
        n = cut
    with open(main, "ab") as f:
        f.write(line[:n])
    store = open_jsonl_storage(path)
    try:
        assert main.stat().st_size == good
        assert store.load().next_seq == 4
        assert store.entry(EntryId(20)) is None
        store.commit(4, [_entry(21)], [])
    finally:
        store.close()
    store = open_jsonl_storage(path)
    assert store.entry(EntryId(21)) is not None and [r.seq for r in store.journal()] == [1, 2, 3, 4]
    store.close()


def _next_lines(path: Path, seq: int, writes: list[PutEntry]) -> bytes:
    """The main line a commit of ``writes`` at ``seq`` would append."""
    return jsonl.sidecars.lay_out([(seq, writes, [])], seq - 1, {}).main


def test_a_batch_without_its_last_line_is_dropped_whole(tmp_path: Path) -> None:
    """commit_many is all or nothing across a crash: if the batch's last line
    is torn, the batch's earlier whole lines are cut off too."""
    path = tmp_path / "s"
    store = _store(path)
    before = _main(path).stat().st_size
    store.commit_many([(4, [_entry(30)], []), (5, [_entry(31)], [])])
    store.close()
    main = _main(path)
    data = main.read_bytes()
    main.write_bytes(data[:-10])  # the second line torn, the first whole
    store = open_jsonl_storage(path)
    try:
        assert main.stat().st_size == before
        assert store.entry(EntryId(30)) is None and store.load().next_seq == 4
    finally:
        store.close()


def test_corruption_before_the_last_line_names_the_file_and_line(tmp_path: Path) -> None:
    """A damaged line that is not the last is corruption, not a torn tail:
    open raises DamagedRecord naming main.jsonl and the line, and leaves the
    file as it was."""
    path = tmp_path / "s"
    _store(path).close()
    main = _main(path)
    lines = main.read_bytes().split(b"\n")
    lines[2] = b"#" + lines[2]  # line 3: commit 2
    main.write_bytes(b"\n".join(lines))
    before = main.read_bytes()
    with pytest.raises(DamagedRecord, match=r"main\.jsonl line 3 is not JSON"):
        open_jsonl_storage(path)
    assert main.read_bytes() == before


def test_a_record_that_does_not_decode_names_the_line_and_commit(tmp_path: Path) -> None:
    """A whole JSON line whose write is not a record (or whose seq goes back) is a DamagedRecord naming the line."""
    path = tmp_path / "s"
    _store(path).close()
    main = _main(path)
    lines = main.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[2])
    bad[4][0][1] = "not an id"
    main.write_text("\n".join([lines[0], lines[1], json.dumps(bad), lines[3]]) + "\n", encoding="utf-8")
    with pytest.raises(DamagedRecord, match=r"main\.jsonl line 3: damaged record in commit 2"):
        open_jsonl_storage(path)
    back = json.loads(lines[3])
    back[0] = 1
    main.write_text("\n".join([lines[0], lines[1], lines[2], json.dumps(back), lines[3]]) + "\n", encoding="utf-8")
    with pytest.raises(DamagedRecord, match=r"line 4: seq 1 does not increase"):
        open_jsonl_storage(path)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('[2,4,"b3:x",[],[]', "not JSON"),  # not the last line: corruption, not a torn tail
        ('[2,4,"b3:x",[]]', "not a commit"),
        ('[2,4,"b3:x",[],[],false]', "its sixth field is not true"),
        ('[2,4,"b3:x",{},[]]', r"damaged commit \(events, writes or more\)"),
        ('[2,4,"b3:x",[],[["T","5"]]]', "damaged 'T' marker"),
        ('[2,4,"b3:x",[],[["e",12,1]]]', "not a compact write"),
        ('[2,4,"b3:x",[],[["t",5,1,"custom",null,{"checkpoint":7}]]]', "damaged record in commit 2"),
        ('[2,4,"b3:x",[],[["x",1]]]', "not a compact write"),
    ],
)
def test_a_damaged_schema7_line_names_the_file_and_line(tmp_path: Path, line: str, why: str) -> None:
    """A schema-7 line (an array) of the wrong shape, or with a compact write
    that does not decode, is a DamagedRecord naming main.jsonl and the line;
    the file is left as it was."""
    path = tmp_path / "s"
    _store(path).close()
    main = _main(path)
    lines = main.read_text(encoding="utf-8").splitlines()
    main.write_text("\n".join([lines[0], lines[1], line, *lines[3:]]) + "\n", encoding="utf-8")
    before = main.read_bytes()
    with pytest.raises(DamagedRecord, match=rf"main\.jsonl line 3(:| is) .*{why}"):
        open_jsonl_storage(path)
    assert main.read_bytes() == before


def test_a_torn_header_is_a_new_store_and_a_strangers_file_is_refused(tmp_path: Path) -> None:
    """Only a piece of the header (a crash while creating) starts the store
    afresh; a main.jsonl that is not ours is NotAStore, left untouched."""
    torn = tmp_path / "torn"
    torn.mkdir()
    _main(torn).write_bytes(jsonl.HEADER_PREFIX[:12])
    store = open_jsonl_storage(torn)
    assert store.load().next_seq == 1
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    store.close()
    assert open_jsonl_storage(torn).conversation(C1) == Conversation(id=C1)

    for text in (b'{"hello": "world"}\n', b"just text"):
        other = tmp_path / f"other{len(text)}"
        other.mkdir()
        _main(other).write_bytes(text)
        with pytest.raises(NotAStore):
            open_jsonl_storage(other)
        assert _main(other).read_bytes() == text
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotAStore):
        open_jsonl_storage(file)
    with pytest.raises(StoreMissing):
        open_jsonl_storage(tmp_path / "absent", create=False)


def test_one_owner_whatever_the_name(tmp_path: Path) -> None:
    """The lock is on the directory's lock file: opening through a symlink of
    the directory, or a directory whose lock is a hard link of it, is
    refused while the owner holds it; after close it opens again."""
    path = tmp_path / "s"
    store = _store(path)
    link = tmp_path / "link"
    link.symlink_to(path, target_is_directory=True)
    with pytest.raises(StoreLocked, match="this process"):
        open_jsonl_storage(link)
    twin = tmp_path / "twin"
    twin.mkdir()
    os.link(path / jsonl.LOCK, twin / jsonl.LOCK)
    (twin / jsonl.MAIN).write_bytes(_main(path).read_bytes())
    with pytest.raises(StoreLocked):
        open_jsonl_storage(twin)
    store.close()
    again = open_jsonl_storage(link)
    assert again.entry(EntryId(13)) is not None
    again.close()


def test_another_process_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    """A second process opening a held store gets StoreLocked naming this process's pid."""
    path = tmp_path / "s"
    store = _store(path)
    code = (
        "import sys\nfrom pidurable.shell import open_jsonl_storage\n"
        "from pidurable.shell.storage import StoreLocked\n"
        "try:\n    open_jsonl_storage(sys.argv[1])\nexcept StoreLocked as e:\n    print(e)\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    finally:
        store.close()
    assert f"pid {os.getpid()}" in out.stdout, out.stderr


def test_fsync_syncs_every_commit_and_the_new_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fsync=True every commit is fsynced before it counts, and creating a store syncs its directory too."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store = open_jsonl_storage(tmp_path / "s", fsync=True)
    assert len(synced) == 2  # the header, the directory
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    store.commit_many([(2, [_entry(12)], []), (3, [_entry(13)], [])])
    assert len(synced) == 4
    store.close()
    store = open_jsonl_storage(tmp_path / "s", fsync=False)
    store.commit(4, [_entry(14)], [])
    assert len(synced) == 4
    store.close()


def test_a_failed_append_or_fsync_poisons_and_open_repairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails half way (disk full) refuses every later commit
    until the store is reopened, and the reopen cuts the partial line; a
    failed fsync poisons too (the line reached the file: the next open keeps
    it). Sidecar faults: test_store_jsonl_sidecars.py."""
    path = tmp_path / "s"
    store = _store(path)
    size = _main(path).stat().st_size
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 40:
            real_write(fd, bytes(data)[:40])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(StorageError, match="No space left on device"):
        store.commit(4, [_entry(14)], [])
    monkeypatch.setattr(os, "write", real_write)
    with pytest.raises(StorageError, match="reopen"):
        store.commit(4, [_entry(14)], [])
    store.close()
    store = open_jsonl_storage(path)
    assert _main(path).stat().st_size == size
    store.commit(4, [_entry(14)], [])

    store.close()
    store = open_jsonl_storage(path, fsync=True)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="fsync main.jsonl"):
        store.commit(5, [_entry(15)], [])
    with pytest.raises(StorageError, match="reopen"):
        store.commit(6, [_entry(16)], [])
    monkeypatch.undo()
    store.close()
    store = open_jsonl_storage(path)  # the line reached the file: the next open tells
    assert [r.seq for r in store.journal()][-1] == 5
    store.close()


def test_task_versions_are_rebuilt_to_the_latest(tmp_path: Path) -> None:
    """Every version of a live task is a record of its sidecar; open rebuilds the last one (and load returns it while live)."""
    path = tmp_path / "s"
    store = _store(path, commits=1)
    task = Task(id=TaskId(5), conversation_id=C1, kind="custom", checkpoint={"phase": "a"})
    for seq, phase in enumerate(("a", "b", "c"), start=2):
        store.commit(seq, [PutTask(task=attrs.evolve(task, checkpoint={"phase": phase}))], [])
    store.close()
    store = open_jsonl_storage(path)
    assert [t.checkpoint for t in store.load().tasks] == [{"phase": "c"}]
    store.close()


def test_documents_and_their_history_are_rebuilt_at_open(tmp_path: Path) -> None:
    """A host-defined document's base and delta lines are rebuilt at open:
    its current value, and (rewindable) its value as of an earlier commit."""
    from pidurable.core.effects import DocumentRevision, PutDocument, RevisionAction
    from pidurable.core.state import DocHistory, DocScope, ForkPolicy

    base = DocumentRevision(
        scope=DocScope.CONVERSATION, owner=C1, kind="todo", version=1, history=DocHistory.REWINDABLE,
        fork=ForkPolicy.AS_OF, action=RevisionAction.BASE, value={"items": []},
    )
    delta = attrs.evolve(base, action=RevisionAction.DELTA, value=None, ops=(["p", ["items"], 0, 0, ["milk ü"]],))
    path = tmp_path / "s"
    store = _store(path, commits=1)
    store.commit(2, [PutDocument(document_id=16, revision=base)], [])
    store.commit(3, [PutDocument(document_id=16, revision=delta)], [])
    now = store.document_state(DocScope.CONVERSATION, C1, "todo")
    store.close()
    store = open_jsonl_storage(path)
    try:
        assert store.document_state(DocScope.CONVERSATION, C1, "todo") == now
        assert now is not None and now.value == {"items": ["milk ü"]}
        then = store.document_at(C1, "todo", 2)
        assert then is not None and then.value == {"items": []}
        assert [d.id for d in store.load().documents] == [16]
    finally:
        store.close()
