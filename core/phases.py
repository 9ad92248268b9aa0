"""Phase machines: the tables that drive the built-in task kinds.

Theory of operation
-------------------
A built-in kind (``pi.generation``, ``pi.tool``) is a :class:`Machine`: a
table ``(phase, input) -> Row(handler, next)`` and a parser from the stored
checkpoint dict to the kind's typed records (checkpoints.py). Every decision
about such a task goes through :meth:`Machine.run`:

1. the stored checkpoint is parsed once into its typed record;
2. the input (reserve, abort, or an event the caller has classified) selects
   the row; a missing row is a bug and raises ``CoreInvariantError``;
3. the row's handler runs with a :class:`Turn`; it decides, and stores the
   task through :meth:`Turn.store`, which writes the record it is given as the
   checkpoint of the row's ``next`` phase (a record of any other phase is
   refused): handlers never write a phase;
4. afterwards the task must be where the row says: at ``next``, or, for a
   row whose ``next`` is ``END``, no longer at a phase (terminal, or held
   ``completing``).

Events from the shell can be stale (their invocation ended: the task moved
on, or was interrupted). Callers ask :meth:`Machine.running` for the task and
:meth:`Machine.accepts` for the row; an event whose row is absent at the
task's current phase is stale and ignored, never guessed at.

Each row run is named in ``tx.rules`` as ``<kind>:<phase>,<input> #<task>``
(``Step.rules``: what ``replay --explain`` shows; no decision reads it).

Must not touch: status tables (lifecycle.py), settlement rules.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .checkpoints import Checkpoint, to_dict
from .draft import Tx
from .lifecycle import TaskMove, move_task
from .model import CoreInvariantError, Task, TaskId, TaskStatus
from .settlement import fault

#: The ``next`` of a row that ends the task (it settles, or is held).
END = None

_new = object.__new__

# Members read once: every row run checks them (a member read through its
# enum class goes through EnumType's __getattr__ hook: ~1,000 machine
# instructions, where a global is ~20).
_COMPLETING, _RUNNING = TaskStatus.COMPLETING, TaskStatus.RUNNING


class Turn:
    """One row being applied to one task (local to one ``Machine.run``)."""

    __slots__ = ("tx", "task", "checkpoint", "next")  # (no instance dict: one per row run, issue 11 item 2)

    def __init__(self, tx: Tx, task: Task, checkpoint: Checkpoint, next_phase: enum.StrEnum | None) -> None:
        self.tx = tx
        self.task = task
        self.checkpoint = checkpoint
        self.next = next_phase

    def store(self, move: TaskMove, checkpoint: Checkpoint | None = None, *, durable: bool = True, **changes: Any) -> Task:
        """Move the task (``move`` checked by lifecycle.py) to the row's next
        phase, with ``checkpoint`` (the next phase's record) or, when the row
        stays at its phase, the stored checkpoint unchanged."""
        if self.next is END:
            raise CoreInvariantError(f"task {self.task.id}: a row that ends the task stores no phase")
        if checkpoint is not None:
            if checkpoint.PHASE != self.next:
                raise CoreInvariantError(
                    f"task {self.task.id}: row leads to {self.next}, not {checkpoint.PHASE}"
                )
            changes["checkpoint"] = to_dict(checkpoint)
            self.checkpoint = checkpoint
        elif self.checkpoint.PHASE != self.next:
            raise CoreInvariantError(f"task {self.task.id}: row leads to {self.next}; a new checkpoint is needed")
        self.task = move_task(self.task, move, changes)
        self.tx.put_task(self.task, durable=durable)
        return self.task

    def keep(self, checkpoint: Checkpoint) -> Task:
        """Store the task as it was built: born already moved to the row's
        next phase with ``checkpoint`` (what ``store`` would have made of it;
        one record built where two were, issue 11 item 2)."""
        if checkpoint.PHASE != self.next or self.task.checkpoint.get("phase") != self.next:
            raise CoreInvariantError(f"task {self.task.id}: row leads to {self.next}, not {checkpoint.PHASE}")
        self.checkpoint = checkpoint
        self.tx.put_task(self.task)
        return self.task


#: Turn's slots, as Machine.run sets them one by one (checked here).
_TURN_SLOTS = ("tx", "task", "checkpoint", "next")
if Turn.__slots__ != _TURN_SLOTS:
    raise AssertionError(f"Turn has slots {Turn.__slots__}: Machine.run sets {_TURN_SLOTS}")

Handler = Callable[[Turn, Any], None]

@attrs.frozen(kw_only=True)
class Row:
    """What a (phase, input) pair does: the handler, and the phase it leads to."""

    handler: Handler
    next: enum.StrEnum | None


@attrs.frozen(kw_only=True)
class Machine:
    """The phase table of one built-in task kind."""

    kind: str
    #: The phase enum and the input enum (for totality tests and diagrams).
    phases: type[enum.StrEnum]
    inputs: type[enum.StrEnum]
    rows: Mapping[tuple[enum.StrEnum, enum.StrEnum], Row]
    parse: Callable[[Mapping[str, Any]], Checkpoint | None]
    #: The ``Step.rules`` name of each row run so far, by the row's key,
    #: without its task id (``<kind>:<phase>,<input> #``): formatting two
    #: members costs more than the rest of a run's bookkeeping.
    _names: dict[tuple[enum.StrEnum, enum.StrEnum], str] = attrs.field(init=False, factory=dict, eq=False, repr=False)

    def row(self, phase: enum.StrEnum, move: enum.StrEnum) -> Row:
        """The row for (phase, input); a missing row is a loud bug."""
        row = self.rows.get((phase, move))
        if row is None:
            raise CoreInvariantError(f"{self.kind}: no row for input {move!r} at phase {phase!r}")
        return row

    def accepts(self, checkpoint: Checkpoint, move: enum.StrEnum) -> bool:
        return (checkpoint.PHASE, move) in self.rows

    def running(self, tx: Tx, task_id: TaskId) -> tuple[Task, Checkpoint] | None:
        """The task an event reports on, if it is still running at a known
        phase (else the event is stale)."""
        task = tx.tasks.get(task_id)
        if task is None or task.status is not _RUNNING:
            return None
        checkpoint = self.parse(task.checkpoint)
        return None if checkpoint is None else (task, checkpoint)

    def parsed(self, tx: Tx, task: Task) -> Checkpoint | None:
        """The task's checkpoint as this kind's typed record; a phase the kind
        does not know faults the task (and gives None)."""
        checkpoint = self.parse(task.checkpoint)
        if checkpoint is None:
            fault(tx, task, f"Task {task.id} has unknown phase {task.phase!r}")
        return checkpoint

    def run(self, tx: Tx, task: Task, checkpoint: Checkpoint, move: enum.StrEnum, event: Any = None) -> None:
        """Apply the row (checkpoint.PHASE, move) to ``task``, then check the
        task ended up where the row says."""
        key = (checkpoint.PHASE, move)
        row = self.rows.get(key) or self.row(*key)  # (the second raises: not a row)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"{self.kind}:{key[0]},{move} #"
        tid, next_phase = task.id, row.next
        tx.rules.append(f"{name}{tid}")
        turn = _new(Turn)  # Turn(...) without its __init__'s Python call (issue 11 item 2): each of its __slots__
        turn.tx = tx
        turn.task = task
        turn.checkpoint = checkpoint
        turn.next = next_phase
        row.handler(turn, event)
        after = tx.tasks.get(tid)
        if next_phase is END:
            if after is not None and after.status is not _COMPLETING:
                raise CoreInvariantError(f"task {tid}: row ({checkpoint.PHASE}, {move}) must end it")
        # the stored phase itself (not Task.phase: a property call per run; a
        # phase that is no string differs from every phase as None does)
        elif after is None or after.checkpoint.get("phase") != next_phase:
            raise CoreInvariantError(f"task {tid}: row ({checkpoint.PHASE}, {move}) must lead to {next_phase}")
