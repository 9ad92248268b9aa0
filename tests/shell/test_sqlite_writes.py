"""A SQLite batch's rows go table by table, each table's rows in multi-row
INSERTs (shell/storage/sqlite_writes.py; issue 11 item 2): the store a batch
leaves is the one its commits leave one at a time, row for row."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pidurable.core.effects import DocumentRevision, PutDocument, PutEntry, PutTask, RevisionAction
from pidurable.core.model import Entry, Outcome, OutcomeStatus, Task, TaskStatus
from pidurable.core.state import DocHistory, DocScope, ForkPolicy
from pidurable.shell.storage import open_sqlite_storage
from pidurable.shell.storage import sqlite_writes
from pidurable.shell.storage.sqlite_writes import Statements


def _revision(action: RevisionAction, history: DocHistory, **fields: Any) -> DocumentRevision:
    return DocumentRevision(
        scope=DocScope.CONVERSATION, owner=1, kind="notes", version=1, history=history,
        fork=ForkPolicy.INITIAL, action=action, **fields,
    )  # fmt: skip


def _commits(n: int) -> list[tuple[int, list[Any], list[Any]]]:
    """``n`` commits that update the same tasks again and again, append
    entries, and write deltas with a base (which reclaims) now and then."""
    out: list[tuple[int, list[Any], list[Any]]] = []
    for seq in range(1, n + 1):
        writes: list[Any] = [PutEntry(entry=Entry(id=seq, conversation_id=1, kind="user", text=f"t{seq}"))]
        for tid in (1, 2, 3):
            status = TaskStatus.RUNNING if seq % 3 else TaskStatus.WAITING
            writes.append(PutTask(task=Task(id=tid, conversation_id=1, kind="k", status=status, checkpoint={"n": seq})))
        if seq == n:  # the last commit ends a task
            done = Outcome(status=OutcomeStatus.COMPLETED, result={"n": seq})
            writes.append(PutTask(task=Task(id=1, conversation_id=1, kind="k", status=TaskStatus.TERMINAL, outcome=done)))
        for did in (-1, -2):
            if seq % 7 == 0:
                rev = _revision(RevisionAction.BASE, DocHistory.LATEST, value={"seq": seq})
            else:
                rev = _revision(RevisionAction.DELTA, DocHistory.REWINDABLE, ops=(["s", ["seq"], seq],))
            writes.append(PutDocument(document_id=did, revision=rev))
        out.append((seq, writes, []))
    return out


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [line for line in conn.iterdump() if "canonical_path" not in line and "store_id" not in line]
    finally:
        conn.close()


@pytest.mark.parametrize("n", [1, 3, sqlite_writes.MAX_ROWS + 5])
def test_a_batch_stores_what_its_commits_store_one_at_a_time(tmp_path: Path, n: int) -> None:
    commits = _commits(n)
    one, batch = tmp_path / "one.db", tmp_path / "batch.db"
    s = open_sqlite_storage(one)
    for c in commits:
        s.commit_many([c])
    s.close()
    s = open_sqlite_storage(batch)
    s.commit_many(commits)  # (n + 5 commits: more rows of a table than one statement takes)
    s.close()
    dumped = _dump(batch)
    assert dumped == _dump(one)
    assert sum(line.startswith('INSERT INTO "journal"') for line in dumped) == n


def test_statements_are_built_for_whole_rows_only() -> None:
    st = Statements("INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = excluded.b", 3)
    assert st[2] == "INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = excluded.b"
    assert st[6] == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) ON CONFLICT (a) DO UPDATE SET b = excluded.b"
    for bad in (0, 3, 8):  # no row, half a row, more rows than one statement takes
        with pytest.raises(ValueError):
            st[bad]


def test_a_key_twice_in_one_statement_keeps_the_last() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    st = Statements("INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = excluded.b", 10)
    conn.execute(st[6], [1, "x", 2, "y", 1, "z"])
    assert conn.execute("SELECT a, b FROM t ORDER BY a").fetchall() == [(1, "z"), (2, "y")]
