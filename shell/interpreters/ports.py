"""The narrow typed ports interpreters and host contexts reach the shell by.

An interpreter never sees the loop, the facade or ``State``: it gets exactly
what its effects need, typed here. A long effect reports back only through a
:class:`Reporter` (``send`` an event, read the ``clock``); host-like calls from
inside an invocation (a tool recording its process, a phase committing, a memo)
go through a :class:`Requester` (``request`` an event carrying a ticket and wait
for the core's ``Respond``, which comes after the commit it answers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from pidurable.core.effects import Respond
from pidurable.core.events import Event
from pidurable.core.model import Entry, Task, TaskId

if TYPE_CHECKING:  # the facade is passed through, opaque; never imported at run time
    from ..documents import DocumentPort
    from ..harness import Harness
    from ..registry import Registry

#: Builds a host event from ``(ticket, now)``.
MakeEvent = Callable[[int, int], Event]


class Reporter(Protocol):
    """How an invocation reports back: by sending an event (never by a return
    value, never by touching state)."""

    def send(self, event: Event) -> None: ...

    def clock(self) -> int: ...

    def background(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` beside the invocation (a throttled progress flush): it
        must end by itself; the harness cancels it at close."""
        ...


class Requester(Reporter, Protocol):
    """A reporter that may also ask the core and wait for its durable answer."""

    async def request(self, make: MakeEvent) -> Respond: ...

    def send_checked(self, event: Event) -> None:
        """``send`` of an event whose every value the edge has already made
        valid (a tool's result after ``edge.tool_result``): not cleaned again."""
        ...


class EntryReads(Protocol):
    """The storage read a tool preparation needs (an assistant entry)."""

    def entry(self, entry_id: int) -> Entry | None: ...


class TaskReads(Protocol):
    """The storage read a task phase needs (does a task exist)."""

    def task(self, task_id: TaskId) -> Task | None: ...


@attrs.frozen(kw_only=True)
class HostPort:
    """What host code running inside an invocation (a custom task phase, a
    hook, ``create_task``) reaches: requests to the core, the clock, committed
    task records, the registry, and the facade it is handed (opaque here)."""

    loop: Requester
    tasks: TaskReads
    registry: Registry
    harness: Harness
    #: where document updates are staged (``documents.py``)
    documents: DocumentPort | None = None

    async def request(self, make: MakeEvent) -> Respond:
        return await self.loop.request(make)

    def clock(self) -> int:
        return self.loop.clock()


__all__ = ["EntryReads", "HostPort", "MakeEvent", "Reporter", "Requester", "TaskReads"]
