"""``LocalEnv``: file access confined to the root and a working directory
inside it; commands in their own process group, recorded before they start,
killed as a group on timeout, cancellation and exit; and
``kill_recorded_process`` for what a killed harness left running.

Commands are real ``/bin/sh`` processes on the real clock (no autojump).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import trio

from pidurable.shell.env import EnvError, LocalEnv, describe_process, kill_recorded_process

WAIT = 10  # seconds, real time


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.02)


def wait_file(path: Path, timeout: float = WAIT) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text()


def wait_group_gone(pgid: int, timeout: float = WAIT) -> None:
    """Every member of process group ``pgid`` has died. SIGKILL reaches the
    whole group at once, but each member dies when the kernel gets to it:
    on a loaded machine a member may still be exiting when the leader and
    the background child are already gone."""
    deadline = time.monotonic() + timeout
    while (members := group_members(pgid)):
        assert time.monotonic() < deadline, f"process group {pgid} still has members {members}"
        time.sleep(0.02)


def group_members(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and alive(int(name)):
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[2]) == pgid:
                        out.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return out


# --- paths and the working directory ------------------------------------------------


def test_paths_resolve_against_a_cwd_inside_the_root(tmp_path: Path) -> None:
    """Relative paths resolve against ``cwd``; a cwd or a path outside the root is refused."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("in sub")
    (tmp_path / "a.txt").write_text("at root")
    env = LocalEnv(tmp_path)
    assert env.read_text("a.txt") == "at root"
    assert env.read_text("a.txt", cwd="sub") == "in sub"
    assert env.read_text("a.txt", cwd=str(tmp_path / "sub")) == "in sub"  # absolute, inside
    assert env.read_text("../a.txt", cwd="sub") == "at root"  # still inside the root
    env.write_text("new/b.txt", "bee", cwd="sub")
    assert (tmp_path / "sub" / "new" / "b.txt").read_text() == "bee"
    with pytest.raises(EnvError, match="outside the environment root"):
        env.read_text("a.txt", cwd="..")
    with pytest.raises(EnvError, match="outside the environment root"):
        env.write_text("x.txt", "no", cwd="/")
    with pytest.raises(EnvError, match="outside the working directory"):
        env.read_text("../../a.txt", cwd="sub")
    assert not (tmp_path.parent / "x.txt").exists()


async def test_a_command_runs_in_its_cwd_and_a_cwd_outside_is_refused(tmp_path: Path) -> None:
    """``run(cwd=...)`` starts the command there; a cwd outside the root raises EnvError and runs nothing."""
    (tmp_path / "sub").mkdir()
    env = LocalEnv(tmp_path)
    result = await env.run("pwd; echo err >&2; exit 3", cwd="sub")
    assert result.exit_code == 3 and not result.timed_out
    assert result.output.splitlines() == [str((tmp_path / "sub").resolve()), "err"]
    with pytest.raises(EnvError):
        await env.run("touch escaped", cwd="../")
    assert not (tmp_path.parent / "escaped").exists()
    with pytest.raises(EnvError, match="does not exist"):
        await env.run("true", cwd="gone")


# --- record before run ----------------------------------------------------------------


async def test_on_start_is_awaited_before_the_command_runs(tmp_path: Path) -> None:
    """The command only starts after ``on_start(pid)`` returned; the pid leads its own group."""
    env = LocalEnv(tmp_path)
    seen: list[dict[str, object]] = []

    async def on_start(pid: int) -> None:
        await trio.sleep(0.3)  # a slow durable commit: the command must still wait
        assert not (tmp_path / "ran").exists()
        seen.append(describe_process(pid))

    result = await env.run("echo $$ > ran; echo ok", on_start=on_start)
    assert result.output == "ok\n" and result.exit_code == 0
    (record,) = seen
    assert record["pgid"] == record["pid"]
    assert isinstance(record["start"], int) and isinstance(record["host"], str)
    # the handshake execs the command: the recorded pid is the command's shell
    assert int((tmp_path / "ran").read_text()) == record["pid"]


async def test_a_failing_on_start_means_the_command_never_runs(tmp_path: Path) -> None:
    """If recording fails, the error propagates, the command never runs and no process is left."""
    env = LocalEnv(tmp_path)
    pids: list[int] = []

    async def on_start(pid: int) -> None:
        pids.append(pid)
        raise RuntimeError("the store refused the record")

    with pytest.raises(RuntimeError, match="refused"):
        await env.run("touch ran", on_start=on_start)
    await trio.sleep(0.2)
    assert not (tmp_path / "ran").exists()
    assert not alive(pids[0])


