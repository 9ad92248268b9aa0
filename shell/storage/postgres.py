"""PostgreSQL storage (issue 13 item 1): the Storage protocol on psycopg 3.

The same protocol, rows and guarantees as SQLite (:mod:`.sqlite`): records
are the codec's bytes in ``text`` columns, encoded by
:func:`.base.encode_commit` before any I/O, so a store holds byte for byte
what a SQLite store holds; one transaction per ``commit`` and per
``commit_many`` batch (the loop groups the commits it has ready); the fork-
aware entry reads and the document reads are SQLite's own mixins (plain SQL
both engines run; ``?`` placeholders become psycopg's ``%s``). The layout and
its migrations: :mod:`.postgres_layout`.

Driver: psycopg 3's *sync* API with a ``psycopg_pool.ConnectionPool``.
psycopg's async API runs on asyncio only; from Trio the supported route is a
worker thread, so the reducer awaits :meth:`commit_many_async`, which runs
the sync commit through ``trio.to_thread.run_sync`` under a
``CapacityLimiter`` as wide as the pool: the Trio thread keeps serving model
streams, tools and hosts during the round trips, and the reducer still acts
only after the commit returned (persist, then act). Reads stay synchronous,
like every adapter's (hosts call them from sync code): each is one indexed
query on a pooled connection.

Ownership: one owner per store for now - a session-level
``pg_try_advisory_lock`` on a key derived from the store id, held by a
connection of its own for the store's life. A second opener, in this process
or on another machine, gets :class:`StoreLocked` naming the holder (its
``application_name`` carries the worker id; PostgreSQL's backend pid and
client address come from ``pg_stat_activity``). A killed owner's session
ends with its TCP connection and the lock goes with it. Many workers share
a store instead with ``shared=True`` (the same lock in share mode, so they
and a single owner exclude each other), each leasing conversation trees:
:mod:`.postgres_tree`, docs/scale-out.md.

Opening: connect; in one transaction under an advisory transaction lock on
the schema's name, look at the schema: absent or empty is a new store
(bootstrapped: ``meta`` with a store id and version 0), tables without
``meta``/store id are :class:`NotAStore` (left as they are), a newer version
is refused; then the store lock; then the migrations, each in a transaction;
then the pool.

Failures: every psycopg error becomes :class:`StorageError` naming the store
(host, port, database and schema - never the password) and the operation.
A connection lost during ``COMMIT`` leaves the outcome unknown; the harness
stops on the error either way, and the next open recovers from whatever the
store holds (the acts of that commit never ran).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg_pool
import trio

from pidurable.core.effects import Write
from pidurable.core.events import Event
from pidurable.core.model import (
    ConversationId,
)

from . import codec, live, sql_reads, postgres_layout as layout, sqlite_documents, sqlite_entries
from .base import (
    DamagedRecord,
    LeaseLost,
    Loaded,
    NotAStore,
    Row,
    StorageError,
    StoreFenced,
    StoreLocked,
    StoreMissing,
    encode_commit,
)

log = logging.getLogger("pidurable")

Batch = Sequence[tuple[int, Sequence[Write], Sequence[Event]]]


def _describe(dsn: str, schema: str) -> str:
    """The store's name in messages: where it is, never the password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return f"postgresql (unparsable DSN) schema {schema}"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or params.get("user") or ""
    return f"postgresql://{host}:{port}/{db} schema {schema}"


