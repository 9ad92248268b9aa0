"""``ScriptedModels``: a deterministic provider for tests and demos.

Reply ``k`` answers a request whose conversation already holds ``k`` model
turns (assistant messages, including errors the model returned: a retried
request moves on to the next reply), so a restarted process continues the
script exactly where the store stands (a re-sent request gets the same reply,
with the same tool-call ids). A
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

from .base import ModelDeferredReply, ModelError, ModelReply, ModelRequest, check_window


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
    #: The error is a context overflow (the provider's "context length exceeded").
    overflow: bool = False
    delay: float = 0.0
    usage: Usage | None = None
    #: Stream the text in this many pieces (``delay`` apart), reporting
    #: partials; 0 = answer at once.
    stream: int = 0
    #: Answer through a deferred handle, polled this many times first.
    deferred: int = 0
    poll_after_ms: int = 0


def tool_call(name: str, **arguments: Any) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=arguments)


def reply(
    text: str | None = None,
    tool_calls: Sequence[ScriptedCall] = (),
    error: str | None = None,
    delay: float = 0,
    usage: Usage | None = None,
    retryable: bool = False,
    stream: int = 0,
    deferred: int = 0,
    poll_after_ms: int = 0,
    overflow: bool = False,
) -> ScriptedReply:
    return ScriptedReply(
        text=text,
        tool_calls=tuple(tool_calls),
        error=error,
        delay=delay,
        usage=usage,
        retryable=retryable,
        stream=stream,
        deferred=deferred,
        poll_after_ms=poll_after_ms,
        overflow=overflow,
    )


class ScriptedModels:
    """Answers every model ref; records the requests it saw."""

    def __init__(
        self,
        script: Sequence[ScriptedReply] | Callable[[ModelRequest], ScriptedReply],
        *,
        keep_requests: int | None = 100,
        context_window: int | None = None,
    ) -> None:
        """``keep_requests``: how many of the newest requests ``requests``
        keeps (None: every one). A long run holds only the last few, so a
        benchmark's memory does not grow with the number of rounds;
        ``request_count`` counts them all."""
        bad = isinstance(keep_requests, bool) or not isinstance(keep_requests, int) or keep_requests < 0
        if keep_requests is not None and bad:
            raise ValueError(f"keep_requests must be None or an int >= 0, not {keep_requests!r}")
        self._keep = keep_requests
        #: The window every model it answers has (None: unknown), as the HTTP adapters.
        self.context_window = check_window(context_window)
        #: Every request ever answered, counted (``requests`` may hold fewer).
        self.request_count = 0
        self._fn = script if callable(script) else None
        self._replies: tuple[ScriptedReply, ...] = () if callable(script) else tuple(script)
        self.requests: list[ModelRequest] = []
        #: handles polled (deferred replies), in order
        self.polls: list[Any] = []
        #: number of requests that created a deferred handle
        self.deferred_created = 0
        #: handles cancelled (an aborted generation that was polling)
        self.cancelled: list[Any] = []

    def resolve(self, ref: ModelRef) -> "ScriptedModels":
        return self

    async def cancel(self, handle: Any) -> None:
        self.cancelled.append(handle)

    async def poll(self, request: ModelRequest, handle: Any) -> "ModelReply | ModelDeferredReply":
        """A deferred reply: ``handle`` names the script step; it stays
        deferred for ``deferred`` polls, then answers."""
        self.polls.append(handle)
        k, left = int(handle["k"]), int(handle["left"])
        r = self._replies[k] if self._fn is None else self._fn(request)
        if left > 0:
            return ModelDeferredReply(handle={"k": k, "left": left - 1}, poll_after_ms=r.poll_after_ms)
        return self._reply(r, k, None)

    async def complete(
        self, request: ModelRequest, on_partial: Callable[[str], None] | None = None
    ) -> "ModelReply | ModelDeferredReply":
        self.request_count += 1
        self.requests.append(request)
        if self._keep is not None and len(self.requests) > self._keep:
            del self.requests[: len(self.requests) - self._keep]
        if self._fn is not None:
            r = self._fn(request)
            k = request.turn  # model turns over the whole transcript: unique, stable ids (also after a reset)
        else:
            k = request.turn
            if k >= len(self._replies):
                raise ModelError(
                    f"ScriptedModels has no reply #{k + 1}: the script has {len(self._replies)} "
                    f"replies and the conversation already holds {k} model turns"
                )
            r = self._replies[k]
        if r.deferred:
            self.deferred_created += 1
            return ModelDeferredReply(handle={"k": k, "left": r.deferred - 1}, poll_after_ms=r.poll_after_ms)
        return await self._stream(r, k, on_partial)

    async def _stream(self, r: ScriptedReply, k: int, on_partial: Callable[[str], None] | None) -> ModelReply:
        if r.stream and r.text:
            size = max(1, -(-len(r.text) // r.stream))
            for i in range(size, len(r.text) + size, size):
                await trio.sleep(r.delay / r.stream)
                if on_partial is not None:
                    on_partial(r.text[:i])
        elif r.delay:
            await trio.sleep(r.delay)
        return self._reply(r, k, on_partial)

    def _reply(self, r: ScriptedReply, k: int, on_partial: Any) -> ModelReply:
        if r.error is not None:
            raise ModelError(r.error, retryable=r.retryable, overflow=r.overflow)
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
