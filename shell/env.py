"""Environments: where tools touch the world.

``LocalEnv(root)`` confines file access to ``root``: a path that resolves
outside it (``..``, an absolute path elsewhere, a symlink out) is refused with
:class:`EnvError`, which the coding tools turn into an error result the model
sees. Commands run with ``root`` as their working directory and a timeout.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs
import trio


class EnvError(Exception):
    """A tool asked the environment for something it refuses (readable)."""


@attrs.frozen(kw_only=True)
class CommandResult:
    exit_code: int | None
    output: str
    timed_out: bool = False


class LocalEnv:
    def __init__(self, root: str | os.PathLike[str] = ".") -> None:
        self.root = Path(root).resolve()

    def resolve(self, path: str) -> Path:
        if not isinstance(path, str) or not path:
            raise EnvError("path must be a non-empty string")
        p = (self.root / path).resolve()
        if p != self.root and self.root not in p.parents:
            raise EnvError(f"Path {path} is outside the working directory {self.root}")
        return p

    def read_text(self, path: str) -> str:
        p = self.resolve(path)
        if not p.is_file():
            raise EnvError(f"File not found: {path}")
        return p.read_text(encoding="utf-8", errors="replace")

    def write_text(self, path: str, content: str) -> int:
        p = self.resolve(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        p.write_bytes(data)
        return len(data)

    async def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run a shell command in ``root``; kill it after ``timeout`` seconds."""
        with trio.move_on_after(timeout) as scope:
            proc = await trio.run_process(
                ["/bin/sh", "-c", command],
                cwd=str(self.root),
                capture_stdout=True,
                stderr=subprocess.STDOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            return CommandResult(exit_code=proc.returncode, output=proc.stdout.decode("utf-8", "replace"))
        assert scope.cancelled_caught
        return CommandResult(exit_code=None, output="", timed_out=True)
