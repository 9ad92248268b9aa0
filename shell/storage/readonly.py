"""Reading a store without owning it (``pidurable inspect``, ``replay``,
``transcript``, the demo's narrator), and finding out who owns it.

:func:`open_view` opens either kind of store the commands take: a SQLite
file, or a JSONL store's directory (or its ``main.jsonl``). Both
views answer the same reads, :class:`StoreView`, so the commands do not ask
which kind they hold.

:class:`ReadOnlySqlite` is a :class:`~.sqlite.SqliteStorage` opened in its
read-only mode: the same checks as a writable open (a missing or empty file is
:class:`StoreMissing`, a file that is not a pidurable store is
:class:`NotAStore`), but the lock is never taken, nothing is migrated or
written, and close never checkpoints. So a store held by a live process can be
read; ``begin()``/``end()`` wrap reads in one read transaction, so a live
writer cannot change what is seen half-way. On read-only media it opens the
file ``immutable=1`` (see :mod:`.sqlite`).

:class:`ReadOnlyJsonl` reads a JSONL store's directory with the code a
writable open uses (jsonl_recovery.py: the same checks, the same errors),
but never takes its lock, never creates a file and never repairs: a torn
last line, a batch without its last line or a sidecar's unconfirmed tail
is simply not counted, which is exactly what a writable open would keep.
A live writer appends a commit's sidecar records before its main line and
reclaims sidecar files only after it, so ``main.jsonl`` is read first, then
at once the sidecars' bytes (parsed after: the window a reclamation can fall
in is short); a record it refers to that its file no longer holds (a
commit read too late to see the reclamation) means ``main.jsonl`` grew
meanwhile: both are read again, after a short pause that grows, for as
long as ``main.jsonl`` keeps growing, up to :data:`LIVE_PATIENCE` seconds (a
count of tries is not enough: under load a fast writer can reclaim within
each window several times in a row). A record still missing once
``main.jsonl`` stands still is real damage (``DamagedRecord``).
The whole store is read at open (the view is a snapshot), so
``begin``/``end`` have nothing to do.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from pidurable.core.model import Conversation, ConversationId, Entry, Submission, Task

from . import jsonl_recovery as recovery
from . import owner
from .base import DamagedRecord, JournalRow, NotAStore, StorageError, StoreMissing
from .jsonl import LOCK, MAIN
from .memory import MemoryStorage
from .sqlite import SqliteStorage

#: For how long (seconds) the JSONL view reads ``main.jsonl`` and the
#: sidecars again while a live writer reclaims sidecar records between its
#: reads (see the module comment); the pause between tries grows to 50 ms.
LIVE_PATIENCE = 10.0


class StoreView(Protocol):
    """What the read-only commands read of a store, whatever its kind."""

    @property
    def path(self) -> Path: ...  # the path it was opened by

    @property
    def schema_version(self) -> int: ...  # the store's layout version (SQLite schema, JSONL header schema)

    def holder(self) -> int | None: ...  # the pid of the live process that owns the store, or None

    def begin(self) -> None: ...  # start a consistent snapshot (until ``end``)

    def end(self) -> None: ...

    def close(self) -> None: ...

    def store_id(self) -> str | None: ...

    def commits(self) -> int: ...

    def journal(self) -> list[JournalRow]: ...

    def last_life(self) -> list[JournalRow]: ...

    def conversations(self) -> list[Conversation]: ...

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]: ...

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]: ...

    def entries(self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None) -> list[Entry]: ...

    def entry(self, entry_id: int) -> Entry | None: ...

    def entry_count(self, conversation_id: int) -> int: ...

    def document(self, conversation_id: ConversationId, kind: str) -> Any: ...

log = logging.getLogger("pidurable")


class ReadOnlySqlite(SqliteStorage):
    """A SQLite store opened read-only, without its lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, read_only=True, create=False)

    def begin(self) -> None:
        """Start one read transaction (a consistent snapshot until ``end``)."""
        self._rows("begin a read transaction", "BEGIN")

    def end(self) -> None:
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error as e:  # a read transaction has nothing to lose
            log.warning("Store %s: ending the read transaction failed (%s)", self.path, e)

    def store_id(self) -> str | None:
        rows = self._rows("reading meta", "SELECT value FROM meta WHERE key = 'store_id'")
        return None if not rows else str(rows[0][0])

    def commits(self) -> int:
        return int(self._rows("counting commits", "SELECT count(*) FROM journal")[0][0])

    def last_life(self) -> list[JournalRow]:
        """The journal from the last process open on (the rows from the
        newest one whose first event is ``opened``), or [] if none is."""
        candidates = self._rows(
            "reading the journal", "SELECT seq FROM journal WHERE events LIKE ? ORDER BY seq DESC", ['%"type":"opened"%']
        )
        for (seq,) in candidates:  # a host's JSON may spell "type":"opened" too: the first event decides
            ((events,),) = self._rows("reading the journal", "SELECT events FROM journal WHERE seq = ?", [seq])
            if _opens(self.path, seq, events):
                rows = self._rows(
                    "reading the journal",
                    "SELECT seq, format, events, writes FROM journal WHERE seq >= ? ORDER BY seq",
                    [seq],
                )
                return [JournalRow(seq=q, format=f, events=e, writes=w) for q, f, e, w in rows]
        return []

    def entry_count(self, conversation_id: int) -> int:
        rows = self._rows("counting entries", "SELECT count(*) FROM entries WHERE conversation_id = ?", [conversation_id])
        return int(rows[0][0])

    def holder(self) -> int | None:
        return lock_holder(self.file)


