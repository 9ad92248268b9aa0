"""PostgreSQL storage beyond the conformance suite (issue 13 item 1): the
same bytes as SQLite, ownership by advisory lock, the open checks, and
commits run off the Trio thread. The server: tests/pg_server.py."""

from __future__ import annotations

import importlib.util
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from pidurable.core.model import ModelRef
from pidurable.shell import AgentConfig, Harness, Input, Registry, open_postgres_storage
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.storage import NotAStore, StorageError, StoreLocked, StoreMissing, open_sqlite_storage
from pidurable.shell.storage.postgres import PostgresStorage
from pidurable.shell.storage.postgres_layout import PG_SCHEMA_VERSION

from pg_server import PgServer


def _conformance() -> Any:
    """The conformance suite's module (its sample history), loaded by path:
    test modules are not importable by name (--import-mode=importlib)."""
    spec = importlib.util.spec_from_file_location("conformance_history", Path(__file__).with_name("test_storage_conformance.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

#: (table, key columns, stored text columns) compared across engines
TABLES = [
    ("conversations", "id", "owner_task_id, parent_id, fork_at, record"),
    ("entries", "id", "conversation_id, seq, record"),
    ("tasks", "id", "conversation_id, kind, status, owner, record"),
    ("submissions", "id", "conversation_id, request_id, status, record"),
    ("document_records", "id", "scope, owner, kind, version, history, fork, created_seq, retired_seq"),
    ("document_revisions", "document_id, seq", "action, content"),
    ("journal", "seq", "format, events, writes"),
]


@pytest.fixture
def pg(postgres_server: PgServer) -> Iterator[tuple[str, str]]:
    """The server's DSN and a schema of this test's own."""
    yield postgres_server.dsn, postgres_server.fresh_schema()


def test_rows_are_byte_identical_to_sqlites(pg: tuple[str, str], tmp_path: Path) -> None:
    """The same history (every write type) leaves the same rows, text byte
    for byte, in PostgreSQL as in SQLite: both encode through base.encode_commit."""
    dsn, schema = pg
    c = _conformance()
    with open_postgres_storage(dsn, schema=schema) as store:
        c.populate(store, c.GOLDEN_HISTORY)
    with open_sqlite_storage(tmp_path / "s.sqlite") as lite:
        c.populate(lite, c.GOLDEN_HISTORY)
    db = sqlite3.connect(tmp_path / "s.sqlite")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}".encode())
        for table, key, columns in TABLES:
            sql = f"SELECT {key}, {columns} FROM {table} ORDER BY {key}"
            theirs = [tuple(r) for r in db.execute(sql)]
            ours = [tuple(r) for r in conn.execute(sql.encode())]
            assert ours == theirs and theirs, table
    db.close()


def test_a_second_owner_is_refused_naming_the_worker(pg: tuple[str, str]) -> None:
    """While one opener holds the store (a session advisory lock), another
    gets StoreLocked naming the holder's worker id; after close it opens."""
    dsn, schema = pg
    first = open_postgres_storage(dsn, "desk-7", schema=schema)
    with pytest.raises(StoreLocked, match=r"in use by worker desk-7 \(PostgreSQL backend pid \d+"):
        open_postgres_storage(dsn, "desk-8", schema=schema)
    first.close()
    open_postgres_storage(dsn, "desk-8", schema=schema).close()


def test_a_killed_owners_lock_goes_with_its_session(pg: tuple[str, str]) -> None:
    """An owner whose connection dies (a killed process) holds nothing: the
    next opener gets the store once the server has ended that session."""
    dsn, schema = pg
    first = open_postgres_storage(dsn, "doomed", schema=schema)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pidurable doomed'")
    deadline = time.monotonic() + 10
    while True:
        try:
            second = open_postgres_storage(dsn, "heir", schema=schema)
            break
        except StoreLocked:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    second.close()
    first.close()  # its connections are gone: closing still succeeds


def test_open_refuses_other_tables_a_newer_layout_and_a_missing_store(pg: tuple[str, str]) -> None:
    """A schema of someone else's tables is NotAStore (and left alone); a
    store from a newer pidurable is refused; create=False on nothing is
    StoreMissing; a store bootstrapped but not migrated is migrated."""
    dsn, schema = pg
    with pytest.raises(StoreMissing):
        open_postgres_storage(dsn, schema=schema, create=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id int)".encode())
        with pytest.raises(NotAStore, match="tables: orders"):
            open_postgres_storage(dsn, schema=schema)
        assert conn.execute(f"SELECT count(*) FROM {schema}.orders".encode()).fetchone() == (0,)
        conn.execute(f"DROP TABLE {schema}.orders".encode())
        open_postgres_storage(dsn, schema=schema).close()
        conn.execute(f"UPDATE {schema}.meta SET value = %s WHERE key = 'schema_version'".encode(), [str(PG_SCHEMA_VERSION + 1)])
        with pytest.raises(StorageError, match="Upgrade pidurable"):
            open_postgres_storage(dsn, schema=schema)
        # version 0: the bootstrap (meta and a store id) without the layout
        conn.execute(f"DROP SCHEMA {schema} CASCADE; CREATE SCHEMA {schema}".encode())
        conn.execute(f"CREATE TABLE {schema}.meta (key text PRIMARY KEY, value text NOT NULL)".encode())
        conn.execute(f"INSERT INTO {schema}.meta VALUES ('store_id', 'abc'), ('schema_version', '0')".encode())
    with open_postgres_storage(dsn, schema=schema) as store:
        assert store.schema_version == PG_SCHEMA_VERSION
        assert store.load().store_id == "abc"


def test_an_unreachable_server_is_a_storage_error_without_the_password() -> None:
    """A server that does not answer is a StorageError naming host, port,
    database and schema, never the password."""
    with pytest.raises(StorageError) as e:
        open_postgres_storage("host=127.0.0.1 port=1 user=u password=hunter2 dbname=d connect_timeout=2")
    assert "127.0.0.1:1/d schema pidurable" in str(e.value) and "hunter2" not in str(e.value)


async def test_the_reducer_commits_off_the_trio_thread(pg: tuple[str, str]) -> None:
    """Under Harness.open, commits run in a worker thread (psycopg's async
    API needs asyncio): while one is slow, other Trio tasks keep running,
    and the turn still settles with its answer stored."""
    dsn, schema = pg
    store = open_postgres_storage(dsn, schema=schema)
    threads: set[int] = set()
    inner = PostgresStorage.commit_many

    def slow_commit(self: PostgresStorage, batch: Any) -> None:
        threads.add(threading.get_ident())
        time.sleep(0.05)
        inner(self, batch)

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.005)

    models = ScriptedModels([reply(text="hello")])
    try:
        PostgresStorage.commit_many = slow_commit  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            async with Harness.open(store, models=models, registry=Registry()) as h:
                conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
                before = ticks
                record = await (await conv.submit(Input("hi"))).wait()
                assert record.status == "done"
                assert ticks - before >= 5  # the Trio thread was free during the commits
            nursery.cancel_scope.cancel()
    finally:
        PostgresStorage.commit_many = inner  # type: ignore[method-assign]
    assert threads and threading.get_ident() not in threads
    with open_postgres_storage(dsn, schema=schema) as again:
        assert [e.text for e in again.entries(1)][-2:] == ["hi", "hello"]
