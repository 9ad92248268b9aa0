"""The PostgreSQL layout: tables, migrations, upserts and the open checks.

A store is one PostgreSQL *schema* (``pidurable`` unless the host names
another), so a store shares a database with the host's own tables and tests
share a server. Layout (PostgreSQL schema version 1, the rows of SQLite's
layout version 3 - ``base.SCHEMA_VERSION`` - column for column)::

    meta(key PK, value)                  store_id, schema_version
    conversations(id PK, owner_task_id, parent_id, fork_at, record)
    entries(id PK, conversation_id, seq, record)       idx (conversation_id, id)
    tasks(id PK, conversation_id, kind, status, owner, record)
    submissions(id PK, conversation_id, request_id, status, record)
    document_records(id PK, scope, owner, kind, version, history, fork,
                     created_seq, retired_seq)
    document_revisions(document_id, seq, action, content)  PK (document_id, seq)
    journal(seq PK, format, events, writes, tree, epoch, worker, landed)
    leases(root PK, owner, epoch, expires_at, work_at, pinned, claimed_at)
    intake(id PK, tree, conversation_id, request_id, type, payload,
           created_at, submission_id, refused)  UNIQUE (conversation_id, request_id)

(conversations, tasks and submissions carry ``tree`` too: the root of the
conversation tree a worker leases; version 2. Version 3 moved the built-ins'
``documents`` rows into their document records, SQLite's version 5.)

Records are ``text``, never ``jsonb``: ``jsonb`` reorders keys and drops
duplicate whitespace, and a record must stay the codec's bytes (the same
bytes SQLite and JSONL hold; replay digests them).

Versions: ``meta.schema_version`` counts this layout's own migrations
(``MIGRATIONS[v]`` takes the store from v-1 to v, each in one transaction,
under the store's lock). Version 0 is the bootstrap: the schema and ``meta``
with a store id, created under a transaction-scoped advisory lock on the
schema's name so two first openers cannot both create it. A store written by
a newer pidurable is refused, as SQLite's is.
"""

from __future__ import annotations

import hashlib
import re

from pidurable.core.builtins import BUILTINS

from .base import SCHEMA_VERSION

#: This layout's version (``meta.schema_version``).
#: 2: trees, leases and intake for many workers (issue 13 items 2-4): a
#: ``tree`` column on conversations, tasks and submissions; ``tree``, ``epoch``
#: and ``landed`` on the journal; ``leases``, ``intake``, the ``id_blocks``
#: sequence and the ``fence`` function (see :mod:`.postgres_tree`).
#: 3: the built-in documents as document records (issue 10; see ``_V3``).
PG_SCHEMA_VERSION = 3

# Layout version 1 holds SQLite's version-3 rows; a new SQLite layout version
# needs a PostgreSQL migration too (this fails loudly until it has one).
# SQLite's version 4 (lean task and entry records, issue 11) changed no
# column: PostgreSQL rows get the same lean records (``base.encode_write``)
# and its reads put the columns back, so whole records of earlier rows read
# as before and no migration is needed. SQLite's version 6 (WITHOUT ROWID
# document revisions) changed how SQLite keeps a table, not its rows: a
# PostgreSQL table is a heap and its primary key an index whatever SQLite
# does, so nothing changes here.
assert SCHEMA_VERSION == 6, "add a PostgreSQL migration for the new layout (postgres_layout.py)"

