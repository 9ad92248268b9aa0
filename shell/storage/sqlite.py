"""SQLite storage via sqlite-utils: one transaction per commit, WAL by default.

Layout (schema version 1)::

    schema(version)                               the layout version, one row
    meta(key PK, value)                           store_id
    conversations(id PK, owner_task_id, record)
    entries(id PK, conversation_id, seq, record)  idx (conversation_id, id)
    tasks(id PK, conversation_id, kind, status, owner, record)
                                                  partial idx on live status
    submissions(id PK, conversation_id, request_id, status, record)
                                                  idx (conversation_id, request_id)
    documents(conversation_id, kind, seq, value)  PK (conversation_id, kind)
    document_revisions(conversation_id, kind, seq, value)   rewindable docs
    journal(seq PK, format, events, writes)       the events behind each commit

Every record is stored whole as JSON in ``record``; the other columns are
indexes. A commit is ``db.atomic()`` (BEGIN ... COMMIT) around plain
``INSERT OR REPLACE`` statements; ``with db.conn:`` is not used because it is
not atomic around sqlite-utils writes.

Ownership: an exclusive ``flock`` on ``<file>.lock`` held while the store is
open. A second opener (process or harness) gets :class:`StoreLocked` naming the
file; the OS drops the lock when its owner dies, so a crashed owner's lock is
reclaimed by the next open.

Migrations: ``MIGRATIONS[v]`` upgrades a store from version ``v - 1`` to ``v``
inside one transaction; a store newer than this code is refused.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlite_utils

from pidurable.core.effects import Write
from pidurable.core.events import Event
from pidurable.core.model import (
    Conversation,
    ConversationId,
    Entry,
    Submission,
    SubmissionId,
    Task,
    TaskId,
)

from . import codec
from .base import (
    REWINDABLE_DOCS,
    SCHEMA_VERSION,
    JournalRow,
    Loaded,
    StorageError,
    StoreFenced,
    StoreLocked,
    conv_state,
    decode_doc,
    encode_commit,
)


def _migrate_v1(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY, owner_task_id INTEGER, record TEXT NOT NULL);
        CREATE TABLE entries (
            id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL,
            seq INTEGER NOT NULL, record TEXT NOT NULL);
        CREATE INDEX entries_by_conversation ON entries (conversation_id, id);
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, kind TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN
                ('pending','running','waiting','completing','terminal')),
            owner INTEGER, record TEXT NOT NULL);
        CREATE INDEX tasks_live ON tasks (status, id) WHERE status != 'terminal';
        CREATE INDEX tasks_by_conversation ON tasks (conversation_id, id);
        CREATE TABLE submissions (
            id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, request_id TEXT,
            status TEXT NOT NULL CHECK (status IN ('queued','placed','done','unanswered')),
            record TEXT NOT NULL);
        CREATE INDEX submissions_by_request ON submissions (conversation_id, request_id);
        CREATE INDEX submissions_unsettled ON submissions (status, id)
            WHERE status IN ('queued','placed');
        CREATE TABLE documents (
            conversation_id INTEGER NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL,
            value TEXT NOT NULL, PRIMARY KEY (conversation_id, kind));
        CREATE TABLE document_revisions (
            conversation_id INTEGER NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL,
            value TEXT NOT NULL, PRIMARY KEY (conversation_id, kind, seq));
        CREATE TABLE journal (
            seq INTEGER PRIMARY KEY, format INTEGER NOT NULL,
            events TEXT NOT NULL, writes TEXT NOT NULL);
        """
    )
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", [str(uuid.uuid4())])


MIGRATIONS: dict[int, Callable[[sqlite_utils.Database], None]] = {1: _migrate_v1}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))

_UPSERT = {
    "conversations": "INSERT OR REPLACE INTO conversations (id, owner_task_id, record) VALUES (:id, :owner_task_id, :record)",
    "entries": "INSERT INTO entries (id, conversation_id, seq, record) VALUES (:id, :conversation_id, :seq, :record)",
    "tasks": "INSERT OR REPLACE INTO tasks (id, conversation_id, kind, status, owner, record) "
    "VALUES (:id, :conversation_id, :kind, :status, :owner, :record)",
    "submissions": "INSERT OR REPLACE INTO submissions (id, conversation_id, request_id, status, record) "
    "VALUES (:id, :conversation_id, :request_id, :status, :record)",
    "documents": "INSERT OR REPLACE INTO documents (conversation_id, kind, seq, value) "
    "VALUES (:conversation_id, :kind, :seq, :value)",
}


