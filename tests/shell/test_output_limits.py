"""Tool output limits (issue 9 item 2) through a real Harness: a result over
its limits is cut with a notice, the full output spilled into the env, the
diagnostic kept in the entry's data; bash keeps the tail and streams its
running output into its live slot; a bad ``output_limits`` is refused at
``define_tool``. Real processes, real clock (no autojump).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.model import EntryKind, ModelRef, SubmissionStatus
from pidurable.core.state import LIVE_DOC
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    LocalEnv,
    MemoryStorage,
    OutputLimits,
    Registry,
    Settings,
    coding_tools,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.limits import Spill
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.registry import ToolResult
import json
from invariants import journal_history

WAIT = 30  # seconds, real time
AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
#: 1 MB of output (20,000 lines of 50 bytes), then the error a tail must keep.
BIG_COMMAND = (
    "i=0; while [ $i -lt 400 ]; do "
    "printf 'line %045d\\n' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 "
    "21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50; "
    "i=$((i+1)); done; echo 'error: the real problem is here' >&2; exit 3"
)


def registry(*items: Any) -> Registry:
    r = Registry()
    for item in items:
        r.install(item)
    return r


def tool_results(storage: Any) -> list[Any]:
    return [e for e in storage.entries(1) if e.kind == EntryKind.TOOL_RESULT]


async def test_a_1mb_bash_output_never_reaches_the_transcript_or_the_store_whole(tmp_path: Path) -> None:
    """bash printing 1 MB and failing: the result entry keeps the tail within
    50 KiB (the error visible), then the diagnostics - the spill file (which
    holds the full output), the exit code, the cut - as the reference's bash
    reports them; every journal row and the SQLite file stay far below 1 MB;
    the entry's data records the cut and the diagnostics."""
    root = tmp_path / "work"
    root.mkdir()
    models = ScriptedModels([reply(tool_calls=[tool_call("bash", command=BIG_COMMAND)]), reply(text="saw it")])
    db = tmp_path / "store.sqlite"
    storage = open_sqlite_storage(db)
    async with Harness.open(storage, models=models, registry=registry(coding_tools()), env=LocalEnv(root)) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(WAIT):
            settled = await (await conv.submit(Input("run it"))).wait()
        assert settled.status == SubmissionStatus.DONE
        (result,) = tool_results(storage)
        rows = storage.journal()
        transcript = await conv.transcript()
    storage.close()

    assert result.is_error
    size = len(result.text.encode())
    assert 40 * 1024 < size < 52 * 1024
    diag = result.data["truncated"]
    assert diag["retain"] == "tail" and diag["total_bytes"] > 1_000_000 and diag["kept_bytes"] <= 50 * 1024
    assert diag["total_lines"] == 20_001 and diag["kept_lines"] < 2000  # 20000 lines + the error line
    spilled = Path(diag["full_output"])
    assert spilled.parent == root / ".pidurable" / "outputs" and spilled.name.endswith(f"-{result.by_task_id}.txt")
    dropped_lines, dropped_bytes = diag["total_lines"] - diag["kept_lines"], diag["total_bytes"] - diag["kept_bytes"]
    assert result.text.endswith(
        "error: the real problem is here\n\n<harness>\n"
        f"[info] Full output: {spilled}\n"
        "[error] Command exited with code 3\n"
        f"[warn] Output truncated to its end: {dropped_lines} lines, {dropped_bytes} bytes dropped\n"
        "</harness>"
    )
    assert [d["code"] for d in result.data["diagnostics"]] == ["full_output", "exit_code", "truncated"]
    full = spilled.read_text()
    assert len(full.encode()) == diag["total_bytes"] and full.startswith("line 000")
    assert full.endswith("error: the real problem is here\n")
    assert max(len(r.events) + len(r.writes) for r in rows) < 200_000
    assert sum(len(r.events) + len(r.writes) for r in rows) < 400_000
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("store.sqlite*"))
    assert on_disk < 1_000_000
    assert all(len(e.text) < 60_000 for e in transcript)


async def test_running_bash_output_shows_in_the_live_slot_while_it_runs(tmp_path: Path) -> None:
    """A command printing in chunks: a watcher polling pi.live sees the
    slot's output grow while the command runs (partial output, throttled),
    and the slot output is gone once the call settled. The command waits for
    the watcher to have seen each of its first two chunks (a file the test
    creates), so the test does not depend on how fast a loaded machine
    schedules the watcher (with fixed pauses it once saw only chunk1, then
    the whole output)."""
    wait = "while [ ! -e {0} ]; do sleep 0.01; done"
    command = f"echo chunk1; {wait.format('seen1')}; echo chunk2; {wait.format('seen2')}; echo chunk3; echo chunk4; echo chunk5"
    models = ScriptedModels([reply(tool_calls=[tool_call("bash", command=command)]), reply(text="done")])
    storage = MemoryStorage()
    seen: list[str] = []
    settings = Settings(partial_interval_ms=50)
    async with Harness.open(
        storage, models=models, registry=registry(coding_tools()), env=LocalEnv(tmp_path), settings=settings
    ) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("run it"))
        with trio.fail_after(WAIT):
            while (await handle.record()).status != SubmissionStatus.DONE:
                live = storage.document(1, LIVE_DOC)
                for slot in live.tools or ():
                    if slot.output and (not seen or seen[-1] != slot.output):
                        seen.append(slot.output)
                        for n in (1, 2):
                            if f"chunk{n}" in slot.output:
                                (tmp_path / f"seen{n}").touch()
                await trio.sleep(0.01)
        live = storage.document(1, LIVE_DOC)
    partial = [s for s in seen if "chunk1" in s and "chunk5" not in s]
    assert len(partial) >= 2, seen  # it grew while the command ran
    assert all(a != b for a, b in zip(seen, seen[1:]))
    assert live.run is None and live.tools is None
    (result,) = tool_results(storage)
    assert result.text == "".join(f"chunk{i}\n" for i in range(1, 6)) and result.data is None


