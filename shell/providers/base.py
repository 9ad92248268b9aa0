"""What a model provider is to the shell.

A provider answers one :class:`ModelRequest` with a :class:`ModelReply`, or
raises :class:`ModelError` (``retryable`` tells transient failures apart).
``models.resolve(ref)`` maps a ``ModelRef`` to a provider, or None when the
model is not available (the run then ends ``unanswered/no_model``).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from pidurable.core.context import Message
from pidurable.core.model import ModelRef, ToolCall, Usage


@attrs.frozen(kw_only=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen(kw_only=True)
class ModelRequest:
    model: ModelRef
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    conversation_id: int = 0
    task_id: int = 0
    attempt: int = 1


@attrs.frozen(kw_only=True)
class ModelReply:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "stop"
    usage: Usage | None = None


class ModelError(Exception):
    """A provider failed; ``retryable`` for transient errors (429, 5xx...)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...


class Models(Protocol):
    def resolve(self, ref: ModelRef) -> Provider | None: ...
