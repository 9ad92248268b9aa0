"""SQLite storage via sqlite-utils: one transaction per commit, WAL by default.

The layout, its migrations and the check that a file has it are in
:mod:`.sqlite_layout`. A commit is BEGIN ... COMMIT (what ``db.atomic()``
does, written out: :meth:`SqliteStorage.commit_many`) around plain ``INSERT``
statements (an upsert where a row is replaced: ``sqlite_layout.UPSERT``),
rolled back on any error; ``with db.conn:`` is not used because it is not
atomic around sqlite-utils writes.

Opening checks before it writes anything, in this order:

1. The name is resolved (``os.path.realpath``): through a symlink SQLite opens
   the target, so the ``-wal``/``-shm`` files always have one name.
2. Ownership (see :mod:`.owner`): an exclusive ``flock`` on a descriptor of
   the file itself, so every name of the file (hard link, symlink) meets the
   same lock; a second opener, in this process or another, gets
   :class:`StoreLocked` naming the owner's pid, host and start time.
3. What the file is, read under the lock: missing or 0 bytes is a new store
   (or :class:`StoreMissing` with ``create=False``); no ``SQLite format 3``
   header is :class:`NotAStore`; a SQLite file is read through a separate
   read-only connection and must have the ``schema`` and ``meta`` tables with
   a store_id (else :class:`NotAStore` listing its tables) and an integer
   version this code reads. A refused file is left as it was.
4. Hard links: ``meta.canonical_path`` is the real path the store was created
   at. If that path still names the same inode, SQLite opens it by that name
   (so every link shares one ``-wal``); otherwise the opened path becomes the
   canonical one (the store was moved or copied). A new store checkpoints its
   creation, so the layout and the canonical path are in the main file where
   an opener by another name finds them.
5. Only then the read-write connection, WAL, migrations and the owner file.

Failures: every SQLite error (open, migrate, load, reads, commit) raises
:class:`StorageError` naming the file and the operation; a record that does
not decode raises :class:`DamagedRecord` naming its table and row. ``close()``
always releases the lock. A checkpoint that fails at close is logged as a
warning on the ``pidurable`` logger, not raised: the commits are safe in the
``-wal`` file and the next open reads them, and hosts close in ``finally``
blocks, where raising would hide the error that made them close.

Read-only mode (``read_only=True``, used by ``pidurable inspect``/``replay``
through :class:`~.readonly.ReadOnlySqlite`): the same checks, but no lock, no
owner file, no migration and no write. Without a ``-wal`` file no connection
has the store open (SQLite removes it when the last one closes), so the main
file is read ``immutable=1`` and nothing is created next to it. With a
``-wal`` file SQLite opens the store ``mode=ro`` and reads the live store
consistently; on read-only media (the directory cannot be written, so SQLite
cannot create the ``-shm`` it then needs) an empty ``-wal`` is read
``immutable=1`` and a ``-wal`` holding commits is refused with an explanation.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import sqlite_utils

from pidurable.core.effects import Write
from pidurable.core.events import Event
from pidurable.core.model import (
    ConversationId,
    TaskId,
)

from . import live, sql_reads, owner, sqlite_documents, sqlite_entries, sqlite_writes
from .sqlite_checkpoints import BACKSTOP_PAGES, Checkpointer
from .codec import writes_digest
from .base import (
    SCHEMA_VERSION,
    DamagedRecord,
    Loaded,
    NotAStore,
    StorageError,
    StoreFenced,
    StoreLocked,
    StoreMissing,
    Row,
    encode_commit_text,
)
from .sqlite_layout import MIGRATIONS, SQLITE_MAGIC, Found, cheap_checks, inspect_store
from . import sqlite_retention
from .sqlite_writes import FORMAT as _FORMAT

log = logging.getLogger("pidurable")


def _wal_has_content(file: Path) -> bool:
    try:
        return os.path.getsize(f"{file}-wal") > 0
    except FileNotFoundError:
        return False
    except OSError as e:  # cannot tell: assume it has, so SQLite itself looks
        log.debug("cannot stat %s-wal (%s)", file, e)
        return True


class SqliteStorage(
    sqlite_documents.DocumentReads, sqlite_entries.EntryReads, sql_reads.RecordReads, live.SqlLiveReads
):
    """A store in one SQLite file (see the module comment for how it opens)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        create: bool = True,
        read_only: bool = False,
        journal_retention: int | str = "all",
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        #: ``"all"`` or the newest commits whose journal rows are kept (see
        #: :meth:`prune_journal`).
        self.journal_retention = sqlite_retention.check_retention(journal_retention)
        self._commits_since_prune: int | None = None  # None: not pruned in this process yet
        self.path = Path(path)
        self.name = str(self.path)
        self.read_only = read_only
        #: The file SQLite opens: the real path, or a hard-linked store's canonical name.
        self.file = Path(os.path.realpath(self.path))
        self._synchronous = synchronous
        self._fenced = False
        self._fd: int | None = None  # a descriptor of the file; flocked unless read-only
        self._inode: owner.Inode = (0, 0)
        self._locked = False
        self._owner_written = False
        self._conn: sqlite3.Connection | None = None
        self._db: sqlite_utils.Database | None = None
        self._lineages: dict[ConversationId, Any] = {}
        #: WAL checkpoints on a thread (sqlite_checkpoints.py); None: read-only or not open yet.
        self._checkpointer: Checkpointer | None = None
        try:
            self._open(create=create and not read_only)
        except BaseException:
            self._abandon()
            raise

    def __enter__(self) -> SqliteStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # opening -----------------------------------------------------------------
    def _open(self, *, create: bool) -> None:
        if not self.path.parent.is_dir():
            where = f"directory {self.path.parent} does not exist"
            if not create:
                raise StoreMissing(f"Store {self.path} does not exist ({where})")
            raise StorageError(f"Cannot open store {self.path}: {where}")
        self._open_fd(create)
        if not self.read_only:
            self._lock()
        try:
            size = os.fstat(self._descriptor()).st_size
            head = os.pread(self._descriptor(), 100, 0) if size else b""
        except OSError as e:
            raise StorageError(f"Cannot read store {self.path}: {e.strerror or e}") from e
        found: Found | None = None
        if size == 0:
            if not create:
                raise StoreMissing(f"Store {self.path} does not exist (the file is empty)")
            if _wal_has_content(self.file):
                raise StorageError(
                    f"Cannot create store {self.path}: the file is empty but {self.file}-wal holds data "
                    "(a store deleted without its -wal file?); move the -wal file away first"
                )
        elif len(head) < 100 or not head.startswith(SQLITE_MAGIC):
            raise NotAStore(f"{self.path} is not a SQLite database; it was left untouched")
        else:
            probe, found = self._probe(self.file)
            canonical = self._canonical(found)
            if self.read_only and canonical == self.file:
                self._attach(probe)
                return
            self._close_connection(probe)
            self.file = canonical
        if self.read_only:
            self._attach(self._connect(self._ro_uri(self.file), uri=True))
            return
        self._attach(self._connect(str(self.file), uri=False))
        self._prepare()
        self._migrate(found)
        self._owner_written = owner.write_owner(self.file)
        connect = partial(self._connect, str(self.file), uri=False)  # (the checkpoints' own connection)
        self._checkpointer = Checkpointer(self.name, connect, self._close_connection)

    def _descriptor(self) -> int:
        assert self._fd is not None
        return self._fd

    def _open_fd(self, create: bool) -> None:
        flags = os.O_RDONLY | os.O_CLOEXEC
        try:
            st = os.stat(self.file)
        except FileNotFoundError:
            if not create:
                raise StoreMissing(f"Store {self.path} does not exist") from None
            flags |= os.O_CREAT
        except OSError as e:
            raise StorageError(f"Cannot open store {self.path}: {e.strerror or e}") from e
        else:
            self._inode = owner.inode_of(st)
            if not stat.S_ISREG(st.st_mode):
                raise NotAStore(f"{self.path} is not a regular file")
            if not self.read_only and owner.owned_here(self._inode):
                # no second descriptor: closing it would drop SQLite's locks (see owner.py)
                raise StoreLocked(self._locked_message())
        try:
            self._fd = os.open(self.file, flags, 0o644)
            st = os.fstat(self._fd)
        except OSError as e:
            what = "create" if flags & os.O_CREAT else "open"
            raise StorageError(f"Cannot {what} store {self.path}: {e.strerror or e}") from e
        self._inode = owner.inode_of(st)
        if not stat.S_ISREG(st.st_mode):
            raise NotAStore(f"{self.path} is not a regular file")

    def _lock(self) -> None:
        try:
            taken = owner.try_lock(self._inode, self._descriptor())
        except OSError as e:
            raise StorageError(f"Cannot lock store {self.path}: {e.strerror or e}") from e
        if not taken:
            raise StoreLocked(self._locked_message())
        self._locked = True

    def _locked_message(self) -> str:
        names = f"{self.path}" if str(self.path) == str(self.file) else f"{self.path} (= {self.file})"
        return f"Store {names} is in use by {self._holder()}; close it there first"

    def _holder(self) -> str:
        """Who holds the store: this process, or the owner file (checked
        against /proc/locks where it can be), or /proc/locks alone."""
        if owner.owned_here(self._inode):
            return owner.me().describe()
        try:
            pid = owner.flock_holder(self._inode)
        except OSError as e:
            log.debug("/proc/locks unreadable (%s); trusting the owner file", e)
            pid = None
        for file in self._owner_files():
            found = owner.read_owner(file)
            if found is not None and (pid is None or found.pid == pid):
                return found.describe()
        if pid is not None:
            return f"pid {pid} on this host"
        return "another process (its owner file is missing)"

    def _owner_files(self) -> Iterator[Path]:
        yield self.file
        try:
            probe, found = self._probe(self.file)
        except StorageError as e:  # only a hint for the message
            log.debug("cannot read %s for its canonical path: %s", self.path, e)
            return
        self._close_connection(probe)
        if found.canonical is not None and found.canonical != str(self.file):
            yield Path(found.canonical)

    def _ro_uri(self, file: Path) -> str:
        """How a read-only connection opens ``file``. Without a -wal file no
        connection has it open in WAL mode (SQLite deletes the -wal when the
        last one closes), so the main file is the whole store: it is read
        ``immutable=1``, which creates no -wal/-shm next to a file that may
        not be ours. Under our lock an empty -wal means the same."""
        uri = file.as_uri()
        if not self.read_only:
            return uri + ("?mode=ro" if _wal_has_content(file) else "?immutable=1")
        if not os.path.exists(f"{file}-wal"):
            return uri + "?immutable=1"
        if os.access(file.parent, os.W_OK) or os.path.exists(f"{file}-shm"):
            return uri + "?mode=ro"
        if _wal_has_content(file):
            raise StorageError(
                f"Cannot read store {self.path}: its directory is read-only and {file}-wal holds commits "
                f"not yet in the main file; SQLite needs {file}-shm to read them. Copy the store with "
                "its -wal file to a writable directory, or open it once where it can be written."
            )
        return uri + "?immutable=1"  # read-only media and nothing in a -wal: the file is the whole store

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StorageError(f"Cannot open store {self.path}: {e}") from e
        owner.connection_opened(self._inode)
        return conn

    def _probe(self, file: Path) -> tuple[sqlite3.Connection, Found]:
        conn = self._connect(self._ro_uri(file), uri=True)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            return conn, inspect_store(conn, str(self.path))
        except sqlite3.Error as e:
            self._close_connection(conn)
            raise StorageError(f"Cannot read store {self.path}: {e}") from e
        except BaseException:
            self._close_connection(conn)
            raise

    def _canonical(self, found: Found) -> Path:
        """The stored canonical path if it names this very file (a hard link
        was opened), else the opened file's real path."""
        if found.canonical is None or found.canonical == str(self.file):
            return self.file
        try:
            same = owner.inode_of(os.stat(found.canonical)) == self._inode
        except OSError as e:
            log.debug("store %s: canonical path %s is gone (%s)", self.path, found.canonical, e)
            return self.file
        return Path(found.canonical) if same else self.file

    def _attach(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # (no sqlite-utils plugins: other packages' code is not run on a store's
        # connection, and finding them scans every installed package's entry points)
        self._db = sqlite_utils.Database(conn, execute_plugins=False)

    def _prepare(self) -> None:
        try:
            (mode,) = self.db.execute("PRAGMA journal_mode=WAL").fetchone()
            self.db.execute(f"PRAGMA synchronous={self._synchronous}")
            self.db.execute("PRAGMA busy_timeout=5000")
            # SQLite's own checkpoints: the backstop of the thread's (sqlite_checkpoints.py)
            self.db.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        except sqlite3.Error as e:
            hint = ""
            if not (os.access(self.file, os.W_OK) and os.access(self.file.parent, os.W_OK)):
                hint = "; the file or its directory is read-only (read it with pidurable inspect or replay)"
            raise StorageError(f"Store {self.path}: open failed ({e}){hint}") from e
        if str(mode).lower() != "wal":
            raise StorageError(f"Store {self.path}: open failed (journal mode is {mode}, not wal)")

    def _migrate(self, found: Found | None) -> None:
        """Create (``found`` is None) or upgrade the layout in one transaction,
        and record the canonical path where it changed."""
        db = self.db
        version = 0 if found is None else found.version
        with self._failing("create" if found is None else "migrate"):
            with db.atomic():
                if found is None:
                    db.execute("CREATE TABLE schema (version INTEGER NOT NULL)")
                for v in range(version + 1, SCHEMA_VERSION + 1):
                    MIGRATIONS[v](db)
                cheap_checks(db)
                if found is None:
                    db.execute("INSERT INTO schema (version) VALUES (?)", [SCHEMA_VERSION])
                elif version != SCHEMA_VERSION:
                    db.execute("UPDATE schema SET version = ?", [SCHEMA_VERSION])
                if found is None or found.canonical != str(self.file):
                    db.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('canonical_path', ?)", [str(self.file)]
                    )
            if found is None:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @contextmanager
    def _failing(self, op: str) -> Iterator[None]:
        """SQLite errors inside become StorageError naming the file and ``op``."""
        try:
            yield
        except sqlite3.Error as e:
            raise StorageError(f"Store {self.path}: {op} failed ({e})") from e

    @property
    def db(self) -> sqlite_utils.Database:
        if self._db is None:
            raise StorageError(f"Store {self.path} is closed")
        return self._db

    def _rows(self, op: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._failing(op):
            return self.db.execute(sql, list(params)).fetchall()

    @property
    def schema_version(self) -> int:
        return int(self._rows("reading the schema version", "SELECT version FROM schema")[0][0])

    # lifecycle -----------------------------------------------------------------
    def load(self) -> Loaded:
        convs, tasks, subs = self._open_records()
        next_id, next_seq, store_id = self._counters()
        return Loaded(
            next_id=next_id,
            next_seq=next_seq,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=store_id,
            documents=self.live_documents(),
        )

    def load_live(self, roots: Sequence[ConversationId] | None = None) -> Loaded:
        """What open needs: the live work only (live.py; the store is this
        process's, so no read transaction is needed)."""
        tasks, subs, convs, docs = self._live()
        next_id, next_seq, store_id = self._counters()
        loaded = Loaded(
            next_id=next_id, next_seq=next_seq, conversations=convs, tasks=tasks, submissions=subs,
            store_id=store_id, documents=docs,
        )
        if roots is None:
            return loaded
        return live.in_trees(loaded, roots, self._owner_of, self.task)

    def _owner_of(self, cid: ConversationId) -> TaskId | None:
        found = self.conversation(cid)
        return None if found is None else found.owner_task_id

    def _counters(self) -> tuple[int, int, str]:
        """``next_id``, ``next_seq`` and the store id."""
        name = self.name
        ((max_id,),) = self._rows(
            "load",
            "SELECT max(m) FROM (SELECT max(id) AS m FROM conversations UNION ALL SELECT max(id) FROM entries "
            "UNION ALL SELECT max(id) FROM tasks UNION ALL SELECT max(id) FROM submissions "
            "UNION ALL SELECT max(id) FROM document_records)",
        )
        ((seq,),) = self._rows("load", "SELECT max(seq) FROM journal")
        ids = self._rows("load", "SELECT value FROM meta WHERE key = 'store_id'")
        if not ids:
            raise DamagedRecord(f"Store {name}: damaged record in meta: no store_id")
        return max(1, int(max_id or 0)) + 1, (int(seq) + 1) if seq is not None else 1, str(ids[0][0])

    def fence(self) -> None:
        """Simulate a crash: no later write reaches the file."""
        self._fenced = True
        self._stop_checkpoints()

    def _stop_checkpoints(self) -> None:
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.stop()

    def close(self) -> None:
        """Release the store; the lock is released on every path. A fenced
        store is dropped without a checkpoint, as a killed process would
        leave it; a failing checkpoint is logged (see the module comment)."""
        self._stop_checkpoints()  # (joins a thread, closes a connection: logs, never raises)
        conn, self._conn, self._db = self._conn, None, None
        try:
            if conn is not None:
                try:
                    if not (self._fenced or self.read_only):
                        self._checkpoint(conn)
                finally:
                    self._close_connection(conn)
        finally:
            self._release()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as e:
            log.warning(
                "Store %s: checkpoint at close failed (%s); its commits stay in %s-wal and the next open reads them",
                self.path,
                e,
                self.file,
            )
            return
        if busy:
            log.info("Store %s: checkpoint at close was blocked by a reader; the -wal file stays", self.path)

    def _close_connection(self, conn: sqlite3.Connection) -> None:
        try:
            conn.close()
        except sqlite3.Error as e:
            log.warning("Store %s: closing the SQLite connection failed (%s)", self.path, e)
        finally:
            owner.connection_closed(self._inode)

    def _abandon(self) -> None:
        """Undo a failed open: no checkpoint, no write."""
        self._stop_checkpoints()
        conn, self._conn, self._db = self._conn, None, None
        try:
            if conn is not None:
                self._close_connection(conn)
        finally:
            self._release()

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._owner_written:
                self._owner_written = False
                owner.remove_owner(self.file)
        finally:
            if self._locked:
                self._locked = False
                try:
                    owner.unlock(self._inode, fd)
                except OSError as e:
                    log.warning("Store %s: unlocking failed (%s)", self.path, e)
            else:
                owner.release_fd(self._inode, fd)

    # writes ------------------------------------------------------------------
    def commit(self, seq: int, writes: Sequence[Write], events: Sequence[Event]) -> None:
        self.commit_many([(seq, writes, events)])

    def commit_many(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None:
        """Several commits in ONE transaction, all or nothing."""
        if self._fenced:
            raise StoreFenced(f"store {self.path} is fenced")
        if self.read_only:
            raise StorageError(f"Store {self.path} is open read-only")
        # encode_commit's rows, events and digest (inline: a call per commit), the
        # batch's rows in one list and its journal rows' values in another (sqlite_writes)
        rows: list[Row] = []
        journal: list[Any] = []
        for seq, writes, events in batch:
            commit_rows, events_text, writes_text = encode_commit_text(seq, writes, events)
            rows += commit_rows
            journal += (seq, _FORMAT, events_text, writes_digest(writes_text))
        db = self.db
        conn = db.conn
        # one cursor runs the batch's statements: ``conn.execute`` makes a
        # cursor for each (7 per commit; issue 11 item 2: a cheap write path)
        cur = conn.cursor()
        try:
            if conn.in_transaction:  # inside a transaction already: a savepoint (db.atomic() makes one)
                with db.atomic():
                    sqlite_writes.write_all(cur, rows, journal)
            else:
                # what db.atomic() does outside a transaction, without its two
                # generator frames per commit (issue 11 item 2)
                cur.execute("BEGIN")
                try:
                    sqlite_writes.write_all(cur, rows, journal)
                    cur.execute("COMMIT")
                except BaseException:
                    # (a no-op if the error already ended the transaction, so
                    # the original exception propagates)
                    db.rollback()
                    raise
        except sqlite3.IntegrityError as e:
            # rolled back: a duplicate entry id or a seq that does not increase
            raise StorageError(f"Store {self.path} refused the commit (nothing was written): {e}") from e
        except sqlite3.Error as e:
            # disk full, I/O error, database locked past the busy timeout...:
            # the transaction was rolled back; this harness stops, and a new
            # one opened on the store recovers from the last commit.
            raise StorageError(f"Store {self.path}: commit failed, nothing was written ({e})") from e
        checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.committed()
        if self.journal_retention != "all":
            since = self._commits_since_prune
            if since is None or since + len(batch) >= sqlite_retention.PRUNE_EVERY:
                self.prune_journal()
            else:
                self._commits_since_prune = since + len(batch)

    # journal retention and compaction (issue 11): sqlite_retention.py ----------
    def prune_journal(self) -> int:
        """Drop the journal rows ``journal_retention`` does not keep (how many)."""
        self._commits_since_prune = 0
        return sqlite_retention.prune(self)

    def journal_span(self) -> tuple[int, int] | None:
        """The first and last seq the journal holds (None: no row)."""
        return sqlite_retention.span(self)

    def compact(self) -> int:
        """Rewrite pre-schema-4 rows lean, VACUUM, truncate the WAL (rows rewritten)."""
        return sqlite_retention.compact(self)


def open_sqlite_storage(
    path: str | os.PathLike[str],
    synchronous: str = "NORMAL",
    *,
    create: bool = True,
    journal_retention: int | str = "all",
) -> SqliteStorage:
    """Open a SQLite store, creating it if ``path`` does not exist or is an
    empty file (unless ``create=False``: then :class:`StoreMissing`). Raises
    ``StoreLocked`` if another live process or harness holds it, and
    ``NotAStore`` for a file that is not a pidurable store (left untouched).
    ``journal_retention``: ``"all"`` (the default) keeps every journal row;
    a number N keeps the newest N commits' rows and those of runs not yet
    settled (:meth:`SqliteStorage.prune_journal`); the records are always
    kept, but ``pidurable replay`` can check only from the first process life
    the journal still holds."""
    return SqliteStorage(path, synchronous=synchronous, create=create, journal_retention=journal_retention)

