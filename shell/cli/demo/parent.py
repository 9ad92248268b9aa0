"""The demo's parent process: runs each part's two lives as child processes,
kills the first with SIGKILL (or sees it kill itself), and has the report
read the store at the crash and after the resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pidurable.core.model import TaskStatus

from ...storage.base import StorageError
from .report import Snapshot, print_recovery, print_stored, problems, read_runs, read_snapshot
from .scenarios import Part

#: How long a child may take, in seconds.
CHILD_TIMEOUT = 40
#: How long the parent waits for the moment to kill life 1, in seconds.
KILL_TIMEOUT = 30


class DemoFailed(Exception):
    pass


class Parent:
    """Runs the parts against one store, one work directory and log files."""

    def __init__(self, db: Path, work: Path, logs: Path, storage: str = "sqlite") -> None:
        self.db = db
        self.storage = storage
        self.work = work
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def cleanup(self) -> None:
        """Kill any child still running (the parent was interrupted)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def spawn(self, part: Part, life: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.logs / f"{part.key}-life{life}.log"
        cmd = [sys.executable, "-m", __package__ or "", "child", part.key]
        cmd += ["--db", str(self.db), "--work", str(self.work), "--life", str(life), "--storage", self.storage]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc, log

    @staticmethod
    def _tail(log: Path) -> str:
        try:
            lines = log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join("      | " + line for line in lines[-8:])

    def _expect_killed(self, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
        if proc.returncode != -signal.SIGKILL:
            raise DemoFailed(
                f"{what}: expected the child (pid {proc.pid}) to die by SIGKILL, but it exited with "
                f"status {proc.returncode}\n{self._tail(log)}"
            )
        print(f"          child {proc.pid} died: killed by signal {-proc.returncode} (SIGKILL)")

    def run_part(self, part: Part) -> None:
        print(f"\n== {part.title} ==")
        if part.show_file:
            print(f"  {part.show_file} before: {(self.work / part.show_file).read_text().strip()}")
        proc, log = self.spawn(part, 1)
        first, *rest = part.life_one
        print(f"  life 1: child process pid {proc.pid} {first}")
        for line in rest:
            print(f"          {line}")
        if part.parent_kill is not None:
            self._kill_when_ready(part, proc, log)
        else:
            self._wait_for_self_kill(proc, log)
        self._expect_killed(proc, log, part.title)
        if part.show_file:
            print(f"  {part.show_file} on disk after the crash: {(self.work / part.show_file).read_text().strip()}")
        self.report(part)

    def _wait_for_self_kill(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        try:
            proc.wait(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise DemoFailed(
                f"the first child (pid {proc.pid}) was still running after {CHILD_TIMEOUT} s\n{self._tail(log)}"
            ) from None

    def _kill_when_ready(self, part: Part, proc: subprocess.Popen[bytes], log: Path) -> None:
        kill = part.parent_kill
        assert kill is not None
        deadline = time.monotonic() + KILL_TIMEOUT
        try:
            while True:
                if proc.poll() is not None:
                    raise DemoFailed(
                        f"the first child (pid {proc.pid}) exited (status {proc.returncode}) before the parent "
                        f"could kill it\n{self._tail(log)}"
                    )
                if time.monotonic() > deadline:
                    committed = " and ".join(kill.committed)
                    raise DemoFailed(f"timed out waiting for {committed} to commit while {kill.running} runs")
                snap = self._poll_snapshot(part)
                if snap is not None and self._ready(snap, kill.committed, kill.running):
                    break
                time.sleep(0.02)
            for line in kill.says:
                print("          " + line.format(pid=proc.pid))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def _poll_snapshot(self, part: Part) -> Snapshot | None:
        try:
            return read_snapshot(self.db, part.key)
        except StorageError:
            return None  # the child has not created the store yet
        except Exception as e:  # noqa: BLE001 - a store being created may be briefly unreadable
            if "locked" in str(e) or "no such table" in str(e):
                return None
            raise

    def _ready(self, snap: Snapshot, committed: tuple[str, ...], running: str) -> bool:
        """``committed`` tool calls are stored and ``running`` runs its body."""
        by_name = {t.input.get("name"): t for t in snap.tasks if t.kind == "pi.tool"}
        started = {(name, call) for life, name, call in read_runs(self.work) if life == 1}
        task = by_name.get(running)
        return (
            all(n in by_name and by_name[n].status is TaskStatus.TERMINAL for n in committed)
            and task is not None
            and task.status is TaskStatus.RUNNING
            and task.phase == "execute"
            and (running, task.input.get("call_id")) in started
        )

    def life_two(self, part: Part) -> None:
        proc, log = self.spawn(part, 2)
        print(f"  life 2: a fresh child process (pid {proc.pid}) reopens the store and resumes")
        try:
            proc.wait(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise DemoFailed(
                f"the resuming child (pid {proc.pid}) did not finish within {CHILD_TIMEOUT} s\n{self._tail(log)}"
            ) from None
        if proc.returncode != 0:
            raise DemoFailed(f"the resuming child (pid {proc.pid}) exited with status {proc.returncode}\n{self._tail(log)}")
        print("          it finished and exited with status 0")

    def report(self, part: Part) -> None:
        crash = read_snapshot(self.db, part.key)
        if crash.submission is None:
            raise DemoFailed("the store holds no submission for the request: the child died before accepting it")
        print_stored(crash)
        self.life_two(part)
        final = read_snapshot(self.db, part.key)
        assert final.submission is not None
        recovery = print_recovery(self.work, crash, final)
        answer = final.answer()
        print("  Final answer:")
        for line in (answer.text if answer else "(none)").splitlines():
            print(textwrap.fill(line, width=100, initial_indent="    ", subsequent_indent="      "))
        sub = final.submission
        why = f" (reason {sub.reason}: {sub.detail})" if sub.reason else ""
        print(f"  submission #{sub.id}: {sub.status.value}{why}")
        found = problems(part, self.work, crash, final, recovery)
        if found:
            raise DemoFailed(f"{part.title.split(':')[0]}: " + "; ".join(found))
