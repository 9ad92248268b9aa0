"""What host code of a task sees: ``TaskRuntime`` (phases) and ``HookContext``.

Every durable operation here is an event to the reducer, answered after its
commit: ``commit`` (the task's next state), ``create_task`` (an owned child
task), ``memo`` (first writer wins). Values must be strict JSON; anything else
is refused here with a readable error (the phase then faults) instead of
reaching the store. Both contexts reach the shell only through a narrow port
(``interpreters/ports.py``): a ``Requester`` for memos, a ``HostPort`` for
phases - never the loop or its state.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pidurable.core.bounds import shown
from pidurable.core.effects import Refused
from pidurable.core.events import MemoRequested, TaskCommitRequested, TaskCreationRequested
from pidurable.core.model import ConversationId, Outcome, OutcomeStatus, Task, TaskId

from .documents import Staging
from .host_input import check_id_number, check_json, check_text
from .errors import InvalidInput
from .interpreters.ports import HostPort, Requester

if TYPE_CHECKING:
    from .harness import Harness

_MISSING: Any = object()


class TaskCommitError(Exception):
    """``runtime.commit`` was refused (the phase then faults with this text)."""


def _outcome(value: Any) -> Outcome:
    if isinstance(value, Outcome):
        return value
    if isinstance(value, dict) and "status" in value:
        try:
            status = OutcomeStatus(value["status"])
        except ValueError:
            raise InvalidInput(f"unknown outcome status {shown(value['status'])}") from None
        return Outcome(status=status, result=value.get("result"), error=value.get("error"))
    raise InvalidInput("outcome must be an Outcome or a dict with a 'status'")


async def memo(rt: Requester, task_id: int, name: str, candidate: Any = _MISSING) -> Any:
    """Read the memo ``name`` of a task, or set it if absent (first writer
    wins, survives restarts, dropped when the task ends)."""
    check_text(name, "a memo name", empty=False)
    # ``memo(name)`` and ``memo(name, None)`` only read (API.md): storing None
    # would make the memo unusable for the later real value.
    write = candidate is not _MISSING and candidate is not None
    if write:
        check_json(candidate, f"memo {name!r}")
    resp = await rt.request(
        lambda ticket, now: MemoRequested(
            now=now,
            ticket=ticket,
            task_id=TaskId(task_id),
            name=name,
            candidate=candidate if write else None,
            write=write,
        )
    )
    if isinstance(resp.reply, Refused):
        raise TaskCommitError(resp.reply.message)
    return resp.reply.data


@attrs.frozen
class HookContext:
    """Given to hooks: who asks, and the asking task's memos."""

    task_id: int
    conversation_id: int
    harness: Harness
    _rt: Requester = attrs.field(repr=False)

    async def memo(self, name: str, candidate: Any = _MISSING) -> Any:
        return await memo(self._rt, self.task_id, name, candidate)


