"""Environments: where tools touch the world.

``LocalEnv(root)`` confines *file access* to ``root``: a path that resolves
outside it (``..``, an absolute path elsewhere, a symlink out) is refused with
:class:`EnvError`, which the coding tools turn into an error result the model
sees. Paths are relative to a working directory ``cwd`` (a conversation's, by
default ``root``), which must itself be inside ``root``.

Commands are NOT confined: ``run`` starts ``/bin/sh -c COMMAND`` as the user
running the agent, in ``cwd``, and the command can touch anything that user
can. What ``run`` does guarantee is about processes:

- each command runs in its own session and process group, and the whole
  group is killed (SIGKILL) on timeout, on Trio cancellation, and once the
  main process exits (so ``sleep 100 &`` neither keeps running nor holds the
  output pipe open);
- *record before run*: the process is spawned behind a handshake
  (``read -r go`` on a pipe). ``on_start(pid)`` is awaited first - the caller
  durably records :func:`describe_process` - and only then is ``go`` written.
  If the parent dies before that, the read sees end-of-file and the command
  never runs. If it dies after, the record names the group, and
  :func:`kill_recorded_process` (called when the store is opened again) kills
  what is left, refusing anything it cannot prove is the same group.

``run(..., on_output=fn)`` streams the combined stdout/stderr to ``fn`` as it
arrives (decoded incrementally, a split UTF-8 character kept for the next
chunk); the whole output is still returned at the end.

*Spill*: a tool result over its output limits is cut, and the full output is
written to ``spill_directory`` (``<root>/.pidurable/outputs``, one file per
call, ``<store>-<task>.txt``), at most ``spill_cap_bytes`` per store (256 MB
by default; the oldest files go first). An env without a ``spill_directory``
keeps no full output (the result then has no ``full_output`` diagnostic).
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from pidurable.core.model import TOOL, Task

from .limits import DEFAULT_SPILL_CAP_BYTES

log = logging.getLogger("pidurable")

#: The handshake: wait for "go" on stdin, then become the command (``$0``).
#: On end-of-file (the parent died before recording the process) nothing runs.
HANDSHAKE = 'read -r go && [ "$go" = go ] && exec /bin/sh -c "$0"'

#: After the main process exits and its group is killed, how long the output
#: pipe may stay open (a child that left the group by calling setsid).
DRAIN_GRACE = 2.0


class EnvError(Exception):
    """A tool asked the environment for something it refuses (readable)."""


@attrs.frozen(kw_only=True)
class CommandResult:
    exit_code: int | None
    output: str
    timed_out: bool = False


class LocalEnv:
    def __init__(self, root: str | os.PathLike[str] = ".", *, spill_cap_bytes: int = DEFAULT_SPILL_CAP_BYTES) -> None:
        self.root = Path(root).resolve()
        if isinstance(spill_cap_bytes, bool) or not isinstance(spill_cap_bytes, int) or spill_cap_bytes < 0:
            raise ValueError(f"spill_cap_bytes must be a non-negative int, not {spill_cap_bytes!r}")
        #: The full outputs of truncated tool results kept per store (bytes).
        self.spill_cap_bytes = spill_cap_bytes

    @property
    def spill_directory(self) -> Path:
        """Where the full outputs of truncated tool results go."""
        return self.root / ".pidurable" / "outputs"

    def _inside(self, p: Path) -> bool:
        return p == self.root or self.root in p.parents

    def workdir(self, cwd: str | None = None) -> Path:
        """The directory ``cwd`` names (relative to ``root``; None = ``root``),
        refused unless it is inside ``root``."""
        if cwd is None:
            return self.root
        if not isinstance(cwd, str) or not cwd:
            raise EnvError("the working directory must be a non-empty string")
        p = (self.root / cwd).resolve()
        if not self._inside(p):
            raise EnvError(f"Working directory {cwd} is outside the environment root {self.root}")
        return p

    def resolve(self, path: str, cwd: str | None = None) -> Path:
        if not isinstance(path, str) or not path:
            raise EnvError("path must be a non-empty string")
        p = (self.workdir(cwd) / path).resolve()
        if not self._inside(p):
            raise EnvError(f"Path {path} is outside the working directory {self.root}")
        return p

    def read_text(self, path: str, cwd: str | None = None) -> str:
        p = self.resolve(path, cwd)
        if not p.is_file():
            raise EnvError(f"File not found: {path}")
        return p.read_text(encoding="utf-8", errors="replace")

    def write_text(self, path: str, content: str, cwd: str | None = None) -> int:
        p = self.resolve(path, cwd)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        p.write_bytes(data)
        return len(data)

    async def run(
        self,
        command: str,
        timeout: float = 30.0,
        *,
        cwd: str | None = None,
        on_start: Callable[[int], Awaitable[None]] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run ``/bin/sh -c command`` in ``cwd`` in a new process group.

        ``await on_start(pid)`` runs before the command may start (see the
        module docstring); ``timeout`` counts from then. ``on_output(text)``
        hears the output as it arrives. The group is killed on timeout, on
        cancellation and after the main process exits.
        """
        workdir = self.workdir(cwd)
        if not workdir.is_dir():
            raise EnvError(f"Working directory {workdir} does not exist")
        proc = await trio.lowlevel.open_process(
            ["/bin/sh", "-c", HANDSHAKE, command],
            cwd=str(workdir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        chunks: list[bytes] = []
        try:
            if on_start is not None:
                await on_start(proc.pid)
            async with trio.open_nursery() as nursery:
                drained = trio.Event()

                async def drain() -> None:
                    assert proc.stdout is not None
                    decoder = codecs.getincrementaldecoder("utf-8")("replace")
                    async for chunk in proc.stdout:
                        chunks.append(bytes(chunk))
                        if on_output is not None:
                            text = decoder.decode(chunk)
                            if text:
                                on_output(text)
                    drained.set()

                nursery.start_soon(drain)
                with trio.move_on_after(timeout) as scope:
                    try:
                        await proc.stdin.send_all(b"go\n")
                        await proc.stdin.aclose()
                    except trio.BrokenResourceError:
                        pass  # it already died; wait() below reports how
                    await proc.wait()
                kill_group(proc.pid)  # background children die; the pipe closes
                with trio.move_on_after(DRAIN_GRACE):
                    await drained.wait()
                nursery.cancel_scope.cancel()
        finally:
            kill_group(proc.pid)  # cancelled or failed: nothing of it keeps running
            with trio.CancelScope(shield=True):
                await proc.wait()
                await proc.stdin.aclose()
                await proc.stdout.aclose()
        output = b"".join(chunks).decode("utf-8", "replace")
        if scope.cancelled_caught:
            return CommandResult(exit_code=None, output=output, timed_out=True)
        return CommandResult(exit_code=proc.returncode, output=output)


def kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid``; a group that is gone is not an error."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        log.warning("cannot kill process group %d: permission denied", pgid)


# --- records of running commands -------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (after the ``(comm)``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    _, sep, rest = raw.rpartition(")")
    return rest.split() if sep else None


def _start_time(fields: list[str]) -> int | None:
    try:
        return int(fields[19])  # field 22: starttime, in clock ticks since boot
    except (IndexError, ValueError):
        return None


def _pgrp(fields: list[str]) -> int | None:
    try:
        return int(fields[2])  # field 5
    except (IndexError, ValueError):
        return None


def describe_process(pid: int) -> dict[str, Any]:
    """What identifies a command's process group across restarts: its pid
    and pgid, the host, and the leader's start time (None where ``/proc`` is
    not available: such a record is never acted on)."""
    fields = _stat(pid)
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = pid  # it runs in a new session: the leader's pid is the group's id
    return {
        "pid": pid,
        "pgid": pgid,
        "host": socket.gethostname(),
        "start": _start_time(fields) if fields is not None else None,
    }


def _alive(fields: list[str]) -> bool:
    return bool(fields) and fields[0] not in ("Z", "X")  # field 3: state; a zombie is done


def _members(pgid: int) -> list[tuple[int, int | None]]:
    """(pid, start time) of every living process in group ``pgid``."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields is not None and _pgrp(fields) == pgid and _alive(fields):
            found.append((int(name), _start_time(fields)))
    return found


def kill_recorded_process(record: Mapping[str, Any]) -> bool:
    """Kill the process group a :func:`describe_process` record names, if it
    provably still is that group; returns whether it killed.

    Proof: same host; the group still has living members; and either the
    leader's pid still exists (alive or a zombie) with the recorded start time,
    leading the group, or the leader is gone and no member started before it
    did (a pgid cannot be reused while its group has members). A reused pid is
    never killed. Problems are logged to the ``pidurable`` logger.
    """
    try:
        pid, pgid, host, start = int(record["pid"]), int(record["pgid"]), record["host"], record["start"]
    except (KeyError, TypeError, ValueError) as e:
        log.warning("ignoring a malformed process record %r: %s", record, e)
        return False
    if host != socket.gethostname():
        log.info("process record %r is from another host; not killing", record)
        return False
    if start is None or pgid <= 1:
        log.warning("process record %r cannot be verified (no start time); not killing", record)
        return False
    fields = _stat(pid)
    if fields is not None and (_start_time(fields) != start or _pgrp(fields) != pgid):
        return False  # the pid was reused by an unrelated process (so our group is gone)
    members = _members(pgid)
    if not members:
        return False  # nothing left (a zombie leader is done)
    if fields is None and any(s is None or s < start for _, s in members):
        return False  # the leader is gone: members must have started after it
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False  # it ended meanwhile
    except OSError as e:
        log.warning("cannot kill leftover process group %d of record %r: %s", pgid, record, e)
        return False
    log.info("killed leftover process group %d (record %r)", pgid, record)
    return True


def kill_leftover_processes(tasks: Iterable[Task]) -> None:
    """A tool command a dead harness left running (its process group is
    recorded in the tool's ``execute`` checkpoint before the command starts)
    is killed before recovery decides about the call."""
    for task in tasks:
        process = task.checkpoint.get("process") if task.kind == TOOL else None
        if isinstance(process, dict) and kill_recorded_process(process):
            log.warning("killed the process group a dead harness left running for tool task %s", task.id)