class PostgresStorage(
    sqlite_documents.DocumentReads, sqlite_entries.EntryReads, sql_reads.RecordReads, live.SqlLiveReads
):
    """A store in one PostgreSQL schema (see the module comment)."""

    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str | None = None,
        schema: str = "pidurable",
        create: bool = True,
        pool_size: int = 4,
        shared: bool = False,
    ) -> None:
        if not layout.SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must be a lower-case identifier ([a-z_][a-z0-9_]*), not {schema!r}")
        if pool_size < 2:
            raise ValueError("pool_size must be at least 2 (a commit in flight and a read)")
        self.dsn = dsn
        self.schema = schema
        self.name = _describe(dsn, schema)
        #: Who this opener is (in ``application_name``, so a refused opener
        #: is told who holds the store). Default: host name and pid.
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.store_id = ""
        self._fenced = False
        self._locked = False
        #: Shared by many workers (each leasing trees: ``postgres_tree``),
        #: holding the store lock in share mode: a single owner is refused
        #: while any worker runs, and workers while a single owner does.
        self.shared = shared
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._pool: psycopg_pool.ConnectionPool | None = None
        #: Bounds the worker threads commits run in (no more than connections).
        self._limiter = trio.CapacityLimiter(pool_size)
        self._pool_size = pool_size
        self._lineages: dict[ConversationId, Any] = {}
        #: load() reads through one connection in one snapshot (per thread).
        self._tx = threading.local()
        try:
            self._open(create)
        except BaseException:
            self._release()
            raise

    def __enter__(self) -> PostgresStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # opening -----------------------------------------------------------------
    @property
    def _application_name(self) -> str:
        return f"pidurable {self.worker_id}"[:63]

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "application_name": self._application_name}

    def _open(self, create: bool) -> None:
        with self._failing("open"):
            try:
                conn = psycopg.connect(self.dsn, **self._connect_kwargs())
            except psycopg.OperationalError as e:
                raise StorageError(f"Cannot connect to store {self.name}: {str(e).strip()}") from e
            self._lock_conn = conn
            version = self._bootstrap(conn, create)
            self._lock(conn)
            self._migrate(conn, version)
            self._pool = psycopg_pool.ConnectionPool(
                self.dsn,
                min_size=1,
                max_size=self._pool_size,
                kwargs=self._connect_kwargs(),
                configure=self._configure,
                open=False,
                name=f"pidurable-{self.schema}",
                timeout=30,
            )
            self._pool.open()  # connects in the background; a first use waits

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET search_path TO {self.schema}".encode())

    def _bootstrap(self, conn: psycopg.Connection[Any], create: bool) -> int:
        """Check (or create) the store in its schema; its layout version."""
        tables = self._tables(conn)
        if "meta" not in tables:  # create it, one creator at a time
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [layout.bootstrap_key(self.schema)])
                tables = self._tables(conn)
                if not tables:
                    if not create:
                        raise StoreMissing(f"Store {self.name} does not exist")
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}".encode())
                    self._configure(conn)
                    conn.execute(layout.BOOTSTRAP[0].encode())
                    conn.execute(layout.BOOTSTRAP[1].encode(), [str(uuid.uuid4())])
                    tables = ["meta"]
                elif "meta" not in tables:
                    raise NotAStore(
                        f"{self.name} holds tables but is not a pidurable store (tables: {', '.join(tables)}); "
                        "it was left untouched"
                    )
        self._configure(conn)
        meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        store_id, raw = meta.get("store_id"), meta.get("schema_version")
        if not store_id:
            raise NotAStore(f"{self.name} is not a pidurable store (no store_id in its meta table)")
        if raw is None or not raw.isdigit():
            raise DamagedRecord(f"Store {self.name}: damaged record in meta (schema_version {raw!r}): not a version number")
        version = int(raw)
        if version > layout.PG_SCHEMA_VERSION:
            raise StorageError(
                f"Store {self.name} has PostgreSQL schema version {version}; this pidurable reads "
                f"versions up to {layout.PG_SCHEMA_VERSION}. Upgrade pidurable."
            )
        missing = layout.TABLES - set(tables) if version == layout.PG_SCHEMA_VERSION else set()
        if missing:
            raise StorageError(f"Store {self.name} is damaged: tables {', '.join(sorted(missing))} are missing")
        self.store_id = store_id
        return version

    def _tables(self, conn: psycopg.Connection[Any]) -> list[str]:
        found = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", [self.schema])
        return [str(r[0]) for r in found]

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        key = layout.store_key(self.store_id)
        how = "pg_try_advisory_lock_shared" if self.shared else "pg_try_advisory_lock"
        (taken,) = _one_row(conn.execute(f"SELECT {how}(%s)".encode(), [key]))
        if not taken:
            raise StoreLocked(f"Store {self.name} is in use by {self._holder(conn, key)}; close it there first")
        self._locked = True

    def _holder(self, conn: psycopg.Connection[Any], key: int) -> str:
        classid, objid = layout.lock_parts(key)
        found = conn.execute(
            "SELECT a.application_name, a.pid, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [classid, objid],
        ).fetchall()
        if not found:
            return "another session (gone by now: try again)"
        app, pid, addr, since = found[0]
        who = str(app).removeprefix("pidurable ") if str(app).startswith("pidurable ") else f"{app!r}"
        where = f", client {addr}" if addr is not None else ""
        return f"worker {who} (PostgreSQL backend pid {pid}{where}, connected since {since:%Y-%m-%d %H:%M:%S})"

    def _migrate(self, conn: psycopg.Connection[Any], version: int) -> None:
        for v in range(version + 1, layout.PG_SCHEMA_VERSION + 1):
            with conn.transaction():
                for statement in layout.MIGRATIONS[v]:
                    conn.execute(statement.encode())
                conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", [str(v)])

    @contextmanager
    def _failing(self, op: str) -> Iterator[None]:
        """psycopg errors inside become StorageError naming the store and ``op``."""
        try:
            yield
        except psycopg.Error as e:
            raise StorageError(f"Store {self.name}: {op} failed ({str(e).strip()})") from e

    @property
    def schema_version(self) -> int:
        return int(self._rows("reading the schema version", "SELECT value FROM meta WHERE key = 'schema_version'")[0][0])

    # connections -------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        held = getattr(self._tx, "conn", None)
        if held is not None:  # inside load(): its snapshot
            yield held
            return
        if self._pool is None:
            raise StorageError(f"Store {self.name} is closed")
        with self._pool.connection() as conn:
            yield conn

    def _rows(self, op: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        # the SQLite mixins' SQL uses '?' placeholders; psycopg's are '%s'
        with self._failing(op), self._connection() as conn:
            return conn.execute(sql.replace("?", "%s").encode(), list(params)).fetchall()

    # lifecycle -----------------------------------------------------------------
    def load(self) -> Loaded:
        """The live state, read in one REPEATABLE READ snapshot."""
        with self._failing("load"), self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._tx.conn = conn
            try:
                return self._load()
            finally:
                self._tx.conn = None

    def load_live(self, roots: Sequence[ConversationId] | None = None) -> Loaded:
        """What open needs: the live work only (live.py), in one REPEATABLE READ snapshot."""
        with self._failing("load"), self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._tx.conn = conn
            try:
                tasks, subs, convs, docs = self._live()
                ((max_id, seq),) = self._rows(
                    "load",
                    "SELECT greatest((SELECT max(id) FROM conversations), (SELECT max(id) FROM entries), "
                    "(SELECT max(id) FROM tasks), (SELECT max(id) FROM submissions), "
                    "(SELECT max(id) FROM document_records)), (SELECT max(seq) FROM journal)",
                )
                loaded = Loaded(
                    next_id=max(1, int(max_id or 0)) + 1,
                    next_seq=(int(seq) + 1) if seq is not None else 1,
                    conversations=convs,
                    tasks=tasks,
                    submissions=subs,
                    store_id=self.store_id,
                    documents=docs,
                )
                if roots is None:
                    return loaded
                owner_of = lambda cid: (c.owner_task_id if (c := self.conversation(cid)) is not None else None)  # noqa: E731
                return live.in_trees(loaded, roots, owner_of, self.task)
            finally:
                self._tx.conn = None

    def _load(self) -> Loaded:
        convs, tasks, subs = self._open_records()
        ((max_id, seq),) = self._rows(
            "load",
            "SELECT greatest((SELECT max(id) FROM conversations), (SELECT max(id) FROM entries), "
            "(SELECT max(id) FROM tasks), (SELECT max(id) FROM submissions), "
            "(SELECT max(id) FROM document_records)), (SELECT max(seq) FROM journal)",
        )
        return Loaded(
            next_id=max(1, int(max_id or 0)) + 1,
            next_seq=(int(seq) + 1) if seq is not None else 1,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=self.store_id,
            documents=self.live_documents(),
        )

    def fence(self) -> None:
        """Simulate a crash: no later commit reaches the database."""
        self._fenced = True

    def close(self) -> None:
        """Release the store: the pool's connections, then the lock, then
        its session. Idempotent."""
        self._release()

    def _release(self) -> None:
        pool, self._pool = self._pool, None
        conn, self._lock_conn = self._lock_conn, None
        try:
            if pool is not None:
                pool.close()
        finally:
            if conn is not None:
                try:
                    if self._locked:
                        # explicitly: a closed socket ends the server's session
                        # a moment later, and an opener right after us (a
                        # restart) must not find the lock still held
                        how = "pg_advisory_unlock_shared" if self.shared else "pg_advisory_unlock"
                        conn.execute(f"SELECT {how}(%s)".encode(), [layout.store_key(self.store_id)])
                except psycopg.Error as e:
                    log.warning("Store %s: unlocking failed (%s); the lock ends with its session", self.name, e)
                finally:
                    self._locked = False
                    conn.close()

    # writes ------------------------------------------------------------------
    def commit(self, seq: int, writes: Sequence[Write], events: Sequence[Event]) -> None:
        self.commit_many([(seq, writes, events)])

    async def commit_many_async(self, batch: Batch) -> None:
        """:meth:`commit_many` in a worker thread (the module comment says
        why). Not cancellable: a commit that started finishes, and the
        caller learns its outcome."""
        await trio.to_thread.run_sync(self.commit_many, batch, limiter=self._limiter)

    def commit_many(self, batch: Batch) -> None:
        """Several commits in ONE transaction, all or nothing."""
        self.commit_fenced(batch, None)

    def commit_fenced(self, batch: Batch, lease: tuple[int, int, str] | None) -> None:
        """``commit_many``; with ``lease`` = (tree, epoch, owner), the
        transaction first checks (and locks) that lease row - ``fence()`` in
        the schema raises SQLSTATE PD001 if the lease moved on, and nothing
        is written (``postgres_tree`` turns that into ``LeaseLost``). The
        rows are written with that tree, the journal rows with its epoch
        and owner."""
        if self._fenced:
            raise StoreFenced(f"store {self.name} is fenced")
        encoded = [(seq, *encode_commit(seq, writes, events)) for seq, writes, events in batch]
        if self._pool is None:
            raise StorageError(f"Store {self.name} is closed")
        try:
            with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
                if lease is not None:
                    conn.execute(b"SELECT fence(%s, %s, %s)", list(lease))
                for seq, rows, ev_text, wr_text in encoded:
                    self._write_one(conn, seq, rows, ev_text, wr_text, lease)
        except psycopg.errors.IntegrityError as e:
            # rolled back: a duplicate entry id or a seq that does not increase
            raise StorageError(f"Store {self.name} refused the commit (nothing was written): {str(e).strip()}") from e
        except psycopg.Error as e:
            if lease is not None and e.sqlstate == "PD001":  # fence() refused: rolled back
                raise LeaseLost(f"Store {self.name}: {e.diag.message_primary}; nothing was written") from e
            # rolled back (or, if the connection died during COMMIT, unknown):
            # this harness stops, and the next open recovers from the store
            raise StorageError(f"Store {self.name}: commit failed, nothing was written ({str(e).strip()})") from e

    @staticmethod
    def _write_one(
        conn: psycopg.Connection[Any],
        seq: int,
        rows: list[Row],
        ev_text: str,
        wr_text: str,
        lease: tuple[int, int, str] | None = None,
    ) -> None:
        tree, epoch, worker = lease if lease is not None else (None, None, None)
        for row in rows:
            if row.table == "document_revisions":
                _write_document(conn, row.columns)
            else:
                conn.execute(layout.UPSERT[row.table].encode(), {**row.columns, "tree": tree})
        conn.execute(layout.JOURNAL.encode(), (seq, codec.FORMAT_VERSION, ev_text, wr_text, tree, epoch, worker))

    # reads -------------------------------------------------------------------


def _write_document(conn: psycopg.Connection[Any], c: dict[str, Any]) -> None:
    """One document revision (the rules: ``postgres_layout.DOC_*``)."""
    if c["action"] == "retire":
        conn.execute(layout.DOC_RETIRE.encode(), c)
        if c["reclaims"]:
            conn.execute(layout.DOC_RETIRE_RECLAIM.encode(), c)
        return
    if c["action"] == "base":
        conn.execute(layout.DOC_BASE.encode(), c)
    conn.execute(layout.DOC_REVISION.encode(), c)
    if c["reclaims"]:
        conn.execute(layout.DOC_RECLAIM.encode(), c)


def _one_row(cur: psycopg.Cursor[Any]) -> Any:
    row = cur.fetchone()
    assert row is not None
    return row


def open_postgres_storage(
    dsn: str, worker_id: str | None = None, *, schema: str = "pidurable", create: bool = True
) -> PostgresStorage:
    """Open (creating it unless ``create=False``) the store in ``schema`` of
    the database at ``dsn``. Raises ``StoreLocked`` while another opener
    holds it, ``NotAStore`` for a schema holding other tables (untouched),
    ``StorageError`` when the server cannot be reached."""
    return PostgresStorage(dsn, worker_id=worker_id, schema=schema, create=create)
