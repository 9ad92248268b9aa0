"""How a benchmark script measures in a fresh child process: the child
prints its result as one line, ``RESULT`` and JSON (:func:`report`); the
parent runs it and finds that line (:func:`run`). Standard library only: a
peer's child (bench/steps.py) runs in the peers' venv, without pidurable."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from typing import Any

#: What starts the line a child prints its result on.
RESULT = "CHILD_RESULT "


def report(out: dict[str, Any]) -> None:
    """The child's result, for :func:`run` to find."""
    print(RESULT + json.dumps(out), flush=True)


def run(cmd: Sequence[str], timeout: float, why_lines: int = 1) -> tuple[dict[str, Any] | None, str]:
    """Run a child; (its result, "") or (None, why): a timeout, or the last
    ``why_lines`` lines of its stderr (its exit status if it wrote none)."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    return result_of(proc.stdout, proc.stderr, proc.returncode, why_lines)


def result_of(stdout: str, stderr: str, code: int | None, why_lines: int) -> tuple[dict[str, Any] | None, str]:
    """A finished child's result line, or why there is none (as :func:`run` gives it)."""
    for line in stdout.splitlines():
        if line.startswith(RESULT):
            return dict(json.loads(line[len(RESULT) :])), ""
    return None, "\n".join(stderr.strip().splitlines()[-why_lines:]) or f"exit {code}"


def run_pair(
    a: Sequence[str], b: Sequence[str], timeout: float, cores: tuple[int, int] = (0, 1)
) -> tuple[tuple[dict[str, Any] | None, str], tuple[dict[str, Any] | None, str]]:
    """Run two children at once, each pinned to its own core (``cores``,
    Linux ``sched_setaffinity``): both see the same moment of a shared
    machine, so the ratio of their results moves far less than either does.
    Each result as :func:`run` gives it."""
    procs = []
    for cmd, core in ((a, cores[0]), (b, cores[1])):
        procs.append(
            subprocess.Popen(
                list(cmd),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),  # type: ignore[misc]
            )
        )
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.communicate()
            return (None, f"timed out after {timeout:.0f} s"), (None, f"timed out after {timeout:.0f} s")
        out.append(result_of(stdout, stderr, proc.returncode, 1))
    return out[0], out[1]
