"""What every command shares: the error that carries an exit status, and
formatting of tasks and long texts.

Errors are one readable line on stderr and a non-zero exit status: 2 for bad
usage, a missing store, a file that is not a pidurable store, or input the
library refuses; 1 otherwise (a locked or damaged store, a failed run).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeAlias

from pidurable.core.model import Task, TaskStatus

from ..storage.base import NotAStore, StorageError, StoreMissing

EXIT_FAILURE = 1
EXIT_USAGE = 2

#: What ``add_subparsers`` returns; each command module adds its parser to it.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A failure with a readable message and an exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def storage_exit_status(e: StorageError) -> int:
    """A missing store or a file that is not one is a bad argument (2); any
    other storage failure (locked, damaged, disk full...) is 1."""
    return EXIT_USAGE if isinstance(e, (StoreMissing, NotAStore)) else EXIT_FAILURE


def short(text: str, limit: int) -> str:
    """``text`` on one line (runs of whitespace become one space), cut to
    ``limit`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_task(t: Task) -> str:
    """One line: ``#12  pi.tool edit  running  phase=execute  replay=unsafe``."""
    kind = t.kind
    if t.kind == "pi.tool" and "name" in t.input:
        kind = f"pi.tool {t.input['name']}"
    parts = [f"#{t.id}", kind, t.status.value]
    if t.status is TaskStatus.TERMINAL and t.outcome is not None:
        detail = t.outcome.status.value
        err = (t.outcome.error or {}).get("message")
        if err:
            detail += f": {short(err, 60)}"
        parts[-1] += f" ({detail})"
    if t.phase is not None:
        parts.append(f"phase={t.phase}")
    if t.kind == "pi.tool" and t.phase in ("execute", "reconcile") and "replay" in t.checkpoint:
        parts.append(f"replay={t.checkpoint['replay']}")
    if t.on:
        parts.append("on=[" + ", ".join(f"#{i}" for i in t.on) + "]")
    if t.background:
        parts.append("background")
    if t.abort_requested:
        parts.append("abort-requested")
    return "  ".join(parts)


def task_tree(tasks: Iterable[Task], indent: str = "  ", extra: Callable[[Task], list[str]] | None = None) -> list[str]:
    """Tasks as a tree: owner -> children, in id order. A task whose owner is
    not among ``tasks`` is a root (its owner is named). ``extra(task)`` gives
    lines shown under a task's line (indented with the tree)."""
    ordered = sorted(tasks, key=lambda t: t.id)
    ids = {t.id for t in ordered}
    children: dict[int, list[Task]] = {}
    roots: list[Task] = []
    for t in ordered:
        if t.owner is not None and t.owner in ids:
            children.setdefault(t.owner, []).append(t)
        else:
            roots.append(t)
    out: list[str] = []

    def walk(t: Task, prefix: str, branch: str, last: bool) -> None:
        line = describe_task(t)
        if t.owner is not None and t.owner not in ids:
            line += f"  (owner #{t.owner})"
        out.append(indent + prefix + branch + line)
        kids = children.get(t.id, [])
        sub = prefix + ("" if not branch else ("   " if last else "│  "))
        if extra is not None:
            out.extend(indent + sub + ("│    " if kids else "     ") + x for x in extra(t))
        for i, k in enumerate(kids):
            walk(k, sub, "└─ " if i == len(kids) - 1 else "├─ ", i == len(kids) - 1)

    for r in roots:
        walk(r, "", "", True)
    return out


def existing_store(db: str) -> Path:
    """``--db`` of a command that never creates a store: it must exist."""
    path = Path(db)
    if not path.exists():
        raise CliError(f"store {path} does not exist", EXIT_USAGE)
    return path
