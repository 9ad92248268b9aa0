"""Host waits: one primitive, re-checked after every commit.

Theory of operation
-------------------
Every host call that waits - for a ``Respond`` to its request, for a record
to settle, for a conversation to go idle - waits through :class:`Waits`.
``until(check)`` returns ``check()`` once it is not None; it is re-checked
each time the loop calls :meth:`Waits.wake` (after every batch of commits and
whenever an invocation leaves) and raises ``HarnessClosed`` once the harness
closed. ``record()`` waits for one stored record: it reads storage once and
then follows the versions the commits write (``watched``), so a waiter never
re-reads storage per commit; it is woken only when a commit writes that
record (or at the close), not by every commit and invocation leaving (a
waiter for a run's submission would otherwise wake several times per step
to find nothing changed). Tickets pair a host request with the
``Respond`` that answers it (an act: never before its commit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TypeVar

import attrs
import trio

from pidurable.core.effects import PutSubmission, PutTask, Respond, Write
from pidurable.core.model import Submission, Task

from .errors import HarnessClosed
from .storage.base import as_stored

T = TypeVar("T")
R = TypeVar("R", Submission, Task)

#: ``isinstance(w, PutTask)`` (...) and a write's record id, each one C call (for filter and map)
_IS_TASK, _IS_SUBMISSION = PutTask.__instancecheck__, PutSubmission.__instancecheck__
_TASK_ID, _SUBMISSION_ID = attrgetter("task.id"), attrgetter("submission.id")


@attrs.define
class Ticket:
    """A host request waiting for its ``Respond``."""

    done: trio.Event = attrs.field(factory=trio.Event)
    response: Respond | None = None

    async def wait(self) -> Respond:
        await self.done.wait()
        assert self.response is not None
        return self.response


class Waits:
    def __init__(self) -> None:
        self.closed = False
        self._changed = trio.Event()
        #: ``_changed`` was handed to a waiter (``until``, ``next_commit``)
        #: since it was made: only then does a wake set it and make the next
        #: one (a wake no one waits for - most of them - costs nothing)
        self._taken = False
        #: Records host calls wait for, by id: the newest committed version.
        self.watched: dict[int, Submission | Task | None] = {}
        self._watchers: dict[int, int] = {}
        #: per watched record, set when a commit writes it (``committed``) or at the close
        self._written: dict[int, trio.Event] = {}
        self._tickets: dict[int, Ticket] = {}
        self._next_ticket = 1

    def close(self) -> None:
        """Every waiter wakes and raises ``HarnessClosed``."""
        self.closed = True
        self.wake()
        for written in self._written.values():
            written.set()
        self._written.clear()

    def wake(self) -> None:
        if self._taken:
            self._taken = False
            self._changed.set()
            self._changed = trio.Event()

    # --- tickets ------------------------------------------------------------------
    def ticket(self) -> tuple[int, Ticket]:
        if self.closed:
            raise HarnessClosed("Harness is closed")
        number = self._next_ticket
        self._next_ticket += 1
        t = self._tickets[number] = Ticket()
        return number, t

    def answer(self, effect: Respond) -> None:
        t = self._tickets.pop(effect.ticket, None)
        if t is not None:
            t.response = effect
            t.done.set()

    # --- the one primitive ------------------------------------------------------------
    async def until(self, check: Callable[[], T | None]) -> T:
        """``check()`` once it is not None; raises ``HarnessClosed`` once closed."""
        while True:
            changed = self._changed
            self._taken = True
            result = check()
            if result is not None:
                return result
            if self.closed:
                raise HarnessClosed("Harness is closed")
            await changed.wait()

    async def record(self, kind: type[R], record_id: int, load: Callable[[], R | None], done: Callable[[R], bool]) -> R:
        """The committed ``kind`` record ``record_id`` once it satisfies ``done``."""
        record = load()
        if record is not None and done(record):
            return record
        self.watched.setdefault(record_id, record)
        self._watchers[record_id] = self._watchers.get(record_id, 0) + 1

        try:
            while True:
                now = self.watched.get(record_id)
                if isinstance(now, kind) and done(now):
                    return now
                if self.closed:
                    raise HarnessClosed("Harness is closed")
                written = self._written.get(record_id)
                if written is None:
                    written = self._written[record_id] = trio.Event()
                await written.wait()
        finally:
            self._watchers[record_id] -= 1
            if not self._watchers[record_id]:
                del self._watchers[record_id]
                self.watched.pop(record_id, None)
                self._written.pop(record_id, None)  # its last waiter left (a cancelled wait, too)

    async def next_commit(self) -> None:
        """Wait for the next wake (a commit, an invocation leaving, the close)."""
        changed = self._changed
        self._taken = True
        await self.until(lambda: True if changed.is_set() else None)

    def committed(self, writes: Sequence[Write]) -> None:
        """Follow the watched records a commit wrote."""
        watched = self.watched.keys()
        if not watched or (
            watched.isdisjoint(map(_TASK_ID, filter(_IS_TASK, writes)))
            and watched.isdisjoint(map(_SUBMISSION_ID, filter(_IS_SUBMISSION, writes)))
        ):
            return  # (the usual commit writes none: found in C, issue 11 item 2)
        for w in writes:
            if isinstance(w, PutSubmission) and w.submission.id in self.watched:
                self.watched[w.submission.id] = w.submission
                self._tell(w.submission.id)
            elif isinstance(w, PutTask) and w.task.id in self.watched:
                # as the store reads it back (a terminal task without its checkpoint)
                self.watched[w.task.id] = as_stored(w.task)
                self._tell(w.task.id)

    def _tell(self, record_id: int) -> None:
        """Wake the waiters of a record a commit wrote."""
        written = self._written.pop(record_id, None)
        if written is not None:
            written.set()