class TaskRuntime:
    """The durable operations a custom task phase (or abort handler) may use."""

    def __init__(self, port: HostPort, task: Task, mode: str) -> None:
        self._rt = port
        self.task_id: int = task.id
        self.conversation_id: ConversationId = task.conversation_id
        self.mode = mode
        self.harness: Harness = port.harness
        self._documents = Staging(port.documents, task_id=task.id, conversation_id=task.conversation_id)

    def now(self) -> int:
        """The harness clock, in milliseconds."""
        return int(self._rt.clock())

    async def commit(
        self,
        status: str = "running",
        *,
        checkpoint: dict[str, Any] | None = None,
        on: tuple[int, ...] | list[int] = (),
        policy: str = "allSettled",
        outcome: Any = None,
    ) -> None:
        """Store the task's next state (one commit): ``running`` with a new
        ``checkpoint``, ``waiting`` on task ids, or ``terminal`` with an
        ``outcome`` (``{"status": "completed"|"failed"|"aborted", "result":
        ..., "error": ...}``)."""
        if not isinstance(status, str) or status not in ("running", "waiting", "terminal"):
            raise InvalidInput(f"commit status must be running, waiting or terminal, not {shown(status)}")
        if not isinstance(policy, str) or policy not in ("allSettled", "failFast"):
            raise InvalidInput(f"commit policy must be 'allSettled' or 'failFast', not {shown(policy)}")
        if not isinstance(on, (tuple, list)):
            raise InvalidInput(f"commit on= takes a tuple or list of task ids, not {type(on).__name__}")
        for t in on:
            check_id_number(t, "commit on= task id")
        if status in ("running", "waiting"):
            if not isinstance(checkpoint, dict):
                raise InvalidInput(f"commit({shown(status)}) needs a checkpoint dict with a 'phase'")
            check_json(checkpoint, "checkpoint")
        out = None
        if status == "terminal":
            out = _outcome(outcome)
            check_json(out.result, "outcome result")
            check_json(out.error, "outcome error")
        ids = tuple(TaskId(int(t)) for t in on)
        for tid in ids:
            if self._rt.tasks.task(tid) is None:
                raise TaskCommitError(f"Task {tid} does not exist")

        def make(ticket: int, now: int) -> TaskCommitRequested:
            self._documents.hand_over(("ticket", ticket))  # committed with this state, or not at all
            return TaskCommitRequested(
                now=now,
                ticket=ticket,
                task_id=TaskId(self.task_id),
                status=status,
                checkpoint=checkpoint,
                on=ids,
                policy=policy,
                outcome=out,
                mode=self.mode,
            )

        resp = await self._rt.request(make)
        if isinstance(resp.reply, Refused):
            raise TaskCommitError(resp.reply.message)

    async def update_document(self, doc: Any, fn: Any) -> Any:
        """Stage ``fn(old) -> new`` (or a new value) for a document (its
        definition or kind): the task's conversation's, or this task's for a
        task-scoped kind. Checked now (``InvalidInput``), committed with the
        phase's next ``commit`` (or returned ``Progress``); returns the new
        value."""
        return await self._documents.update(doc, fn)

    async def create_task(self, kind: str, input: dict[str, Any] | None = None) -> int:
        """Create a custom task owned by this one (in its conversation)."""
        return await create_task(self._rt, kind, input or {}, self.conversation_id, owner=self.task_id)

    async def memo(self, name: str, candidate: Any = _MISSING) -> Any:
        return await memo(self._rt.loop, self.task_id, name, candidate)

    async def sleep(self, until: int) -> None:
        """Wait until the harness clock reaches ``until`` (ms). Store the
        deadline in a checkpoint first: after a restart only the remaining
        time is waited."""
        # re-check the harness clock after each timer: it need not be trio's
        while (remaining := (until - self.now()) / 1000) > 0 and math.isfinite(remaining):
            await trio.sleep(remaining)


async def create_task(
    rt: HostPort,
    kind: str,
    input: dict[str, Any],
    conversation_id: int,
    *,
    owner: int | None = None,
    background: bool = False,
) -> int:
    definition = rt.registry.task(kind)
    if definition is None:
        raise InvalidInput(f"No task definition {kind!r} is installed")
    if type(background) is not bool:
        raise InvalidInput(f"background must be True or False, not {shown(background)}")
    check_json(input, "task input")
    checkpoint = definition.initial(dict(input))
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("phase"), str):
        raise InvalidInput(f"{kind}.initial() must return a dict with a string 'phase'")
    if checkpoint["phase"] not in definition.phases:
        raise InvalidInput(f"{kind}.initial() returned phase {checkpoint['phase']!r}, which it does not define")
    check_json(checkpoint, "initial checkpoint")
    resp = await rt.request(
        lambda ticket, now: TaskCreationRequested(
            now=now,
            ticket=ticket,
            kind=kind,
            conversation_id=ConversationId(conversation_id),
            input=dict(input),
            checkpoint=checkpoint,
            version=definition.version,
            owner=None if owner is None else TaskId(owner),
            background=background,
        )
    )
    if isinstance(resp.reply, Refused):
        raise InvalidInput(resp.reply.message)
    assert resp.reply.value is not None
    return resp.reply.value