class SqliteStorage:
    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = Path(path)
        self.name = str(self.path)
        parent = self.path.parent
        if not parent.is_dir():
            raise StorageError(f"Cannot open store {self.path}: directory {parent} does not exist")
        self._synchronous = synchronous
        self._lock_fd: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._db: sqlite_utils.Database | None = None
        self._fenced = False
        self._acquire_lock()
        try:
            self._connect()
        except BaseException:
            self._release_lock()
            raise

    # ownership ---------------------------------------------------------------
    def _acquire_lock(self) -> None:
        lock_path = str(self.path) + ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"Store {self.path} is in use by another process or harness "
                f"(lock {lock_path} is held); close it there first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _connect(self) -> None:
        try:
            conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StorageError(f"Cannot open store {self.path}: {e}") from e
        self._conn = conn
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA busy_timeout=5000")
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StorageError(f"Cannot open store {self.path}: {e}") from e
        self._db = sqlite_utils.Database(conn)
        try:
            self._migrate()
        except BaseException:
            conn.close()
            self._conn = self._db = None
            raise

    def _migrate(self) -> None:
        db = self.db
        with db.atomic():
            db.execute("CREATE TABLE IF NOT EXISTS schema (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"Store {self.path} has schema version {version}; this pidurable reads "
                    f"versions up to {SCHEMA_VERSION}. Upgrade pidurable."
                )
            for v in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[v](db)
            if row is None:
                db.execute("INSERT INTO schema (version) VALUES (?)", [SCHEMA_VERSION])
            elif version != SCHEMA_VERSION:
                db.execute("UPDATE schema SET version = ?", [SCHEMA_VERSION])

    @property
    def db(self) -> sqlite_utils.Database:
        if self._db is None:
            raise StorageError(f"Store {self.path} is closed")
        return self._db

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("SELECT version FROM schema").fetchone()[0])

    # lifecycle -----------------------------------------------------------------
    def load(self) -> Loaded:
        db = self.db
        docs: dict[int, dict[str, str]] = {}
        for cid, kind, value in db.execute("SELECT conversation_id, kind, value FROM documents"):
            docs.setdefault(cid, {})[kind] = value
        convs = tuple(
            conv_state(codec.from_json(rec, Conversation), docs.get(cid, {}))
            for cid, rec in db.execute("SELECT id, record FROM conversations ORDER BY id")
        )
        tasks = tuple(
            codec.from_json(rec, Task)
            for (rec,) in db.execute("SELECT record FROM tasks WHERE status != 'terminal' ORDER BY id")
        )
        subs = tuple(
            codec.from_json(rec, Submission)
            for (rec,) in db.execute(
                "SELECT record FROM submissions WHERE status IN ('queued','placed') ORDER BY id"
            )
        )
        max_id = 1
        for table in ("conversations", "entries", "tasks", "submissions"):
            (m,) = db.execute(f"SELECT max(id) FROM {table}").fetchone()
            if m is not None:
                max_id = max(max_id, int(m))
        (seq,) = db.execute("SELECT max(seq) FROM journal").fetchone()
        (store_id,) = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        return Loaded(
            next_id=max_id + 1,
            next_seq=(int(seq) + 1) if seq is not None else 1,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=store_id,
        )

    def fence(self) -> None:
        """Simulate a crash: no later write reaches the file."""
        self._fenced = True

    def close(self) -> None:
        """Release the store. A fenced store is dropped without a checkpoint,
        as a killed process would leave it."""
        if self._conn is not None:
            try:
                if not self._fenced:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._conn.close()
                self._conn = None
                self._db = None
        self._release_lock()

    # writes ------------------------------------------------------------------
    def commit(self, seq: int, writes: Sequence[Write], events: Sequence[Event]) -> None:
        self.commit_many([(seq, writes, events)])

    def commit_many(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None:
        """Several commits in ONE transaction, all or nothing."""
        if self._fenced:
            raise StoreFenced(f"store {self.path} is fenced")
        encoded = [(seq, *encode_commit(seq, writes, events)) for seq, writes, events in batch]
        conn = self.db.conn
        try:
            with self.db.atomic():
                for seq, rows, ev_text, wr_text in encoded:
                    self._write_one(conn, seq, rows, ev_text, wr_text)
        except sqlite3.IntegrityError as e:
            # rolled back: a duplicate entry id or a seq that does not increase
            raise StorageError(f"Store {self.path} refused the commit (nothing was written): {e}") from e
        except sqlite3.Error as e:
            # disk full, I/O error, database locked past the busy timeout...:
            # the transaction was rolled back; this harness stops, and a new
            # one opened on the store recovers from the last commit.
            raise StorageError(f"Store {self.path}: commit failed, nothing was written ({e})") from e

    @staticmethod
    def _write_one(conn: sqlite3.Connection, seq: int, rows: list[Any], ev_text: str, wr_text: str) -> None:
        for row in rows:
            conn.execute(_UPSERT[row.table], row.columns)
            if row.table == "documents" and row.columns["kind"] in REWINDABLE_DOCS:
                conn.execute(
                    "INSERT OR REPLACE INTO document_revisions (conversation_id, kind, seq, value) "
                    "VALUES (:conversation_id, :kind, :seq, :value)",
                    row.columns,
                )
        conn.execute(
            "INSERT INTO journal (seq, format, events, writes) VALUES (?, ?, ?, ?)",
            (seq, codec.FORMAT_VERSION, ev_text, wr_text),
        )

    # reads -------------------------------------------------------------------
    def _one(self, sql: str, params: Sequence[Any], cl: type) -> Any:
        row = self.db.execute(sql, list(params)).fetchone()
        return None if row is None else codec.from_json(row[0], cl)

    def entries(
        self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None
    ) -> list[Entry]:
        """A conversation's entries, oldest first; ``after < id <= upto``."""
        cur = self.db.execute(
            "SELECT record FROM entries WHERE conversation_id = ? AND id > ? AND id <= ? ORDER BY id",
            [conversation_id, -1 if after is None else after, (1 << 62) if upto is None else upto],
        )
        return [codec.from_json(rec, Entry) for (rec,) in cur]

    def entry(self, entry_id: int) -> Entry | None:
        return self._one("SELECT record FROM entries WHERE id = ?", [entry_id], Entry)  # type: ignore[no-any-return]

    def submission(self, submission_id: SubmissionId) -> Submission | None:
        return self._one("SELECT record FROM submissions WHERE id = ?", [submission_id], Submission)  # type: ignore[no-any-return]

    def submission_by_request(self, conversation_id: ConversationId, request_id: str) -> Submission | None:
        return self._one(  # type: ignore[no-any-return]
            "SELECT record FROM submissions WHERE conversation_id = ? AND request_id = ?",
            [conversation_id, request_id],
            Submission,
        )

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]:
        if conversation_id is None:
            cur = self.db.execute("SELECT record FROM submissions ORDER BY id")
        else:
            cur = self.db.execute(
                "SELECT record FROM submissions WHERE conversation_id = ? ORDER BY id", [conversation_id]
            )
        return [codec.from_json(rec, Submission) for (rec,) in cur]

    def task(self, task_id: TaskId) -> Task | None:
        return self._one("SELECT record FROM tasks WHERE id = ?", [task_id], Task)  # type: ignore[no-any-return]

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]:
        where, params = [], []
        if conversation_id is not None:
            where.append("conversation_id = ?")
            params.append(conversation_id)
        if live_only:
            where.append("status != 'terminal'")
        sql = "SELECT record FROM tasks" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [codec.from_json(rec, Task) for (rec,) in self.db.execute(sql, params)]

    def conversation(self, conversation_id: ConversationId) -> Conversation | None:
        return self._one(  # type: ignore[no-any-return]
            "SELECT record FROM conversations WHERE id = ?", [conversation_id], Conversation
        )

    def conversations(self) -> list[Conversation]:
        return [
            codec.from_json(rec, Conversation)
            for (rec,) in self.db.execute("SELECT record FROM conversations ORDER BY id")
        ]

    def document(self, conversation_id: ConversationId, kind: str) -> Any:
        row = self.db.execute(
            "SELECT value FROM documents WHERE conversation_id = ? AND kind = ?", [conversation_id, kind]
        ).fetchone()
        return None if row is None else decode_doc(kind, row[0])

    def journal(self) -> list[JournalRow]:
        return [
            JournalRow(seq=seq, events=ev, writes=wr)
            for seq, ev, wr in self.db.execute("SELECT seq, events, writes FROM journal ORDER BY seq")
        ]


def open_sqlite_storage(path: str | os.PathLike[str], synchronous: str = "NORMAL") -> SqliteStorage:
    """Open (creating if needed) a SQLite store; raises ``StoreLocked`` if
    another live process or harness holds it."""
    return SqliteStorage(path, synchronous=synchronous)