_V1 = """
CREATE TABLE conversations (
    id bigint PRIMARY KEY, owner_task_id bigint, parent_id bigint, fork_at bigint, record text NOT NULL);
CREATE INDEX conversations_by_parent ON conversations (parent_id) WHERE parent_id IS NOT NULL;
CREATE TABLE entries (
    id bigint PRIMARY KEY, conversation_id bigint NOT NULL, seq bigint NOT NULL, record text NOT NULL);
CREATE INDEX entries_by_conversation ON entries (conversation_id, id);
CREATE TABLE tasks (
    id bigint PRIMARY KEY, conversation_id bigint NOT NULL, kind text NOT NULL,
    status text NOT NULL CHECK (status IN ('pending','running','waiting','completing','terminal')),
    owner bigint, record text NOT NULL);
CREATE INDEX tasks_live ON tasks (status, id) WHERE status <> 'terminal';
CREATE INDEX tasks_by_conversation ON tasks (conversation_id, id);
CREATE TABLE submissions (
    id bigint PRIMARY KEY, conversation_id bigint NOT NULL, request_id text,
    status text NOT NULL CHECK (status IN ('queued','placed','done','unanswered')),
    record text NOT NULL);
CREATE INDEX submissions_by_request ON submissions (conversation_id, request_id);
CREATE INDEX submissions_unsettled ON submissions (status, id) WHERE status IN ('queued','placed');
CREATE TABLE documents (
    conversation_id bigint NOT NULL, kind text NOT NULL, seq bigint NOT NULL, value text NOT NULL,
    PRIMARY KEY (conversation_id, kind));
CREATE TABLE document_records (
    id bigint PRIMARY KEY,
    scope text NOT NULL CHECK (scope IN ('conversation','task')),
    owner bigint NOT NULL, kind text NOT NULL, version bigint NOT NULL,
    history text NOT NULL CHECK (history IN ('latest','rewindable')),
    fork text NOT NULL, created_seq bigint NOT NULL, retired_seq bigint);
CREATE INDEX document_records_by_address ON document_records (scope, owner, kind, id);
CREATE TABLE document_revisions (
    document_id bigint NOT NULL, seq bigint NOT NULL,
    action text NOT NULL CHECK (action IN ('base','delta','retire')),
    content text NOT NULL, PRIMARY KEY (document_id, seq));
CREATE TABLE journal (
    seq bigint PRIMARY KEY, format integer NOT NULL, events text NOT NULL, writes text NOT NULL);
"""

#: Version 2: the tree of every conversation, task and submission (the
#: conversation tree a worker leases: a top-level conversation, the
#: conversations its tasks own and its forks, with their tasks and
#: submissions), backfilled for existing rows; what a lease fences.
_V2: tuple[str, ...] = (
    "ALTER TABLE conversations ADD COLUMN tree bigint",
    "ALTER TABLE tasks ADD COLUMN tree bigint",
    "ALTER TABLE submissions ADD COLUMN tree bigint",
    """DO $$ BEGIN
        UPDATE conversations SET tree = id WHERE owner_task_id IS NULL AND parent_id IS NULL;
        LOOP
            UPDATE conversations c SET tree = p.tree FROM conversations p
            WHERE c.tree IS NULL AND p.tree IS NOT NULL
              AND p.id = COALESCE((SELECT k.conversation_id FROM tasks k WHERE k.id = c.owner_task_id), c.parent_id);
            EXIT WHEN NOT FOUND;
        END LOOP;
        UPDATE conversations SET tree = id WHERE tree IS NULL;
        UPDATE tasks k SET tree = c.tree FROM conversations c WHERE c.id = k.conversation_id;
        UPDATE submissions s SET tree = c.tree FROM conversations c WHERE c.id = s.conversation_id;
    END $$""",
    "CREATE INDEX conversations_by_tree ON conversations (tree, id)",
    "CREATE INDEX tasks_live_by_tree ON tasks (tree, id) WHERE status <> 'terminal'",
    "CREATE INDEX submissions_unsettled_by_tree ON submissions (tree, id) WHERE status IN ('queued','placed')",
    # landed: the order commits reached the store (a fenced-out commit never lands after a newer epoch's)
    "CREATE SEQUENCE journal_landed",
    "ALTER TABLE journal ADD COLUMN tree bigint, ADD COLUMN epoch bigint, ADD COLUMN worker text, "
    "ADD COLUMN landed bigint NOT NULL DEFAULT nextval('journal_landed')",
    "CREATE SEQUENCE id_blocks",
    "CREATE TABLE leases (root bigint PRIMARY KEY, owner text, epoch bigint NOT NULL DEFAULT 0, "
    "expires_at timestamptz, work_at timestamptz, pinned text, claimed_at timestamptz)",
    "CREATE INDEX leases_wanted ON leases (root) WHERE work_at IS NOT NULL",
    "CREATE TABLE intake (id bigserial PRIMARY KEY, tree bigint NOT NULL, conversation_id bigint NOT NULL, "
    "request_id text NOT NULL, type text NOT NULL CHECK (type IN ('input','write')), payload text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now(), submission_id bigint, refused text, "
    "UNIQUE (conversation_id, request_id))",
    "CREATE INDEX intake_pending ON intake (tree, id) WHERE submission_id IS NULL AND refused IS NULL",
    # fence(root, epoch, owner): lock the lease row; a commit of an owner whose
    # lease was taken (or released) fails with SQLSTATE PD001 and rolls back
    """CREATE FUNCTION fence(r bigint, e bigint, o text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN
        PERFORM 1 FROM leases WHERE root = r AND epoch = e AND owner = o FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'lease on tree % epoch % is no longer held by %', r, e, o USING ERRCODE = 'PD001';
        END IF;
    END $$""",
    # every existing tree gets a lease row; those with live work want an owner
    "INSERT INTO leases (root, work_at) SELECT c.id, CASE WHEN EXISTS "
    "(SELECT 1 FROM tasks k WHERE k.tree = c.id AND k.status <> 'terminal') OR EXISTS "
    "(SELECT 1 FROM submissions s WHERE s.tree = c.id AND s.status IN ('queued','placed')) THEN now() END "
    "FROM conversations c WHERE c.tree = c.id",
)

