"""How a benchmark script measures in a fresh child process: the child
prints its result as one line, ``RESULT`` and JSON (:func:`report`); the
parent runs it and finds that line (:func:`run`). Standard library only: a
peer's child (bench/steps.py) runs in the peers' venv, without pidurable."""

from __future__ import annotations

import json
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
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return dict(json.loads(line[len(RESULT) :])), ""
    return None, "\n".join(proc.stderr.strip().splitlines()[-why_lines:]) or f"exit {proc.returncode}"
