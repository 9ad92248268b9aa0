"""The statements of a SQLite commit (the layout: :mod:`.sqlite_layout`):
a batch's rows table by table, then its journal rows, inside the
transaction :meth:`.sqlite.SqliteStorage.commit_many` opens."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from . import codec, sqlite_documents
from .sqlite_layout import UPSERT


class Statements(dict[int, str]):
    """One ``INSERT ... VALUES (?, ...)`` statement for any number of rows,
    by the number of values: ``VALUES (?, ...), (?, ...)``, so SQLite runs
    one statement for a table's rows of a whole batch, not one per row
    (sqlite3 binds, releases the GIL, steps and resets per statement;
    issue 11 item 2). Built on first use (``__missing__``: a hit is a dict
    read in C); ``most``: the values one statement takes at most."""

    def __init__(self, sql: str, max_rows: int) -> None:
        super().__init__()
        found = re.fullmatch(r"(.* VALUES )(\([?, ]+\))(.*)", sql, re.S)
        assert found is not None, sql
        self._head, self._one, self._tail = found.groups()
        self.width = self._one.count("?")
        self.most = self.width * max_rows

    def __missing__(self, n: int) -> str:
        rows, left = divmod(n, self.width)
        if left or not 0 < rows * self.width <= self.most:
            raise ValueError(f"{n} values are not whole rows of {self.width} (at most {self.most})")
        sql = self[n] = self._head + ", ".join([self._one] * rows) + self._tail
        return sql


def _positional(sql: str) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]:
    """``sql`` with ``?`` for its ``:name`` parameters, and what picks their
    values from a row's columns in that order: sqlite3 binds a named
    parameter by building and hashing a string of its name on every execute
    (issue 11 item 2: a cheap write path)."""
    names = re.findall(r":(\w+)", sql)
    assert len(names) > 1, sql  # (itemgetter of one name gives the value, not a tuple)
    return re.sub(r":\w+", "?", sql), itemgetter(*names)


#: At most this many rows in one statement (SQLite takes at most 32,766
#: parameters; a batch of many commits goes in several statements).
MAX_ROWS = 100
#: :data:`.sqlite_layout.UPSERT` with positional parameters: (statements, the row's values in order).
_UPSERT = {t: (Statements(sql, MAX_ROWS), values) for t, (sql, values) in ((t, _positional(s)) for t, s in UPSERT.items())}
_JOURNAL = Statements("INSERT INTO journal (seq, format, events, writes) VALUES (?, ?, ?, ?)", MAX_ROWS)
_REVISIONS = Statements(sqlite_documents.INSERT_REVISION, MAX_ROWS)
#: The format of the journal rows written (the second value of each).
FORMAT = codec.FORMAT_VERSION
#: A row's table and its columns (:class:`.rows.Row`'s fields, read in C).
_TABLE, _COLUMNS = itemgetter(0), itemgetter(2)
#: :data:`.sqlite_documents.INSERT_REVISION`'s parameters from a revision row's columns.
_revision_values = itemgetter("document_id", "seq", "action", "content")
_DOCUMENTS = "document_revisions"


def write_all(cur: sqlite3.Cursor, rows: list[Any], journal: list[Any]) -> None:
    """A batch's rows (:class:`.rows.Row`, the commits' in order) and
    journal rows (``seq, FORMAT, events, writes`` of each commit, one after
    the other); ``cur``: inside the transaction. The rows go table by table -
    the tables are independent (no trigger, no foreign key) and each table's
    rows keep their order (a stable sort, in C), so the store ends the same -,
    each table's rows in one statement (:class:`Statements`). A document's
    revisions go in order; consecutive deltas (a revision row and nothing
    else) in one statement."""
    execute = cur.execute
    for table, group in groupby(sorted(rows, key=_TABLE), _TABLE):
        if table != _DOCUMENTS:
            statements, values = _UPSERT[table]
            flat = list(chain.from_iterable(map(values, map(_COLUMNS, group))))
            if len(flat) <= statements.most:  # (_insert, inline: most batches)
                execute(statements[len(flat)], flat)
            else:
                _insert(execute, statements, flat)
            continue
        deltas: list[Any] = []
        for _, _, c in group:
            if c["action"] == "delta":  # only its revision row (sqlite_documents.write, inline)
                deltas += _revision_values(c)
                continue
            if deltas:
                _insert(execute, _REVISIONS, deltas)
                deltas = []
            sqlite_documents.write(cur, c)
        if deltas:
            _insert(execute, _REVISIONS, deltas)
    if len(journal) <= _JOURNAL.most:
        execute(_JOURNAL[len(journal)], journal)
    else:
        _insert(execute, _JOURNAL, journal)


def _insert(execute: Callable[[str, Any], Any], statements: Statements, values: list[Any]) -> None:
    """``values`` (whole rows, one after the other) in as few statements as
    :data:`MAX_ROWS` allows."""
    most = statements.most
    if len(values) <= most:
        execute(statements[len(values)], values)
        return
    for at in range(0, len(values), most):
        chunk = values[at : at + most]
        execute(statements[len(chunk)], chunk)
