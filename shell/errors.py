"""Errors a host sees. Every one carries a readable message."""

from __future__ import annotations

from typing import assert_never

from pidurable.core.effects import Accepted, Refusal, Refused, Respond

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


def accepted(resp: Respond, conversation_id: int | None = None) -> Accepted:
    """The core's answer to a host request: the ``Accepted`` reply, or the
    host exception its refusal names."""
    match resp.reply:
        case Accepted():
            return resp.reply
        case Refused(kind=kind, message=message):
            match kind:
                case Refusal.BUSY:
                    raise ConversationBusy(conversation_id or 0, message)
                case Refusal.NOT_FOUND:
                    raise NotFound(message)
                case Refusal.INVALID:
                    raise InvalidInput(message)
                case _ as unreachable:
                    assert_never(unreachable)
        case _ as unreachable:
            assert_never(unreachable)


__all__ = ["ConversationBusy", "HarnessClosed", "InvalidInput", "NotFound", "StorageError", "StoreLocked"]