class ReadOnlyJsonl:
    """A JSONL store read without its lock (see the module comment): its
    tables rebuilt in a :class:`~.memory.MemoryStorage` as a writable open
    rebuilds them, every read answered from there."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        #: The directory's real path (its ``lock`` is the store's lock on every name).
        self.dir = Path(os.path.realpath(self.path))
        self.main = self.dir / MAIN
        self._tables = MemoryStorage()
        self._tables.name = str(self.path)
        if not self.dir.exists():
            raise StoreMissing(f"Store {self.path} does not exist")
        if not self.dir.is_dir():
            raise NotAStore(f"{self.path} is not a directory (a JSONL store is one); it was left untouched")
        if not self.main.exists():
            raise StoreMissing(f"Store {self.path} does not exist (no {MAIN})")
        data = self._read_main()
        if not data:
            raise StoreMissing(f"Store {self.path} does not exist ({self.main} is empty)")
        files = recovery.read_files(self.dir)  # at once: the files are parsed once both are read
        give_up = time.monotonic() + LIVE_PATIENCE
        pause = 0.001
        while True:
            scan = recovery.scan_main(self.path, self.main, data)
            try:
                found = recovery.read_sidecars(self.dir, self.main, scan.commits, files)
                break
            except DamagedRecord:
                time.sleep(pause)  # (out of step with a writer's rhythm)
                pause = min(pause * 2, 0.05)
                again = self._read_main()
                if again == data or time.monotonic() > give_up:
                    raise
                log.debug("Store %s: %s grew while its sidecars were read; reading both again", self.path, MAIN)
                data, files = again, recovery.read_files(self.dir)
        recovery.rebuild(self._tables, scan.commits, found, scan.rows)
        self._store_id = scan.store_id  # None: only a torn header (a store being created)
        self._layout = scan.layout

    def _read_main(self) -> bytes:
        try:
            return self.main.read_bytes()
        except OSError as e:
            raise StorageError(f"Cannot read store {self.path}: {e.strerror or e}") from e

    @property
    def schema_version(self) -> int:
        return self._layout

    def holder(self) -> int | None:
        return lock_holder(self.dir / LOCK)

    def begin(self) -> None:
        """Nothing to do: the view was read whole at open (a snapshot)."""

    def end(self) -> None:
        """Nothing to do (see ``begin``)."""

    def close(self) -> None:
        """Nothing to release: the view holds no file open and no lock."""

    def store_id(self) -> str | None:
        return self._store_id

    def commits(self) -> int:
        return len(self._tables.journal())

    def journal(self) -> list[JournalRow]:
        return self._tables.journal()

    def last_life(self) -> list[JournalRow]:
        """The journal from the last process open on (see ``ReadOnlySqlite.last_life``)."""
        rows = self._tables.journal()
        for i in range(len(rows) - 1, -1, -1):
            if _opens(self.path, rows[i].seq, rows[i].events):
                return rows[i:]
        return []

    def conversations(self) -> list[Conversation]:
        return self._tables.conversations()

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]:
        return self._tables.tasks(conversation_id, live_only)

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]:
        return self._tables.submissions(conversation_id)

    def entries(self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None) -> list[Entry]:
        return self._tables.entries(conversation_id, upto, after)

    def entry(self, entry_id: int) -> Entry | None:
        return self._tables.entry(entry_id)

    def entry_count(self, conversation_id: int) -> int:
        return self._tables.entry_count(conversation_id)

    def document(self, conversation_id: ConversationId, kind: str) -> Any:
        return self._tables.document(conversation_id, kind)


def _opens(store: Path, seq: int, events: str) -> bool:
    """Whether a commit's events start with ``opened`` (a process life's
    first commit). Events that are not a JSON list are damage: reported
    (the pidurable logger), and the commit counts as not opening a life."""
    try:
        first = json.loads(events)[0]
    except (ValueError, IndexError, KeyError, TypeError) as e:
        log.warning("Store %s: the events of commit %s are unreadable (%s): not taken as a process life's start",
                    store, seq, e)
        return False
    return isinstance(first, dict) and first.get("type") == "opened"


def open_readonly(path: str | os.PathLike[str]) -> ReadOnlySqlite:
    """Open a SQLite store for reading; raises :class:`StorageError`
    (``StoreMissing``, ``NotAStore``...) with a readable message."""
    return ReadOnlySqlite(path)


def is_jsonl_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a JSONL store: a directory (what else it holds
    is checked at open), or a file starting with a JSONL store's header (its
    ``main.jsonl``)."""
    p = Path(path)
    if p.is_dir():
        return True
    try:
        with p.open("rb") as f:
            return f.read(len(recovery.HEADER_PREFIX)) == recovery.HEADER_PREFIX
    except OSError:
        return False


