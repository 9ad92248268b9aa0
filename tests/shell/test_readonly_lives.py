"""``StoreView.last_life`` on both kinds of store (readonly.py): the journal
from the newest commit whose first event is ``opened``; a commit whose
events are damaged is reported, not silently taken or dropped."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from pidurable.shell.storage.readonly import open_view

FIXTURES = Path(__file__).parent / "fixtures"


def _first_type(events: str) -> str:
    return str(json.loads(events)[0]["type"])


@pytest.mark.parametrize("name", ["schema3_lives_store.sqlite", "jsonl_schema6_lives_store"])
def test_last_life_starts_at_the_newest_opened_commit(tmp_path: Path, name: str) -> None:
    store = tmp_path / name
    (shutil.copytree if (FIXTURES / name).is_dir() else shutil.copy)(FIXTURES / name, store)
    view = open_view(store)
    try:
        journal, life = view.journal(), view.last_life()
    finally:
        view.close()
    opened = [r.seq for r in journal if _first_type(r.events) == "opened"]
    assert len(opened) == 3  # the fixtures' three process lives
    assert life and life[0].seq == opened[-1] and life == [r for r in journal if r.seq >= opened[-1]]


def test_a_damaged_events_row_is_reported_and_not_a_life(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.sqlite"
    shutil.copy(FIXTURES / "schema3_lives_store.sqlite", store)
    view = open_view(store)
    journal = view.journal()
    view.close()
    newest = [r.seq for r in journal if _first_type(r.events) == "opened"][-1]
    with sqlite3.connect(store) as db:  # damage the newest life's first row, keeping the text LIKE finds
        db.execute("UPDATE journal SET events = ? WHERE seq = ?", ['{"type":"opened" -- torn', newest])
    view = open_view(store)
    try:
        with caplog.at_level(logging.WARNING, logger="pidurable"):
            life = view.last_life()
    finally:
        view.close()
    assert life and life[0].seq < newest  # the life before it
    assert any(f"commit {newest}" in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)
