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

from pidurable.core.builtins import BUILTINS

from .base import DocumentRow, builtin_value, document_state, split_builtins

#: ``(sql, params) -> rows`` (the store's error-wrapping execute).
Execute = Callable[[str, Sequence[Any]], list[Any]]


#: A revision's row (all a delta writes, which never reclaims: :func:`.sqlite_writes.write_all` runs it itself).
INSERT_REVISION = "INSERT INTO document_revisions (document_id, seq, action, content) VALUES (?, ?, ?, ?)"


def write(conn: sqlite3.Cursor, c: dict[str, Any]) -> None:
    """One document revision: the record row, the revision, reclamation
    (``conn``: the commit's cursor, inside its transaction)."""
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
    conn.execute(INSERT_REVISION, (did, seq, c["action"], c["content"]))
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
        """Every live host-defined document, its value rebuilt (what ``load``
        returns; the built-ins are :meth:`live_builtins`)."""
        out = []
        for row in self._document_rows("retired_seq IS NULL AND id >= 0", []):
            doc = document_state(self.name, row, self._revisions(row.id))
            if doc is not None:
                out.append(doc)
        return tuple(out)

    def live_builtins(self, conversations: Sequence[int] | None = None) -> dict[ConversationId, dict[str, DocumentState]]:
        """The built-in documents (core/builtins.py: negative ids) of every
        conversation, or of these, by conversation and kind: one query for
        the records and one for their revisions."""
        where, params = "id < 0 AND retired_seq IS NULL", []
        if conversations is not None:
            where += f" AND owner IN ({', '.join('?' * len(conversations))})"
            params = list(conversations)
        records = self._document_rows(where, params)
        if not records:
            return {}
        revisions: dict[int, list[tuple[int, str]]] = {}
        marks = ", ".join("?" * len(records))
        for did, seq, content in self._rows(
            "reading document_revisions",
            f"SELECT document_id, seq, content FROM document_revisions WHERE document_id IN ({marks}) "
            "ORDER BY document_id, seq",
            [r.id for r in records],
        ):
            revisions.setdefault(did, []).append((seq, content))
        docs = [d for r in records if (d := document_state(self.name, r, revisions.get(r.id, []))) is not None]
        return split_builtins(docs)[0]

    def document(self, conversation_id: ConversationId, kind: str) -> Any:
        """A built-in document's typed value (core/builtins.py): its initial
        value while the conversation has not stored it (None: not a built-in)."""
        if kind not in BUILTINS:
            return None
        doc = self.document_state(DocScope.CONVERSATION, conversation_id, kind)
        return BUILTINS[kind].initial if doc is None else builtin_value(doc, self.name)
