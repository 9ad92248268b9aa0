"""Stores written by earlier code (issue 11 item 7): the checked-in fixtures
open (and migrate) with today's code, keep their records, take new work,
and their journals replay through today's core (``replay --check``).

A fixture's journal may stop replaying exactly when the core deliberately
changes what it decides; such a change is acknowledged in ``MAY_DIVERGE``
(the commit and why), never by regenerating the fixture.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import trio

from pidurable.shell import Harness, Input, Registry, define_doc, open_sqlite_storage
from pidurable.shell.cli import main
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.storage.base import SCHEMA_VERSION, JournalRow
from pidurable.shell.storage.readonly import open_readonly

FIXTURES = Path(__file__).parent / "fixtures"

#: fixture -> {commit: the deliberate core change that makes it differ now}.
MAY_DIVERGE: dict[str, dict[int, str]] = {
    "schema1_store.sqlite": {
        2: "issue 17 item 4 (system entries): an agent offered tools gets a system entry (tools_added) at its first prepare",
    },
    "schema2_lives_store.sqlite": {
        8: "issue 17 item 4 (system entries): an agent offered tools gets a system entry (tools_added) at its first prepare",
        11: "issue 17 (tool diagnostics): an interrupted call's result text carries a <harness> block "
        "and the entry's data its diagnostics",
        16: "issue 17 item 4 (system entries): conversation 3's agent, offered tools, gets its system entry at its first prepare",
    },
    "schema3_lives_store.sqlite": {},
    "schema5_lives_store.sqlite": {},
}
#: What each fixture holds: schema version, commits, process lives.
SHAPE = {
    "schema1_store.sqlite": (1, 5, 1),
    "schema2_lives_store.sqlite": (2, 17, 3),
    "schema3_lives_store.sqlite": (3, 17, 3),
    "schema5_lives_store.sqlite": (5, 17, 3),
}


@pytest.fixture(params=sorted(SHAPE))
def fixture(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """A copy of a checked-in fixture store (the original is never opened for writing)."""
    name = request.param
    copy = tmp_path / name
    shutil.copy(FIXTURES / name, copy)
    return name, copy


def _journal(path: Path) -> list[JournalRow]:
    store = open_readonly(path)
    try:
        return store.journal()
    finally:
        store.close()


def _unexpected(name: str, path: Path) -> list[str]:
    result = check(_journal(path), name)
    return [f"commit {d.seq}: {d.message} {list(d.diff)}" for d in result.divergences if d.seq not in MAY_DIVERGE[name]]


def test_a_fixture_replays_before_and_after_migration(fixture: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """issue 11 item 7: a store written by earlier code replays through today's
    core as it is (read-only), and again once opened, migrated and resumed:
    the migration keeps the journal, and the new process life replays too."""
    name, path = fixture
    schema, commits, lives = SHAPE[name]
    ro = open_readonly(path)
    try:
        assert ro.schema_version == schema and ro.commits() == commits
    finally:
        ro.close()
    assert _unexpected(name, path) == []
    before = _journal(path)

    storage = open_sqlite_storage(path)  # migrates
    storage.close()
    ro = open_readonly(path)
    try:
        assert ro.schema_version == SCHEMA_VERSION
    finally:
        ro.close()
    after = _journal(path)
    assert [(r.seq, r.format, r.events, r.writes) for r in after] == [(r.seq, r.format, r.events, r.writes) for r in before]

    async def resume() -> None:
        registry = Registry()
        registry.install(define_doc("notes", {"type": "object"}, {"lines": []}))
        models = ScriptedModels(lambda request: reply(text="still here"))
        async with Harness.open(open_sqlite_storage(path), models=models, registry=registry) as h:
            conv = await h.root()
            sub = await conv.submit(Input("Are you there?", request_id="after-migration"))
            assert (await sub.wait()).status == "done"
            assert (await conv.transcript())[-1].text == "still here"

    trio.run(resume)
    result = check(_journal(path), name)
    assert result.lives == lives + 1
    assert _unexpected(name, path) == []
    if not MAY_DIVERGE[name]:
        assert main(["replay", "--check", "--db", str(path)]) == 0
        assert f"events, {lives + 1} process lives)" in capsys.readouterr().out


def test_the_schema2_lives_fixture_keeps_its_records(tmp_path: Path) -> None:
    """The schema-2 fixture's documents, submissions and interrupted tool read back after migration."""
    copy = tmp_path / "s2.sqlite"
    shutil.copy(FIXTURES / "schema2_lives_store.sqlite", copy)
    storage = open_sqlite_storage(copy)
    try:
        subs = {s.request_id: s.status.value for s in storage.submissions() if s.request_id}
        assert subs == {"q1": "done", "q2": "done", "q3": "done"}
        edit = next(t for t in storage.tasks() if t.input.get("name") == "edit")
        assert edit.outcome is not None and edit.outcome.status.value == "failed"
        loaded = storage.load()
        notes = [d for d in loaded.documents if d.kind == "notes"]
        assert [d.value for d in notes] == [{"lines": ["opened", "read config.json"]}]
    finally:
        storage.close()


def _layout(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master")}
    finally:
        conn.close()


def test_version_6_keeps_document_revisions_without_a_rowid(tmp_path: Path) -> None:
    """Schema 6 (issue 11 item 2): ``document_revisions`` is a WITHOUT ROWID
    table, in a new store and in one migrated from schema 5 (its rows kept,
    in key order; no ``sqlite_autoindex`` b-tree beside it), and the
    migrated store's documents read back as they did."""
    new = tmp_path / "new.sqlite"
    open_sqlite_storage(new).close()
    copy = tmp_path / "s5.sqlite"
    shutil.copy(FIXTURES / "schema5_lives_store.sqlite", copy)
    before = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        rows = before.execute("SELECT document_id, seq, action, content FROM document_revisions ORDER BY document_id, seq").fetchall()
    finally:
        before.close()
    assert "sqlite_autoindex_document_revisions_1" in _layout(copy) and len(rows) == 13

    def documents(path: Path) -> list[tuple[str, object]]:
        storage = open_sqlite_storage(path)
        try:
            return sorted((d.kind, repr(d.value)) for d in storage.load().documents)
        finally:
            storage.close()

    ro = open_readonly(copy)
    try:
        want = sorted((d.kind, repr(d.value)) for d in ro.load().documents)
    finally:
        ro.close()
    assert [kind for kind, _ in want] == ["notes"]
    assert documents(copy) == want  # migrates
    for path in (new, copy):
        layout = _layout(path)
        assert "WITHOUT ROWID" in layout["document_revisions"], path.name
        assert "sqlite_autoindex_document_revisions_1" not in layout
        assert "document_revisions_v6" not in layout
    after = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert after.execute("SELECT document_id, seq, action, content FROM document_revisions").fetchall() == rows
    finally:
        after.close()
