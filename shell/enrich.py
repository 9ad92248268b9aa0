"""What the shell adds to a host event before the core steps it.

The core keeps only live work; a few host requests need a settled record it
no longer holds. The reducer looks it up here, right before the step (after
every earlier commit of its batch is durable, so the read sees every earlier
decision), and sets it on the event:

- ``InputSubmitted`` / ``WriteSubmitted`` with a ``request_id``: ``existing``,
  the submission that id already made in that conversation (dedup);
- ``TaskAbortRequested`` for a task the core no longer holds: ``known``,
  its stored record (so the answer is ``terminal``, not ``not_found``);
- ``SubmissionAbortRequested``: ``known``, the stored submission;
- ``ForkRequested``: ``point``, what storage says about the fork point
  (``fork.py``: the entry, its commit, the documents as of it).

Why replay-safe: the ENRICHED event is what is stepped and what is journaled
with the commit it causes, so replaying the journal through the pure core
needs no storage at all and reproduces the same commits byte for byte.
(The other additions the shell makes are also carried in events: ``prepared``
tool calls, validated by the model interpreter, and values from outside made
strict JSON by ``edge.clean_event`` as they enter the channel.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from pidurable.core.events import Event, InputSubmitted, SubmissionAbortRequested, TaskAbortRequested, WriteSubmitted
from pidurable.core.fork_events import ForkRequested
from pidurable.core.model import ConversationId, Submission, SubmissionId, Task, TaskId
from pidurable.core.state import State

from .fork import PointReads, read_point


class LookupReads(PointReads, Protocol):
    """The storage reads enrichment needs."""

    def submission_by_request(self, conversation_id: ConversationId, request_id: str) -> Submission | None: ...

    def submission(self, submission_id: SubmissionId) -> Submission | None: ...

    def task(self, task_id: TaskId) -> Task | None: ...


#: The events that can need a stored record, and whether this one does
#: (asked of every event before its step: one lookup by exact type - no
#: event class has subclasses - instead of a chain of ``isinstance`` tests;
#: issue 11 item 2).
LOOKUPS: dict[type, Callable[[Any], bool]] = {
    InputSubmitted: lambda e: e.request_id is not None and e.existing is None,
    WriteSubmitted: lambda e: e.request_id is not None and e.existing is None,
    TaskAbortRequested: lambda e: e.known is None,
    ForkRequested: lambda e: e.point is None,
    SubmissionAbortRequested: lambda e: e.known is None,
}


def needs_lookup(event: Event) -> bool:
    """Does stepping ``event`` read storage (so earlier commits must land first)?"""
    check = LOOKUPS.get(type(event))
    return check is not None and check(event)


def enrich(event: Event, state: State, storage: LookupReads) -> Event:
    """``event`` with the settled record it needs, if any (see the header)."""
    if isinstance(event, (InputSubmitted, WriteSubmitted)):
        assert event.request_id is not None
        found = storage.submission_by_request(event.conversation_id, event.request_id)
        return event if found is None else attrs.evolve(event, existing=found)
    if isinstance(event, ForkRequested):
        return read_point(event, state, storage)
    if isinstance(event, TaskAbortRequested):
        if event.task_id in state.tasks:
            return event  # live: the core has it
        task = storage.task(event.task_id)
        return event if task is None else attrs.evolve(event, known=task)
    assert isinstance(event, SubmissionAbortRequested)
    known = storage.submission(event.submission_id)
    return event if known is None else attrs.evolve(event, known=known)
