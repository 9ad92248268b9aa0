"""Settled conversations, brought back when a host event names one.

The core holds live conversations only (core/holding.py): a settled one is
evicted once more than ``KEEP_SETTLED`` are settled, and ``Harness.open``
reads none (``Storage.load_live``). Before the reducer steps a host event
that names a conversation the state does not hold (``TARGETS``), it makes
every earlier decision durable, reads the conversation from storage
(``load_conversations``: its built-in documents and live host-defined ones)
and steps :class:`~pidurable.core.loading_events.ConversationsLoaded` first.
An id storage does not know is not in that event: the core then refuses the
host event exactly as it always did ("does not exist").

The loop reads what a whole batch of events names at once, before the
batch's first step (``away_all``: one read, one event, the batch not broken
up); an event naming a conversation evicted again within the batch (more
than ``KEEP_SETTLED`` settled) flushes and reads it on its own.

The event is journaled with the commit that follows, as stepped, so replay
needs no storage (the same rule as ``enrich.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from pidurable.core.events import (
    AgentConfigurationRequested,
    CompactionRequested,
    ConversationAbortRequested,
    DocumentUpdateRequested,
    Event,
    InputSubmitted,
    RootRequested,
    SubmissionAbortRequested,
    TaskCommitRequested,
    TaskCreationRequested,
    ToolFinished,
    WriteSubmitted,
)
from pidurable.core.fork_events import ForkRequested
from pidurable.core.loading_events import ConversationsLoaded
from pidurable.core.model import ROOT_CONVERSATION_ID, ConversationId
from pidurable.core.state import ConvState, DocScope, DocumentState, State

#: How many settled conversations the core keeps held (``Opened.keep_settled``):
#: a conversation asked again soon after its run (a chat's next message) is
#: not read back; beyond it the least recently changed is evicted. Well above
#: the loop's ``MAX_BATCH``: what a batch loads up front (``away_all``) stays
#: held until the batch's events that name it are stepped, even while other
#: conversations settle in the same batch (each would push out the oldest).
#: A held settled conversation costs memory only (~2 KB), never step time.
KEEP_SETTLED = 256


def _one(ev: Any) -> tuple[ConversationId, ...]:
    return (ev.conversation_id,)


#: The conversations each host event names (an event not listed names only
#: live work: a task, whose conversation the core holds).
TARGETS: Mapping[type, Callable[[Any], Iterable[ConversationId]]] = {
    RootRequested: lambda ev: (ROOT_CONVERSATION_ID,),
    AgentConfigurationRequested: _one,
    InputSubmitted: _one,
    WriteSubmitted: _one,
    ConversationAbortRequested: _one,
    TaskCreationRequested: _one,
    CompactionRequested: _one,
    ForkRequested: _one,
    SubmissionAbortRequested: lambda ev: () if ev.conversation_id is None else (ev.conversation_id,),
    DocumentUpdateRequested: lambda ev: (ev.change.owner,) if ev.change.scope is DocScope.CONVERSATION else (),
}

#: Events whose staged document updates may name other conversations (shell/documents.py).
_STAGING = (DocumentUpdateRequested, TaskCommitRequested, ToolFinished)


class Staging(Protocol):
    def conversations(self, event: Event) -> list[int]: ...


class ConversationReads(Protocol):
    def load_conversations(
        self, ids: Sequence[ConversationId]
    ) -> tuple[tuple[ConvState, ...], tuple[DocumentState, ...]]: ...


def away(event: Event, state: State, staging: Staging) -> list[ConversationId]:
    """The conversations ``event`` names that ``state`` does not hold."""
    if state.keep_settled is None:
        return []  # this life holds every conversation
    return sorted(c for c in named(event, staging) if c not in state.conversations)


def named(event: Event, staging: Staging) -> set[ConversationId]:
    """Every conversation ``event`` names (held or not)."""
    of = TARGETS.get(type(event))
    ids = set(of(event)) if of is not None else set()
    if isinstance(event, _STAGING):
        staged = staging.conversations(event)  # (none, as a rule)
        if staged:
            ids.update(ConversationId(c) for c in staged)
    return ids


def away_all(events: Sequence[Event], state: State, staging: Staging) -> tuple[list[ConversationId], list[ConversationId]]:
    """What a batch names: the conversations ``state`` does not hold (the
    loop reads them at once, before the batch's first step) and the held
    settled ones (refreshed with them, so the loading evicts none of those)."""
    if state.keep_settled is None:
        return [], []
    ids: set[ConversationId] = set()
    for event in events:
        ids |= named(event, staging)
    if not ids:
        return [], []  # a batch of results of live work (the usual one) names none
    held = set(state.settled)
    return sorted(c for c in ids if c not in state.conversations), sorted(c for c in ids if c in held)


def load(
    storage: ConversationReads, ids: Sequence[ConversationId], now: int, refreshed: Sequence[ConversationId] = ()
) -> ConversationsLoaded | None:
    """The event that brings back the stored ones of ``ids`` (None: none is stored)."""
    conversations, documents = storage.load_conversations(ids)
    if not conversations:
        return None
    return ConversationsLoaded(now=now, conversations=conversations, documents=documents, refreshed=tuple(refreshed))
