"""The statements of a SQLite commit (the layout: :mod:`.sqlite_layout`):
each commit's rows in order, then its journal row, inside the transaction
:meth:`.sqlite.SqliteStorage.commit_many` opens."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from itertools import groupby
from operator import itemgetter
from typing import Any

from . import codec, sqlite_documents
from .sqlite_layout import UPSERT


def _positional(sql: str) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]:
    """``sql`` with ``?`` for its ``:name`` parameters, and what picks their
    values from a row's columns in that order: sqlite3 binds a named
    parameter by building and hashing a string of its name on every execute
    (issue 11 item 2: a cheap write path)."""
    names = re.findall(r":(\w+)", sql)
    assert len(names) > 1, sql  # (itemgetter of one name gives the value, not a tuple)
    return re.sub(r":\w+", "?", sql), itemgetter(*names)


#: :data:`.sqlite_layout.UPSERT` with positional parameters: (sql, the row's values in order).
_UPSERT = {table: _positional(sql) for table, sql in UPSERT.items()}
_INSERT_JOURNAL = "INSERT INTO journal (seq, format, events, writes) VALUES (?, ?, ?, ?)"
_FORMAT = codec.FORMAT_VERSION
#: A row's table and its columns (:class:`.rows.Row`'s fields, read in C).
_TABLE, _COLUMNS = itemgetter(0), itemgetter(2)
#: :data:`.sqlite_documents.INSERT_REVISION`'s parameters from a revision row's columns.
_revision_values = itemgetter("document_id", "seq", "action", "content")


def write_all(cur: sqlite3.Cursor, encoded: list[tuple[int, list[Any], str, str]]) -> None:
    """Each commit's rows in order, then its journal row (``cur``: inside
    the transaction). Consecutive rows of one table go in one
    ``executemany`` (a model step's four tasks: one statement; issue 11
    item 2), grouped and fed in C (groupby, map)."""
    execute = cur.execute
    executemany = cur.executemany
    for seq, rows, ev_text, wr_text in encoded:
        for table, group in groupby(rows, _TABLE):
            if table != "document_revisions":
                sql, values = _UPSERT[table]
                executemany(sql, map(values, map(_COLUMNS, group)))
                continue
            for _, _, c in group:
                if c["action"] == "delta":  # only its revision row (sqlite_documents.write, inline)
                    execute(sqlite_documents.INSERT_REVISION, _revision_values(c))
                else:
                    sqlite_documents.write(cur, c)
        execute(_INSERT_JOURNAL, (seq, _FORMAT, ev_text, wr_text))
