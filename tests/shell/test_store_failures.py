"""Issue 7, items 4 and 5: storage failures are StorageErrors that name the
file, closing always releases the lock, and open touches only what is ours.

Full disks are real: ``PRAGMA max_page_count`` makes SQLite itself answer
"database or disk is full" (always runs); a small tmpfs filled by a tool is
the real thing (needs root and a working ``mount``, else skipped with the
reason); ``RLIMIT_FSIZE`` in a child process makes the checkpoint at close
fail with a real I/O error (always runs). Read-only media is a tmpfs remounted
read-only.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.effects import PutConversation, PutEntry, PutLive, PutSubmission, PutTask
from pidurable.core.model import (
    Conversation,
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    Submission,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
)
from pidurable.core.state import Live
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Registry,
    StorageError,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import DamagedRecord, NotAStore, SqliteStorage, StoreLocked, StoreMissing
from pidurable.shell.storage.readonly import lock_holder, open_readonly
from pidurable.shell.storage.base import SCHEMA_VERSION

AGENT = AgentConfig(model=ModelRef("scripted", "demo"), cwd=".")
WAIT = 10
CLI = [sys.executable, "-m", "pidurable.shell.cli"]
C1 = ConversationId(1)


def listing(d: Path) -> dict[str, tuple[int, int]]:
    """Every file of a directory with its size and mtime (to prove nothing changed)."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def assert_unlocked(db: Path) -> None:
    """Nobody holds the store: the lock table says so and a new open succeeds."""
    assert lock_holder(db) is None
    SqliteStorage(db).close()


# --- mounts (root only) -------------------------------------------------------------------


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs (1 MiB), unmounted at teardown; skipped, with the reason, where mounting is refused."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; running as uid %d" % os.geteuid())
    where = tmp_path / "mnt"
    where.mkdir()
    res = _run("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where))
    if res.returncode != 0:
        pytest.skip(f"mount -t tmpfs refused here: {res.stderr.strip() or res.returncode}")
    try:
        yield where
    finally:
        for _ in range(50):
            if _run("umount", str(where)).returncode == 0:
                break
            time.sleep(0.1)
        else:
            _run("umount", "-l", str(where))


def remount_read_only(where: Path) -> None:
    res = _run("mount", "-o", "remount,ro", str(where))
    if res.returncode != 0:
        pytest.skip(f"mount -o remount,ro refused here: {res.stderr.strip()}")
    with pytest.raises(OSError):  # really read-only media now
        (where / "probe").write_text("x")


# --- a full disk --------------------------------------------------------------------------


async def finish(db: Path, models: ScriptedModels, registry: Registry, content: str) -> Any:
    """Reopen the store, resubmit the same request (the stored one is returned) and wait for it to settle."""
    async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input(content, request_id="r1"))
        with trio.fail_after(WAIT):
            record = await handle.wait()
        return record, await conv.transcript()


async def test_issue7_sqlite_full_on_commit_is_a_storage_error_and_the_run_resumes(tmp_path: Path) -> None:
    """A commit refused with SQLITE_FULL (max_page_count) surfaces as StorageError naming the file; the lock is released, the accepted input is kept, and a reopened harness finishes the run."""
    db = tmp_path / "s.sqlite"
    storage = open_sqlite_storage(db)
    models = ScriptedModels([reply(text="x" * 300_000)])  # far more pages than allowed below
    with pytest.raises(StorageError) as info:
        async with Harness.open(storage, models=models, registry=Registry()) as h:
            conv = await h.root(agent=AGENT)
            (pages,) = storage.db.execute("PRAGMA page_count").fetchone()
            storage.db.execute(f"PRAGMA max_page_count = {pages + 4}")
            handle = await conv.submit(Input("hello", request_id="r1"))  # durable on return
            with trio.fail_after(WAIT):
                await handle.wait()
    assert str(info.value) == f"Store {db}: commit failed, nothing was written (database or disk is full)"
    assert_unlocked(db)

    kept = open_readonly(db)
    try:
        accepted = kept.submission_by_request(C1, "r1")
        assert accepted is not None and accepted.status is SubmissionStatus.PLACED
    finally:
        kept.close()
    record, transcript = await finish(db, ScriptedModels([reply(text="recovered")]), Registry(), "hello")
    assert record.status == "done" and record.id == accepted.id
    assert [e.text for e in transcript] == ["hello", "recovered"]


