"""Record reads shared by the SQL stores (SQLite and PostgreSQL): the same
tables, the same ``id, record`` rows, the same decoding (a mixin: it needs
the store's ``name`` and ``_rows(op, sql, params)``, whose ``?`` placeholders
each store maps to its driver)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pidurable.core.model import Conversation, ConversationId, Submission, SubmissionId, Task, TaskId
from pidurable.core.state import ConvState, DocumentState

from .base import ROW_COLUMNS, JournalRow, conv_state, decode_doc, decode_record, decode_row


class RecordReads:
    """Submissions, tasks, conversations, documents and the journal."""

    name: str
    _rows: Callable[..., list[Any]]
    live_builtins: Callable[..., dict[ConversationId, dict[str, DocumentState]]]

    def _records(self, table: str, cl: type[Any], where: str = "", params: Sequence[Any] = ()) -> list[Any]:
        """Decoded records of ``table`` (``where`` filters), by id; a task's
        or an entry's with its row's columns put back (``ROW_COLUMNS``)."""
        columns = ROW_COLUMNS.get(table)
        sql = f"SELECT {', '.join(columns or ('id',))}, record FROM {table}"
        sql += (f" WHERE {where}" if where else "") + " ORDER BY id"
        rows = self._rows(f"reading {table}", sql, params)
        if columns is not None:
            return [decode_row(self.name, table, dict(zip(columns, row)), row[-1], cl) for row in rows]
        return [decode_record(self.name, table, i, rec, cl) for i, rec in rows]

    def _open_records(self) -> tuple[tuple[ConvState, ...], tuple[Task, ...], tuple[Submission, ...]]:
        """What a whole ``load()`` reads: every conversation (with its
        built-in documents), the live tasks, the unsettled submissions."""
        docs = self.live_builtins()
        convs = tuple(conv_state(c, docs.get(c.id, {}), self.name) for c in self._records("conversations", Conversation))
        tasks = tuple(self._records("tasks", Task, "status <> 'terminal'"))
        subs = tuple(self._records("submissions", Submission, "status IN ('queued','placed')"))
        return convs, tasks, subs

    def _one(self, table: str, cl: type[Any], where: str, params: Sequence[Any]) -> Any:
        found = self._records(table, cl, where, params)
        return found[0] if found else None

    def submission(self, submission_id: SubmissionId) -> Submission | None:
        return self._one("submissions", Submission, "id = ?", [submission_id])  # type: ignore[no-any-return]

    def submission_by_request(self, conversation_id: ConversationId, request_id: str) -> Submission | None:
        return self._one(  # type: ignore[no-any-return]
            "submissions", Submission, "conversation_id = ? AND request_id = ?", [conversation_id, request_id]
        )

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]:
        if conversation_id is None:
            return self._records("submissions", Submission)
        return self._records("submissions", Submission, "conversation_id = ?", [conversation_id])

    def task(self, task_id: TaskId) -> Task | None:
        return self._one("tasks", Task, "id = ?", [task_id])  # type: ignore[no-any-return]

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]:
        where, params = [], []
        if conversation_id is not None:
            where.append("conversation_id = ?")
            params.append(conversation_id)
        if live_only:
            where.append("status <> 'terminal'")
        return self._records("tasks", Task, " AND ".join(where), params)

    def conversations(self) -> list[Conversation]:
        return self._records("conversations", Conversation)

    def journal(self) -> list[JournalRow]:
        return [
            JournalRow(seq=seq, events=ev, writes=wr, format=fmt)
            for seq, fmt, ev, wr in self._rows(
                "reading the journal", "SELECT seq, format, events, writes FROM journal ORDER BY seq"
            )
        ]
