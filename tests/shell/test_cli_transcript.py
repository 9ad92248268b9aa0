"""``pidurable transcript``: a conversation printed readably - roles, tool
calls with arguments, results cut with a flag to show all, system entries,
compaction and reset markers - or as JSON (issue 11 item 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.effects import PutAgent, PutConversation, PutEntry
from pidurable.core.model import (
    AgentConfig,
    Conversation,
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    ModelRef,
    ToolCall,
    Usage,
)
from pidurable.shell import Harness, Input, Registry, ToolResult, define_tool, open_sqlite_storage
from pidurable.shell.cli import main
from pidurable.shell.providers import ScriptedModels, reply, tool_call

C1 = ConversationId(1)
LONG = "\n".join(f"line {i}: " + "x" * 20 for i in range(40))


def entry(i: int, kind: str, text: str = "", **kw: Any) -> Entry:
    return Entry(id=EntryId(i), conversation_id=C1, kind=kind, text=text, **kw)


ENTRIES = [
    entry(2, EntryKind.SYSTEM, data={"sections": {"base": "You are terse."}, "order": ["base"], "tools_added": ["read", "bash"], "tools_removed": []}),
    entry(3, EntryKind.USER, "Fix the config\nplease"),
    entry(
        4,
        EntryKind.ASSISTANT,
        "Reading it first.",
        tool_calls=(ToolCall(id="c1", name="read", arguments={"path": "config.json", "limit": 10}),),
        stop_reason="tool_use",
        usage=Usage(input_tokens=120, output_tokens=9),
    ),
    entry(5, EntryKind.TOOL_RESULT, LONG, tool_call_id="c1", tool_name="read"),
    entry(6, EntryKind.TOOL_RESULT, "boom", tool_call_id="c2", tool_name="bash", is_error=True),
    entry(7, EntryKind.COMPACTION, "Summary: the user wants the config fixed.", data={"head": 5, "reason": "manual"}),
    entry(8, EntryKind.RESET, "carry on with the port", data={"head": 8}),
    entry(9, "note", "a host's own entry kind", data={"tag": 1}),
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "t.sqlite"
    s = open_sqlite_storage(path)
    try:
        s.commit(1, [PutConversation(conversation=Conversation(id=C1)), PutAgent(conversation_id=C1, agent=AgentConfig(model=ModelRef("scripted", "m")))], [])
        s.commit(2, [PutEntry(entry=e) for e in ENTRIES], [])
        s.commit(3, [PutConversation(conversation=Conversation(id=ConversationId(20))), PutEntry(entry=Entry(id=EntryId(21), conversation_id=ConversationId(20), kind=EntryKind.USER, text="other"))], [])
    finally:
        s.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["transcript", *argv]) == 0
    return capsys.readouterr().out


def test_transcript_shows_every_kind_of_entry_readably(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Roles, a tool call with its arguments, usage, ok/error results, the system change, compaction and reset markers, a host kind."""
    out = run(capsys, "--db", str(store))
    assert out.startswith("conversation 1 (root): 8 entries, model scripted:m\n")
    assert "#2 system: prompt sections base; tools +read +bash\n    [base]\n        You are terse." in out
    assert "#3 user\n    Fix the config\n    please\n" in out
    assert "#4 assistant [tool_use, 120 in, 9 out tokens]\n    Reading it first.\n    -> read(path='config.json', limit=10)  [c1]\n" in out
    assert "#5 tool read [ok] for c1\n    line 0: " in out
    assert "#6 tool bash [error] for c2\n    boom\n" in out
    assert "#7 ── compaction (manual): the model's context starts at entry #5 after this summary ──\n    Summary:" in out
    assert "#8 ── reset: the model's context starts afresh here ──\n    handoff: carry on with the port\n" in out
    assert '#9 note {"tag": 1}\n    a host\'s own entry kind' in out
    assert "other" not in out  # another conversation's entries


def test_long_tool_results_are_cut_and_full_shows_them(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 40-line result shows its first lines and says how much is left; --full prints all of it."""
    out = run(capsys, "--db", str(store))
    assert "line 11:" in out and "line 12:" not in out
    assert "… (28 more lines, " in out and "more characters; --full shows all)" in out
    full = run(capsys, "--db", str(store), "--full")
    assert "line 39: " in full and "--full shows all" not in full


def test_transcript_json_holds_every_entry_whole(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints the conversation and its entries as stored, texts uncut."""
    data = json.loads(run(capsys, "--db", str(store), "--json"))
    assert data["conversation"] == {"id": 1, "owner_task_id": None, "parent_id": None, "fork_at": None, "model": "scripted:m"}
    assert [e["id"] for e in data["entries"]] == [e.id for e in ENTRIES]
    result = data["entries"][3]
    assert result["text"] == LONG and result["tool_name"] == "read" and result["kind"] == "tool_result"
    assert data["entries"][2]["tool_calls"] == [{"id": "c1", "name": "read", "arguments": {"path": "config.json", "limit": 10}}]


def test_transcript_of_another_conversation_and_bad_input(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--conversation picks one; an unknown one, a missing store and a store without conversations are one-line errors (exit 2)."""
    assert "#21 user\n    other" in run(capsys, "--db", str(store), "--conversation", "20")
    assert main(["transcript", "--db", str(store), "--conversation", "7"]) == 2
    assert "conversation 7 does not exist" in capsys.readouterr().err
    assert main(["transcript", "--db", str(tmp_path / "nope.sqlite")]) == 2
    assert not (tmp_path / "nope.sqlite").exists()
    empty = tmp_path / "empty.sqlite"
    open_sqlite_storage(empty).close()
    assert main(["transcript", "--db", str(empty)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("pidurable: error: ") for line in err)
    assert "has no conversations" in err[1]


def test_transcript_of_a_real_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scripted run with a tool round reads back in order: question, call, result, answer."""
    db = tmp_path / "r.sqlite"

    async def read(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text='{"port": 8080}')

    registry = Registry()
    registry.install(define_tool("read", "read", {"type": "object", "properties": {"path": {"type": "string"}}}, read, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("read", path="c.json")]), reply(text="Port 8080.")])

    async def life() -> None:
        async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            assert (await (await conv.submit(Input("Which port?"))).wait()).status == "done"

    trio.run(life)
    out = run(capsys, "--db", str(db))
    order = ["user\n    Which port?", "-> read(path='c.json')", "tool read [ok]", '{"port": 8080}', "assistant [stop]\n    Port 8080."]
    positions = [out.index(x) for x in order]
    assert positions == sorted(positions)


def test_transcript_is_listed_and_described(capsys: pytest.CaptureFixture[str]) -> None:
    """`pidurable --help` lists transcript; `pidurable transcript --help` describes it."""
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "transcript" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["transcript", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--conversation ID" in out and "--full" in out and "--json" in out
