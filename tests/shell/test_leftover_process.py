"""Issue 7, item 7: a command left running by a killed harness is found and
killed on the next open (its process group was recorded in the tool's
checkpoint before the command started)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from pidurable.core.model import EntryKind, TOOL
from pidurable.shell import AgentConfig, Harness, LocalEnv, ModelRef, Registry, coding_tools, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply, tool_call

CHILD = Path(__file__).with_name("children") / "bash_leftover.py"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.slow
def test_a_command_left_running_by_a_killed_harness_is_killed_on_open(tmp_path: Path) -> None:
    """SIGKILL the harness while bash runs ``sleep 1000 &``: the sleeper
    survives its harness; the next open kills it and reports the unsafe call
    interrupted (never re-run)."""
    db = tmp_path / "s.sqlite"
    work = tmp_path / "work"
    work.mkdir()
    child = subprocess.Popen([sys.executable, str(CHILD), str(db), str(work)])
    deadline = time.monotonic() + 30
    while not ((work / "sleeper.pid").exists() and (work / "shell.pid").exists()):
        assert child.poll() is None, "child exited before the command started"
        assert time.monotonic() < deadline, "command never started"
        time.sleep(0.02)
    time.sleep(0.1)
    sleeper = int((work / "sleeper.pid").read_text())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert _alive(sleeper), "the command should outlive its killed harness"
    storage = open_sqlite_storage(db)
    live = [t for t in storage.tasks(live_only=True) if t.kind == TOOL]
    assert live and isinstance(live[0].checkpoint.get("process"), dict)

    async def reopen() -> None:
        registry = Registry()
        registry.install(coding_tools())
        models = ScriptedModels([reply(tool_calls=[tool_call("bash", command="true")]), reply(text="done")])
        async with Harness.open(storage, models=models, registry=registry, env=LocalEnv(work)) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "t")))
            with trio.fail_after(30):
                await h.wait_idle()
            results = [e for e in await conv.transcript() if e.kind == EntryKind.TOOL_RESULT]
            assert len(results) == 1 and "interrupted" in results[0].text

    trio.run(reopen)
    deadline = time.monotonic() + 5
    while _alive(sleeper):
        assert time.monotonic() < deadline, f"leftover sleeper {sleeper} was not killed on open"
        time.sleep(0.02)