async def test_issue7_full_tmpfs_commit_fails_then_the_run_finishes(tmpfs: Path) -> None:
    """On a real full disk (a tmpfs filled by a tool) the failing commit is a StorageError, not a raw sqlite3 error, even though the checkpoint at close fails too; the store is unlocked at once, and once the filler is deleted it reopens and the run finishes with the input kept."""
    db = tmpfs / "s.sqlite"
    filler = tmpfs / "filler"
    runs: list[str] = []

    async def fill(ctx: Any, args: Any) -> str:
        runs.append("run")
        if len(runs) == 1:
            with open(filler, "wb") as f:
                with pytest.raises(OSError):  # ENOSPC
                    while True:
                        f.write(b"\0" * 4096)
                        f.flush()
        return "filled"

    registry = Registry()
    registry.install(define_tool("fill", "fill the disk", {"type": "object"}, fill, replay="safe"))
    # a big input: its pages must be checkpointed into the main file at close, which the full disk refuses
    content = "hello " + "x" * 30_000
    models = ScriptedModels([reply(tool_calls=[tool_call("fill")]), reply(text="done")])
    with pytest.raises(StorageError) as info:
        async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
            conv = await h.root(agent=AGENT)
            handle = await conv.submit(Input(content, request_id="r1"))
            with trio.fail_after(WAIT):
                await handle.wait()
    assert str(info.value) == f"Store {db}: commit failed, nothing was written (database or disk is full)"
    assert runs == ["run"] and filler.stat().st_size > 0
    assert Path(f"{db}-wal").stat().st_size > 0, "the checkpoint at close could not empty the -wal file"
    assert lock_holder(db) is None

    filler.unlink()
    record, transcript = await finish(db, models, registry, content)
    assert record.status == "done"
    assert runs == ["run", "run"]  # the safe tool re-ran after the crash-like stop
    assert transcript[0].text == content and transcript[-1].text == "done"


_CHECKPOINT_FAILS = """
    import logging, os, resource, signal, sys
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    from pidurable.core.effects import PutConversation, PutEntry
    from pidurable.core.model import Conversation, ConversationId, Entry, EntryId, EntryKind
    from pidurable.shell.storage import StoreLocked, open_sqlite_storage
    db = sys.argv[1]
    store = open_sqlite_storage(db)
    store.commit(1, [PutConversation(conversation=Conversation(id=ConversationId(1)))], [])
    big = Entry(id=EntryId(2), conversation_id=ConversationId(1), kind=EntryKind.USER, text="x" * 200_000)
    store.commit(2, [PutEntry(entry=big)], [])
    # From here no file may grow past the main file's size: the checkpoint,
    # which must grow it, fails with a real I/O error (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(db), resource.RLIM_INFINITY))
    store.close()
    print("CLOSED", flush=True)
    again = open_sqlite_storage(db)  # StoreLocked here if close kept the lock
    print("REOPENED", len(again.entries(ConversationId(1))[0].text), flush=True)
"""


def test_issue7_failing_checkpoint_at_close_still_releases_the_lock(tmp_path: Path) -> None:
    """When the checkpoint at close fails (a real EFBIG via RLIMIT_FSIZE), close() logs a warning instead of raising, the lock is released (the same process reopens the store) and every commit is still there."""
    db = tmp_path / "s.sqlite"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHECKPOINT_FAILS), str(db)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["CLOSED", "REOPENED", "200000"], proc.stdout + proc.stderr
    assert f"pidurable WARNING Store {db}: checkpoint at close failed" in proc.stderr
    store = open_sqlite_storage(db)
    try:
        assert len(store.entries(C1)[0].text) == 200_000
    finally:
        store.close()


