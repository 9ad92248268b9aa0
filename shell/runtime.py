"""The reducer loop and the effect interpreters.

Theory of operation
-------------------
One reducer owns ``State``. It takes events one at a time from one memory
channel, calls the pure ``step``, and runs the returned effects strictly in
order:

- ``Commit`` runs inline (a WAL transaction costs tens of microseconds; a thread
  hop per commit would triple the step cost) and is durable before the next
  effect starts. It journals every event fed to ``step`` since the previous
  commit, in the same transaction, so the run can be replayed.
- ``CallModel``, ``PrepareTool``, ``RunTool`` start a child of the harness
  nursery, inside a cancel scope kept in ``inflight[task_id]``; the child
  reports back only by sending an event. Interpreters never touch ``State``.
- ``Cancel`` cancels that scope; ``Respond`` answers a waiting host call.

``hooks.before_effect(i, effect)`` is called before every effect (``i`` counts
effects in this process life): the seam where crash tests kill the shell.
Host waits (``SubmissionHandle.wait``...) re-read storage after each commit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from pidurable.core import step as core_step
from pidurable.core.effects import (
    EFFECT_TYPES,
    CallModel,
    Cancel,
    CancelDeferred,
    Commit,
    Effect,
    MigrateTask,
    PollModel,
    PrepareTool,
    PutEntry,
    PutSubmission,
    PutTask,
    Refused,
    Respond,
    RunPhase,
    RunTool,
    Sleep,
)
from pidurable.core.events import (
    Event,
    InputSubmitted,
    InvocationFailed,
    ToolProcessStarted,
    MigrationFinished,
    ModelDeferred,
    ModelFailed,
    ModelStreamed,
    PhaseReturned,
    PreparedCall,
    TimerFired,
    SubmissionAbortRequested,
    TaskAbortRequested,
    WriteSubmitted,
    ModelResponded,
    ToolFailed,
    ToolFinished,
    ToolPrepared,
    ToolRejected,
)
from pidurable.core.context import Message
from pidurable.core.model import TaskId, ToolCall
from pidurable.core.state import State

from .context_cache import ContextCache
from .edge import clean_event, reply_problem, tool_result
from .providers.base import ModelDeferredReply, ModelError, ModelRequest, ToolSpec
from .errors import InvalidInput
from .registry import Progress, Registry, ToolCallContext, ToolResult
from .storage import codec
from .tasks import HookContext, TaskCommitError, TaskRuntime
from .storage.base import Storage


#: At most this many ready events are stepped before their effects run.
MAX_BATCH = 64

log = logging.getLogger("pidurable")


class Hooks:
    """Test seam. Production uses this no-op."""

    def before_effect(self, index: int, effect: Effect) -> None:
        pass


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def trio_anchored_clock() -> Callable[[], int]:
    """The default harness clock: wall time at open, advanced by Trio's clock.

    Deadlines (retry, poll, sleeps) are stored in wall milliseconds so they
    survive restarts; within one process life time advances with Trio's
    monotonic clock, so timers and the harness clock agree (also under a test
    MockClock) and a wall-clock jump cannot make a timer fire early or late.
    """
    wall0 = wall_clock_ms()
    trio0 = trio.current_time()
    return lambda: wall0 + int((trio.current_time() - trio0) * 1000)


@attrs.define
class _Ticket:
    done: trio.Event = attrs.field(factory=trio.Event)
    response: Respond | None = None


class Runtime:
    def __init__(
        self,
        *,
        storage: Storage,
        models: Any,
        registry: Registry,
        env: Any,
        store_id: str,
        hooks: Hooks | None = None,
        clock: Callable[[], int] | None = None,
        harness: Any = None,
    ) -> None:
        self.storage = storage
        self.models = models
        self.registry = registry
        self.env = env
        self.store_id = store_id
        self.hooks = hooks or Hooks()
        self.clock = clock or trio_anchored_clock()
        self.harness = harness
        self.state = State()
        self._send, self._recv = trio.open_memory_channel[Event](math.inf)
        self._journal: list[Event] = []
        self._commits: list[tuple[Commit, list[Event]]] = []
        self._acts: list[Effect] = []
        self._tickets: dict[int, _Ticket] = {}
        self._next_ticket = 1
        self._committed = trio.Event()
        self.inflight: dict[TaskId, trio.CancelScope] = {}
        self.effect_index = 0
        self.steps = 0
        self.nursery: trio.Nursery | None = None
        self.closed = False
        self.context = ContextCache(lambda cid: self.storage.entries(cid))
        #: Records host calls wait for, by id: the newest committed version
        #: (filled by commits, so a waiter need not re-read storage).
        self.watched: dict[int, Any] = {}
        self._watchers: dict[int, int] = {}

    # --- feeding events ---------------------------------------------------
    def send(self, event: Event) -> None:
        """Queue an event for the reducer. Outside values in the results of
        effects are made strict JSON / valid UTF-8 here (``edge.py``)."""
        if not self.closed:
            self._send.send_nowait(clean_event(event))

    async def request(self, make: Callable[[int, int], Event]) -> Respond:
        """Send a host event carrying a fresh ticket; wait for its Respond."""
        from .errors import HarnessClosed

        if self.closed:
            raise HarnessClosed("Harness is closed")
        ticket = self._next_ticket
        self._next_ticket += 1
        t = _Ticket()
        self._tickets[ticket] = t
        self.send(make(ticket, self.clock()))
        await t.done.wait()
        assert t.response is not None
        return t.response

    async def wait_record(self, record_id: int, load: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
        """Wait until the committed record ``record_id`` satisfies ``done``.

        Reads storage once, then follows the commits in memory."""
        from .errors import HarnessClosed

        changed = self._committed
        record = load()
        if record is not None and done(record):
            return record
        self.watched.setdefault(record_id, record)
        self._watchers[record_id] = self._watchers.get(record_id, 0) + 1
        try:
            while True:
                if self.closed:
                    raise HarnessClosed("Harness is closed")
                await changed.wait()
                changed = self._committed
                record = self.watched.get(record_id)
                if record is not None and done(record):
                    return record
        finally:
            self._watchers[record_id] -= 1
            if not self._watchers[record_id]:
                del self._watchers[record_id]
                self.watched.pop(record_id, None)

    async def next_commit(self) -> None:
        """Wait for the next commit (or the harness closing)."""
        from .errors import HarnessClosed

        if self.closed:
            raise HarnessClosed("Harness is closed")
        await self._committed.wait()

    async def wait_committed(self, check: Callable[[], Any]) -> Any:
        """Return ``check()`` once it is not None, re-checking after commits."""
        from .errors import HarnessClosed

        while True:
            changed = self._committed
            result = check()
            if result is not None:
                return result
            if self.closed:
                raise HarnessClosed("Harness is closed")
            await changed.wait()

    # --- the reducer ------------------------------------------------------
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                batch = [await self._recv.receive()]
            except trio.EndOfChannel:  # pragma: no cover - the channel is never closed
                return
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            self.handle_batch(batch)

    def handle(self, event: Event) -> None:
        """Step one event and run its effects (tests drive the reducer so)."""
        self.handle_batch([event])

    def handle_batch(self, events: list[Event]) -> None:
        """Step every ready event, then run the effects: all commits of the
        batch in ONE storage transaction, then the acts in order. Every act
        still starts after the commit holding its intent is durable; grouping
        saves a transaction per event when several results arrive at once."""
        for event in events:
            if self._reads_storage(event):
                self._flush()  # the read must see every earlier decision
            self._step(event)
        self._flush()

    def _step(self, event: Event) -> None:
        event = self._enrich(event)
        self._journal.append(event)
        result = core_step(self.state, event)
        self.state = result.state
        self.steps += 1
        for effect in result.effects:
            if isinstance(effect, Commit):
                # the commit journals every event stepped since the last one
                self._commits.append((effect, self._journal))
                self._journal = []
            else:
                self._acts.append(effect)

    def _flush(self) -> None:
        commits, acts = self._commits, self._acts
        self._commits, self._acts = [], []
        if commits:
            for effect, _ in commits:
                self._before(effect)
            self.storage.commit_many([(c.seq, c.writes, evs) for c, evs in commits])
            for effect, _ in commits:
                self._committed_writes(effect)
            self._wake()
        for effect in acts:
            self._before(effect)
            try:
                INTERPRETERS[type(effect)](self, effect)
            except Exception as e:  # one effect failing never stops the harness
                self._invocation_failed(effect, e)

    def _invocation_failed(self, effect: Any, error: Exception) -> None:
        """Interpreting ``effect`` raised: report it, and fault its task (the
        run it serves settles ``unanswered/faulted``); other work goes on."""
        task_id = getattr(effect, "task_id", None)
        log.error("interpreting %s for task %s failed", type(effect).__name__, task_id, exc_info=error)
        if task_id is not None:
            message = f"Internal error while running {type(effect).__name__}: {type(error).__name__}: {error}"
            self.send(InvocationFailed(now=self.clock(), task_id=task_id, message=message))

    def _wake(self) -> None:
        """Wake every waiter (after a commit, or an invocation leaving)."""
        self._committed.set()
        self._committed = trio.Event()

    def _before(self, effect: Effect) -> None:
        index = self.effect_index
        self.effect_index += 1
        self.hooks.before_effect(index, effect)

    @staticmethod
    def _reads_storage(event: Event) -> bool:
        if isinstance(event, (InputSubmitted, WriteSubmitted)):
            return event.request_id is not None and event.existing is None
        if isinstance(event, TaskAbortRequested):
            return event.known is None
        return isinstance(event, SubmissionAbortRequested) and event.known is None

    def _enrich(self, event: Event) -> Event:
        # Request-id dedup and abort_submission need settled submissions too,
        # which the core does not keep: look them up here, on the reducer,
        # right before the step (after every earlier commit of the batch).
        if not self._reads_storage(event):
            return event
        if isinstance(event, (InputSubmitted, WriteSubmitted)):
            assert event.request_id is not None
            found = self.storage.submission_by_request(event.conversation_id, event.request_id)
            return event if found is None else attrs.evolve(event, existing=found)
        if isinstance(event, TaskAbortRequested):
            if event.task_id in self.state.tasks:
                return event  # live: the core has it
            task = self.storage.task(event.task_id)
            return event if task is None else attrs.evolve(event, known=task)
        assert isinstance(event, SubmissionAbortRequested)
        known = self.storage.submission(event.submission_id)
        return event if known is None else attrs.evolve(event, known=known)

    # --- interpreters -------------------------------------------------------
    def _commit(self, effect: Commit) -> None:
        self._commits.append((effect, self._journal))
        self._journal = []
        self._flush()

    def _committed_writes(self, effect: Commit) -> None:
        for w in effect.writes:
            if isinstance(w, PutEntry):
                self.context.on_entry(w.entry)
            elif isinstance(w, PutSubmission) and w.submission.id in self.watched:
                self.watched[w.submission.id] = w.submission
            elif isinstance(w, PutTask) and w.task.id in self.watched:
                self.watched[w.task.id] = w.task

    def _respond(self, effect: Respond) -> None:
        t = self._tickets.pop(effect.ticket, None)
        if t is not None:
            t.response = effect
            t.done.set()

    def _cancel(self, effect: Cancel) -> None:
        scope = self.inflight.get(effect.task_id)
        if scope is not None:
            scope.cancel()

    def _spawn(self, task_id: TaskId, fn: Callable[..., Any], effect: Any) -> None:
        assert self.nursery is not None
        scope = trio.CancelScope()
        self.inflight[task_id] = scope

        async def guarded() -> None:
            try:
                with scope:
                    await fn(effect)
            except Exception as e:  # a bug in one invocation faults its task only
                self._invocation_failed(effect if not isinstance(effect, tuple) else effect[0], e)
            finally:
                if self.inflight.get(task_id) is scope:
                    del self.inflight[task_id]
                    self._wake()

        self.nursery.start_soon(guarded)

    def _call_model(self, effect: CallModel) -> None:
        self._spawn(effect.task_id, self._do_call_model, effect)

    def _prepare_tool(self, effect: PrepareTool) -> None:
        # Resolution and validation are short and bounded: done inline, the
        # answer is the next event (no task spawn per call). Before-tool hooks
        # are host code (async): then it runs as a child like any long effect.
        if self.registry.hooks("before_tool"):
            self._spawn(effect.task_id, self._do_prepare_with_hooks, effect)
        else:
            self._do_prepare_tool(effect)

    def _run_tool(self, effect: RunTool) -> None:
        self._spawn(effect.task_id, self._do_run_tool, effect)

    def _poll_model(self, effect: PollModel) -> None:
        self._spawn(effect.task_id, self._do_poll_model, effect)

    def _cancel_deferred(self, effect: CancelDeferred) -> None:
        provider = self.models.resolve(effect.model) if self.models is not None else None
        cancel = getattr(provider, "cancel", None)
        if cancel is None:
            return
        assert self.nursery is not None

        async def best_effort() -> None:
            try:
                await cancel(effect.handle)
            except Exception as e:  # best effort: the abort already settled durably
                log.warning("cancelling deferred response %r failed: %s", effect.handle, e)

        self.nursery.start_soon(best_effort)

    def _sleep(self, effect: Sleep) -> None:
        self._spawn(effect.task_id, self._do_sleep, effect)

    def _run_phase(self, effect: RunPhase) -> None:
        task = self.state.tasks.get(effect.task_id)  # read at dispatch, never written
        self._spawn(effect.task_id, self._do_run_phase, (effect, task))

    def _migrate_task(self, effect: MigrateTask) -> None:
        self._spawn(effect.task_id, self._do_migrate, effect)

    # --- long effects (children of the nursery) --------------------------------
    def _offered(self, allowed: tuple[str, ...] | None) -> list[Any]:
        """The tools a request offers: every installed one, or exactly the
        agent's filter, in its order (names not installed are skipped)."""
        installed = self.registry.tools()
        if allowed is None:
            return list(installed.values())
        return [installed[name] for name in allowed if name in installed]

    def _build_request(self, effect: CallModel | PollModel, cutoff: int | None) -> ModelRequest:
        messages: tuple[Any, ...] = ()
        turn = 0
        if cutoff is not None:
            found, turn = self.context.view(effect.conversation_id, cutoff)
            messages = tuple(found)
        if effect.system is not None:
            messages = (Message(role="system", text=effect.system), *messages)
        return ModelRequest(
            turn=turn,
            model=effect.model,
            messages=messages,
            tools=tuple(
                ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
                for t in self._offered(effect.tools)
            ),
            conversation_id=effect.conversation_id,
            task_id=effect.task_id,
            attempt=effect.attempt,
        )

    def _fail_request(self, effect: CallModel | PollModel, message: str, reason: str = "model_error") -> None:
        self.send(
            ModelFailed(now=self.clock(), task_id=effect.task_id, attempt=effect.attempt, reason=reason, message=message)
        )

    def _no_model(self, effect: CallModel | PollModel) -> None:
        ref = effect.model
        self._fail_request(effect, f"Model {ref.provider}/{ref.model_id} is not available", "no_model")

    async def _do_call_model(self, effect: CallModel) -> None:
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if provider is None:
            self._no_model(effect)
            return
        request = await self._before_request(self._build_request(effect, effect.cutoff))
        await self._answer(effect, lambda on_partial: provider.complete(request, on_partial=on_partial))

    async def _do_poll_model(self, effect: PollModel) -> None:
        provider = self.models.resolve(effect.model) if self.models is not None else None
        if provider is None:
            self._no_model(effect)
            return
        if not hasattr(provider, "poll"):
            ref = effect.model
            self._fail_request(effect, f"Provider {ref.provider} cannot poll deferred responses (model {ref.model_id})")
            return
        request = self._build_request(effect, effect.cutoff)
        await self._answer(effect, lambda on_partial: provider.poll(request, effect.handle))

    async def _answer(self, effect: CallModel | PollModel, call: Callable[[Any], Any]) -> None:
        """Run a provider call; stream throttled partials; report the outcome
        as exactly one event (responded, deferred or failed)."""
        latest: list[str | None] = [None]
        interval = max(self.state.settings.partial_interval_ms, 1) / 1000

        def on_partial(text: str) -> None:
            if text:
                latest[0] = text

        async def pump() -> None:
            # trailing-edge throttle: at most one partial per interval, and
            # each one goes through the reducer (one commit in flight)
            sent: str | None = None
            while True:
                await trio.sleep(interval)
                if latest[0] is not None and latest[0] != sent:
                    sent = latest[0]
                    self.send(ModelStreamed(now=self.clock(), task_id=effect.task_id, attempt=effect.attempt, text=sent))

        base = {"now": 0, "task_id": effect.task_id, "attempt": effect.attempt}
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            try:
                reply = await call(on_partial)
            except Exception as e:  # reported below, outside the nursery
                failure = e
            nursery.cancel_scope.cancel()
        try:
            if failure is not None:
                raise failure
        except ModelError as e:
            self.send(
                ModelFailed(
                    **{**base, "now": self.clock()},
                    message=str(e),
                    retryable=e.retryable,
                    retry_after_ms=e.retry_after_ms,
                    reason="context_overflow" if e.overflow else "model_error",
                )
            )
            return
        except Exception as e:  # a provider bug must not strand the run
            self.send(ModelFailed(**{**base, "now": self.clock()}, message=f"{type(e).__name__}: {e}"))
            return
        problem = reply_problem(reply)
        if problem is not None:
            log.warning("task %s: %s", effect.task_id, problem)
            self._fail_request(effect, problem)
            return
        if isinstance(reply, ModelDeferredReply):
            self.send(
                ModelDeferred(**{**base, "now": self.clock()}, handle=reply.handle, poll_after_ms=reply.poll_after_ms)
            )
            return
        self.send(
            ModelResponded(
                **{**base, "now": self.clock()},
                text=reply.text,
                tool_calls=reply.tool_calls,
                stop_reason=reply.stop_reason,
                usage=reply.usage,
                prepared=self._prepare_calls(reply.tool_calls, effect.tools),
            )
        )

    def _prepare_calls(
        self, calls: tuple[ToolCall, ...], allowed: tuple[str, ...] | None
    ) -> tuple[PreparedCall | None, ...]:
        """Resolve and validate the calls now, so their tool tasks can be born
        at ``execute`` in the round's own commit. Not when before-tool hooks
        are installed (they run in the ``call`` phase); a call that does not
        resolve or validate gets None and takes the ``call`` phase, which
        answers it with the error result."""
        if not calls or self.registry.hooks("before_tool"):
            return ()
        out: list[PreparedCall | None] = []
        for call in calls:
            tool = self._tool(call.name, allowed)
            if tool is None or tool.validate(call.arguments) is not None:
                out.append(None)
            else:
                out.append(PreparedCall(arguments=dict(call.arguments), replay=tool.replay))
        return tuple(out)

    async def _do_sleep(self, effect: Sleep) -> None:
        while (remaining := (effect.until - self.clock()) / 1000) > 0:
            await trio.sleep(remaining)
        self.send(TimerFired(now=self.clock(), task_id=effect.task_id, until=effect.until))

    def _tool(self, name: Any, allowed: tuple[str, ...] | None) -> Any:
        """The installed tool ``name`` if the agent's filter offers it."""
        if not isinstance(name, str) or (allowed is not None and name not in allowed):
            return None
        return self.registry.tool(name)

    def _resolve_call(self, effect: PrepareTool) -> tuple[Any, Any] | None:
        """The call and its tool, or None after sending the rejection."""
        entry = self.context.entry(effect.assistant_entry_id) or self.storage.entry(effect.assistant_entry_id)
        call = None if entry is None else next((c for c in entry.tool_calls if c.id == effect.call_id), None)
        if call is None:
            self._reject(effect, "invalid_call", f"Tool call {effect.call_id} not found in entry {effect.assistant_entry_id}")
            return None
        tool = self._tool(call.name, effect.tools)
        if tool is None:
            self._reject(effect, "tool_unavailable", f"Tool {call.name} is not available")
            return None
        problem = tool.validate(call.arguments)
        if problem is not None:
            self._reject(effect, "invalid_arguments", f"Invalid arguments for tool {call.name}: {problem}")
            return None
        return call, tool

    def _reject(self, effect: PrepareTool, code: str, message: str) -> None:
        self.send(ToolRejected(now=self.clock(), task_id=effect.task_id, code=code, message=message))

    def _do_prepare_tool(self, effect: PrepareTool) -> None:
        resolved = self._resolve_call(effect)
        if resolved is None:
            return
        call, tool = resolved
        self.send(
            ToolPrepared(now=self.clock(), task_id=effect.task_id, arguments=dict(call.arguments), replay=tool.replay)
        )

    async def _do_prepare_with_hooks(self, effect: PrepareTool) -> None:
        resolved = self._resolve_call(effect)
        if resolved is None:
            return
        call, tool = resolved
        ctx = HookContext(effect.task_id, effect.conversation_id, self.harness, self)
        arguments = dict(call.arguments)
        for hook in self.registry.hooks("before_tool"):
            try:
                changed = await hook(ctx, attrs.evolve(call, arguments=arguments))
            except Exception as e:  # a raising hook blocks the call
                self._reject(effect, "blocked", f"Tool call blocked: {e}")
                return
            if changed is not None:
                arguments = dict(changed)
        problem = tool.validate(arguments)
        if problem is not None:
            self._reject(effect, "invalid_arguments", f"Invalid arguments for tool {call.name}: {problem}")
            return
        self.send(ToolPrepared(now=self.clock(), task_id=effect.task_id, arguments=arguments, replay=tool.replay))

    async def _before_request(self, request: ModelRequest) -> ModelRequest:
        """``before_request`` hooks may replace the messages of this request
        only (nothing is stored)."""
        hooks = self.registry.hooks("before_request")
        if not hooks:
            return request
        ctx = HookContext(request.task_id, request.conversation_id, self.harness, self)
        messages = list(request.messages)
        for hook in hooks:
            try:
                replaced = await hook(ctx, list(messages))
            except Exception as e:  # reported; the request goes on unchanged by it
                log.warning("before_request hook %r raised (task %s): %s", hook, request.task_id, e, exc_info=e)
                continue
            if replaced is not None:
                messages = list(replaced)
        return attrs.evolve(request, messages=tuple(messages))

    async def _after_tool(self, effect: RunTool, ctx: ToolCallContext, result: ToolResult) -> Any:
        hooks = self.registry.hooks("after_tool")
        if not hooks:
            return result
        hctx = HookContext(effect.task_id, effect.conversation_id, self.harness, self)
        call = ToolCall(id=effect.call_id, name=effect.name, arguments=dict(effect.arguments))
        for hook in hooks:
            try:
                replaced = await hook(hctx, call, result)
            except Exception as e:  # an observer failing does not fail the call: reported
                log.warning("after_tool hook %r raised (task %s): %s", hook, effect.task_id, e, exc_info=e)
                continue
            if replaced is not None:
                result = tool_result(effect.name, replaced, ToolResult)
        return result

    async def record_process(self, task_id: TaskId, pid: int) -> None:
        """``ToolCallContext.record_process``: commit the process group into
        the tool's checkpoint and wait until it is durable."""
        from .env import describe_process

        process = describe_process(pid)
        resp = await self.request(
            lambda ticket, now: ToolProcessStarted(now=now, ticket=ticket, task_id=task_id, process=process)
        )
        if isinstance(resp.reply, Refused):
            raise RuntimeError(resp.reply.message)

    async def _do_run_phase(self, job: tuple[RunPhase, Any]) -> None:
        effect, task = job
        ran = dict(effect.checkpoint)

        def returned(error: str | None = None, cancelled: bool = False) -> None:
            self.send(
                PhaseReturned(
                    now=self.clock(), task_id=effect.task_id, mode=effect.mode, ran=ran, error=error, cancelled=cancelled
                )
            )

        definition = self.registry.task(effect.kind)
        if definition is None or task is None:
            returned(error=f"Task {effect.task_id}: no definition of {effect.kind} is installed")
            return
        handler = definition.abort if effect.mode == "abort" else definition.phases.get(str(ran.get("phase")))
        if handler is None:
            returned(error=f"Task {effect.task_id}: {effect.kind} has no handler for {ran.get('phase')!r}")
            return
        runtime = TaskRuntime(self, attrs.evolve(task, checkpoint=ran), effect.mode)
        try:
            progress = await handler(attrs.evolve(task, checkpoint=ran), runtime)
            if isinstance(progress, Progress):
                await runtime.commit(
                    progress.status,
                    checkpoint=progress.checkpoint,
                    on=progress.on,
                    policy=progress.policy,
                    outcome=progress.outcome,
                )
        except trio.Cancelled:
            returned(cancelled=True)
            raise
        except Exception as e:  # host code failed: the task faults, the harness goes on
            returned(error=f"{type(e).__name__}: {e}" if not isinstance(e, (TaskCommitError, InvalidInput)) else str(e))
            return
        returned()

    async def _do_migrate(self, effect: MigrateTask) -> None:
        definition = self.registry.task(effect.kind)
        version = definition.version if definition is not None else effect.from_version
        try:
            if definition is None or definition.migrate is None:
                raise RuntimeError(f"no migrate() for {effect.kind}")
            new_input, new_checkpoint = definition.migrate(dict(effect.input), dict(effect.checkpoint), effect.from_version)
            codec.dumps([new_input, new_checkpoint])
        except Exception as e:
            self.send(MigrationFinished(now=self.clock(), task_id=effect.task_id, version=version, error=str(e)))
            return
        self.send(
            MigrationFinished(
                now=self.clock(), task_id=effect.task_id, version=version, input=new_input, checkpoint=new_checkpoint
            )
        )

    async def _do_run_tool(self, effect: RunTool) -> None:
        tool = self.registry.tool(effect.name)
        if tool is None:
            self.send(
                ToolFailed(now=self.clock(), task_id=effect.task_id, message=f"Tool {effect.name} is not installed")
            )
            return
        async def record(pid: int) -> None:
            await self.record_process(effect.task_id, pid)

        ctx = ToolCallContext(
            env=self.env,
            task_id=effect.task_id,
            conversation_id=effect.conversation_id,
            call_id=effect.call_id,
            harness=self.harness,
            idempotency_key=f"{self.store_id}:tool:{effect.task_id}",
            cwd=effect.cwd,
            record=record,
        )
        try:
            result = tool_result(effect.name, await tool.execute(ctx, dict(effect.arguments)), ToolResult)
            result = await self._after_tool(effect, ctx, result)
        except Exception as e:  # a raising tool (or a result that is not one) is an error result
            message = str(e) or type(e).__name__
            self.send(ToolFailed(now=self.clock(), task_id=effect.task_id, message=message))
            return
        self.send(
            ToolFinished(
                now=self.clock(), task_id=effect.task_id, text=result.text, is_error=result.is_error, usage=result.usage
            )
        )


INTERPRETERS: dict[type, Callable[[Runtime, Any], None]] = {
    Commit: Runtime._commit,
    CallModel: Runtime._call_model,
    PrepareTool: Runtime._prepare_tool,
    RunTool: Runtime._run_tool,
    RunPhase: Runtime._run_phase,
    PollModel: Runtime._poll_model,
    CancelDeferred: Runtime._cancel_deferred,
    Sleep: Runtime._sleep,
    MigrateTask: Runtime._migrate_task,
    Cancel: Runtime._cancel,
    Respond: Runtime._respond,
}
assert set(INTERPRETERS) == set(EFFECT_TYPES), "every effect type needs an interpreter"
