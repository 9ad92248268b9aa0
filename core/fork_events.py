"""The fork request event and the facts the shell reads for it.

Kept beside ``events.py`` (which is at its size limit and re-exports
``ForkRequested`` in the ``Event`` union); decisions live in ``fork.py``.

``conv.fork(at=entry, documents=...)`` sends :class:`ForkRequested`. What the
core cannot know - transcript bodies and document history stay in storage -
the shell reads right before the step (``enrich``) and sets as ``point``: the
journaled event carries it, so replay needs no storage.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar

import attrs

from .model import AgentConfig, ConversationId, EntryId
from .state import DocumentState, ForkPolicy


class PointStatus(enum.StrEnum):
    """What the id a fork is asked at names, seen from the conversation."""

    #: An entry the conversation sees (its own, or one it inherits).
    VISIBLE = "visible"
    #: An entry the conversation does not see (another conversation's, or
    #: a parent's entry after the fork point).
    NOT_VISIBLE = "not_visible"
    #: A record that is not an entry (a task, a submission, a conversation).
    NOT_AN_ENTRY = "not_an_entry"
    #: No record has that id (yet).
    UNKNOWN = "unknown"


@attrs.frozen(kw_only=True)
class ForkPoint:
    """What storage says about the fork point (read by the shell)."""

    status: PointStatus
    #: The commit that stored the entry (VISIBLE only).
    seq: int = 0
    #: The conversation's context range start at the entry: the ``head`` of
    #: the newest head marker at or before it (None: the transcript start).
    head: EntryId | None = None
    #: The conversation's documents as of ``seq``, for those whose fork
    #: policy is ``as_of`` (read along the parent chain for an inherited
    #: entry); a kind absent here did not exist then.
    as_of: tuple[DocumentState, ...] = ()
    #: The conversation's ``pi.agent`` as of ``seq`` (builtins.py: it is
    #: ``rewindable``); None when storage has no revision of it that old (a
    #: store migrated after the entry was written): the fork keeps the
    #: current agent then.
    agent: AgentConfig | None = None


@attrs.frozen(kw_only=True)
class ForkRequested:
    """``conv.fork(at=..., documents=...)``: one commit creates the fork;
    answered with its id."""

    TAG: ClassVar[str] = "fork_requested"
    now: int
    ticket: int
    conversation_id: ConversationId
    at: EntryId
    #: One policy for every document (None: each document's own).
    policy: ForkPolicy | None = None
    #: Per document kind, overriding ``policy`` and the stored one.
    policies: Mapping[str, ForkPolicy] = attrs.field(factory=dict)
    #: Set by the shell before the step (None: not read yet).
    point: ForkPoint | None = None
