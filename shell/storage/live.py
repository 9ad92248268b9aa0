"""What ``Harness.open`` reads: the live work only (issue 11: open is O(live)).

``load_live(roots=None)`` returns a :class:`~.base.Loaded` holding the live
tasks, the unsettled submissions, and only the conversations the core must
hold (core/holding.py): those with a live task or an unsettled submission in
them, and those owned by a live task - with their built-in documents and
their live host-defined documents, plus every live task-scoped document.
Settled conversations are not read at all; the reducer asks for one when a
host event names it (``load_conversations(ids)``, shell/loading.py).

``roots`` narrows the live work to some conversation trees (a root
conversation, the conversations its tasks own, theirs, ...): a worker that
claims trees opens only what it claims. The counters (``next_id``,
``next_seq``) stay the store's.

A busy conversation or one with queued input always has a live task or an
unsettled submission (its run's generation, its queued inputs): the two
record reads find every conversation ``HOLD`` names, and the core checks it
at every step in tests (``holding.CHECK``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from pidurable.core.model import Conversation, ConversationId, Submission, Task, TaskId
from pidurable.core.state import ConvState, DocScope, DocumentState

from .base import DocumentRow, Loaded, conv_state, decode_record, document_state

#: At most this many ids in one ``IN (...)`` (SQLite's default limit is far above).
CHUNK = 500


def live_conversation_ids(
    tasks: Iterable[Task], submissions: Iterable[Submission], owned: Iterable[tuple[ConversationId, TaskId]]
) -> list[ConversationId]:
    """The conversations the core holds at open: a live task or an unsettled
    submission in it, or owned by a live task (``owned``: every conversation
    that has an owner task, with it)."""
    live = {t.id for t in tasks}
    ids = {t.conversation_id for t in tasks} | {s.conversation_id for s in submissions}
    ids.update(cid for cid, owner in owned if owner in live)
    return sorted(ids)


def in_trees(
    loaded: Loaded, roots: Sequence[ConversationId], owner_of: Callable[[ConversationId], TaskId | None],
    task_of: Callable[[TaskId], Task | None],
) -> Loaded:
    """``loaded`` narrowed to the trees of ``roots``: what lives in a
    conversation whose root (up the owner links: the owner task's
    conversation, ...) is one of them."""
    wanted = set(roots)
    tasks = {t.id: t for t in loaded.tasks}
    memo: dict[ConversationId, ConversationId] = {}

    def root(cid: ConversationId) -> ConversationId:
        seen: list[ConversationId] = []
        while cid not in memo and cid not in seen:
            seen.append(cid)
            owner = owner_of(cid)
            task = None if owner is None else (tasks.get(owner) or task_of(owner))
            if task is None:
                break
            cid = task.conversation_id
        top = memo.get(cid, cid)
        for c in seen:
            memo[c] = top
        return top

    def keep(cid: ConversationId) -> bool:
        return root(cid) in wanted

    convs = tuple(c for c in loaded.conversations if keep(c.id))
    held = {c.id for c in convs}
    return attrs.evolve(
        loaded,
        conversations=convs,
        tasks=tuple(t for t in loaded.tasks if keep(t.conversation_id)),
        submissions=tuple(s for s in loaded.submissions if keep(s.conversation_id)),
        documents=tuple(
            d
            for d in loaded.documents
            if (d.owner in held if d.scope is DocScope.CONVERSATION else (t := tasks.get(TaskId(d.owner))) is None or keep(t.conversation_id))
        ),
    )


def chunks(ids: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(ids), CHUNK):
        yield ids[i : i + CHUNK]


class SqlLiveReads:
    """``load_conversations`` and the live part of ``load_live`` for the SQL
    stores (a mixin: it needs ``name``, ``_rows``, ``_records``,
    ``_document_rows`` and ``_revisions``; ``?`` placeholders as elsewhere)."""

    name: str
    _rows: Callable[..., list[Any]]
    _records: Callable[..., list[Any]]
    _document_rows: Callable[[str, Sequence[Any]], list[DocumentRow]]
    _revisions: Callable[[int], list[tuple[int, str]]]
    live_builtins: Callable[..., dict[ConversationId, dict[str, DocumentState]]]

    def load_conversations(
        self, ids: Sequence[ConversationId]
    ) -> tuple[tuple[ConvState, ...], tuple[DocumentState, ...]]:
        """These conversations (the ones storage has, by id) and their live
        host-defined documents."""
        ids = sorted(set(ids))
        convs: list[ConvState] = []
        rows: list[DocumentRow] = []
        for part in chunks(ids):
            marks = ",".join("?" * len(part))
            docs = self.live_builtins(part)  # the built-in documents (core/builtins.py)
            convs.extend(
                conv_state(decode_record(self.name, "conversations", cid, rec, Conversation), docs.get(cid, {}), self.name)
                for cid, rec in self._rows(
                    "loading conversations", f"SELECT id, record FROM conversations WHERE id IN ({marks}) ORDER BY id", part
                )
            )
            rows.extend(
                self._document_rows(f"scope = 'conversation' AND retired_seq IS NULL AND id >= 0 AND owner IN ({marks})", part)
            )
        return tuple(convs), _documents(self.name, rows, self._revisions)

    def _live(self) -> tuple[tuple[Task, ...], tuple[Submission, ...], tuple[ConvState, ...], tuple[DocumentState, ...]]:
        tasks = tuple(self._records("tasks", Task, "status <> 'terminal'"))
        subs = tuple(self._records("submissions", Submission, "status IN ('queued','placed')"))
        owned = self._rows("loading", "SELECT id, owner_task_id FROM conversations WHERE owner_task_id IS NOT NULL")
        convs, docs = self.load_conversations(live_conversation_ids(tasks, subs, owned))
        task_docs = _documents(self.name, self._document_rows("scope = 'task' AND retired_seq IS NULL", []), self._revisions)
        return tasks, subs, convs, tuple(sorted(docs + task_docs, key=lambda d: d.id))


def _documents(
    store: str, rows: Iterable[DocumentRow], revisions: Callable[[int], list[tuple[int, str]]]
) -> tuple[DocumentState, ...]:
    out = [d for row in sorted(rows, key=lambda r: r.id) if (d := document_state(store, row, revisions(row.id))) is not None]
    return tuple(out)
