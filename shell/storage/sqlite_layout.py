"""The SQLite layout: its tables, the migrations that build them, the upsert
statements, and the read-only check that an existing file has the layout.

Layout (schema version 6)::

    schema(version)                               the layout version, one row
    meta(key PK, value)                           store_id, canonical_path
    conversations(id PK, owner_task_id, record, parent_id, fork_at)
                                                  partial idx on parent_id: forks
    entries(id PK, conversation_id, seq, record)  idx (conversation_id, id)
    tasks(id PK, conversation_id, kind, status, owner, record)
                                                  partial idx on live status
    submissions(id PK, conversation_id, request_id, status, record)
                                                  idx (conversation_id, request_id)
    document_records(id PK, scope, owner, kind, version, history, fork, created_seq, retired_seq)
                                                  idx (scope, owner, kind): documents (the built-ins'
                                                  ids are negative: core/builtins.py)
    document_revisions(document_id, seq, action, content)   PK (document_id, seq), WITHOUT ROWID
    journal(seq PK, format, events, writes)       the events behind each commit

Every record is stored as JSON in ``record``; the other columns are
indexes. From version 4 a task's or an entry's ``record`` leaves out the
fields its columns hold (``base.ROW_COLUMNS``: reads put them back), and a
terminal task's its checkpoint, ``on`` and memos (``base.TERMINAL_DROPS``).
A document - a host's (``define_doc``) or a built-in (``pi.agent``...,
core/builtins.py) - is a ``document_records`` row and its revisions: ``base`` (the whole value) or ``delta`` (the ops of
one commit), each the JSON of a ``DocumentRevision``; a base (or a
retirement) of a current-only document (history ``latest``, or task scope)
deletes the revisions before it. ``MIGRATIONS[v]`` upgrades a store from
version ``v - 1`` to ``v`` inside one transaction; a store newer than this
code is refused. Version 2 replaced version 1's ``document_revisions``
(created, never written) by the table above and added ``document_records``.
Version 3 added a fork's parent and fork point to ``conversations`` (NULL
for every conversation written before: none of them is a fork). Version 4
(lean rows) changed no column, only what new task and entry records hold.
Version 5 moved each built-in's ``documents`` row (its whole value) into its
document record and a base revision, and dropped that table. Version 6
rebuilt ``document_revisions`` as a WITHOUT ROWID table, the same rows.

The CHECKs that list a column's values are OR chains of equalities
(:func:`cheap_checks`, run at every writable open: the migrations write
``IN`` lists, which SQLite evaluated with a temporary b-tree per statement).

``inspect_store`` only reads: it runs on a read-only connection before the
opener writes anything, so a file that is not a pidurable store is refused
and left as it was (see :mod:`.sqlite`).
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Callable

import attrs
import sqlite_utils

from pidurable.core.builtins import base_revision as builtin_base

from . import codec
from .base import SCHEMA_VERSION, DamagedRecord, NotAStore, StorageError, decode_doc


def _script(db: sqlite_utils.Database, sql: str) -> None:
    """The statements of ``sql``, one by one, inside the migration's
    transaction (``sqlite3``'s ``executescript`` would commit first). Split
    where ``sqlite3.complete_statement`` says a statement ends, asked at each
    ``;`` (sqlite-utils' ``executescript`` asks at every character, joining
    the statement so far each time: 7 of the 16 ms a new store took)."""
    cursor = db.conn.cursor()
    start = at = 0
    while (end := sql.find(";", at)) != -1:
        at = end + 1
        if sqlite3.complete_statement(sql[start:at]):
            cursor.execute(sql[start:at])
            start = at
    if sql[start:].strip():
        cursor.execute(sql[start:])


def _migrate_v1(db: sqlite_utils.Database) -> None:
    _script(
        db,
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


def _migrate_v2(db: sqlite_utils.Database) -> None:
    """Host-defined documents: their records and revisions (version 1's
    ``document_revisions`` was never written, so nothing is lost)."""
    _script(
        db,
        """
        DROP TABLE document_revisions;
        CREATE TABLE document_records (
            id INTEGER PRIMARY KEY,
            scope TEXT NOT NULL CHECK (scope IN ('conversation','task')),
            owner INTEGER NOT NULL, kind TEXT NOT NULL, version INTEGER NOT NULL,
            history TEXT NOT NULL CHECK (history IN ('latest','rewindable')),
            fork TEXT NOT NULL, created_seq INTEGER NOT NULL, retired_seq INTEGER);
        CREATE INDEX document_records_by_address ON document_records (scope, owner, kind, id);
        CREATE TABLE document_revisions (
            document_id INTEGER NOT NULL, seq INTEGER NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('base','delta','retire')),
            content TEXT NOT NULL, PRIMARY KEY (document_id, seq));
        """
    )


def _migrate_v3(db: sqlite_utils.Database) -> None:
    """Forks: the parent and the fork point of a conversation (reads follow
    the parent chain; the index finds a conversation's forks)."""
    _script(
        db,
        """
        ALTER TABLE conversations ADD COLUMN parent_id INTEGER;
        ALTER TABLE conversations ADD COLUMN fork_at INTEGER;
        CREATE INDEX conversations_by_parent ON conversations (parent_id) WHERE parent_id IS NOT NULL;
        """
    )


def _migrate_v4(db: sqlite_utils.Database) -> None:
    """Lean rows (issue 11): no column changes. From version 4 on, a task's or
    an entry's ``record`` leaves out what its columns hold, and a terminal
    task's its execution state (``base.ROW_COLUMNS``, ``TERMINAL_DROPS``);
    rows written before keep their whole records, which decode the same
    (``pidurable compact-store`` rewrites them lean). The version tells older
    code, which would read a lean row as damaged, to refuse the store."""


def _migrate_v5(db: sqlite_utils.Database) -> None:
    """The built-in documents as documents (issue 10, core/builtins.py): each
    ``documents`` row (a built-in's whole value) becomes its document's
    record and a base revision at the row's commit; the table is dropped.
    What the built-ins held before that commit was never kept (a fork at an
    older entry keeps the parent's current agent, as it always did)."""
    for cid, kind, seq, value in db.execute(
        "SELECT conversation_id, kind, seq, value FROM documents ORDER BY conversation_id, kind"
    ).fetchall():
        did, revision = builtin_base(cid, kind, decode_doc(kind, value, "(migrating)", cid))
        db.execute(
            "INSERT INTO document_records (id, scope, owner, kind, version, history, fork, created_seq) "
            "VALUES (?, 'conversation', ?, ?, ?, ?, ?, ?)",
            [did, cid, kind, revision.version, revision.history.value, revision.fork.value, seq],
        )
        db.execute(
            "INSERT INTO document_revisions (document_id, seq, action, content) VALUES (?, ?, 'base', ?)",
            [did, seq, codec.dumps(codec.stored.unstructure(revision))],
        )
    db.execute("DROP TABLE documents")


def _migrate_v6(db: sqlite_utils.Database) -> None:
    """``document_revisions`` as a WITHOUT ROWID table, its rows copied in
    key order (issue 11 item 2). As a rowid table its primary key was a
    second b-tree (``sqlite_autoindex_document_revisions_1``) that every
    revision was written into as well: one more page per commit in the WAL
    (of about nine), and its bytes in the file. Every read is by
    ``document_id`` (and ``seq``): the key is the table's order now. Same
    columns, same rows, same statements (a store of version 6 reads as
    version 5 did; older code refuses it only by its number)."""
    _script(
        db,
        """
        CREATE TABLE document_revisions_v6 (
            document_id INTEGER NOT NULL, seq INTEGER NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('base','delta','retire')),
            content TEXT NOT NULL, PRIMARY KEY (document_id, seq)) WITHOUT ROWID;
        INSERT INTO document_revisions_v6 (document_id, seq, action, content)
            SELECT document_id, seq, action, content FROM document_revisions ORDER BY document_id, seq;
        DROP TABLE document_revisions;
        ALTER TABLE document_revisions_v6 RENAME TO document_revisions;
        """
    )


#: A CHECK that lists a column's values, as the migrations above write it.
_CHECK_IN = re.compile(r"CHECK \((\w+) IN\s*\(([^()]*)\)\)")


def _or_chain(m: re.Match[str]) -> str:
    """``CHECK (c IN ('a','b','c'))`` -> ``CHECK (c = 'a' OR c = 'b' OR c = 'c')``."""
    column, values = m.group(1), [v.strip() for v in m.group(2).split(",")]
    return "CHECK (" + " OR ".join(f"{column} = {v}" for v in values) + ")"


def cheap_checks(db: sqlite_utils.Database) -> list[str]:
    """Write the layout's CHECK constraints as OR chains of equalities (the
    tables it rewrote). SQLite evaluates ``c IN (...)`` of more than two
    constants by building a temporary b-tree of the list on every execution
    of the statement: every task upsert and every document revision insert
    did (3.5 per commit, about a seventh of SQLite's work per durable step;
    issue 11 item 2). An OR chain allows exactly the same values and is
    evaluated in place.

    A CHECK is no part of what a row holds on disk, so this is SQLite's
    documented way to change one (https://www.sqlite.org/lang_altertable.html,
    "making other kinds of table schema changes"): the tables' text in
    ``sqlite_master`` is updated and the schema cookie bumped, inside the
    caller's transaction. It runs at every writable open (a store written by
    earlier code is rewritten once; its layout version does not change: any
    code reads and writes the same rows, and the values allowed are the
    same)."""
    found = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    rewritten = [(name, new) for name, sql in found if name in TABLES and (new := _CHECK_IN.sub(_or_chain, sql)) != sql]
    if not rewritten:
        return []
    ((cookie,),) = db.execute("PRAGMA schema_version").fetchall()
    db.execute("PRAGMA writable_schema = ON")
    try:
        for name, sql in rewritten:
            db.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", [sql, name])
        db.execute(f"PRAGMA schema_version = {int(cookie) + 1}")
    finally:
        db.execute("PRAGMA writable_schema = OFF")
    return [name for name, _ in rewritten]


MIGRATIONS: dict[int, Callable[[sqlite_utils.Database], None]] = {
    1: _migrate_v1,
    2: _migrate_v2,
    3: _migrate_v3,
    4: _migrate_v4,
    5: _migrate_v5,
    6: _migrate_v6,
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))

