"""Issue 7, item 3: one owner per store FILE, whatever name it is opened by.

The lock is an exclusive flock on the database file itself, so a hard link or
a symlink meets the same lock as the original name; a refused opener is told
who holds the store (pid, host, since when). A live OTHER process is a real
subprocess; "this process" cases open the store twice without a harness.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidurable.core.effects import PutConversation
from pidurable.core.model import Conversation, ConversationId
from pidurable.shell.storage import SqliteStorage, StoreLocked, open_sqlite_storage
from pidurable.shell.storage.readonly import lock_holder, open_readonly


def conv(i: int) -> PutConversation:
    return PutConversation(conversation=Conversation(id=ConversationId(i)))


@pytest.fixture
def names(tmp_path: Path) -> dict[str, Path]:
    """A store path, and where a hard link and a symlink to it will live (another directory)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return {
        "store": tmp_path / "a" / "store.sqlite",
        "hardlink": tmp_path / "b" / "hard.sqlite",
        "symlink": tmp_path / "b" / "soft.sqlite",
    }


def link_both(names: dict[str, Path]) -> None:
    os.link(names["store"], names["hardlink"])
    names["symlink"].symlink_to(names["store"])


@pytest.fixture
def owner_process(names: dict[str, Path]) -> Iterator[subprocess.Popen[str]]:
    """Another process that creates the store, commits conversation 1 and waits (holding it)."""
    code = f"""
        import time
        from pidurable.core.effects import PutConversation
        from pidurable.core.model import Conversation, ConversationId
        from pidurable.shell.storage import open_sqlite_storage
        store = open_sqlite_storage({str(names["store"])!r})
        store.commit(1, [PutConversation(conversation=Conversation(id=ConversationId(1)))], [])
        print("READY", flush=True)
        time.sleep(120)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", line + (proc.stderr.read() if proc.stderr else "")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# --- another process holds the store --------------------------------------------------


@pytest.mark.slow
def test_issue7_hard_link_and_symlink_meet_the_owners_lock(
    names: dict[str, Path], owner_process: subprocess.Popen[str]
) -> None:
    """While another process holds the store, opening it by its name, a hard link or a symlink raises StoreLocked naming the owner's pid, host and start time."""
    link_both(names)
    for key in ("store", "hardlink", "symlink"):
        with pytest.raises(StoreLocked) as info:
            open_sqlite_storage(names[key])
        message = str(info.value)
        assert str(names[key]) in message
        assert f"in use by pid {owner_process.pid} on host {socket.gethostname()} since " in message, message
        assert "this process" not in message
    # inspect's lookup finds the same owner through every name
    assert {lock_holder(names[k]) for k in names} == {owner_process.pid}
    assert owner_process.poll() is None, "a refused open must not disturb the owner"


@pytest.mark.slow
def test_issue7_hard_link_reopens_through_the_canonical_name(
    names: dict[str, Path], owner_process: subprocess.Popen[str]
) -> None:
    """After the owner is killed with its commit still in <store>-wal, opening through a hard link connects to the canonical name, so the commit is seen and no second -wal appears."""
    link_both(names)
    owner_process.send_signal(signal.SIGKILL)
    assert owner_process.wait(timeout=30) == -signal.SIGKILL
    wal = Path(f"{names['store']}-wal")
    assert wal.stat().st_size > 0, "the killed owner's commit should still be in the -wal file"
    assert lock_holder(names["hardlink"]) is None

    store = open_sqlite_storage(names["hardlink"])
    try:
        assert store.file == names["store"].resolve()
        assert store.conversations() == [Conversation(id=ConversationId(1))]
        assert not Path(f"{names['hardlink']}-wal").exists()
        store.commit(2, [conv(2)], [])
    finally:
        store.close()
    via_symlink = open_sqlite_storage(names["symlink"])
    try:
        assert [c.id for c in via_symlink.conversations()] == [1, 2]
        assert not Path(f"{names['symlink']}-wal").exists() and not Path(f"{names['symlink']}.owner").exists()
    finally:
        via_symlink.close()


# --- this process holds the store -----------------------------------------------------


def test_issue7_second_open_in_this_process_by_any_name_is_locked(names: dict[str, Path]) -> None:
    """Two harness-less opens in one process: the second, by name, hard link or symlink, raises StoreLocked naming this process; the first keeps working and, once closed, the store opens by a link."""
    first = open_sqlite_storage(names["store"])
    try:
        first.commit(1, [conv(1)], [])
        link_both(names)
        for key in ("store", "hardlink", "symlink"):
            with pytest.raises(StoreLocked) as info:
                SqliteStorage(names[key])
            assert f"in use by pid {os.getpid()} (this process) on host {socket.gethostname()}" in str(info.value)
        # the refused opens did not disturb the owner's connection
        first.commit(2, [conv(2)], [])
        assert [c.id for c in first.conversations()] == [1, 2]
        assert lock_holder(names["hardlink"]) == os.getpid()
    finally:
        first.close()
    assert lock_holder(names["store"]) is None
    again = SqliteStorage(names["hardlink"])
    try:
        assert [c.id for c in again.conversations()] == [1, 2]
    finally:
        again.close()


