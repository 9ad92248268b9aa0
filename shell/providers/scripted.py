"""``ScriptedModels``: a deterministic provider for tests and demos.

Reply ``k`` answers a request whose context already holds ``k`` assistant
messages, so a restarted process continues the script exactly where the store
stands (a re-sent request gets the same reply, with the same tool-call ids). A
request past the end of the script fails with a clear ``ModelError``, which
the run records as ``unanswered/model_error`` - nothing is lost.
``ScriptedModels(fn)`` with ``fn(request) -> reply`` is the general form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from pidurable.core.model import ModelRef, ToolCall, Usage

from .base import ModelError, ModelReply, ModelRequest


@attrs.frozen(kw_only=True)
class ScriptedCall:
    name: str
    arguments: dict[str, Any]


@attrs.frozen(kw_only=True)
class ScriptedReply:
    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    error: str | None = None
    retryable: bool = False
    delay: float = 0.0
    usage: Usage | None = None


def tool_call(name: str, **arguments: Any) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=arguments)


def reply(
    text: str | None = None,
    tool_calls: Sequence[ScriptedCall] = (),
    error: str | None = None,
    delay: float = 0,
    usage: Usage | None = None,
    retryable: bool = False,
) -> ScriptedReply:
    return ScriptedReply(
        text=text, tool_calls=tuple(tool_calls), error=error, delay=delay, usage=usage, retryable=retryable
    )


class ScriptedModels:
    """Answers every model ref; records the requests it saw."""

    def __init__(self, script: Sequence[ScriptedReply] | Callable[[ModelRequest], ScriptedReply]) -> None:
        self._fn = script if callable(script) else None
        self._replies: tuple[ScriptedReply, ...] = () if callable(script) else tuple(script)
        self.requests: list[ModelRequest] = []

    def resolve(self, ref: ModelRef) -> "ScriptedModels":
        return self

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if self._fn is not None:
            r = self._fn(request)
            k = len(request.messages)  # grows every turn: unique, stable ids
        else:
            k = sum(1 for m in request.messages if m.role == "assistant")
            if k >= len(self._replies):
                raise ModelError(
                    f"ScriptedModels has no reply #{k + 1}: the script has {len(self._replies)} "
                    f"replies and the context already holds {k} assistant messages"
                )
            r = self._replies[k]
        if r.delay:
            await trio.sleep(r.delay)
        if r.error is not None:
            raise ModelError(r.error, retryable=r.retryable)
        calls = tuple(
            ToolCall(id=f"call_{k}_{i}", name=c.name, arguments=dict(c.arguments))
            for i, c in enumerate(r.tool_calls)
        )
        return ModelReply(
            text=r.text or "",
            tool_calls=calls,
            stop_reason="tool_use" if calls else "stop",
            usage=r.usage,
        )