async def test_a_tool_without_a_spill_directory_reports_only_the_cut() -> None:
    """With no env (no spill directory), a custom tool's 300-line result is cut
    to its head by its limits (given as a tuple); the model reads the
    ``truncated`` warn (no ``full_output``: nothing was kept) and the cut's
    record has no path. The progress it reported shows the same way without an env."""

    async def dump(call: Any, args: dict[str, Any]) -> ToolResult:
        call.report_output("starting\n")
        return ToolResult(text="".join(f"row {i}\n" for i in range(300)))

    tool = define_tool("dump", "dump rows", {"type": "object"}, dump, output_limits=(10_000, 100, "head"))
    models = ScriptedModels([reply(tool_calls=[tool_call("dump")]), reply(text="ok")])
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=registry(tool), env=None) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(WAIT):
            await (await conv.submit(Input("dump"))).wait()
    (result,) = tool_results(storage)
    assert result.text.startswith("row 0\n") and "row 99\n" in result.text and "row 100\n" not in result.text
    assert result.text.endswith(
        "row 99\n\n<harness>\n[warn] Output truncated to its beginning: 200 lines, 1600 bytes dropped\n</harness>"
    )
    assert not result.is_error
    assert result.data == {
        "truncated": {"total_bytes": 2290, "total_lines": 300, "kept_bytes": 690, "kept_lines": 100, "retain": "head"},
        "diagnostics": [
            {"severity": "warn", "message": "Output truncated to its beginning: 200 lines, 1600 bytes dropped", "code": "truncated"}
        ],
    }
    progressed = [wr for _, ev, wr in journal_history(storage) if any(e["type"] == "tool_progressed" for e in ev)]
    assert len(progressed) == 1 and "starting" in json.dumps(progressed[0])


def test_define_tool_accepts_limits_as_a_record_or_a_tuple() -> None:
    """``output_limits`` may be None (the defaults), an OutputLimits or the
    tuple the issue names; bash keeps the tail, read the head."""
    from pidurable.shell.tools.coding import BASH, READ

    async def ex(call: Any, args: dict[str, Any]) -> str:
        return ""

    assert define_tool("t", "t", {"type": "object"}, ex).output_limits == OutputLimits()
    assert define_tool("t", "t", {"type": "object"}, ex, output_limits=(100, 5, "tail")).output_limits == OutputLimits(
        max_bytes=100, max_lines=5, retain="tail"
    )
    assert define_tool("t", "t", {"type": "object"}, ex, output_limits=(100, 5)).output_limits.retain == "head"
    assert BASH.output_limits.retain == "tail" and READ.output_limits.retain == "head"
    assert OutputLimits().max_bytes == 50 * 1024 and OutputLimits().max_lines == 2000


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ((0, 10, "head"), "max_bytes must be a positive int"),
        ((100, -1, "head"), "max_lines must be a positive int"),
        ((100, 10, "middle"), "retain must be 'head' or 'tail'"),
        ((1.5, 10, "tail"), "max_bytes must be a positive int"),
        ((True, 10, "tail"), "max_bytes must be a positive int"),
        ((100,), "must be None, an OutputLimits or a tuple"),
        ({"max_bytes": 100}, "must be None, an OutputLimits or a tuple"),
        ("50k", "must be None, an OutputLimits or a tuple"),
    ],
)
def test_a_bad_output_limits_is_refused_at_define_tool(limits: Any, message: str) -> None:
    """A bad ``output_limits`` fails at definition time with a clear error naming the tool."""

    async def ex(call: Any, args: dict[str, Any]) -> str:
        return ""

    with pytest.raises(ValueError, match="Tool t") as info:
        define_tool("t", "t", {"type": "object"}, ex, output_limits=limits)
    assert message in str(info.value)


def test_the_spill_cap_counts_one_stores_files(tmp_path: Path) -> None:
    """Stores sharing a spill directory each get their own cap: eviction
    removes only the oldest files of the store that is writing."""
    other = tmp_path / "B-1.txt"
    other.write_text("x" * 500)
    spill = Spill(tmp_path, cap_bytes=250, prefix="A-")
    first = spill.write("A-1.txt", "a" * 200)
    second = spill.write("A-2.txt", "b" * 200)
    assert first is not None and second is not None
    assert not Path(first).exists() and Path(second).exists() and other.exists()


def test_local_env_spill_settings() -> None:
    """LocalEnv spills under ``<root>/.pidurable/outputs``, 256 MB per store by
    default; the cap is configurable and checked."""
    env = LocalEnv("/tmp")
    assert env.spill_directory == Path("/tmp/.pidurable/outputs") and env.spill_cap_bytes == 256 * 1024 * 1024
    assert LocalEnv("/tmp", spill_cap_bytes=1024).spill_cap_bytes == 1024
    with pytest.raises(ValueError, match="spill_cap_bytes"):
        LocalEnv("/tmp", spill_cap_bytes=-1)
