"""SQLite rows of host-defined documents (the layout: :mod:`.sqlite_layout`).

``write`` applies one ``PutDocument`` row inside the commit's transaction:
a base upserts the ``document_records`` row, every revision is inserted, and
a base (or retirement) of a current-only document deletes the revisions
before it. ``rows``/``revisions`` read them back for :func:`.base.document_state`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from functools import partial

from pidurable.core.model import ConversationId
from pidurable.core.state import DocScope, DocumentState

from .base import DocumentRow, document_state

#: ``(sql, params) -> rows`` (the store's error-wrapping execute).
Execute = Callable[[str, Sequence[Any]], list[Any]]


def write(conn: sqlite3.Connection, c: dict[str, Any]) -> None:
    """One document revision: the record row, the revision, reclamation."""
    did, seq = c["document_id"], c["seq"]
    if c["action"] == "retire":
        conn.execute("UPDATE document_records SET retired_seq = ? WHERE id = ?", (seq, did))
        if c["reclaims"]:
            conn.execute("DELETE FROM document_revisions WHERE document_id = ?", (did,))
        return
    if c["action"] == "base":
        conn.execute(
            "INSERT INTO document_records (id, scope, owner, kind, version, history, fork, created_seq) "
            "VALUES (:document_id, :scope, :owner, :kind, :version, :history, :fork, :seq) "
            "ON CONFLICT (id) DO UPDATE SET version = excluded.version, history = excluded.history, "
            "fork = excluded.fork",
            c,
        )
    conn.execute(
        "INSERT INTO document_revisions (document_id, seq, action, content) VALUES (?, ?, ?, ?)",
        (did, seq, c["action"], c["content"]),
    )
    if c["reclaims"]:
        conn.execute("DELETE FROM document_revisions WHERE document_id = ? AND seq < ?", (did, seq))


def rows(execute: Execute, where: str, params: Sequence[Any]) -> list[DocumentRow]:
    sql = (
        "SELECT id, scope, owner, kind, version, history, fork, created_seq, retired_seq "
        f"FROM document_records WHERE {where} ORDER BY id"
    )
    return [
        DocumentRow(id=i, scope=sc, owner=o, kind=k, version=v, history=h, fork=f, created_seq=c, retired_seq=r)
        for i, sc, o, k, v, h, f, c, r in execute(sql, params)
    ]


def revisions(execute: Execute, document_id: int) -> list[tuple[int, str]]:
    found = execute("SELECT seq, content FROM document_revisions WHERE document_id = ? ORDER BY seq", [document_id])
    return [(seq, content) for seq, content in found]


class DocumentReads:
    """The document reads of :class:`.sqlite.SqliteStorage` (a mixin: it
    needs the store's ``name`` and ``_rows(op, sql, params)``)."""

    name: str
    _rows: Callable[..., list[Any]]

    def _document_rows(self, where: str, params: Sequence[Any]) -> list[DocumentRow]:
        return rows(partial(self._rows, "reading document_records"), where, params)

    def _revisions(self, document_id: int) -> list[tuple[int, str]]:
        return revisions(partial(self._rows, "reading document_revisions"), document_id)

    def document_state(self, scope: DocScope, owner: int, kind: str) -> DocumentState | None:
        """The live host-defined document at (scope, owner, kind), or None."""
        found = self._document_rows(
            "scope = ? AND owner = ? AND kind = ? AND retired_seq IS NULL", [scope.value, owner, kind]
        )
        return document_state(self.name, found[-1], self._revisions(found[-1].id)) if found else None

    def document_at(self, conversation_id: ConversationId, kind: str, seq: int) -> DocumentState | None:
        """The conversation's document ``kind`` as of commit ``seq``."""
        found = self._document_rows(
            "scope = 'conversation' AND owner = ? AND kind = ? AND created_seq <= ?", [conversation_id, kind, seq]
        )
        return document_state(self.name, found[-1], self._revisions(found[-1].id), upto=seq) if found else None

    def live_documents(self) -> tuple[DocumentState, ...]:
        """Every live document, its value rebuilt (what ``load`` returns)."""
        out = []
        for row in self._document_rows("retired_seq IS NULL", []):
            doc = document_state(self.name, row, self._revisions(row.id))
            if doc is not None:
                out.append(doc)
        return tuple(out)
