"""The SQLite layout's CHECK constraints are OR chains (sqlite_layout.cheap_checks,
issue 11 item 2): ``c IN (...)`` of more than two constants made SQLite build
a temporary b-tree on every task upsert and every revision insert. New stores
are created so, stores written by earlier code are rewritten at a writable
open; the values allowed are the same, the rows and the layout version too."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from pidurable.core.effects import RevisionAction
from pidurable.core.model import SubmissionStatus, TaskStatus
from pidurable.shell.storage import SCHEMA_VERSION, open_sqlite_storage
from pidurable.shell.storage.readonly import open_readonly
from pidurable.shell.storage.sqlite_layout import cheap_checks

FIXTURES = Path(__file__).parent / "fixtures"
#: ``IN (`` of a value list (a CHECK's, or a partial index's WHERE).
IN_LIST = re.compile(r"\bIN\s*\(", re.IGNORECASE)
STORES = ["schema1_store.sqlite", "schema2_lives_store.sqlite", "schema3_lives_store.sqlite"]

#: table -> (the checked column, its values, a statement inserting one row with ``?`` for it).
CHECKED = {
    "tasks": (
        "status",
        [s.value for s in TaskStatus],
        "INSERT INTO tasks (id, conversation_id, kind, status, owner, record) VALUES (?, 1, 'k', ?, NULL, '{}')",
    ),
    "submissions": (
        "status",
        [s.value for s in SubmissionStatus],
        "INSERT INTO submissions (id, conversation_id, request_id, status, record) VALUES (?, 1, NULL, ?, '{}')",
    ),
    "document_revisions": (
        "action",
        [a.value for a in RevisionAction],
        "INSERT INTO document_revisions (document_id, seq, action, content) VALUES (?, 1, ?, '{}')",
    ),
}


def _tables(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    finally:
        conn.close()


def _without_check(sql: str) -> str:
    return re.sub(r"CHECK \((?:[^()]|\([^()]*\))*\)", "CHECK", sql)


def test_a_new_store_checks_without_in_lists(tmp_path: Path) -> None:
    """No table of a new store has an ``IN (...)`` CHECK, and none of the
    write statements builds a temporary table (OpenEphemeral)."""
    store = open_sqlite_storage(tmp_path / "s.db")
    try:
        conn = store.db.conn
        for table, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            assert not IN_LIST.search(sql), (table, sql)
        for table, (_, values, insert) in CHECKED.items():
            ops = [row[1] for row in conn.execute("EXPLAIN " + insert, [1, values[0]])]
            assert "OpenEphemeral" not in ops, table
        assert cheap_checks(store.db) == []  # nothing left to rewrite
    finally:
        store.close()


def test_the_checks_allow_exactly_the_listed_values(tmp_path: Path) -> None:
    """Every value of the enum is stored; anything else is refused as before."""
    store = open_sqlite_storage(tmp_path / "s.db")
    try:
        conn = store.db.conn
        for table, (column, values, insert) in CHECKED.items():
            for i, value in enumerate(values):
                conn.execute(insert, [i + 1, value])
            for bad in ("bogus", values[0].upper(), values[0] + " ", ""):
                with pytest.raises(sqlite3.IntegrityError, match=f"CHECK constraint failed: {column} = "):
                    conn.execute(insert, [100, bad])
            # (in insertion order: by the id each got; document_revisions has no rowid from schema 6)
            key = "document_id" if table == "document_revisions" else "id"
            stored = [r[0] for r in conn.execute(f"SELECT {column} FROM {table} ORDER BY {key}")]
            assert stored == values
    finally:
        store.close()


@pytest.mark.parametrize("name", STORES)
def test_a_store_written_by_earlier_code_is_rewritten_at_open(tmp_path: Path, name: str) -> None:
    """A fixture store (IN-list CHECKs) opened read-only is left as it was;
    opened to write, its CHECKs become OR chains once, in the open's
    transaction: the file passes integrity_check and holds the same rows."""
    path = tmp_path / name
    shutil.copy(FIXTURES / name, path)
    before = _tables(path)
    assert any(IN_LIST.search(sql) for sql in before.values())
    readonly = open_readonly(path)
    try:
        journal = readonly.journal()
    finally:
        readonly.close()
    assert _tables(path) == before

    store = open_sqlite_storage(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        assert store.journal() == journal
        assert store.db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        store.close()
    after = _tables(path)
    for table, sql in after.items():
        assert not IN_LIST.search(sql), (table, sql)
    for table, (column, values, _) in CHECKED.items():
        chain = " OR ".join(f"{column} = '{v}'" for v in values)
        assert f"CHECK ({chain})" in after[table], table
    for table in ("tasks", "submissions"):  # (no migration since schema 1 changed them)
        # only the CHECK changed: the lines without it are the same
        assert _without_check(after[table]) == _without_check(before[table])

    again = open_sqlite_storage(path)
    try:
        assert cheap_checks(again.db) == []
    finally:
        again.close()
    assert _tables(path) == after


def test_a_migration_script_runs_statement_by_statement_inside_the_transaction(tmp_path: Path) -> None:
    """``sqlite_layout._script``: split where a statement really ends (a ``;``
    in a string or a comment does not end one), in the open transaction."""
    import sqlite_utils

    from pidurable.shell.storage.sqlite_layout import _script

    conn = sqlite3.connect(tmp_path / "x.sqlite", isolation_level=None)
    db = sqlite_utils.Database(conn, execute_plugins=False)
    conn.execute("BEGIN")
    _script(
        db,
        """
        CREATE TABLE t (v TEXT);  -- a comment; with a semicolon
        INSERT INTO t VALUES ('a;b');
        INSERT INTO t VALUES ('c')""",
    )
    assert conn.in_transaction  # (sqlite3's executescript would have committed)
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 't'").fetchone() == (0,)
    conn.execute("BEGIN")
    _script(db, "CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('a;b'); INSERT INTO t VALUES ('c')")
    conn.execute("COMMIT")
    assert conn.execute("SELECT v FROM t ORDER BY rowid").fetchall() == [("a;b",), ("c",)]
    conn.close()
