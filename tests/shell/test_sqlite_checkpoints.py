"""WAL checkpoints run on a thread of their own, not inside a commit
(shell/storage/sqlite_checkpoints.py; issue 11 item 2): the main file gets
the commits every EVERY_BATCHES transactions, a failure is logged and hands
the job back to SQLite's own checkpoints, and closing or fencing the store
leaves no thread and no connection behind."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidurable.core.effects import PutEntry
from pidurable.core.model import Entry
from pidurable.shell.storage import open_sqlite_storage, owner
from pidurable.shell.storage.sqlite import SqliteStorage
from pidurable.shell.storage.sqlite_checkpoints import BACKSTOP_PAGES, EVERY_BATCHES, Checkpointer


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStorage]:
    s = open_sqlite_storage(tmp_path / "store.sqlite")
    yield s
    s.close()


def _commit(store: SqliteStorage, first: int, n: int) -> None:
    for seq in range(first, first + n):
        entry = Entry(id=seq, conversation_id=1, kind="user", text=f"t{seq}")
        store.commit(seq, [PutEntry(entry=entry)], [])


def _main_file_journal(store: SqliteStorage, tmp_path: Path) -> int:
    """The journal rows the main file holds alone (a copy without its -wal)."""
    copy = tmp_path / "main-only.sqlite"
    shutil.copyfile(store.file, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM journal").fetchone()[0])
    finally:
        conn.close()
        copy.unlink()


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pidurable-checkpoint")]


def test_the_main_file_gets_the_commits_from_the_checkpoint_thread(store: SqliteStorage, tmp_path: Path) -> None:
    checkpointer = store._checkpointer
    assert checkpointer is not None
    _commit(store, 1, EVERY_BATCHES - 1)
    checkpointer.wait()
    # below the threshold nothing was checkpointed (SQLite's own waits for BACKSTOP_PAGES)
    assert checkpointer.runs == 0
    assert _main_file_journal(store, tmp_path) == 0
    _commit(store, EVERY_BATCHES, 1)
    checkpointer.wait()
    assert checkpointer.runs == 1
    assert _main_file_journal(store, tmp_path) == EVERY_BATCHES
    _commit(store, EVERY_BATCHES + 1, EVERY_BATCHES)
    checkpointer.wait()
    assert checkpointer.runs == 2
    assert _main_file_journal(store, tmp_path) == 2 * EVERY_BATCHES


def test_sqlite_s_own_checkpoints_are_the_backstop(store: SqliteStorage) -> None:
    ((pages,),) = store.db.execute("PRAGMA wal_autocheckpoint").fetchall()
    assert pages == BACKSTOP_PAGES
    # (the thread checkpoints first: ~10 pages a transaction in the steps workload)
    assert EVERY_BATCHES * 10 < BACKSTOP_PAGES


def test_a_failing_checkpoint_is_logged_once_and_commits_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.sqlite"
    store = open_sqlite_storage(path)
    checkpointer = store._checkpointer
    assert checkpointer is not None
    broken = sqlite3.connect(":memory:", check_same_thread=False)
    broken.close()  # (every statement on it raises sqlite3.ProgrammingError)
    checkpointer._connect = lambda: broken
    checkpointer._close = lambda conn: None
    with caplog.at_level(logging.WARNING, logger="pidurable"):
        _commit(store, 1, 3 * EVERY_BATCHES)
        checkpointer.wait()
    warnings = [r.getMessage() for r in caplog.records if "background checkpoints stopped" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "a checkpoint failed" in warnings[0]
    assert not checkpointer.active and checkpointer.runs == 0
    store.close()
    reopened = open_sqlite_storage(path)
    try:
        assert reopened.load().next_seq == 3 * EVERY_BATCHES + 1
    finally:
        reopened.close()


def test_a_connection_that_cannot_open_is_logged_and_commits_go_on(
    store: SqliteStorage, caplog: pytest.LogCaptureFixture
) -> None:
    checkpointer = store._checkpointer
    assert checkpointer is not None

    def refuse() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    checkpointer._connect = refuse
    with caplog.at_level(logging.WARNING, logger="pidurable"):
        _commit(store, 1, 2 * EVERY_BATCHES)
    assert [r for r in caplog.records if "cannot open its connection" in r.getMessage()]
    assert not _checkpoint_threads()


@pytest.mark.parametrize("end", ["close", "fence"])
def test_closing_or_fencing_leaves_no_thread_and_no_connection(tmp_path: Path, end: str) -> None:
    store = open_sqlite_storage(tmp_path / "store.sqlite")
    inode = store._inode
    _commit(store, 1, EVERY_BATCHES)
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer._conn is not None
    with owner._FILES.lock:
        assert owner._FILES.connections[inode] == 2  # the store's and the checkpoints'
    getattr(store, end)()
    assert not _checkpoint_threads()
    assert checkpointer._conn is None and not checkpointer.active
    with owner._FILES.lock:
        left = owner._FILES.connections.get(inode, 0)
    assert left == (1 if end == "fence" else 0)
    if end == "fence":
        store.close()


def test_fewer_than_one_transaction_between_checkpoints_is_refused() -> None:
    def never() -> Any:
        raise AssertionError("not connected")

    with pytest.raises(ValueError, match="at least 1"):
        Checkpointer("x", never, never, every=0)


def test_a_read_only_store_runs_no_checkpoints(store: SqliteStorage, tmp_path: Path) -> None:
    _commit(store, 1, 2)
    reader = SqliteStorage(store.path, read_only=True)
    try:
        assert reader._checkpointer is None
    finally:
        reader.close()