# SQLite's version 5 (issue 10: the built-in documents as document records,
# core/builtins.py) is this layout's version 3: each ``documents`` row becomes
# its built-in's record (id -(8 * conversation + n)) and a base revision at the
# row's commit (the row's value is already the lean JSON core/builtins.py
# writes), and the table goes.
_BUILTIN_NUMBERS = "CASE d.kind " + " ".join(f"WHEN '{k}' THEN {b.number}" for k, b in BUILTINS.items()) + " END"
_V3 = (
    "INSERT INTO document_records (id, scope, owner, kind, version, history, fork, created_seq) "
    f"SELECT -(8 * d.conversation_id + {_BUILTIN_NUMBERS}), 'conversation', d.conversation_id, d.kind, 1, "
    "CASE d.kind WHEN 'pi.agent' THEN 'rewindable' ELSE 'latest' END, "
    "CASE d.kind WHEN 'pi.agent' THEN 'as_of' ELSE 'initial' END, d.seq FROM documents d",
    "INSERT INTO document_revisions (document_id, seq, action, content) "
    f"SELECT -(8 * d.conversation_id + {_BUILTIN_NUMBERS}), d.seq, 'base', "
    "'{\"scope\":\"conversation\",\"owner\":' || d.conversation_id || ',\"kind\":\"' || d.kind || "
    "'\",\"version\":1,' || CASE d.kind WHEN 'pi.agent' THEN '' "
    "ELSE '\"history\":\"latest\",\"fork\":\"initial\",' END || '\"action\":\"base\",\"value\":' "
    "|| d.value || '}' FROM documents d",
    "DROP TABLE documents",
)
assert {k: (b.history.value, b.fork.value) for k, b in BUILTINS.items()} == {
    k: ("rewindable", "as_of") if k == "pi.agent" else ("latest", "initial") for k in BUILTINS
}, "the PostgreSQL migration 3 above spells the built-ins' policies"

#: version -> the statements that reach it from the version before.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: tuple(s.strip() for s in _V1.split(";") if s.strip()),
    2: _V2,
    3: _V3,
}
assert sorted(MIGRATIONS) == list(range(1, PG_SCHEMA_VERSION + 1))

#: The tables of the layout at PG_SCHEMA_VERSION.
TABLES = frozenset(
    {
        "meta",
        "conversations",
        "entries",
        "tasks",
        "submissions",
        "document_records",
        "document_revisions",
        "journal",
        "leases",
        "intake",
    }
)

BOOTSTRAP = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    "INSERT INTO meta (key, value) VALUES ('store_id', %s), ('schema_version', '0')",
)