def test_a_parent_killed_before_go_means_the_command_never_runs(tmp_path: Path) -> None:
    """A process SIGKILLed inside ``on_start`` (before "go"): the handshake reads
    end-of-file and the command never runs."""
    script = textwrap.dedent(
        f"""
        import trio
        from pidurable.shell.env import LocalEnv

        async def on_start(pid):
            open({str(tmp_path / "pid")!r}, "w").write(f"{{pid}}\\n")
            await trio.sleep(100)

        trio.run(lambda: LocalEnv({str(tmp_path)!r}).run("touch ran", on_start=on_start))
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        pid = int(wait_file(tmp_path / "pid"))
        assert alive(pid)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(WAIT)
    wait_dead(pid)  # the handshake gave up on end-of-file
    assert not (tmp_path / "ran").exists()


# --- the process group dies ----------------------------------------------------------


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    """On timeout the command and its background child are killed; the output so far is kept."""
    env = LocalEnv(tmp_path)
    started = time.monotonic()
    result = await env.run("sleep 100 & echo $! > bg; echo before; sleep 100", timeout=0.5)
    assert result.timed_out and result.exit_code is None
    assert result.output == "before\n"
    assert time.monotonic() - started < 5
    wait_dead(int((tmp_path / "bg").read_text()))


async def test_background_children_die_when_the_command_exits(tmp_path: Path) -> None:
    """``sleep 100 &`` neither keeps running nor holds the output pipe after the main process exits."""
    env = LocalEnv(tmp_path)
    started = time.monotonic()
    result = await env.run("sleep 100 & echo $!; echo done", timeout=60)
    assert time.monotonic() - started < 2, "the background child held the pipe"
    bg, last = result.output.split()
    assert last == "done" and result.exit_code == 0
    wait_dead(int(bg))


async def test_cancellation_kills_the_whole_group(tmp_path: Path) -> None:
    """A Trio cancellation (an abort) kills the command and its background child before run() returns."""
    env = LocalEnv(tmp_path)
    pids: list[int] = []

    async def on_start(pid: int) -> None:
        pids.append(pid)

    with trio.move_on_after(0.5) as scope:
        await env.run("sleep 100 & echo $! > bg; sleep 100", on_start=on_start)
    assert scope.cancelled_caught
    assert not alive(pids[0])  # killed and reaped before run() returned
    wait_dead(int(wait_file(tmp_path / "bg")))


# --- leftovers of a killed harness ------------------------------------------------------

HOLDER = """
import json, sys, trio
from pidurable.shell.env import LocalEnv, describe_process

root, command = sys.argv[1], sys.argv[2]

async def on_start(pid):
    with open(root + "/record.json", "w") as f:
        f.write(json.dumps(describe_process(pid)) + "\\n")

trio.run(lambda: LocalEnv(root).run(command, timeout=300, on_start=on_start))
"""


def start_and_kill_holder(tmp_path: Path, command: str) -> dict[str, object]:
    """Run ``command`` under a Python process that records it, wait until the
    command wrote ``started``, SIGKILL that process; return the record."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), command])
    try:
        record: dict[str, object] = json.loads(wait_file(tmp_path / "record.json"))
        wait_file(tmp_path / "started")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(WAIT)
    return record


def test_a_leftover_group_is_found_and_killed(tmp_path: Path) -> None:
    """A command and its background child outlive a SIGKILLed harness;
    ``kill_recorded_process`` kills both; a second call finds nothing."""
    record = start_and_kill_holder(tmp_path, "sleep 100 & echo $! > bg; echo go > started; sleep 100")
    bg = int((tmp_path / "bg").read_text())
    pgid = int(record["pgid"])  # type: ignore[call-overload]
    assert alive(bg) and alive(pgid), "the leftover should still run"
    assert kill_recorded_process(record) is True
    wait_dead(bg)
    wait_dead(pgid)
    wait_group_gone(pgid)
    assert kill_recorded_process(record) is False


def test_a_leftover_group_whose_leader_ended_is_still_killed(tmp_path: Path) -> None:
    """The leader exits after the harness died, its background child remains:
    found by its process group and killed."""
    record = start_and_kill_holder(tmp_path, "sleep 100 & echo $! > bg; echo go > started; sleep 0.5")
    bg = int((tmp_path / "bg").read_text())
    wait_dead(int(record["pid"]))  # type: ignore[call-overload]
    assert alive(bg)
    assert kill_recorded_process(record) is True
    wait_dead(bg)


def test_a_record_that_does_not_match_is_refused(tmp_path: Path) -> None:
    """A record whose start time or host differs (a reused pid) kills nothing."""
    record = start_and_kill_holder(tmp_path, "sleep 100 & echo $! > bg; echo go > started; sleep 100")
    bg = int((tmp_path / "bg").read_text())
    try:
        assert kill_recorded_process({**record, "start": int(record["start"]) + 1}) is False  # type: ignore[call-overload]
        assert kill_recorded_process({**record, "host": "elsewhere.invalid"}) is False
        assert kill_recorded_process({**record, "start": None}) is False
        assert kill_recorded_process({"pid": "x"}) is False
        time.sleep(0.1)
        assert alive(bg) and alive(int(record["pid"]))  # type: ignore[call-overload]
    finally:
        assert kill_recorded_process(record) is True
    wait_dead(bg)


def test_a_reused_pid_in_another_group_is_refused(tmp_path: Path) -> None:
    """A live process with the recorded pid and start time but another group
    (it is not the leader we started) is not killed."""
    other = subprocess.Popen(["sleep", "100"])  # in the test's own process group
    try:
        record = describe_process(other.pid)
        assert record["pgid"] != other.pid
        forged = {**record, "pgid": other.pid}
        assert kill_recorded_process(forged) is False
        assert alive(other.pid)
    finally:
        other.kill()
        other.wait()
