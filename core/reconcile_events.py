"""The verdict of a tool's ``reconcile`` and the event that carries it.

Kept beside ``events.py`` (which is at its size limit and lists
``ToolReconciled`` in the ``Event`` union); decisions live in reconcile.py,
the effect that asks for it (``RunReconcile``) in effects.py.

An unsafe call found at ``execute`` after a restart may have run. A tool that
can *find out* (``define_tool(..., reconcile=fn)``) is asked: the shell runs
``fn(call, args)`` with the interrupted execution's context and reports one
:class:`ToolReconciled` with its :class:`Verdict`.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from .model import Diagnostic, Json, TaskId, Usage


class Verdict(enum.StrEnum):
    """What ``reconcile`` found (also the result entry's ``data["reconciled"]``)."""

    #: The effect happened: the call settles with the result reconcile gave.
    DONE = "done"
    #: The effect provably did not happen: ``execute`` runs again.
    NOT_DONE = "not_done"
    #: It cannot tell (or reconcile raised): the interrupted result, plus a note.
    UNKNOWN = "unknown"


@attrs.frozen(kw_only=True)
class ToolReconciled:
    """The tool's ``reconcile`` answered (``RunReconcile``).

    ``DONE`` carries a whole result, bounded by the tool's output limits
    exactly as a ``ToolFinished`` (``text``, ``is_error``, ``usage``,
    ``truncated``, ``diagnostics``); ``UNKNOWN`` carries the ``note`` for the
    model (a raising reconcile: its error); ``NOT_DONE`` carries nothing."""

    TAG: ClassVar[str] = "tool_reconciled"
    now: int
    task_id: TaskId
    verdict: Verdict
    text: str = ""
    is_error: bool = False
    usage: Usage | None = None
    truncated: dict[str, Json] | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    note: str = ""