def _upsert(table: str, columns: tuple[str, ...], fixed: tuple[str, ...] = ()) -> str:
    """The statement that writes a row of ``table`` whole, replacing the row
    of the same id: the row ``INSERT OR REPLACE`` leaves, by an update in
    place (REPLACE deletes the old row and inserts the new one, every index
    entry with it: a task row cost ~10% more; issue 11 item 2). ``fixed``:
    columns a row of that id never changes, left out of the update: SQLite
    rewrites the entry of every index on a column the update names, even
    to the same value (a task's ``conversation_id``: its entry in
    ``tasks_by_conversation`` was deleted and inserted again at every task
    update, 2.25 per durable step; about 4.5% of the instructions a
    commit's statements run)."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id" and c not in fixed)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)}) "
        f"ON CONFLICT (id) DO UPDATE SET {sets}"
    )


#: How a commit writes each table's rows (named parameters: the row's columns).
UPSERT = {
    "conversations": _upsert("conversations", ("id", "owner_task_id", "parent_id", "fork_at", "record")),
    "entries": "INSERT INTO entries (id, conversation_id, seq, record) VALUES (:id, :conversation_id, :seq, :record)",
    # a task's conversation and kind are set when it is made and copied by
    # every move (core/lifecycle.py move_task); tasks are never moved to
    # another conversation (a fork copies none: core/fork.py)
    "tasks": _upsert("tasks", ("id", "conversation_id", "kind", "status", "owner", "record"), fixed=("conversation_id", "kind")),
    "submissions": _upsert("submissions", ("id", "conversation_id", "request_id", "status", "record")),
}


#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

#: The tables of the layout at SCHEMA_VERSION.
TABLES = frozenset(
    {
        "schema",
        "meta",
        "conversations",
        "entries",
        "tasks",
        "submissions",
        "document_records",
        "document_revisions",
        "journal",
    }
)


@attrs.frozen(kw_only=True)
class Found:
    """What the read-only check found in an existing store file."""

    version: int
    store_id: str
    canonical: str | None


def inspect_store(conn: sqlite3.Connection, name: str) -> Found:
    """Check that ``conn`` (read-only) is a pidurable store; only reads."""
    tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    if not {"schema", "meta"} <= set(tables):
        listed = ", ".join(tables) if tables else "none"
        raise NotAStore(f"{name} is a SQLite database but is not a pidurable store (tables: {listed}); it was left untouched")
    try:
        meta = {str(k): v for k, v in conn.execute("SELECT key, value FROM meta")}
        rows = conn.execute("SELECT version FROM schema").fetchall()
    except sqlite3.OperationalError as e:  # a meta or schema table of another shape
        raise NotAStore(f"{name} is a SQLite database but is not a pidurable store ({e}); it was left untouched") from e
    store_id = meta.get("store_id")
    if not isinstance(store_id, str) or not store_id:
        raise NotAStore(f"{name} is a SQLite database but is not a pidurable store (no store_id in its meta table)")
    if len(rows) != 1:
        raise DamagedRecord(f"Store {name}: damaged record in schema: {len(rows)} version rows, one expected")
    (version,) = rows[0]
    if type(version) is not int or version < 1:
        raise DamagedRecord(f"Store {name}: damaged record in schema (version {version!r}): not a version number")
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"Store {name} has schema version {version}; this pidurable reads "
            f"versions up to {SCHEMA_VERSION}. Upgrade pidurable."
        )
    missing = TABLES - set(tables)
    if version == SCHEMA_VERSION and missing:
        raise StorageError(f"Store {name} is damaged: tables {', '.join(sorted(missing))} are missing")
    canonical = meta.get("canonical_path")
    return Found(version=version, store_id=store_id, canonical=canonical if isinstance(canonical, str) else None)
