"""Errors a host sees. Every one carries a readable message."""

from __future__ import annotations

from .storage.base import StorageError, StoreLocked


class ConversationBusy(Exception):
    """``when_busy="reject"`` on a busy conversation; nothing was stored."""

    def __init__(self, conversation_id: int, message: str | None = None) -> None:
        self.conversation_id = conversation_id
        super().__init__(message or f"Conversation {conversation_id} is busy")


class InvalidInput(ValueError):
    """A host call was refused for bad input; nothing was stored."""


class NotFound(LookupError):
    """A host call named something that does not exist."""


class HarnessClosed(RuntimeError):
    """The harness is closed (or crashed); open a new one on the store."""


__all__ = ["ConversationBusy", "HarnessClosed", "InvalidInput", "NotFound", "StorageError", "StoreLocked"]