def open_view(path: str | os.PathLike[str]) -> StoreView:
    """Open a store of either kind for reading, by what ``path`` is: a
    directory is a JSONL store (a file holding a JSONL header, its
    ``main.jsonl``, names its directory), anything else a SQLite file.
    Raises :class:`StorageError` (``StoreMissing``, ``NotAStore``,
    ``DamagedRecord``...) with the message a writable open gives."""
    p = Path(path)
    if p.is_dir():
        return ReadOnlyJsonl(p)
    if is_jsonl_store(p):
        return ReadOnlyJsonl(p.parent)
    return ReadOnlySqlite(p)


def lock_holder(path: str | os.PathLike[str]) -> int | None:
    """The pid of the live process holding the store, or None.

    Looked up without touching the lock: ``/proc/locks`` (Linux) lists FLOCK
    holders by inode, and the store's lock is a flock on the database file
    itself (any name of it: pass ``ReadOnlySqlite.file`` or any link). Where
    ``/proc/locks`` is unreadable, the owner file ``<file>.owner`` is trusted
    if it names this host and a live pid (a hint only).
    """
    real = Path(os.path.realpath(path))
    try:
        inode = owner.inode_of(os.stat(real))
    except OSError:
        return None
    try:
        return owner.flock_holder(inode)
    except OSError as e:
        log.debug("/proc/locks unreadable (%s); trusting the owner file", e)
    found = owner.read_owner(real)
    if found is None or found.host != socket.gethostname() or found.pid <= 0:
        return None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return found.pid  # alive, owned by another user
    return found.pid
