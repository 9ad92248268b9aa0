"""Journal retention and ``pidurable compact-store`` (issue 11 item 3).

``open_sqlite_storage(path, journal_retention="all" | N)``: N keeps the
journal rows of the newest N commits and of every run not yet settled;
``replay --check`` then checks from the first process life the journal
still holds, and says so. ``compact-store`` drops rows by the same rule
(``--journal-retention``), rewrites rows of older schemas lean and VACUUMs,
under the store's lock.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, define_tool, open_sqlite_storage
from pidurable.shell.cli import main
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage.base import ROW_COLUMNS, StoreLocked, as_stored

FIXTURES = Path(__file__).parent / "fixtures"
AGENT = AgentConfig(model=ModelRef("scripted", "m"))


def _models() -> ScriptedModels:
    def script(request: Any) -> Any:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("tool"):
            return reply(tool_calls=[tool_call("t", i=0), tool_call("t", i=1)])
        return reply(text=f"ok {len(request.messages)}")

    return ScriptedModels(script)


def _registry(started: trio.Event | None = None) -> Registry:
    async def t(ctx: Any, args: dict[str, Any]) -> str:
        return "done"

    async def hang(ctx: Any, args: dict[str, Any]) -> str:
        if started is not None:
            started.set()
        await trio.sleep_forever()
        return "never"  # pragma: no cover

    r = Registry()
    r.install(define_tool("t", "trivial", {"type": "object"}, t, replay="safe"))
    r.install(define_tool("hang", "blocks", {"type": "object"}, hang, replay="safe"))
    return r


async def _inputs(path: Path, texts: list[str], retention: int | str = "all") -> None:
    async with Harness.open(open_sqlite_storage(path, journal_retention=retention), models=_models(), registry=_registry()) as h:
        conv = await h.root(agent=AGENT)
        for text in texts:
            assert (await (await conv.submit(Input(text))).wait()).status == "done"


def _seqs(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT seq FROM journal ORDER BY seq")]
    finally:
        conn.close()


@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "10", "none", None])
def test_a_retention_that_is_not_all_or_a_count_is_refused_before_anything_is_created(tmp_path: Path, bad: Any) -> None:
    path = tmp_path / "s.sqlite"
    with pytest.raises(ValueError, match="journal_retention must be 'all' or a whole number of commits >= 1"):
        open_sqlite_storage(path, journal_retention=bad)
    assert not path.exists()


def test_all_keeps_every_row_and_n_keeps_the_newest_commits_of_settled_runs(tmp_path: Path) -> None:
    kept, pruned = tmp_path / "kept.sqlite", tmp_path / "pruned.sqlite"
    trio.run(_inputs, kept, ["a", "tool b", "c"])
    trio.run(_inputs, pruned, ["a", "tool b", "c"], 5)
    every = _seqs(kept)
    assert every[0] == 1 and len(every) > 5
    store = open_sqlite_storage(pruned, journal_retention=5)
    try:
        store.prune_journal()  # the first commit pruned already; the last ones came after it
        assert store.journal_span() == (every[-1] - 4, every[-1])
        # records are never touched: the same transcript, tasks and submissions
        other = open_sqlite_storage(kept)
        try:
            assert [e.text for e in store.entries(1)] == [e.text for e in other.entries(1)]
            assert len(store.tasks()) == len(other.tasks()) and len(store.submissions()) == len(other.submissions())
        finally:
            other.close()
    finally:
        store.close()


def test_a_run_not_yet_settled_keeps_its_journal_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    trio.run(_inputs, path, ["a", "b", "c"])

    async def hang() -> None:
        started = trio.Event()
        models = ScriptedModels(lambda request: reply(tool_calls=[tool_call("hang")]))
        async with Harness.open(open_sqlite_storage(path), models=models, registry=_registry(started)) as h:
            conv = await h.root(agent=AGENT)
            await conv.submit(Input("hang"))
            await started.wait()
        # closed with the tool running: the run stays live in the store

    trio.run(hang)
    conn = sqlite3.connect(path)
    (user_seq,) = conn.execute("SELECT seq FROM entries WHERE record LIKE '%\"text\":\"hang\"%'").fetchone()
    (top,) = conn.execute("SELECT max(seq) FROM journal").fetchone()
    conn.close()
    store = open_sqlite_storage(path, journal_retention=1)
    try:
        assert store.prune_journal() > 0
        low, high = store.journal_span() or (0, 0)
        assert high == top and 1 < low <= user_seq  # the live run's rows stay, older settled ones went
    finally:
        store.close()


def test_replay_check_on_a_pruned_store_checks_from_the_first_process_life_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.sqlite"
    trio.run(_inputs, path, ["a", "tool b"])
    first_life = _seqs(path)[-1]
    trio.run(_inputs, path, ["c"])  # a second process life: its opened is commit first_life + 1
    store = open_sqlite_storage(path, journal_retention=len(_seqs(path)) - first_life)
    store.prune_journal()
    store.close()
    assert _seqs(path)[0] == first_life + 1

    assert main(["replay", "--check", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"is partial: it starts at commit {first_life + 1} (commits 1-{first_life} are not in it: dropped by journal retention, or cut)" in out
    assert f"replaying from commit {first_life + 1}, the first process life it holds" in out
    assert "reproduced byte for byte" in out and "1 process life)" in out

    # keep only the newest commit, not the last life's opened: nothing can be checked
    store = open_sqlite_storage(path, journal_retention=1)
    store.prune_journal()
    store.close()
    assert main(["replay", "--check", "--db", str(path)]) == 1
    assert "it holds no process life's start (an opened), so nothing can be replayed" in capsys.readouterr().out


def test_compact_store_reclaims_space_and_keeps_every_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.sqlite"
    trio.run(_inputs, path, ["tool a", "tool b", "tool c", "d"])
    store = open_sqlite_storage(path)
    before = (store.entries(1), store.tasks(), store.submissions())
    top = store.journal_span()
    store.close()
    assert main(["compact-store", "--db", str(path), "--journal-retention", "3"]) == 0
    out = capsys.readouterr().out
    assert f"compacted {path}: " in out and " bytes, " in out and " reclaimed" in out
    assert top is not None
    assert f"commits {top[1] - 2}-{top[1]} kept" in out
    store = open_sqlite_storage(path)
    try:
        assert (store.entries(1), store.tasks(), store.submissions()) == before
        assert store.journal_span() == (top[1] - 2, top[1])
        assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        store.close()
    # without --journal-retention the journal is left whole
    assert main(["compact-store", "--db", str(path)]) == 0
    assert "journal:" not in capsys.readouterr().out


def test_compact_store_refuses_a_store_open_elsewhere_and_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.sqlite"
    trio.run(_inputs, path, ["a"])
    holder = open_sqlite_storage(path)
    try:
        size = path.stat().st_size
        assert main(["compact-store", "--db", str(path)]) == 1
        err = capsys.readouterr().err
        assert "is in use by" in err and "close it there first" in err
        assert path.stat().st_size == size
        with pytest.raises(StoreLocked):
            open_sqlite_storage(path)
    finally:
        holder.close()
    assert main(["compact-store", "--db", str(path), "--journal-retention", "0"]) == 2
    assert "journal_retention must be 'all' or a whole number" in capsys.readouterr().err
    assert main(["compact-store", "--db", str(tmp_path / "missing.sqlite")]) == 2
    jsonl = tmp_path / "store-jsonl"
    jsonl.mkdir()
    assert main(["compact-store", "--db", str(jsonl)]) == 2  # a directory is a JSONL store: without main.jsonl, none
    assert "does not exist (no main.jsonl)" in capsys.readouterr().err
    assert list(jsonl.iterdir()) == []


def test_compact_store_rewrites_a_schema_3_store_lean_and_it_still_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s3.sqlite"
    shutil.copy(FIXTURES / "schema3_lives_store.sqlite", path)
    store = open_sqlite_storage(path)  # migrates to schema 4; old rows stay whole
    tasks, entries = store.tasks(), [e for c in store.conversations() for e in store.entries(c.id)]
    journal = store.journal()
    store.close()
    conn = sqlite3.connect(path)
    whole = conn.execute("SELECT count(*) FROM tasks WHERE record LIKE '{\"id\":%'").fetchone()[0]
    whole += conn.execute("SELECT count(*) FROM entries WHERE record LIKE '{\"id\":%'").fetchone()[0]
    conn.close()
    assert whole > 0

    assert main(["compact-store", "--db", str(path)]) == 0
    assert f"records: {whole} task and entry rows rewritten in the lean form (schema 4)" in capsys.readouterr().out
    conn = sqlite3.connect(path)
    for table in ROW_COLUMNS:
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE record LIKE '{{\"id\":%'").fetchone()[0] == 0
    conn.close()
    store = open_sqlite_storage(path)
    try:
        assert store.tasks() == [as_stored(t) for t in tasks]
        assert [e for c in store.conversations() for e in store.entries(c.id)] == entries
        assert store.journal() == journal
        assert check(store.journal(), "compacted").ok
    finally:
        store.close()