def test_issue7_failing_create_is_a_storage_error_and_leaves_no_lock(tmp_path: Path) -> None:
    """A store that cannot be created (no file may grow: RLIMIT_FSIZE 0) raises StorageError naming the file, never a raw sqlite3 error, and a second try meets the same error, not StoreLocked."""
    db = tmp_path / "s.sqlite"
    code = f"""
        import resource, signal
        from pidurable.shell.storage import StorageError, StoreLocked, open_sqlite_storage
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
        for attempt in (1, 2):
            try:
                open_sqlite_storage({str(db)!r})
            except StoreLocked as e:
                print("LOCKED", e)
            except StorageError as e:
                print("REFUSED", type(e.__cause__).__name__, e)
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"REFUSED OperationalError Store {db}: ") for line in lines), proc.stdout


# --- reads and damaged records ---------------------------------------------------------------


def test_issue7_failing_read_is_a_storage_error_naming_the_operation(tmp_path: Path) -> None:
    """A read that SQLite refuses (its table was dropped behind the store's back) raises StorageError naming the file and the read."""
    db = tmp_path / "s.sqlite"
    store = open_sqlite_storage(db)
    try:
        store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
        raw = sqlite3.connect(db)
        raw.execute("DROP TABLE entries")
        raw.commit()
        raw.close()
        with pytest.raises(StorageError, match=rf"^Store {db}: reading entries failed \(no such table: entries\)$"):
            store.entries(C1)
        with pytest.raises(StorageError, match=rf"^Store {db}: load failed \(no such table: entries\)$"):
            store.load()
    finally:
        store.close()


LIVE_TASK = Task(id=TaskId(5), conversation_id=C1, kind="custom")
PLACED = Submission(id=SubmissionId(3), conversation_id=C1, type="input", status=SubmissionStatus.PLACED, request_id="r")
USER = Entry(id=EntryId(4), conversation_id=C1, kind=EntryKind.USER, text="hi")

#: case -> (SQL that damages one row, how the damage is named, the read that must refuse it)
DAMAGE: dict[str, tuple[str, str, Any]] = {
    "invalid JSON in a task": (
        "UPDATE tasks SET record = '{not json' WHERE id = 5",
        r"tasks id 5: invalid JSON",
        lambda s: s.task(TaskId(5)),
    ),
    "conversation of a wrong shape": (
        "UPDATE conversations SET record = '[]' WHERE id = 1",
        r"conversations id 1: ",
        lambda s: s.conversations(),
    ),
    "submission with an unknown status": (
        """UPDATE submissions SET record = json_set(record, '$.status', 'bogus') WHERE id = 3""",
        r"submissions id 3: invalid value for type, expected SubmissionStatus @ \$\.status",
        lambda s: s.submission(SubmissionId(3)),
    ),
    "entry that says another id": (
        """UPDATE entries SET record = json_set(record, '$.id', 99) WHERE id = 4""",
        r"entries id 4: it says id 99",
        lambda s: s.entries(C1),
    ),
    "live document of a wrong shape": (  # pi.live of conversation 1: document -10 (core/builtins.py)
        """UPDATE document_revisions SET content = json_set(content, '$.value', json('{"run": 7}')) WHERE document_id = -10""",
        r"document_revisions \(document -10\): ",
        lambda s: s.document(C1, "pi.live"),
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_issue7_damaged_record_is_named_by_load_and_reads(tmp_path: Path, case: str) -> None:
    """A stored record with invalid JSON or a wrong shape makes load() and the per-record reads raise DamagedRecord (a StorageError) naming the file, the table and the row."""
    sql, named, read = DAMAGE[case]
    db = tmp_path / "s.sqlite"
    with open_sqlite_storage(db) as store:
        store.commit(
            1,
            [
                PutConversation(conversation=Conversation(id=C1)),
                PutLive(conversation_id=C1, live=Live()),
                PutEntry(entry=USER),
                PutSubmission(submission=PLACED),
                PutTask(task=LIVE_TASK),
            ],
            [],
        )
    raw = sqlite3.connect(db)
    raw.execute(sql)
    raw.commit()
    raw.close()

    with open_sqlite_storage(db) as store:
        with pytest.raises(DamagedRecord, match=rf"^Store {db}: damaged record in {named}"):
            read(store)
        if case != "entry that says another id":  # load() never reads transcript bodies
            with pytest.raises(DamagedRecord, match=rf"^Store {db}: damaged record in {named}"):
                store.load()
    assert_unlocked(db)


async def test_issue7_harness_open_on_a_damaged_store_raises_storage_error(tmp_path: Path) -> None:
    """Harness.open on a store with a damaged live task raises StorageError naming the record, not a JSON or cattrs error."""
    db = tmp_path / "s.sqlite"
    with open_sqlite_storage(db) as store:
        store.commit(1, [PutConversation(conversation=Conversation(id=C1)), PutTask(task=LIVE_TASK)], [])
    raw = sqlite3.connect(db)
    raw.execute("UPDATE tasks SET record = '{\"id\": 5, \"on\": 7}' WHERE id = 5")
    raw.commit()
    raw.close()
    storage = open_sqlite_storage(db)
    try:
        with pytest.raises(StorageError, match=r"damaged record in tasks id 5: "):
            async with Harness.open(storage, models=ScriptedModels([]), registry=Registry()):
                pass  # pragma: no cover - open must refuse
    finally:
        storage.close()
    assert_unlocked(db)


def test_issue7_inspect_a_damaged_store_is_one_line_exit_1(tmp_path: Path) -> None:
    """`pidurable inspect` on a store with a damaged record prints one line naming it and exits 1."""
    db = tmp_path / "s.sqlite"
    with open_sqlite_storage(db) as store:
        store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    raw = sqlite3.connect(db)
    raw.execute("UPDATE conversations SET record = 'oops' WHERE id = 1")
    raw.commit()
    raw.close()
    res = subprocess.run([*CLI, "inspect", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.startswith(f"pidurable: error: Store {db}: damaged record in conversations id 1: invalid JSON")
    assert res.stderr.count("\n") == 1


# --- tampered versions -------------------------------------------------------------------------

TAMPERED = {
    "text": ("UPDATE schema SET version = 'abc'", r"damaged record in schema \(version 'abc'\): not a version number"),
    "zero": ("UPDATE schema SET version = 0", r"damaged record in schema \(version 0\): not a version number"),
    "two rows": ("INSERT INTO schema (version) VALUES (1)", r"damaged record in schema: 2 version rows, one expected"),
    "newer": ("UPDATE schema SET version = 99", rf"has schema version 99; this pidurable reads versions up to {SCHEMA_VERSION}"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_issue7_tampered_version_is_refused_and_the_file_untouched(tmp_path: Path, case: str) -> None:
    """A schema row that is not a version this code reads is refused with a StorageError naming the file; the file is not modified and not left locked."""
    sql, message = TAMPERED[case]
    db = tmp_path / "s.sqlite"
    open_sqlite_storage(db).close()
    raw = sqlite3.connect(db)
    raw.execute(sql)
    raw.commit()
    raw.close()
    before = listing(tmp_path)
    for opener in (open_sqlite_storage, open_readonly):
        with pytest.raises(StorageError, match=rf"^Store {db}(: | ){message}") as info:
            opener(db)
        assert not isinstance(info.value, StoreLocked)
    assert listing(tmp_path) == before
    assert lock_holder(db) is None


# --- files that are not ours -------------------------------------------------------------------


def _sqlite_file(path: Path, *statements: str) -> None:
    raw = sqlite3.connect(path)
    for s in statements:
        raw.execute(s)
    raw.commit()
    raw.close()


NOT_OURS: dict[str, tuple[Any, str]] = {
    "text file": (lambda p: p.write_text("not a database at all, but longer than a SQLite header " * 3), "is not a SQLite database"),
    "short file": (lambda p: p.write_bytes(b"SQLite format 3\x00"), "is not a SQLite database"),
    "SQLite without tables": (
        lambda p: _sqlite_file(p, "PRAGMA user_version = 7"),
        "is a SQLite database but is not a pidurable store (tables: none)",
    ),
    "another app's database": (
        lambda p: _sqlite_file(p, "CREATE TABLE users (id)", "CREATE TABLE orders (id)", "INSERT INTO users VALUES (1)"),
        "is a SQLite database but is not a pidurable store (tables: orders, users)",
    ),
    "another app's WAL database": (
        lambda p: _sqlite_file(p, "PRAGMA journal_mode = WAL", "CREATE TABLE notes (body)"),
        "is a SQLite database but is not a pidurable store (tables: notes)",
    ),
    "look-alike without store_id": (
        lambda p: _sqlite_file(
            p, "CREATE TABLE schema (version)", "INSERT INTO schema VALUES (1)", "CREATE TABLE meta (key, value)"
        ),
        "is a SQLite database but is not a pidurable store (no store_id in its meta table)",
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_OURS))
def test_issue7_a_file_that_is_not_a_store_is_refused_untouched(tmp_path: Path, case: str) -> None:
    """Opening (read-write or read-only) a file that is not a pidurable store raises NotAStore saying what it is, and changes nothing in its directory: same bytes, same mtime, no -wal, -shm, owner or lock file."""
    make, message = NOT_OURS[case]
    path = tmp_path / "x.sqlite"
    make(path)
    before, data = listing(tmp_path), path.read_bytes()
    for open_ in (open_sqlite_storage, open_readonly):
        with pytest.raises(NotAStore) as info:
            open_(path)
        assert str(info.value).startswith(f"{path} {message}")
    assert listing(tmp_path) == before and path.read_bytes() == data
    assert lock_holder(path) is None


def test_issue7_missing_or_empty_file_with_create_false(tmp_path: Path) -> None:
    """With create=False a missing or 0-byte file raises StoreMissing ("does not exist") and nothing is created; with the default create=True a 0-byte file becomes a store."""
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(StoreMissing, match=rf"^Store {missing} does not exist$"):
        open_sqlite_storage(missing, create=False)
    nowhere = tmp_path / "no" / "dir" / "s.sqlite"
    with pytest.raises(StoreMissing, match=rf"^Store {nowhere} does not exist \(directory {nowhere.parent} does not exist\)$"):
        open_readonly(nowhere)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(StoreMissing, match=rf"^Store {empty} does not exist \(the file is empty\)$"):
        open_sqlite_storage(empty, create=False)
    with pytest.raises(StoreMissing):
        open_readonly(empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"] and empty.stat().st_size == 0
    with open_sqlite_storage(empty) as store:
        assert store.schema_version == SCHEMA_VERSION and store.load().next_seq == 1


def test_issue7_a_directory_is_not_a_store(tmp_path: Path) -> None:
    """A path naming a directory is refused as not a regular file."""
    with pytest.raises(NotAStore, match="is not a regular file"):
        open_sqlite_storage(tmp_path)


def test_issue7_new_store_next_to_a_stray_wal_is_refused(tmp_path: Path) -> None:
    """An empty or missing store file next to a -wal with content (a store deleted without its -wal) is refused: SQLite would replay another database's pages into the new one."""
    db = tmp_path / "s.sqlite"
    with open_sqlite_storage(db) as store:
        store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
        wal = Path(f"{db}-wal").read_bytes()
    assert wal
    db.unlink()
    Path(f"{db}-wal").write_bytes(wal)
    with pytest.raises(StorageError, match=r"holds data"):
        open_sqlite_storage(db)
    assert lock_holder(db) is None


# --- read-only media -------------------------------------------------------------------------------


async def test_issue7_inspect_and_replay_read_a_store_on_read_only_media(tmpfs: Path) -> None:
    """A store on read-only media (a tmpfs remounted ro: no -shm can be created) is read by open_readonly, `pidurable inspect` and `pidurable replay`; a writable open or a new store there is a StorageError naming the file."""
    db = tmpfs / "s.sqlite"
    models = ScriptedModels([reply(text="hi there")])
    async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("hello", request_id="r1"))
        with trio.fail_after(WAIT):
            assert (await handle.wait()).status == "done"
    remount_read_only(tmpfs)
    before = listing(tmpfs)

    view = open_readonly(db)
    try:
        assert [e.text for e in view.entries(C1)] == ["hello", "hi there"]
    finally:
        view.close()
    res = subprocess.run([*CLI, "inspect", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "conversation 1 (root): idle, 2 entries" in res.stdout
    res = subprocess.run([*CLI, "replay", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"(\d+) commits replayed through the pure core: \1 identical, 0 different", res.stdout), res.stdout

    with pytest.raises(StorageError, match=rf"^Store {db}: open failed \(.*\); the file or its directory is read-only"):
        open_sqlite_storage(db)
    with pytest.raises(StorageError, match=rf"^Cannot create store {tmpfs / 'new.sqlite'}: Read-only file system$"):
        open_sqlite_storage(tmpfs / "new.sqlite")
    assert listing(tmpfs) == before


def test_issue7_read_only_media_with_unmerged_wal_is_explained(tmpfs: Path) -> None:
    """On read-only media a store whose -wal holds commits but has no -shm cannot be read by SQLite: the opener says so instead of showing an old state."""
    db = tmpfs / "s.sqlite"
    code = f"""
        import time
        from pidurable.core.effects import PutConversation
        from pidurable.core.model import Conversation, ConversationId
        from pidurable.shell.storage import open_sqlite_storage
        store = open_sqlite_storage({str(db)!r})
        store.commit(1, [PutConversation(conversation=Conversation(id=ConversationId(1)))], [])
        print("READY", flush=True)
        time.sleep(60)
    """
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert Path(f"{db}-wal").stat().st_size > 0
    Path(f"{db}-shm").unlink()
    remount_read_only(tmpfs)
    with pytest.raises(StorageError, match=r"its directory is read-only and .*-wal holds commits"):
        open_readonly(db)
    res = subprocess.run([*CLI, "inspect", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "its directory is read-only" in res.stderr and res.stderr.count("\n") == 1
