"""The event that brings settled conversations back into the state.

Kept beside ``events.py`` (which is at its size limit and lists
``ConversationsLoaded`` in the ``Event`` union); the rule is in holding.py,
the reads behind it in the shell (``shell/loading.py``).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from .model import ConversationId
from .state import ConvState, DocumentState


@attrs.frozen(kw_only=True)
class ConversationsLoaded:
    """The shell read these conversations from storage right before a host
    event that names them (the state held none of them): each one's built-in
    documents (``conversations``) and its live host-defined documents
    (``documents``), exactly as stored. An id storage does not know is simply
    absent: the event that named it is refused as before. Journaled with the
    commit that follows, so replay needs no storage."""

    TAG: ClassVar[str] = "conversations_loaded"
    now: int
    conversations: tuple[ConvState, ...] = ()
    documents: tuple[DocumentState, ...] = ()
    #: Held settled conversations the same batch of host events names: they
    #: become the newest settled ones too, so loading the others does not
    #: evict them before their events are stepped.
    refreshed: tuple[ConversationId, ...] = ()
