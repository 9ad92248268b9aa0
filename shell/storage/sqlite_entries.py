"""SQLite reads of transcripts, fork-aware (the layout: :mod:`.sqlite_layout`).

A fork's transcript is its parent's visible entries up to its fork point,
then its own: ``entries`` reads the segments of the conversation's
:data:`~.base.Lineage` in one query (each segment is a range of the
``(conversation_id, id)`` index). A conversation's parent never changes, so
lineages are cached once found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pidurable.core.model import Conversation, ConversationId, Entry

from .base import Lineage, decode_row, lineage_of

#: Above every id (SQLite integers are 64-bit).
_TOP = 1 << 62


class EntryReads:
    """The entry reads of :class:`.sqlite.SqliteStorage` (a mixin: it needs
    the store's ``name``, ``_rows(op, sql, params)`` and ``_one``)."""

    name: str
    _rows: Callable[..., list[Any]]
    _one: Callable[..., Any]
    _lineages: dict[ConversationId, Lineage]

    def conversation(self, conversation_id: ConversationId) -> Conversation | None:
        return self._one("conversations", Conversation, "id = ?", [conversation_id])  # type: ignore[no-any-return]

    def lineage(self, conversation_id: ConversationId) -> Lineage:
        """Whose entries the conversation reads (itself, then its parents)."""
        found = self._lineages.get(conversation_id)
        if found is None:
            found = lineage_of(self.conversation, conversation_id, self.name)
            if self.conversation(conversation_id) is not None:
                self._lineages[conversation_id] = found
        return found

    def entries(
        self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None
    ) -> list[Entry]:
        """A conversation's transcript (inherited entries first), oldest
        first; ``after < id <= upto``."""
        segments = self.lineage(conversation_id)
        where = " OR ".join("(conversation_id = ? AND id <= ?)" for _ in segments)
        params: list[Any] = [p for c, cap in segments for p in (c, _TOP if cap is None else cap)]
        params += [-1 if after is None else after, _TOP if upto is None else upto]
        sql = f"SELECT id, conversation_id, record FROM entries WHERE ({where}) AND id > ? AND id <= ? ORDER BY id"
        return [
            decode_row(self.name, "entries", {"id": i, "conversation_id": c}, rec, Entry)
            for i, c, rec in self._rows("reading entries", sql, params)
        ]

    def entry(self, entry_id: int) -> Entry | None:
        return self._one("entries", Entry, "id = ?", [entry_id])  # type: ignore[no-any-return]

    def entry_seq(self, entry_id: int) -> int | None:
        """The commit that stored entry ``entry_id`` (None: no such entry)."""
        found: Sequence[Any] = self._rows("reading entries", "SELECT seq FROM entries WHERE id = ?", [entry_id])
        return int(found[0][0]) if found else None
