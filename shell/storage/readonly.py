"""Reading a SQLite store without owning it (``pidurable inspect``, ``replay``,
the demo's narrator), and finding out who owns it.

:class:`ReadOnlySqlite` is a :class:`~.sqlite.SqliteStorage` opened in its
read-only mode: the same checks as a writable open (a missing or empty file is
:class:`StoreMissing`, a file that is not a pidurable store is
:class:`NotAStore`), but the lock is never taken, nothing is migrated or
written, and close never checkpoints. So a store held by a live process can be
read; ``begin()``/``end()`` wrap reads in one read transaction, so a live
writer cannot change what is seen half-way. On read-only media it opens the
file ``immutable=1`` (see :mod:`.sqlite`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
from pathlib import Path

from . import owner
from .base import JournalRow
from .sqlite import SqliteStorage

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
            try:
                first = json.loads(events)[0]
            except (ValueError, IndexError, KeyError):
                continue
            if isinstance(first, dict) and first.get("type") == "opened":
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


def open_readonly(path: str | os.PathLike[str]) -> ReadOnlySqlite:
    """Open a store for reading; raises :class:`StorageError` (``StoreMissing``,
    ``NotAStore``...) with a readable message."""
    return ReadOnlySqlite(path)


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
