"""The coding tools through a real Harness: file tools and ``bash`` work in
the conversation's working directory inside the env root, ``bash`` records its
process group in the tool task's checkpoint before the command runs, and an
abort kills the whole group. Real processes, real clock (no autojump).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from pidurable.core.model import EntryKind, ModelRef, SubmissionStatus
from pidurable.shell import AgentConfig, Harness, Input, LocalEnv, MemoryStorage, Registry, coding_tools
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.tools.coding import read_tools

WAIT = 20  # seconds, real time


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def results(storage: MemoryStorage) -> list[Any]:
    return [e for e in storage.entries(1) if e.kind == EntryKind.TOOL_RESULT]


def registry(ext: Any) -> Registry:
    r = Registry()
    r.install(ext)
    return r


async def test_tools_work_in_the_conversations_cwd(tmp_path: Path) -> None:
    """With the agent's cwd ``sub``: read and bash run there, a path escaping
    the root is an error result, and bash's process group is in the tool
    task's checkpoint while the command runs."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("in sub")
    (tmp_path / "secret.txt").write_text("outside")
    models = ScriptedModels(
        [
            reply(
                tool_calls=[
                    tool_call("read", path="a.txt"),
                    tool_call("read", path="../../secret.txt"),
                    tool_call("bash", command="echo $$ > pid; while [ ! -e go ]; do sleep 0.02; done; pwd"),
                ]
            ),
            reply(text="done"),
        ]
    )
    storage = MemoryStorage()
    agent = AgentConfig(model=ModelRef("scripted", "demo"), cwd="sub")
    async with Harness.open(storage, models=models, registry=registry(coding_tools()), env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=agent)
        handle = await conv.submit(Input("look"))
        with trio.fail_after(WAIT):
            while not (tmp_path / "sub" / "pid").exists() or not (tmp_path / "sub" / "pid").read_text().endswith("\n"):
                await trio.sleep(0.02)
        pid = int((tmp_path / "sub" / "pid").read_text())
        (bash,) = [t for t in storage.tasks(live_only=True) if t.input.get("name") == "bash"]
        process = bash.checkpoint["process"]
        assert process["pid"] == pid and process["pgid"] == pid and isinstance(process["start"], int)
        (tmp_path / "sub" / "go").write_text("")
        with trio.fail_after(WAIT):
            settled = await handle.wait()
    assert settled.status == SubmissionStatus.DONE
    by_text = sorted((r.text, r.is_error) for r in results(storage))
    assert ("in sub", False) in by_text
    assert (str((tmp_path / "sub").resolve()) + "\n", False) in by_text
    assert any(err and "outside the working directory" in text for text, err in by_text)


async def test_abort_kills_the_commands_whole_group(tmp_path: Path) -> None:
    """Aborting the conversation while bash runs kills the command and its background child."""
    models = ScriptedModels(
        [reply(tool_calls=[tool_call("bash", command="sleep 100 & echo $! > bg; sleep 100")]), reply(text="never")]
    )
    storage = MemoryStorage()
    agent = AgentConfig(model=ModelRef("scripted", "demo"), cwd=str(tmp_path))
    async with Harness.open(storage, models=models, registry=registry(coding_tools()), env=LocalEnv(tmp_path)) as h:
        conv = await h.root(agent=agent)
        handle = await conv.submit(Input("run it"))
        with trio.fail_after(WAIT):
            while not (tmp_path / "bg").exists() or not (tmp_path / "bg").read_text().endswith("\n"):
                await trio.sleep(0.02)
            bg = int((tmp_path / "bg").read_text())
            (bash,) = [t for t in storage.tasks(live_only=True) if t.input.get("name") == "bash"]
            leader = int(bash.checkpoint["process"]["pid"])
            assert alive(bg) and alive(leader)
            await conv.abort()
            settled = await handle.wait()
    assert settled.status == SubmissionStatus.UNANSWERED and settled.reason == "aborted"
    assert not alive(leader)
    deadline = time.monotonic() + WAIT
    while alive(bg):
        assert time.monotonic() < deadline, "the background child survived the abort"
        time.sleep(0.02)


def test_bash_says_it_is_not_confined_and_read_tools_are_read_only() -> None:
    """bash's description tells the model it runs as the user, unconfined; read_tools() offers only read."""
    tools = {t.name: t for t in coding_tools().tools}
    assert set(tools) == {"read", "write", "edit", "bash"}
    assert "NOT confined" in tools["bash"].description
    assert [t.name for t in read_tools().tools] == ["read"]
    assert read_tools().tools[0].replay == "safe"