UPSERT = {
    # the tree: the writer's (a worker's view), else the owning task's, else
    # the fork parent's, else its own; set once, when the row is inserted
    "conversations": "INSERT INTO conversations (id, owner_task_id, parent_id, fork_at, record, tree) "
    "VALUES (%(id)s, %(owner_task_id)s, %(parent_id)s, %(fork_at)s, %(record)s, COALESCE(%(tree)s::bigint, "
    "(SELECT k.tree FROM tasks k WHERE k.id = %(owner_task_id)s), "
    "(SELECT p.tree FROM conversations p WHERE p.id = %(parent_id)s), %(id)s)) "
    "ON CONFLICT (id) DO UPDATE SET owner_task_id = EXCLUDED.owner_task_id, "
    "parent_id = EXCLUDED.parent_id, fork_at = EXCLUDED.fork_at, record = EXCLUDED.record",
    # an entry is written once: a second put of its id is refused (the commit rolls back)
    "entries": "INSERT INTO entries (id, conversation_id, seq, record) "
    "VALUES (%(id)s, %(conversation_id)s, %(seq)s, %(record)s)",
    "tasks": "INSERT INTO tasks (id, conversation_id, kind, status, owner, record, tree) "
    "VALUES (%(id)s, %(conversation_id)s, %(kind)s, %(status)s, %(owner)s, %(record)s, "
    "COALESCE(%(tree)s::bigint, (SELECT c.tree FROM conversations c WHERE c.id = %(conversation_id)s))) "
    "ON CONFLICT (id) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, kind = EXCLUDED.kind, "
    "status = EXCLUDED.status, owner = EXCLUDED.owner, record = EXCLUDED.record",
    "submissions": "INSERT INTO submissions (id, conversation_id, request_id, status, record, tree) "
    "VALUES (%(id)s, %(conversation_id)s, %(request_id)s, %(status)s, %(record)s, "
    "COALESCE(%(tree)s::bigint, (SELECT c.tree FROM conversations c WHERE c.id = %(conversation_id)s))) "
    "ON CONFLICT (id) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, "
    "request_id = EXCLUDED.request_id, status = EXCLUDED.status, record = EXCLUDED.record",
}

#: One ``PutDocument`` row (as ``sqlite_documents.write``): a retirement marks
#: the record, a base upserts it; every revision but a retirement is inserted;
#: a base or retirement that reclaims deletes the revisions before it.
DOC_RETIRE = "UPDATE document_records SET retired_seq = %(seq)s WHERE id = %(document_id)s"
DOC_RETIRE_RECLAIM = "DELETE FROM document_revisions WHERE document_id = %(document_id)s"
DOC_BASE = (
    "INSERT INTO document_records (id, scope, owner, kind, version, history, fork, created_seq) "
    "VALUES (%(document_id)s, %(scope)s, %(owner)s, %(kind)s, %(version)s, %(history)s, %(fork)s, %(seq)s) "
    "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, history = EXCLUDED.history, fork = EXCLUDED.fork"
)
DOC_REVISION = (
    "INSERT INTO document_revisions (document_id, seq, action, content) "
    "VALUES (%(document_id)s, %(seq)s, %(action)s, %(content)s)"
)
DOC_RECLAIM = "DELETE FROM document_revisions WHERE document_id = %(document_id)s AND seq < %(seq)s"

#: The journal row; ``tree``, ``epoch`` and ``worker`` say which lease a
#: worker's commit was fenced by (NULL for a single owner's).
JOURNAL = (
    "INSERT INTO journal (seq, format, events, writes, tree, epoch, worker) VALUES (%s, %s, %s, %s, %s, %s, %s)"
)

#: A store's schema name: a plain lower-case identifier (it is spliced into
#: ``search_path`` and DDL, so nothing needs quoting).
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: pg_advisory_lock key space: the first 32 bits say "pidurable".
_NAMESPACE = 0x70_69_64_75  # "pidu"


def _key(kind: str, text: str) -> int:
    """A signed 64-bit advisory-lock key: our namespace, then a hash of ``text``."""
    low = int.from_bytes(hashlib.blake2b(f"{kind}:{text}".encode(), digest_size=4).digest(), "big")
    key = (_NAMESPACE << 32) | low
    return key - (1 << 64) if key >= 1 << 63 else key


def store_key(store_id: str) -> int:
    """The session lock one owner holds on store ``store_id``."""
    return _key("store", store_id)


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of the store in ``schema`` (work for workers)."""
    return f"pidurable_{schema}"


def bootstrap_key(schema: str) -> int:
    """The transaction lock that serializes creating a store in ``schema``
    (advisory locks are per database already)."""
    return _key("bootstrap", schema)


def lock_parts(key: int) -> tuple[int, int]:
    """How ``pg_locks`` shows a bigint advisory key: (classid, objid)."""
    unsigned = key & ((1 << 64) - 1)
    return unsigned >> 32, unsigned & 0xFFFFFFFF
