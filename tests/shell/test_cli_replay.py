"""``pidurable replay --check``: a store's (or an exported JSONL) journal
replayed through the current core, the first divergence reported at the
right commit; journal format versions (issue 11 items 6 and 7)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.step import HANDLERS
from pidurable.core.events import ModelResponded, ToolFinished
from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, ToolResult, define_tool, open_sqlite_storage
from pidurable.shell.cli import main
from pidurable.shell.journal import Kind, check, journal_writes, replay
from pidurable.shell.journal_file import read_journal
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage.readonly import open_view

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def build_store(path: Path) -> None:
    """Two process lives: a tool round answered, then a second input."""

    async def read(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text='{"port": 8080}')

    registry = Registry()
    registry.install(define_tool("read", "read a file", SCHEMA, read, replay="safe"))
    models = ScriptedModels(
        [
            reply(tool_calls=[tool_call("read", path="a.json"), tool_call("read", path="b.json")]),
            reply(text="The port is 8080."),
            reply(text="You are welcome."),
        ]
    )

    async def life(prompt: str, request_id: str) -> None:
        async with Harness.open(open_sqlite_storage(path), models=models, registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            sub = await conv.submit(Input(prompt, request_id=request_id))
            assert (await sub.wait()).status == "done"

    trio.run(life, "What is the port?", "q1")
    trio.run(life, "Thanks", "q2")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "s.sqlite"
    build_store(path)
    return path


def journal_of(path: Path) -> list[Any]:
    s = open_view(path)
    try:
        return s.journal()
    finally:
        s.close()


def first_seq_with(path: Path, tag: str) -> int:
    return next(r.seq for r in journal_of(path) if any(e["type"] == tag for e in json.loads(r.events)))


def test_replay_check_passes_on_a_store_and_says_how_much_it_checked(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """replay --check on an untouched store exits 0 and names the commits, events and process lives it checked."""
    rows = journal_of(store)
    assert main(["replay", "--check", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    events = sum(len(json.loads(r.events)) for r in rows)
    assert f"{len(rows)} commits ({events} events, 2 process lives)" in out
    assert "reproduced byte for byte" in out


def test_replay_check_reports_a_changed_core_at_the_right_commit(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A core whose tool_finished handler writes another result text diverges
    at the first commit that journals a tool_finished: exit 1, that seq, the
    event, and what this code writes there (a lean journal keeps a digest of
    the recorded writes; a format-1 row gets a field diff, see below)."""
    original = HANDLERS[ToolFinished]
    patched = lambda tx, ev: original(tx, attrs.evolve(ev, text=ev.text + " (changed)"))  # noqa: E731
    monkeypatch.setitem(HANDLERS, ToolFinished, patched)  # type: ignore[arg-type]
    seq = first_seq_with(store, "tool_finished")

    assert main(["replay", "--check", "-v", "--db", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGES at commit {seq} (writes)" in out
    assert "tool_finished" in out
    assert "the journal keeps a digest" in out
    assert '{\\"port\\": 8080} (changed)' in out
    assert f"{seq - 1} commits before it are identical." in out
    # the second process life starts afresh from its Opened and replays exactly
    result = check(journal_of(store))
    assert [d.seq for d in result.divergences] == [seq]
    assert result.lives == 2


def test_replay_without_descriptions_and_check_on_given_transitions(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay(describe=False)`` is the same replay without a line per
    write; ``check`` and ``journal_writes`` given a replay's transitions
    answer as they do replaying themselves - a divergence included."""
    rows = journal_of(store)
    described, bare = list(replay(rows)), list(replay(rows, describe=False))
    assert all(t.writes for t in described) and all(t.writes == () for t in bare)
    assert [attrs.evolve(t, writes=()) for t in described] == bare
    assert check(rows, "store", bare) == check(rows, "store")
    assert journal_writes(rows, "store", bare) == journal_writes(rows, "store")
    original = HANDLERS[ToolFinished]
    patched = lambda tx, ev: original(tx, attrs.evolve(ev, text=ev.text + " (changed)"))  # noqa: E731
    monkeypatch.setitem(HANDLERS, ToolFinished, patched)  # type: ignore[arg-type]
    # under a changed core: the transitions given are what is checked
    result = check(rows, "store", list(replay(rows, describe=False)))
    assert result == check(rows, "store") and [d.seq for d in result.divergences] == [first_seq_with(store, "tool_finished")]
    assert check(rows, "store", bare).ok
    assert journal_writes(rows, "store", bare) == journal_writes(rows, "store", described)


def test_plain_replay_describes_writes_with_v_or_at_a_difference(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pidurable replay`` prints a line per write under ``-v`` for every
    commit, and without it only under a commit that differs."""
    assert main(["replay", "-v", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert "0 different" in out and "        entry " in out and "        task " in out
    assert main(["replay", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert "0 different" in out and "        entry " not in out and "        task " not in out
    original = HANDLERS[ToolFinished]
    patched = lambda tx, ev: original(tx, attrs.evolve(ev, text=ev.text + " (changed)"))  # noqa: E731
    monkeypatch.setitem(HANDLERS, ToolFinished, patched)  # type: ignore[arg-type]
    assert main(["replay", "--db", str(store)]) == 1
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[DIFF]"))
    assert lines[at + 1] == "        (writes kept as a digest; replay recomputes them)"


def test_replay_check_reports_a_core_that_raises(store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that raises on a recorded event is reported as such at that commit, without a traceback."""

    def broken(tx: Any, ev: Any) -> None:
        raise AssertionError("handler broke")

    monkeypatch.setitem(HANDLERS, ModelResponded, broken)  # type: ignore[arg-type]
    seq = first_seq_with(store, "model_responded")
    assert main(["replay", "--check", "--db", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGES at commit {seq} (raised)" in out
    assert "step raised AssertionError on this event: handler broke" in out


def test_replay_check_reports_a_tampered_journal_row(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A journal row whose recorded writes digest (format 2) was altered is the divergence, at its seq."""
    copy = tmp_path / "t.sqlite"
    shutil.copy(store, copy)
    seq = next(r.seq for r in journal_of(store) if "The port is 8080." in r.events)  # the answer's commit
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE journal SET writes = 'b2:' || substr(writes, 5) || '0' WHERE seq = ?", [seq])
    db.close()
    assert main(["replay", "--check", "--db", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGES at commit {seq} (writes)" in out
    assert "the journal keeps a digest" in out


def test_replay_check_diffs_a_tampered_format_1_row(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row that keeps its writes as JSON (as format 1 did, and an export does) whose writes were altered: the divergence shows the changed field."""
    from pidurable.shell import journal
    from pidurable.shell.storage import codec

    copy = tmp_path / "t1.sqlite"
    shutil.copy(store, copy)
    rows = journal_of(store)
    produced = {seq: wr for seq, _, wr in journal.journal_writes(rows)}
    seq = next(r.seq for r in rows if "The port is 8080." in r.events)
    tampered = produced[seq].replace("The port is 8080.", "The port is 9090.")
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE journal SET writes = ? WHERE seq = ?", [tampered, seq])
    db.close()
    assert codec.is_digest(rows[0].writes)
    assert main(["replay", "--check", "--db", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGES at commit {seq} (writes)" in out
    assert '"The port is 9090." -> "The port is 8080."' in out


def test_replay_check_reports_an_event_that_no_longer_decodes(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An event type this code does not know is reported as a journal that cannot be replayed exactly."""
    copy = tmp_path / "u.sqlite"
    shutil.copy(store, copy)
    seq = first_seq_with(store, "model_responded")
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE journal SET events = replace(events, '\"model_responded\"', '\"model_answered\"') WHERE seq = ?", [seq])
    db.close()
    assert main(["replay", "--check", "--db", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGES at commit {seq} (undecodable)" in out
    assert "cannot be replayed exactly" in out


def test_a_journal_row_of_a_future_format_is_refused_naming_the_version(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 11 item 7: a row claiming a journal format newer than this code writes (5) is refused before anything is replayed: one line naming the row and the version, exit 1."""
    copy = tmp_path / "f.sqlite"
    shutil.copy(store, copy)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE journal SET format = 5 WHERE seq = 3")
    db.close()
    for argv in (["replay", "--check", "--db", str(copy)], ["replay", "--db", str(copy)]):
        assert main(argv) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert "journal row 3 has format version 5" in captured.err
        assert "upgrade" in captured.err
    assert [r.format for r in journal_of(copy)][:4] == [4, 4, 5, 4]


def test_export_and_check_a_jsonl_journal(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """replay --export writes the journal as JSONL (texts byte for byte); replay --check FILE.jsonl reads it back and passes."""
    out = tmp_path / "j.jsonl"
    assert main(["replay", "--db", str(store), "--export", str(out)]) == 0
    rows = read_journal(out)
    # a lean journal is exported readable: each row's writes as the JSON its digest is of
    from pidurable.shell import journal

    stored = journal_of(store)
    assert [(r.seq, r.format, r.events, r.writes) for r in rows] == [
        (seq, r.format, events, writes) for r, (seq, events, writes) in zip(stored, journal.journal_writes(stored))
    ]
    capsys.readouterr()
    assert main(["replay", "--check", str(out)]) == 0
    assert "reproduced byte for byte" in capsys.readouterr().out
    # writes given as arrays (hand-written golden files) compare the same
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    arrays = tmp_path / "a.jsonl"
    arrays.write_text("\n".join(json.dumps({**d, "events": json.loads(d["events"]), "writes": json.loads(d["writes"])}) for d in lines) + "\n")
    assert main(["replay", "--check", str(arrays)]) == 0


def test_a_tampered_jsonl_journal_diverges(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSONL journal whose recorded writes were edited diverges at that line's seq."""
    out = tmp_path / "j.jsonl"
    assert main(["replay", "--db", str(store), "--export", str(out)]) == 0
    seq = first_seq_with(store, "tool_finished")
    lines = out.read_text().splitlines()
    row = json.loads(lines[seq - 1])
    row["writes"] = row["writes"].replace("8080", "8081")
    lines[seq - 1] = json.dumps(row)
    out.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["replay", "--check", str(out)]) == 1
    assert f"DIVERGES at commit {seq}" in capsys.readouterr().out


def test_a_journal_starting_inside_a_process_life_is_not_compared_until_the_next_open(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An excerpt without its opened cannot be replayed exactly: the library reports it (no_open); ``replay
    --check`` says the journal is partial and checks from its first process life (issue 11: journal retention
    leaves such journals), exit 0 when that reproduces."""
    out = tmp_path / "j.jsonl"
    assert main(["replay", "--db", str(store), "--export", str(out)]) == 0
    lines = out.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[2:]) + "\n")
    capsys.readouterr()
    assert main(["replay", "--check", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "is partial: it starts at commit 3 (commits 1-2 are not in it: dropped by journal retention, or cut)" in out
    assert "replaying from commit " in out and "reproduced byte for byte" in out
    result = check(read_journal(cut))
    assert [d.kind for d in result.divergences] == [Kind.NO_OPEN] and result.lives == 1 and result.commits > 0


@pytest.mark.parametrize(
    "content, words",
    [
        ("not json\n", "line 1: not JSON"),
        ('{"seq": 1}\n', "line 1: not a journal row"),
        ('{"seq": 2, "events": "[]", "writes": "[]"}\n{"seq": 1, "events": "[]", "writes": "[]"}\n', "line 2: seq 1 does not follow 2"),
        ("\n", "holds no journal rows"),
    ],
)
def test_bad_journal_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, words: str
) -> None:
    """A file that is not a JSONL journal: exit 2 and one line naming the file and line, no traceback."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["replay", "--check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(bad) in err and err.count("\n") == 1


def test_replay_argument_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No source, two sources, a missing journal or store: exit 2 with one line."""
    assert main(["replay", "--check"]) == 2
    assert main(["replay", "--check", str(tmp_path / "x.jsonl"), "--db", str(tmp_path / "y.sqlite")]) == 2
    assert main(["replay", "--check", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["replay", "--check", "--db", str(tmp_path / "missing.sqlite")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("pidurable: error: ") for line in err)
    assert not (tmp_path / "missing.sqlite").exists()


def test_replay_check_on_a_locked_store_works_read_only(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store held by an open harness is checked read-only (the lock is never taken)."""
    copy = tmp_path / "held.sqlite"
    shutil.copy(store, copy)
    held = open_sqlite_storage(copy)
    try:
        assert main(["replay", "--check", "--db", str(copy)]) == 0
    finally:
        held.close()
    assert "reproduced byte for byte" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["sqlite", "jsonl"])
def test_the_demos_stores_replay_exactly(storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 11: `pidurable replay --check` reproduces the demo's store (its three parts, each killed with SIGKILL and resumed) exactly, on SQLite and on JSONL."""
    db = tmp_path / ("demo.sqlite" if storage == "sqlite" else "demo-jsonl")
    assert main(["demo", "--storage", storage, "--db", str(db)]) == 0
    assert f"pidurable replay --check --db {db}" in capsys.readouterr().out  # the demo says how
    assert main(["replay", "--check", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    rows = journal_of(db)
    assert f"replay --check: {len(rows)} commits" in out
    assert "6 process lives" in out  # three parts, each a killed life and a resumed one
    assert check(rows).ok and not [d for d in check(rows).divergences if d.kind is Kind.WRITES]


def test_a_store_opened_without_scheduling_then_resumed_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Harness.open(resume=False) then harness.resume(): the resumed event is journaled with the next commit and replays exactly."""
    db = tmp_path / "r.sqlite"
    models = ScriptedModels([reply(text="one"), reply(text="two")])

    async def life() -> None:
        async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry(), resume=False) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            sub = await conv.submit(Input("first"))
            await h.resume()
            assert (await sub.wait()).status == "done"
            assert (await (await conv.submit(Input("second"))).wait()).status == "done"

    trio.run(life)
    assert any("resumed" in r.events for r in journal_of(db))
    assert main(["replay", "--check", "--db", str(db)]) == 0
    assert "events, 1 process life)" in capsys.readouterr().out


def test_a_round_of_tool_results_is_one_journal_row_that_replays(store: Path) -> None:
    """The two tool results of the store's round, ready together, were
    stepped in one draft (loop.GROUPED): one commit journals both; replay
    steps them so and reproduces it; a handler raising on the second is
    located at that event of the row."""
    rows = journal_of(store)
    grouped = [r for r in rows if [e["type"] for e in json.loads(r.events)] == ["tool_finished", "tool_finished"]]
    assert len(grouped) == 1, [json.loads(r.events) for r in rows]
    assert check(rows).ok


def test_replay_locates_the_raising_event_of_a_grouped_row(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = journal_of(store)
    (row,) = [r for r in rows if [e["type"] for e in json.loads(r.events)] == ["tool_finished", "tool_finished"]]
    second = json.loads(row.events)[1]["task_id"]
    real = HANDLERS[ToolFinished]

    def second_breaks(tx: Any, ev: Any) -> None:
        if ev.task_id == second:
            raise AssertionError("the second result broke")
        real(tx, ev)

    monkeypatch.setitem(HANDLERS, ToolFinished, second_breaks)  # type: ignore[arg-type]
    d = check(rows).divergences[0]
    assert (d.kind, d.seq, d.event_index, d.event_tag) == (Kind.RAISED, row.seq, 1, "tool_finished")
    assert "the second result broke" in d.message
