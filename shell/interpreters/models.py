"""Model calls: ``CallModel``, ``PollModel``, ``CancelDeferred``; the
compaction helpers ``SelectCut``, ``Summarize`` and ``MeasureContext``.

Builds the request from the context cache up to the effect's pinned
``cutoff`` (plus the rendered system prompt and the tools the agent's filter
offers), lets ``before_request`` hooks replace its messages, runs the
provider, streams throttled partials (``ModelStreamed``, at most one per
``partial_interval_ms``, each through the reducer) and reports the outcome as
exactly ONE event: ``ModelResponded`` (with the reply's calls pre-validated,
``prepared``), ``ModelDeferred`` or ``ModelFailed``. A provider that raises
something other than ``ModelError`` (a bug) still ends in ``ModelFailed``:
the run never strands. Nothing here touches ``State``; the throttle interval
is read from it by the loop and passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from pidurable.core.compaction import SUMMARY_SYSTEM_PROMPT, estimate_context_tokens, select_cut, summary_request_text
from pidurable.core.context import Message, active_range, range_messages
from pidurable.core.effects import CallModel, CancelDeferred, MeasureContext, PollModel, SelectCut, Summarize
from pidurable.core.events import ContextMeasured, CutSelected, ModelDeferred, ModelFailed, ModelResponded, ModelStreamed

from ..context_cache import ContextCache
from ..providers.base import ModelDeferredReply, ModelError, ModelReply, ModelRequest, Models, OnPartial, ToolSpec, reply_problem
from ..record_inits import new_ModelRequest
from ..registry import Registry
from .hooks import CompactInfo, HookRunner
from .ports import Reporter
from .tools import prepared_calls

log = logging.getLogger("pidurable")

Reply = ModelReply | ModelDeferredReply


@runtime_checkable
class Polling(Protocol):
    """A provider that can fetch a deferred response by its handle."""

    async def poll(self, request: ModelRequest, handle: Any) -> Reply: ...


@runtime_checkable
class Cancelling(Protocol):
    """A provider that can withdraw a deferred response."""

    async def cancel(self, handle: Any) -> None: ...


@attrs.frozen(kw_only=True)
class ModelInterpreter:
    loop: Reporter
    models: Models | None
    registry: Registry
    hooks: HookRunner
    context: ContextCache
    #: ``_offered`` per (registry version, tool filter)
    _specs: dict[tuple[int, tuple[str, ...] | None], tuple[ToolSpec, ...]] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    async def call(self, effect: CallModel, interval_ms: int) -> None:
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if provider is None:
            self._no_model(effect)
            return
        request = await self.hooks.before_request(self._request(effect), effect.extensions)
        await self._answer(effect, interval_ms, lambda on_partial: provider.complete(request, on_partial=on_partial))

    async def poll(self, effect: PollModel, interval_ms: int) -> None:
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if provider is None:
            self._no_model(effect)
            return
        if not isinstance(provider, Polling):
            ref = effect.model
            self._fail(effect, f"Provider {ref.provider} cannot poll deferred responses (model {ref.model_id})")
            return
        request = self._request(effect)
        await self._answer(effect, interval_ms, lambda on_partial: provider.poll(request, effect.handle))

    def select_cut(self, effect: SelectCut) -> None:
        """What a compaction summarizes: the cut over the committed context
        (pure, core/compaction.py) and the newest entry it saw."""
        entries = self.context.entries(effect.conversation_id)
        _, kept = active_range(entries)
        cut = select_cut(kept, effect.keep_recent_tokens)
        tail = entries[-1].id if cut is not None else None
        self.loop.send(CutSelected(now=self.loop.clock(), task_id=effect.task_id, first_kept=cut, tail=tail))

    def select_needs_hooks(self, effect: SelectCut) -> bool:
        """``before_compact`` hooks are host code: the selection then runs as a child."""
        return bool(self.registry.named_hooks("before_compact", effect.extensions))

    async def select_cut_with_hooks(self, effect: SelectCut) -> None:
        """The cut, then the ``before_compact`` hooks (first decision wins):
        decline -> nothing is compacted; a summary -> placed without a model call."""
        entries = self.context.entries(effect.conversation_id)
        marker, kept = active_range(entries)
        cut = select_cut(kept, effect.keep_recent_tokens)
        tail = entries[-1].id if cut is not None else None
        summary = None
        if cut is not None:
            covered = ([marker] if marker is not None else []) + [e for e in kept if e.id < cut]
            info = CompactInfo(
                reason=effect.reason,
                entries=tuple(covered),
                messages=tuple(range_messages(covered)),
                first_kept=cut,
                instructions=effect.instructions,
            )
            decision = await self.hooks.before_compact(effect, info)
            if decision == "decline":
                cut = tail = None
            elif decision is not None:
                summary = decision
        self.loop.send(
            CutSelected(now=self.loop.clock(), task_id=effect.task_id, first_kept=cut, tail=tail, summary=summary)
        )

    def measure_context(self, effect: MeasureContext) -> None:
        """The size of a generation's next request (§3.13.2): the
        usage-anchored estimate of the active range through ``cutoff`` (its
        summary first) plus the system prompt."""
        marker, kept = active_range(self.context.entries(effect.conversation_id), effect.cutoff)
        tokens = estimate_context_tokens(([marker] if marker is not None else []) + kept, effect.system)
        self.loop.send(ContextMeasured(now=self.loop.clock(), task_id=effect.task_id, tokens=tokens))

    async def summarize(self, effect: Summarize, interval_ms: int) -> None:
        """The pinned summarization request (reference §3.13 step 2): no
        tools, the summarizer's system prompt, the entries before
        ``first_kept`` (an earlier summary first) serialized in one user
        message; the reply is reported like any model reply."""
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if provider is None:
            ref = effect.model
            self._fail(effect, f"Model {ref.provider}/{ref.model_id} is not available")
            return
        entries = self.context.entries(effect.conversation_id)
        marker, kept = active_range(entries, effect.tail)
        covered = ([marker] if marker is not None else []) + [e for e in kept if e.id < effect.first_kept]
        text = summary_request_text(range_messages(covered), effect.instructions)
        request = new_ModelRequest(
            turn=self.context.view(effect.conversation_id, effect.tail)[1],
            model=effect.model,
            messages=(Message(role="system", text=SUMMARY_SYSTEM_PROMPT), Message(role="user", text=text)),
            conversation_id=effect.conversation_id,
            task_id=effect.task_id,
            attempt=effect.attempt,
            max_tokens=effect.max_tokens,
        )
        await self._answer(effect, interval_ms, lambda on_partial: provider.complete(request, on_partial=on_partial))

    def cancel_deferred(self, effect: CancelDeferred) -> Callable[[], Awaitable[None]] | None:
        """Best effort (the abort already settled durably): the job to start,
        or None if the provider cannot cancel."""
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if not isinstance(provider, Cancelling):
            return None
        cancel = provider.cancel

        async def best_effort() -> None:
            try:
                await cancel(effect.handle)
            except Exception as e:  # best effort: reported, nothing else depends on it
                log.warning("cancelling deferred response %r failed: %s", effect.handle, e)

        return best_effort

    def _offered(self, allowed: tuple[str, ...] | None) -> tuple[ToolSpec, ...]:
        """The tools a request offers: every installed one, or exactly the
        agent's filter, in its order (names not installed are skipped).
        Built once per filter and registry version (``_specs``), not per request."""
        key = (self.registry.version, allowed)
        specs = self._specs.get(key)
        if specs is None:
            installed = self.registry.tools()
            tools = list(installed.values()) if allowed is None else [installed[n] for n in allowed if n in installed]
            specs = tuple(ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in tools)
            if len(self._specs) >= 64 or any(v != key[0] for v, _ in self._specs):
                self._specs.clear()  # an older registry version's, or too many filters
            self._specs[key] = specs
        return specs

    def _request(self, effect: CallModel | PollModel) -> ModelRequest:
        head: tuple[Message, ...] = () if effect.system is None else (Message(role="system", text=effect.system),)
        messages: Sequence[Message] = head
        turn = 0
        if effect.cutoff is not None:
            messages, turn = self.context.request(effect.conversation_id, effect.cutoff, head)
        return new_ModelRequest(  # no keyword dict (record_inits.py; issue 11 item 2)
            turn=turn,
            model=effect.model,
            messages=messages,
            tools=self._offered(effect.tools),
            conversation_id=effect.conversation_id,
            task_id=effect.task_id,
            attempt=effect.attempt,
        )

    def _fail(self, effect: CallModel | PollModel | Summarize, message: str, reason: str = "model_error") -> None:
        self.loop.send(
            ModelFailed(
                now=self.loop.clock(), task_id=effect.task_id, attempt=effect.attempt, reason=reason, message=message
            )
        )

    def _no_model(self, effect: CallModel | PollModel) -> None:
        ref = effect.model
        self._fail(effect, f"Model {ref.provider}/{ref.model_id} is not available", "no_model")

    async def _answer(
        self, effect: CallModel | PollModel | Summarize, interval_ms: int, call: Callable[[OnPartial], Awaitable[object]]
    ) -> None:
        """Run a provider call; stream throttled partials; report the outcome
        as exactly one event (responded, deferred or failed)."""
        loop = self.loop
        latest: list[str | None] = [None]
        interval = max(interval_ms, 1) / 1000
        # the pump starts with the first partial (a reply that does not stream
        # costs no task and no cancel scope), beside the call, and stops with it
        pumping: trio.CancelScope | None = None
        done = False

        def on_partial(text: str) -> None:
            nonlocal pumping
            if text:
                latest[0] = text
                if pumping is None:
                    pumping = trio.CancelScope()
                    loop.background(partial(pump, pumping))

        async def pump(pumping: trio.CancelScope) -> None:
            # trailing-edge throttle: at most one partial per interval, and
            # each one goes through the reducer (one commit in flight)
            sent: str | None = None
            with pumping:
                while True:
                    await trio.sleep(interval)
                    text = latest[0]
                    if done:  # woken just as the call ended: the reply supersedes it
                        return
                    if text is not None and text != sent:
                        # only what was appended since the last partial (O(delta)
                        # per event and journal row); anything else: the whole text
                        offset = len(sent) if sent is not None and text.startswith(sent) else 0
                        sent = text
                        loop.send(
                            ModelStreamed(
                                now=loop.clock(), task_id=effect.task_id, attempt=effect.attempt, text=text[offset:], offset=offset
                            )
                        )

        failure: Exception | None = None
        reply: object = None
        try:
            reply = await call(on_partial)
        except Exception as e:  # reported below
            failure = e
        finally:
            done = True
            if pumping is not None:
                pumping.cancel()
        task_id, attempt = effect.task_id, effect.attempt
        if isinstance(failure, ModelError):
            reason = "context_overflow" if failure.overflow else "model_error"
            loop.send(
                ModelFailed(
                    now=loop.clock(),
                    task_id=task_id,
                    attempt=attempt,
                    message=str(failure),
                    retryable=failure.retryable,
                    retry_after_ms=failure.retry_after_ms,
                    reason=reason,
                )
            )
            return
        if failure is not None:  # a provider bug must not strand the run
            message = f"{type(failure).__name__}: {failure}"
            loop.send(ModelFailed(now=loop.clock(), task_id=task_id, attempt=attempt, message=message))
            return
        problem = reply_problem(reply)
        if problem is not None:
            log.warning("task %s: %s", task_id, problem)
            self._fail(effect, problem)
            return
        if isinstance(reply, ModelDeferredReply) and isinstance(effect, Summarize):
            # a summary is not polled for: the compaction fails (and says why)
            self._fail(effect, "Summarization failed: the provider deferred its answer (summaries are not polled)")
            return
        if isinstance(reply, ModelDeferredReply):
            loop.send(
                ModelDeferred(
                    now=loop.clock(), task_id=task_id, attempt=attempt, handle=reply.handle, poll_after_ms=reply.poll_after_ms
                )
            )
            return
        assert isinstance(reply, ModelReply)  # reply_problem checked it
        await self.hooks.after_response(
            task_id, effect.conversation_id, reply, None if isinstance(effect, Summarize) else effect.extensions
        )
        continuation = None
        if not isinstance(effect, Summarize) and not reply.tool_calls:
            continuation = await self.hooks.on_yield(task_id, effect.conversation_id, reply, effect.extensions)
        loop.send(
            ModelResponded(
                now=loop.clock(),
                task_id=task_id,
                attempt=attempt,
                text=reply.text,
                tool_calls=reply.tool_calls,
                stop_reason=reply.stop_reason,
                usage=reply.usage,
                prepared=()
                if isinstance(effect, Summarize)
                else prepared_calls(self.registry, reply.tool_calls, effect.tools, effect.extensions),
                continuation=continuation,
            )
        )
