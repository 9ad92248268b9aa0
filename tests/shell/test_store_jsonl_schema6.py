"""JSONL stores of schema 6 (the sidecar layout of 06c17dc: object lines,
every inline write in its journal form, markers with their ordinal) open
with today's code (schema 8: array lines of schema 7, entries and terminal
tasks as their rows, markers without ordinals; schema 8 adds a compacted
store's snapshot rows): same journal, same records, the header upgraded, new
commits in the array form, and the whole journal
replays. Fixtures: tests/shell/fixtures/make_lives_store.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import trio

from pidurable.core.model import ConversationId, TaskId, TaskStatus
from pidurable.core.state import DocScope
from pidurable.shell import Harness, Input, Registry, define_doc, open_jsonl_storage
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.storage import jsonl

FIXTURES = Path(__file__).parent / "fixtures"
LIVES = FIXTURES / "jsonl_schema6_lives_store"
RUNNING = FIXTURES / "jsonl_schema6_running_task_store"


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in (path / jsonl.MAIN).read_text(encoding="utf-8").splitlines()]


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name.startswith(("task-", "doc-"))}


def _registry() -> Registry:
    registry = Registry()
    registry.install(define_doc("notes", {"type": "object"}, {"lines": []}))
    return registry


def _resume(path: Path, text: str, request_id: str) -> None:
    async def life() -> None:
        models = ScriptedModels(lambda request: reply(text="still here"))
        async with Harness.open(open_jsonl_storage(path), models=models, registry=_registry()) as h:
            conv = await h.root()
            assert (await (await conv.submit(Input(text, request_id=request_id))).wait()).status == "done"

    trio.run(life)


def test_a_schema6_store_opens_upgrades_and_takes_schema7_commits(tmp_path: Path) -> None:
    """The three-lives fixture: its journal is the lines' (seq, format,
    digest) and replays (3 lives); reopening gives the same journal and
    records; the header says 8, the old lines and sidecars are as they were;
    a new life writes array lines, and all of it replays (4 lives)."""
    path = tmp_path / "store"
    shutil.copytree(LIVES, path)
    old, old_files = (path / jsonl.MAIN).read_bytes(), _files(path)
    rows = _lines(path)
    assert rows[0]["schema"] == 6 and all(isinstance(r, dict) for r in rows)
    assert any(w["type"] == "task" for r in rows[1:] for w in r["writes"])  # terminal tasks inline, whole
    store = open_jsonl_storage(path)
    try:
        journal, loaded, tasks = store.journal(), store.load(), store.tasks()
        assert [(r.seq, r.format, r.writes) for r in journal] == [(c["seq"], c["format"], c["digest"]) for c in rows[1:]]
        assert [json.loads(r.events) for r in journal] == [c["events"] for c in rows[1:]]
        result = check(journal)
        assert result.ok and result.lives == 3
        assert all(t.status is TaskStatus.TERMINAL for t in tasks)
        assert [(t.outcome.status.value, t.outcome.error) for t in tasks if t.kind == "pi.tool" and t.outcome] == [
            ("completed", None), ("failed", {"message": "Tool edit was interrupted and may have partially run"}),
        ]
        notes = store.document_state(DocScope.CONVERSATION, ConversationId(1), "notes")
        assert notes is not None and notes.value == {"lines": ["opened", "read config.json"]}  # doc-2.jsonl
    finally:
        store.close()
    new = (path / jsonl.MAIN).read_bytes()
    assert json.loads(new.split(b"\n", 1)[0])["schema"] == jsonl.LAYOUT == 8
    assert new.split(b"\n", 1)[1] == old.split(b"\n", 1)[1] and _files(path) == old_files
    store = open_jsonl_storage(path)
    try:
        assert store.journal() == journal and store.load() == loaded and store.tasks() == tasks
    finally:
        store.close()

    _resume(path, "Are you there?", "after-upgrade")
    added = _lines(path)[len(rows) :]
    assert added and all(isinstance(c, list) for c in added)
    assert any(isinstance(w, list) and w[0] == "e" for c in added for w in c[4])
    store = open_jsonl_storage(path)
    try:
        result = check(store.journal())
        assert result.ok and result.lives == 4
        assert store.tasks()[: len(tasks)] == tasks
    finally:
        store.close()


def test_a_schema6_store_with_live_tasks_in_sidecars_recovers_them(tmp_path: Path) -> None:
    """The fixture stopped in its first life (the ``edit`` tool task 13
    running, its generation 9 waiting): their versions are read from
    task-13.jsonl / task-9.jsonl (schema-6 markers); a new life settles
    them, writes their terminal records in the schema-7 form, deletes their
    sidecars, and the journal replays (2 lives)."""
    path = tmp_path / "store"
    shutil.copytree(RUNNING, path)
    side = {n: json.loads(b.splitlines()[-1]) for n, b in _files(path).items() if n.startswith("task-")}
    assert sorted(side) == ["task-13.jsonl", "task-9.jsonl"]
    store = open_jsonl_storage(path)
    try:
        live = {t.id: t for t in store.tasks(live_only=True)}
        assert sorted(live) == [9, 13]
        for tid in (9, 13):
            record = side[f"task-{tid}.jsonl"]["write"]["task"]
            assert live[TaskId(tid)].status.value == record["status"]
            assert live[TaskId(tid)].checkpoint == record["checkpoint"]
        assert check(store.journal()).ok
    finally:
        store.close()

    _resume(path, "What is the port?", "q1")  # the same submission: answered once the edit is settled
    assert not any(n.startswith("task-") for n in _files(path))
    ends = [w for c in _lines(path)[1:] if isinstance(c, list) for w in c[4] if isinstance(w, list) and w[0] == "t"]
    assert {w[1] for w in ends} >= {9, 13}
    assert all("checkpoint" not in w[5] for w in ends)  # a terminal task's row: no execution state
    store = open_jsonl_storage(path)
    try:
        edit = store.task(TaskId(13))
        assert edit is not None and edit.outcome is not None
        assert edit.outcome.error == {"message": "Tool edit was interrupted and may have partially run"}
        assert store.tasks(live_only=True) == []
        result = check(store.journal())
        assert result.ok and result.lives == 2
    finally:
        store.close()
