"""SQLite adapter specifics: pragmas, schema versioning, opening errors, and
ownership of the store file across threads of control and real processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidurable.core.effects import PutConversation
from pidurable.core.model import Conversation, ConversationId
from pidurable.shell.storage import (
    SCHEMA_VERSION,
    SqliteStorage,
    StorageError,
    StoreLocked,
    open_sqlite_storage,
)

# NORMAL = 1, FULL = 2 (https://www.sqlite.org/pragma.html#pragma_synchronous)
SYNC_LEVELS = {"NORMAL": 1, "FULL": 2}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


@pytest.fixture
def opened() -> Iterator[list[SqliteStorage]]:
    """Stores opened by a test; closed at teardown even if it fails."""
    stores: list[SqliteStorage] = []
    yield stores
    for s in stores:
        s.close()


def _open(opened: list[SqliteStorage], path: Path, **kw: str) -> SqliteStorage:
    store = open_sqlite_storage(path, **kw)
    opened.append(store)
    return store


def _pragma(store: SqliteStorage, name: str) -> object:
    return store.db.execute(f"PRAGMA {name}").fetchone()[0]


# --- pragmas and schema ----------------------------------------------------------


def test_wal_and_synchronous_normal_by_default(db_path: Path, opened: list[SqliteStorage]) -> None:
    """A store opens in WAL mode with synchronous=NORMAL unless told otherwise."""
    store = _open(opened, db_path)
    assert str(_pragma(store, "journal_mode")).lower() == "wal"
    assert _pragma(store, "synchronous") == SYNC_LEVELS["NORMAL"]


def test_synchronous_full_is_selectable(db_path: Path, opened: list[SqliteStorage]) -> None:
    """open_sqlite_storage(synchronous="FULL") sets synchronous=FULL and keeps WAL."""
    store = _open(opened, db_path, synchronous="FULL")
    assert str(_pragma(store, "journal_mode")).lower() == "wal"
    assert _pragma(store, "synchronous") == SYNC_LEVELS["FULL"]


def test_unknown_synchronous_level_is_refused(db_path: Path) -> None:
    """A synchronous level other than NORMAL or FULL is refused before anything is opened or locked."""
    with pytest.raises(ValueError, match="OFF"):
        SqliteStorage(db_path, synchronous="OFF")
    assert not db_path.exists()


def test_schema_version_is_stored(db_path: Path, opened: list[SqliteStorage]) -> None:
    """A new store records SCHEMA_VERSION in its schema table, once, and keeps it across reopen."""
    store = _open(opened, db_path)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema").fetchall() == [(SCHEMA_VERSION,)]
    again = _open(opened, db_path)
    assert again.schema_version == SCHEMA_VERSION


def test_a_built_in_is_a_document_and_an_older_whole_value_write_is_its_base(db_path: Path, opened: list[SqliteStorage]) -> None:
    """The built-ins are document records (issue 10, core/builtins.py; no
    ``documents`` table since schema 4): a whole-value write of an older
    journal (a JSONL line) is stored as a base revision of the built-in, at
    its derived id, and reads back typed."""
    from pidurable.core.builtins import builtin_id
    from pidurable.core.effects import PutAgent
    from pidurable.core.model import AgentConfig, ModelRef

    store = _open(opened, db_path)
    cid = ConversationId(1)
    agent = AgentConfig(model=ModelRef("scripted", "m"))
    store.commit(1, [PutConversation(conversation=Conversation(id=cid))], [])
    store.commit(2, [PutAgent(conversation_id=cid, agent=agent)], [])
    assert "documents" not in {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = store.db.execute("SELECT document_id, seq, action FROM document_revisions").fetchall()
    assert rows == [(builtin_id(cid, "pi.agent"), 2, "base")]
    assert store.document(cid, "pi.agent") == agent
    assert store.load().conversations[0].agent == agent


def test_newer_schema_version_is_refused(db_path: Path, opened: list[SqliteStorage]) -> None:
    """A store written by a newer pidurable is refused with a StorageError naming both versions, and its lock is released."""
    _open(opened, db_path).close()
    newer = SCHEMA_VERSION + 41
    raw = sqlite3.connect(db_path)
    raw.execute("UPDATE schema SET version = ?", (newer,))
    raw.commit()
    raw.close()

    with pytest.raises(StorageError) as info:
        SqliteStorage(db_path)
    message = str(info.value)
    assert str(newer) in message and str(SCHEMA_VERSION) in message
    assert not isinstance(info.value, StoreLocked)
    # The refusal left the file as it was and did not keep the store locked.
    with pytest.raises(StorageError, match=str(newer)):
        SqliteStorage(db_path)
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema").fetchall() == [(newer,)]


def test_missing_directory_names_the_directory(tmp_path: Path) -> None:
    """Opening a store in a directory that does not exist raises StorageError naming that directory."""
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(StorageError) as info:
        open_sqlite_storage(missing / "store.sqlite")
    assert str(missing) in str(info.value)
    assert not missing.exists()


# --- ownership -----------------------------------------------------------------


def test_second_open_in_same_process_is_locked(db_path: Path, opened: list[SqliteStorage]) -> None:
    """A second open of a held store in the same process raises StoreLocked naming the file; after close it opens."""
    first = _open(opened, db_path)
    with pytest.raises(StoreLocked) as info:
        SqliteStorage(db_path)
    assert str(db_path) in str(info.value)
    first.close()
    _open(opened, db_path)


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


@pytest.mark.slow
def test_second_open_from_another_process_is_locked(db_path: Path, opened: list[SqliteStorage]) -> None:
    """While this process holds the store, another process opening it gets StoreLocked naming the file."""
    _open(opened, db_path)
    code = f"""
        import sys
        from pidurable.shell.storage import SqliteStorage, StoreLocked
        try:
            SqliteStorage({str(db_path)!r})
        except StoreLocked as e:
            print("LOCKED:", e)
            sys.exit(3)
        print("OPENED")
    """
    proc = subprocess.run(_child(code), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("LOCKED:")
    assert str(db_path) in proc.stdout


@pytest.mark.slow
def test_lock_of_a_killed_process_is_reclaimed(db_path: Path, opened: list[SqliteStorage]) -> None:
    """A store held by a process that was SIGKILLed opens in the next process, with the dead owner's commits intact."""
    code = f"""
        import sys, time
        from pidurable.core.effects import PutConversation
        from pidurable.core.model import Conversation, ConversationId
        from pidurable.shell.storage import SqliteStorage
        store = SqliteStorage({str(db_path)!r})
        store.commit(1, [PutConversation(conversation=Conversation(id=ConversationId(1)))], [])
        print("READY", flush=True)
        time.sleep(60)
    """
    proc = subprocess.Popen(_child(code), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", line + (proc.stderr.read() if proc.stderr else "")
        # While the child lives, the store is held.
        with pytest.raises(StoreLocked):
            SqliteStorage(db_path)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    store = _open(opened, db_path)
    assert store.conversations() == [Conversation(id=ConversationId(1))]
    loaded = store.load()
    assert loaded.next_seq == 2
    store.commit(2, [PutConversation(conversation=Conversation(id=ConversationId(2)))], [])
    assert [c.id for c in store.conversations()] == [1, 2]
