"""Storage conformance for host-defined documents (memory and SQLite), and
the migration of a schema-1 store written by earlier code (issue 10)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.effects import DocumentRevision, PutConversation, PutDocument, PutTask, RevisionAction
from pidurable.core.model import Conversation, ConversationId, Task, TaskId
from pidurable.core.state import DocHistory, DocScope, ForkPolicy
from pidurable.shell import Harness, MemoryStorage, Registry, define_doc, open_sqlite_storage
from pidurable.shell.storage.base import SCHEMA_VERSION

FIXTURE = Path(__file__).parent / "fixtures" / "schema1_store.sqlite"
C1 = ConversationId(1)


def rev(action: RevisionAction, *, value: Any = None, ops: tuple[Any, ...] = (), history: DocHistory = DocHistory.REWINDABLE, scope: DocScope = DocScope.CONVERSATION, owner: int = 1) -> DocumentRevision:
    return DocumentRevision(
        scope=scope,
        owner=owner,
        kind="todo",
        version=1,
        history=history,
        fork=ForkPolicy.AS_OF if history is DocHistory.REWINDABLE else ForkPolicy.CURRENT,
        action=action,
        value=value,
        ops=ops,
    )


@attrs.define
class Store:
    kind: str
    path: Path
    store: Any = None

    def open(self) -> Any:
        self.store = MemoryStorage() if self.kind == "memory" else open_sqlite_storage(self.path)
        return self.store

    def reopen(self) -> Any:
        if self.kind == "memory":
            self.store.close()
            return self.store
        self.store.close()
        self.store = open_sqlite_storage(self.path)
        return self.store


@pytest.fixture(params=["memory", "sqlite"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = Store(kind=request.param, path=tmp_path / "store.sqlite")
    yield s
    if s.store is not None and s.kind == "sqlite":
        s.store.close()


def _history(store: Any, history: DocHistory) -> None:
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    store.commit(2, [PutDocument(document_id=2, revision=rev(RevisionAction.BASE, value={"items": []}, history=history))], [])
    for seq in range(3, 6):
        op = ["p", ["items"], seq - 3, 0, [seq]]
        store.commit(seq, [PutDocument(document_id=2, revision=rev(RevisionAction.DELTA, ops=(op,), history=history))], [])
    store.commit(6, [PutDocument(document_id=2, revision=rev(RevisionAction.BASE, value={"items": [3, 4, 5, 6]}, history=history))], [])
    store.commit(7, [PutDocument(document_id=2, revision=rev(RevisionAction.DELTA, ops=(["d", ["items", 0]],), history=history))], [])


@pytest.mark.parametrize("history", list(DocHistory))
def test_documents_load_rebuilt_from_base_and_deltas(adapter: Store, history: DocHistory) -> None:
    """load() and document_state() rebuild a document from its newest base
    and the deltas after it; the id counter counts document ids."""
    store = adapter.open()
    _history(store, history)
    for life in range(2):
        s = adapter.reopen() if life else store
        loaded = s.load()
        (doc,) = loaded.documents
        assert doc.value == {"items": [4, 5, 6]} and doc.deltas == 1 and doc.id == 2
        assert loaded.next_id == 3
        assert s.document_state(DocScope.CONVERSATION, 1, "todo") == doc


def test_rewindable_history_reads_any_past_value_and_latest_refuses(adapter: Store) -> None:
    """document_at gives the value as of a commit for a rewindable document;
    a ``latest`` one keeps only its newest base onwards."""
    store = adapter.open()
    _history(store, DocHistory.REWINDABLE)
    assert store.document_at(C1, "todo", 1) is None
    assert store.document_at(C1, "todo", 2).value == {"items": []}  # type: ignore[union-attr]
    assert store.document_at(C1, "todo", 4).value == {"items": [3, 4]}  # type: ignore[union-attr]
    assert store.document_at(C1, "todo", 7).value == {"items": [4, 5, 6]}  # type: ignore[union-attr]


def test_latest_history_reclaims_and_refuses_a_past_read(tmp_path: Path) -> None:
    """A base of a ``latest`` document deletes the revisions before it; a
    read of a reclaimed past says so."""
    from pidurable.shell.storage.base import StorageError

    store = open_sqlite_storage(tmp_path / "s.sqlite")
    _history(store, DocHistory.LATEST)
    (count,) = store.db.execute("SELECT count(*) FROM document_revisions").fetchone()
    assert count == 2
    with pytest.raises(StorageError, match="latest"):
        store.document_at(C1, "todo", 4)
    store.close()


def test_task_documents_retire_and_their_revisions_go(adapter: Store) -> None:
    """Retiring a task document removes it from load() and reads; its
    revisions are reclaimed."""
    store = adapter.open()
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    task = Task(id=TaskId(2), conversation_id=C1, kind="custom", checkpoint={"phase": "a"})
    base = rev(RevisionAction.BASE, value={"items": []}, scope=DocScope.TASK, owner=2, history=DocHistory.LATEST)
    store.commit(2, [PutTask(task=task), PutDocument(document_id=3, revision=base)], [])
    assert store.load().documents
    store.close()
    store = adapter.reopen()
    store.commit(3, [PutDocument(document_id=3, revision=attrs.evolve(base, action=RevisionAction.RETIRE, value=None))], [])
    assert store.load().documents == ()
    assert store.document_state(DocScope.TASK, 2, "todo") is None
    assert adapter.reopen().load().documents == ()


def test_a_failed_commit_stores_no_document_revision(adapter: Store) -> None:
    """A commit whose other write cannot be encoded stores none of its document revisions either."""
    store = adapter.open()
    store.commit(1, [PutConversation(conversation=Conversation(id=C1))], [])
    bad = Task(id=TaskId(9), conversation_id=C1, kind="custom", input={"x": float("nan")})
    with pytest.raises((TypeError, ValueError)):
        store.commit(2, [PutDocument(document_id=2, revision=rev(RevisionAction.BASE, value={"items": []})), PutTask(task=bad)], [])
    assert store.load().documents == ()
    assert store.document_state(DocScope.CONVERSATION, 1, "todo") is None


def test_a_schema_1_store_migrates_and_takes_documents(tmp_path: Path) -> None:
    """A store written by schema-1 code (checked-in fixture) opens: it is
    migrated to the current schema in place, keeps its history (the
    journal replays), and then stores documents."""
    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema").fetchone() == (1,)
    todo = define_doc("todo", {"type": "object"}, {"items": []})
    registry = Registry()
    registry.install(todo)

    async def main() -> None:
        async with Harness.open(open_sqlite_storage(path), models=None, registry=registry) as h:
            conv = await h.root()
            assert [e.kind for e in await conv.transcript()][-1] == "assistant"
            await conv.update_document(todo, lambda t: {"items": ["migrated"]})

    trio.run(main)
    store = open_sqlite_storage(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        assert store.document_state(DocScope.CONVERSATION, 1, "todo").value == {"items": ["migrated"]}  # type: ignore[union-attr]
        import invariants

        # commit 2 predates issue 17 item 4 (tests/shell/test_store_migrations.py, MAY_DIVERGE)
        item_4 = "issue 17 item 4 (system entries): an agent offered tools gets a system entry at its first prepare"
        invariants.replay_is_deterministic(store, may_diverge={2: item_4})
    finally:
        store.close()
