"""Journal retention and compaction of a SQLite store (issue 11 item 3).

``journal_retention`` (``open_sqlite_storage(path, journal_retention=...)``)
is ``"all"`` (the default: every journal row is kept) or a whole number N
of commits. With N, :func:`prune` keeps the newest N rows and every row from
the first commit that the oldest live work may come from: the commit of the
newest entry older than the oldest live task or unsettled submission (ids
grow with commits, so no older commit wrote that work) - a run not yet
settled keeps its whole journal. Records are never touched, the newest row
always stays (open reads the next seq from it), and the ``DELETE`` is one
transaction of its own, so a crash leaves the rows as they were. The store
prunes at the first commit of a process life and every :data:`PRUNE_EVERY`
commits after.

:func:`compact` (``pidurable compact-store``) rewrites task and entry rows
written before schema 4 in their lean form (the same records,
``base.ROW_COLUMNS``), runs ``VACUUM`` and truncates the WAL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pidurable.core.effects import PutEntry, PutTask
from pidurable.core.model import Entry, Task

from .base import ROW_COLUMNS, StorageError, StoreFenced, decode_row, encode_write

if TYPE_CHECKING:
    from .sqlite import SqliteStorage

#: Journal retention prunes after this many commits (and at a life's first).
PRUNE_EVERY = 1000


def check_retention(value: Any) -> int | str:
    """``journal_retention``: ``"all"`` or a whole number of commits >= 1."""
    if value == "all" and isinstance(value, str):
        return "all"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"journal_retention must be 'all' or a whole number of commits >= 1 (the newest commits whose "
            f"journal rows are kept), not {value!r}"
        )
    return value


def prune(store: SqliteStorage) -> int:
    """Drop the journal rows the store's retention does not keep; how many."""
    if store.journal_retention == "all" or store.read_only:
        return 0
    if store._fenced:
        raise StoreFenced(f"store {store.path} is fenced")
    with store._failing("pruning the journal"):
        keep_from = _keep_from(store, int(store.journal_retention))
        if keep_from is None:
            return 0
        with store.db.atomic():
            cur = store.db.conn.execute("DELETE FROM journal WHERE seq < ?", [keep_from])
        return int(cur.rowcount)


def _keep_from(store: SqliteStorage, retention: int) -> int | None:
    """The first journal seq to keep (None: keep every row)."""
    db = store.db
    ((top,),) = db.execute("SELECT max(seq) FROM journal").fetchall()
    if top is None:
        return None
    keep_from = int(top) - retention + 1  # retention >= 1: the newest row stays
    ((oldest,),) = db.execute(
        "SELECT min(m) FROM (SELECT min(id) AS m FROM tasks WHERE status != 'terminal' "
        "UNION ALL SELECT min(id) FROM submissions WHERE status IN ('queued','placed'))"
    ).fetchall()
    if oldest is not None:
        found = db.execute("SELECT seq FROM entries WHERE id < ? ORDER BY id DESC LIMIT 1", [oldest]).fetchall()
        keep_from = min(keep_from, int(found[0][0]) if found else 1)
    return keep_from if keep_from > 1 else None


def span(store: SqliteStorage) -> tuple[int, int] | None:
    """The first and last seq the journal holds (None: no row)."""
    ((low, high),) = store._rows("reading the journal", "SELECT min(seq), max(seq) FROM journal")
    return None if low is None else (int(low), int(high))


def compact(store: SqliteStorage) -> int:
    """Rewrite pre-schema-4 task and entry rows lean, ``VACUUM``, truncate
    the WAL; returns the rows rewritten. The store must be open read-write
    (so this process holds its lock: no other process has it open)."""
    if store.read_only or store._fenced:
        raise StorageError(f"Store {store.path} is open read-only or fenced: it cannot be compacted")
    rewritten = 0
    if store._checkpointer is not None:  # (its TRUNCATE below would wait on a running one)
        store._checkpointer.wait()
    with store._failing("compacting"):
        with store.db.atomic():
            rewritten += _rewrite_lean(store, "tasks", Task, PutTask, "task")
            rewritten += _rewrite_lean(store, "entries", Entry, PutEntry, "entry")
        store.db.execute("VACUUM")
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return rewritten


def _rewrite_lean(store: SqliteStorage, table: str, cl: type[Any], put: Any, field: str) -> int:
    """Rows whose record still holds its own id (written before schema 4)."""
    columns = ROW_COLUMNS[table]
    conn = store.db.conn
    rows = conn.execute(f"SELECT {', '.join(columns)}, record FROM {table} WHERE record LIKE '{{\"id\":%'").fetchall()
    for row in rows:
        record = decode_row(store.name, table, dict(zip(columns, row)), row[-1], cl)
        lean = encode_write(put(**{field: record}), 0)[0].columns["record"]
        conn.execute(f"UPDATE {table} SET record = ? WHERE id = ?", [lean, row[0]])
    return len(rows)