def test_issue7_owner_file_names_the_owner_while_open(names: dict[str, Path]) -> None:
    """An open store has <file>.owner naming this pid, host and start time; close removes it, and no <file>.lock is made any more."""
    store = open_sqlite_storage(names["store"])
    sidecar = Path(f"{names['store']}.owner")
    try:
        data = json.loads(sidecar.read_text())
        assert data["pid"] == os.getpid() and data["host"] == socket.gethostname()
        assert 0 < data["started"] <= os.stat(names["store"]).st_mtime + 1
    finally:
        store.close()
    assert not sidecar.exists()
    assert sorted(p.name for p in names["store"].parent.iterdir()) == ["store.sqlite"]


def test_issue7_unwritable_owner_file_is_harmless(
    names: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """If <file>.owner cannot be written the store opens anyway (a warning is logged), and a second opener still learns the owner's pid from the lock table."""
    Path(f"{names['store']}.owner").mkdir()  # writing the sidecar fails: it is a directory
    with caplog.at_level(logging.WARNING, logger="pidurable"):
        store = open_sqlite_storage(names["store"])
    try:
        assert any("cannot write the owner file" in r.getMessage() for r in caplog.records)
        store.commit(1, [conv(1)], [])
        with pytest.raises(StoreLocked, match=rf"in use by pid {os.getpid()}"):
            open_sqlite_storage(names["store"])
    finally:
        store.close()
    assert Path(f"{names['store']}.owner").is_dir(), "close must not remove what it did not write"


def test_issue7_store_created_through_a_symlink_lives_at_the_target(names: dict[str, Path]) -> None:
    """A store created through a symlink is the target file: its -wal/-shm and owner file are next to the target, nothing next to the link."""
    names["symlink"].symlink_to(names["store"])
    store = open_sqlite_storage(names["symlink"])
    try:
        store.commit(1, [conv(1)], [])
        assert store.file == names["store"].resolve()
        assert {p.name for p in names["store"].parent.iterdir()} >= {"store.sqlite", "store.sqlite-wal", "store.sqlite.owner"}
        assert sorted(p.name for p in names["symlink"].parent.iterdir()) == ["soft.sqlite"]
    finally:
        store.close()


def test_issue7_a_copy_is_another_store(names: dict[str, Path]) -> None:
    """A copy of a store file is another file: it opens while the original is held, and records its own path as canonical."""
    original = open_sqlite_storage(names["store"])
    try:
        original.commit(1, [conv(1)], [])
        original.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        copy = names["hardlink"].with_name("copy.sqlite")
        copy.write_bytes(names["store"].read_bytes())
        other = open_sqlite_storage(copy)
        try:
            assert other.file == copy.resolve()
            assert other.conversations() == [Conversation(id=ConversationId(1))]
            (canonical,) = other.db.execute("SELECT value FROM meta WHERE key = 'canonical_path'").fetchone()
            assert canonical == str(copy.resolve())
        finally:
            other.close()
    finally:
        original.close()


def test_issue7_read_only_view_does_not_take_the_lock(names: dict[str, Path]) -> None:
    """A read-only view (inspect) through a hard link reads a held store without its lock, and closing it leaves the owner working."""
    owner = open_sqlite_storage(names["store"])
    try:
        owner.commit(1, [conv(1)], [])
        link_both(names)
        view = open_readonly(names["hardlink"])
        try:
            assert view.file == names["store"].resolve()
            assert view.conversations() == [Conversation(id=ConversationId(1))]
        finally:
            view.close()
        owner.commit(2, [conv(2)], [])
        assert [c.id for c in owner.conversations()] == [1, 2]
        with pytest.raises(StoreLocked):
            open_sqlite_storage(names["symlink"])
    finally:
        owner.close()


def test_issue7_owner_is_named_from_the_owner_file_without_proc_locks(
    names: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where /proc/locks cannot be read, lock_holder trusts <file>.owner for a live pid on this host, and ignores one naming a dead pid."""
    from pidurable.shell.storage import owner

    def unreadable(inode: object) -> int | None:
        raise PermissionError("/proc/locks")

    monkeypatch.setattr(owner, "flock_holder", unreadable)
    store = open_sqlite_storage(names["store"])
    try:
        assert lock_holder(names["store"]) == os.getpid()
    finally:
        store.close()
    assert lock_holder(names["store"]) is None  # close removed the owner file
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": 1.0}
    Path(f"{names['store']}.owner").write_text(json.dumps(stale))
    assert lock_holder(names["store"]) is None


def test_read_only_store_runs_the_full_open_and_refuses_writes(names: dict[str, Path]) -> None:
    """ReadOnlySqlite goes through SqliteStorage's own __init__ (read-only mode): it resolves the file, takes no lock, and refuses commits with StorageError."""
    from pidurable.shell.storage import StorageError

    with open_sqlite_storage(names["store"]) as store:
        store.commit(1, [conv(1)], [])
    names["symlink"].symlink_to(names["store"])
    view = open_readonly(names["symlink"])
    try:
        assert view.read_only and view.file == names["store"].resolve()
        assert lock_holder(names["store"]) is None
        with pytest.raises(StorageError, match="is open read-only"):
            view.commit(2, [conv(2)], [])
        assert view.commits() == 1 and view.store_id() == view.load().store_id
    finally:
        view.close()
    with open_sqlite_storage(names["store"]) as store:
        assert [c.id for c in store.conversations()] == [1]
