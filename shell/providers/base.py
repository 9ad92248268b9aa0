"""What a model provider is to the shell.

A provider answers one :class:`ModelRequest` with a :class:`ModelReply`, or
raises :class:`ModelError` (``retryable`` tells transient failures apart).
``models.resolve(ref)`` maps a ``ModelRef`` to a provider, or None when the
model is not available (the run then ends ``unanswered/no_model``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    #: The context, system message first: an immutable sequence (a tuple,
    #: or the context cache's ``MessageView``, which compares equal to the
    #: tuple of its messages; a slice or ``+`` of it is a tuple).
    messages: Sequence[Message]
    tools: tuple[ToolSpec, ...] = ()
    conversation_id: int = 0
    task_id: int = 0
    attempt: int = 1
    #: Model turns so far in this conversation (assistant entries, errors
    #: included): a deterministic index of this call, the same after a restart.
    turn: int = 0
    #: An output budget (a summarization request sets it); None: the provider's.
    max_tokens: int | None = None


@attrs.frozen(kw_only=True)
class ModelReply:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "stop"
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class ModelDeferredReply:
    """The provider will answer later: poll ``handle`` after ``poll_after_ms``."""

    handle: Any
    poll_after_ms: int = 5000


class ModelError(Exception):
    """A provider failed. ``retryable`` for transient errors (429, 5xx,
    overloaded, timeouts, connection resets), with the server's Retry-After
    in ms if it sent one; ``overflow`` when the context was too long."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after_ms: int | None = None,
        overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.overflow = overflow


OnPartial = Callable[[str], None]


class Provider(Protocol):
    async def complete(
        self, request: ModelRequest, on_partial: OnPartial | None = None
    ) -> "ModelReply | ModelDeferredReply": ...


class Models(Protocol):
    def resolve(self, ref: ModelRef) -> Provider | None: ...


def check_window(window: object) -> int | None:
    """``context_window``: None or a positive int."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise ValueError(f"context_window must be None or a positive int, not {window!r}")
    return window


def reply_problem(reply: Any) -> str | None:
    """Why a provider's answer is not a well-formed reply, or None. (Its
    values are cleaned later, by ``edge.clean_event``.)"""
    if isinstance(reply, ModelDeferredReply):
        return None
    if not isinstance(reply, ModelReply):
        return f"The provider returned {type(reply).__name__}, not a ModelReply"
    if not isinstance(reply.text, str):
        return f"The provider's reply text is a {type(reply.text).__name__}, not str"
    if not isinstance(reply.stop_reason, str):
        return "The provider's stop reason is not a string"
    if not isinstance(reply.tool_calls, tuple):
        return "The provider's tool calls are not a tuple"
    for call in reply.tool_calls:
        if not isinstance(call, ToolCall) or not isinstance(call.id, str) or not isinstance(call.name, str):
            return f"The provider returned a malformed tool call: {call!r:.200}"
        if not isinstance(call.arguments, dict):
            return f"The provider returned non-object arguments for tool {call.name!r}"
    return None
