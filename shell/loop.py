"""The reducer loop: take events, step, run effects in order, commit in batches.

Theory of operation (the per-effect contract; docs/contract.md says it for hosts)
------------------------------------------------------------------------------
One task owns ``State``. It takes ready events from one Trio memory channel
(up to ``MAX_BATCH`` at once), steps each through the pure ``step`` (a run of
``GROUPED`` results in one draft: ``step_many``, one commit) and then runs the
effects of the whole batch: first ALL their commits in ONE storage
transaction, then the acts in the order the core returned them. What the shell guarantees, per effect kind:

- ``Commit``: durable before any later effect starts (persist, then act). It
  journals, in the same transaction, every event stepped since the previous
  commit, exactly as stepped (enriched, cleaned), so the journal replays.
  Batching keeps the order: every act of the batch starts after every commit
  of the batch; an event that reads storage (``enrich.py``) first flushes the
  batch so far, so its read sees every earlier decision. A store whose
  commit is a network round trip (``OffThreadCommits``: PostgreSQL) is
  awaited in a worker thread: other tasks run meanwhile (they only queue
  events), and a second activation of the reducer (``handle(Opened)`` racing
  ``run``) waits for the first to finish. Inline stores add no checkpoint.
- ``Respond``: answers the host call holding its ticket. It is an act, so it
  never runs before the commit it answers is durable.
- ``CallModel``, ``PollModel``, ``PrepareTool`` with hooks, ``RunTool``,
  ``RunReconcile``, ``RunPhase``, ``MigrateTask``, ``Sleep``: a child of the harness nursery in a
  cancel scope kept in ``inflight[task_id]``; it reports back only by sending
  events (``interpreters/``). If it raises, ``InvocationFailed`` faults its task
  (logged to ``pidurable``); when it leaves, its scope is dropped and waiters
  wake, so an abort can join the work it stopped.
- ``RunTool``: the bodies of one conversation's calls acted in one flush start
  in the order the core emitted them, which is call order (Trio starts
  sibling tasks in no fixed order, so only the round's first task is spawned
  at act time; a body that finishes without suspending is followed by the
  next in the same task, one that suspends first hands the rest to a new
  task: ``_spawn_in_call_order``). Every body has its own cancel scope in
  ``inflight`` from act time on, and its own copy of the context. They
  still run concurrently and finish in any order.
- ``PrepareTool`` without hooks: inline (short, bounded); its answer is the
  next event. ``CancelDeferred``: a best-effort child, outside ``inflight``.
- ``Cancel``: cancels the task's scope. The cancelled invocation reports
  nothing more the core needs: the core already settled the task in the
  commit that preceded ``Cancel`` and drops any late result as stale (a phase
  still reports ``PhaseReturned(cancelled=True)``); its leaving is accounted
  for in ``inflight``, which ``abort`` waits on.

``hooks.before_effect(i, effect)`` runs before every effect, commits included
(``i`` counts effects in this process life): the seam where crash tests kill
the shell. Host waits use one primitive, ``waits.until(check)``
(``waits.py``), re-checked after every commit and every invocation leaving.
Once a batch's commits are durable the loop tells ``watches`` which
conversations each one touched (``watch.py``; watchers build their views
lazily, in their own tasks) and hands them to ``observer`` (``observe.py``:
log records and spans derived from what changed); a failed commit closes the
watches before the error leaves the loop.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import copy_context
from functools import partial
from itertools import filterfalse
from typing import Any, ClassVar, TypeGuard, assert_never, cast

import attrs
import trio

from pidurable.core import Step, step_many
from pidurable.core import step as core_step
from pidurable.core.effects import (
    CallModel,
    Cancel,
    CancelDeferred,
    Commit,
    Effect,
    MeasureContext,
    MigrateTask,
    PollModel,
    SelectCut,
    Summarize,
    PrepareTool,
    PutEntry,
    RenderSystem,
    RunAbortHooks,
    RunReconcile,
    RunAfterTools,
    Respond,
    RunPhase,
    RunTool,
    Sleep,
)
from pidurable.core.events import (
    Event,
    InvocationFailed,
    ModelFailed,
    ModelResponded,
    ModelStreamed,
    ToolFailed,
    ToolFinished,
    ToolPrepared,
    ToolProgressed,
    ToolRejected,
)
from pidurable.core.model import AgentConfig, ConversationId, TaskId
from pidurable.core.state import State

from .clock import trio_anchored_clock
from . import loading
from .context_cache import ContextCache
from .documents import DocumentUpdates
from .edge import clean_event
from .enrich import LOOKUPS, enrich, needs_lookup
from .interpreters import Interpreters
from .interpreters.ports import MakeEvent
from .interpreters.tasks import sleep
from .observe import Observer
from .rounds import Slot, Turn, until_suspended
from .storage.base import OffThreadCommits, Storage
from .waits import Waits
from .watch import Watches

#: The events a batch steps in one draft (``step_many``: one commit for a
#: run of them): what the work in flight reports - a model's answer, a tool's
#: preparation, progress and result. They name no conversation the core may
#: not hold and read nothing from storage; host requests (each answered on
#: its own commit) and everything else are stepped one by one.
GROUPED = frozenset({ModelResponded, ModelFailed, ModelStreamed, ToolPrepared, ToolRejected, ToolProgressed, ToolFinished, ToolFailed})
assert not GROUPED & LOOKUPS.keys(), "a grouped event would read storage (enrich.py)"

#: At most this many ready events are stepped before their effects run.
MAX_BATCH = 64

log = logging.getLogger("pidurable")

#: ``isinstance(w, PutEntry)``, ``isinstance(e, Commit)`` in one C call (for filter)
_IS_ENTRY = cast("Callable[[object], TypeGuard[PutEntry]]", PutEntry.__instancecheck__)
_IS_COMMIT = cast("Callable[[object], TypeGuard[Commit]]", Commit.__instancecheck__)

#: The effects acted as a child of the harness nursery, in a cancel scope kept
#: in ``inflight`` (``Loop._spawn``).
Spawned = (
    CallModel
    | PollModel
    | Summarize
    | PrepareTool
    | RunTool
    | RunPhase
    | MigrateTask
    | Sleep
    | RenderSystem
    | SelectCut
    | RunAfterTools
    | RunAbortHooks
    | RunReconcile
)
#: The tool bodies of one conversation acted in one flush, in call order; a
#: body is run with the round, its index and its turn (``_spawn_in_call_order``).
_Body = Callable[["_Round", int, Turn], Awaitable[None]]
_Round = list[_Body]


class Hooks:
    """Test seam. Production uses this no-op."""

    def before_effect(self, index: int, effect: Effect) -> None:
        pass


class Loop:
    """The reducer. Interpreters reach it only as a ``Requester`` port."""

    #: The known-bad variant's switch (acts before their commits), flipped only
    #: by tests/crash/test_harness_detects_bugs.py to prove the sweep catches it.
    PERSIST_BEFORE_ACTING: ClassVar[bool] = True

    def __init__(
        self, *, storage: Storage, store_id: str, hooks: Hooks | None = None, clock: Callable[[], int] | None = None
    ) -> None:
        self.storage = storage
        #: commit_many_async of a store that commits off the Trio thread
        self._offload = storage.commit_many_async if isinstance(storage, OffThreadCommits) else None
        #: set while a batch is handled, when its commits may suspend the reducer
        self._handling: trio.Event | None = None
        self.store_id = store_id
        self.hooks: Hooks = hooks or Hooks()
        self.clock: Callable[[], int] = clock or trio_anchored_clock()
        self.state = State()
        self.context = ContextCache(lambda cid: self.storage.entries(cid))
        self.interpreters: Interpreters | None = None
        self.nursery: trio.Nursery | None = None
        #: each invocation's cancel scope (a round's tool body: its ``Slot``)
        self.inflight: dict[TaskId, trio.CancelScope | Slot] = {}
        #: Host waits and request tickets (``waits.py``).
        self.waits = Waits()
        #: Conversation / task-graph watchers (``watch.py``), told after each durable commit.
        self.watches = Watches()
        #: Log records and spans derived from each durable commit (``observe.py``).
        self.observer = Observer()
        #: Document updates staged for events not yet stepped (``documents.py``).
        self.documents = DocumentUpdates(lambda: self.state)
        self.documents.stored = storage.document_state
        self.effect_index = 0
        self.steps = 0
        #: The agent as it is journaled: its model's context window recorded
        #: (edge.with_window; Harness.open sets it from the models port).
        self.windowed: Callable[[AgentConfig | None], AgentConfig | None] = lambda agent: agent
        self._send, self._recv = trio.open_memory_channel[Event](math.inf)
        self._journal: list[Event] = []
        #: Commits not yet persisted: the effect, the events it journals, and
        #: the state before the step that made it (what ``observe.py`` compares).
        self._commits: list[tuple[Commit, list[Event], State]] = []
        self._acts: list[Effect] = []
        #: per conversation, the tool bodies acted in this flush, in call order:
        #: each one's task starts the next one's (``_spawn_in_call_order``)
        self._tool_rounds: dict[ConversationId, _Round] = {}

    def start(self, nursery: trio.Nursery, interpreters: Interpreters) -> None:
        self.nursery, self.interpreters = nursery, interpreters
        self.watches.spawn = nursery.start_soon  # watch relays (watch.py)

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: Hooks) -> None:
        self._hooks = hooks
        #: its before_effect, None for the production no-op: not called per effect (issue 11 item 2)
        self._seam = None if type(hooks) is Hooks else hooks.before_effect

    @property
    def closed(self) -> bool:
        return self.waits.closed

    def close(self) -> None:
        """Refuse further calls and wake every waiter (it then raises); every
        watcher's iterator stops; open spans end."""
        self.waits.close()
        self.watches.close()
        self.observer.close()

    # --- feeding events ---------------------------------------------------
    def send(self, event: Event) -> None:
        """Queue an event for the reducer. Outside values in the results of
        effects are made strict JSON / valid UTF-8 here (``edge.py``)."""
        if not self.waits.closed:  # (self.closed without the property's call)
            self._send.send_nowait(clean_event(event))

    def send_checked(self, event: Event) -> None:
        """``send`` without ``clean_event``: every value of ``event`` was made
        valid at the edge already (a tool body's result, ``edge.tool_result``),
        so cleaning it again would find nothing (issue 11 item 2)."""
        if not self.waits.closed:
            self._send.send_nowait(event)

    def background(self, job: Callable[[], Awaitable[None]]) -> None:
        """Start a short helper task (a progress flush) in the harness nursery,
        without a cancel scope of its own: cheaper than a nursery per call."""
        assert self.nursery is not None, "Loop.start() first"
        self.nursery.start_soon(job)

    async def request(self, make: MakeEvent) -> Respond:
        """Send a host event carrying a fresh ticket; wait for its Respond."""
        number, ticket = self.waits.ticket()
        self.send(make(number, self.clock()))
        return await ticket.wait()

    async def next_commit(self) -> None:
        """Wait for the next commit (or invocation leaving, or the close)."""
        await self.waits.next_commit()

    # --- the reducer ------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            batch = [await self._recv.receive()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            await self.handle_batch(batch)

    async def handle(self, event: Event) -> None:
        """Step one event and run its effects (``Harness.open`` steps ``Opened`` so)."""
        await self.handle_batch([event])

    async def handle_batch(self, events: list[Event]) -> None:
        """Step ``events`` and run their effects. It suspends only to await a
        commit off the Trio thread; then a second call waits its turn."""
        if self._offload is None:  # an inline store: no batch suspends, none waits its turn
            await self._handle_batch(events)
            return
        while self._handling is not None:
            await self._handling.wait()
        self._handling = trio.Event()
        try:
            await self._handle_batch(events)
        finally:
            handling, self._handling = self._handling, None
            if handling is not None:
                handling.set()

    async def _handle_batch(self, events: list[Event]) -> None:
        # the settled conversations the whole batch names, in one read before
        # its first step (nothing of it is stepped yet: storage is current)
        away, held = loading.away_all(events, self.state, self.documents)
        if away:
            loaded = loading.load(self.storage, away, events[0].now, held)
            if loaded is not None:
                self._step(loaded)
        grouped: list[Event] = []  # a run of GROUPED events, stepped together (_step_many)
        for i, event in enumerate(events):
            documents = self.documents
            if type(event) in GROUPED and not (i and loading.named(event, documents)) and not documents.waiting(event):
                grouped.append(event)
                continue
            if grouped:
                self._step_many(grouped)
                grouped = []
            # one evicted again within the batch (more than KEEP_SETTLED settled);
            # not for the first event: nothing but that read was stepped before
            # it, so what it names is held now or is not stored at all
            away = loading.away(event, self.state, self.documents) if i else []
            if away:  # a settled conversation the core does not hold (loading.py)
                await self._flush()  # the read must see every earlier decision
                loaded = loading.load(self.storage, away, event.now)
                if loaded is not None:
                    self._step(loaded)
            if needs_lookup(event):
                await self._flush()  # the read must see every earlier decision
                event = enrich(event, self.state, self.storage)
            if self.documents.waiting(event):
                # staged update functions run on the value the core holds now
                resolved = self.documents.resolve(event, self.state)
                if isinstance(resolved, Respond):
                    self.waits.answer(resolved)  # refused: nothing stepped, nothing stored
                    continue
                event = resolved
            self._step(event)
        if grouped:
            self._step_many(grouped)
        await self._flush()

    def _step_many(self, events: list[Event]) -> None:
        """``events`` (GROUPED) in one draft: one commit for all of them, which
        journals them as one row (replay steps a row's events so: journal.py)."""
        self._journal.extend(events)
        self._stepped(step_many(self.state, events), len(events))

    def _step(self, event: Event) -> None:
        self._journal.append(event)
        self._stepped(core_step(self.state, event), 1)

    def _stepped(self, result: Step, n: int) -> None:
        """Take the result of stepping ``n`` events: the new state, the commit
        (it journals every event stepped since the last one), the acts in order."""
        before = self.state
        self.state = result.state
        self.steps += n
        effects = result.effects
        for effect in filter(_IS_COMMIT, effects):
            self._commits.append((effect, self._journal, before))
            self._journal = []
        self._acts.extend(filterfalse(_IS_COMMIT, effects))  # the acts, in order (in C: issue 11 item 2)

    async def _flush(self) -> None:
        commits, acts = self._commits, self._acts
        self._commits, self._acts = [], []
        if self.PERSIST_BEFORE_ACTING:
            observed = await self._persist(commits)
            self._act_all(acts, observed)
        else:  # the known-bad variant: never in production
            self._act_all(acts)
            await self._persist(commits)

    async def _persist(self, commits: list[tuple[Commit, list[Event], State]]) -> bool | None:
        """Make ``commits`` durable; returns whether the acts that follow are
        observed, if the observer knows it (``Observer.committed``)."""
        if not commits:
            return None
        if self._seam is None:  # no seam to call: count the effects (issue 11 item 2)
            self.effect_index += len(commits)
        else:
            for effect, _, _ in commits:
                self._before(effect)
        batch = [(effect.seq, effect.writes, events) for effect, events, _ in commits]
        try:
            if self._offload is not None:
                await self._offload(batch)  # not cancellable: the outcome is always known
            else:
                self.storage.commit_many(batch)
        except BaseException:
            # State is now ahead of the store: no watcher may build a view from it
            self.watches.close()
            raise
        for effect, _, _ in commits:
            for w in filter(_IS_ENTRY, effect.writes):  # (in C: issue 11 item 2)
                self.context.on_entry(w.entry)
            self.waits.committed(effect.writes)
            self.watches.committed(effect.seq, effect.writes)
        observed = self.observer.committed(commits, self.state)
        self.waits.wake()
        return observed

    def _act_all(self, acts: list[Effect], observed: bool | None = None) -> None:
        self._tool_rounds = {}
        try:
            observed = bool(acts) and (self.observer.acting() if observed is None else observed)
        except Exception:  # then each act asks, and fails, as its own (below)
            observed = True
        seam = self._seam
        for effect in acts:
            if seam is None:  # (no call per act: issue 11 item 2)
                self.effect_index += 1
            else:
                self._before(effect)
            try:
                if observed:
                    self.observer.acted(effect, self.state)  # a tool re-run after a restart commits nothing
                self._act(effect)
            except Exception as e:  # one effect failing never stops the harness
                self._invocation_failed(effect, e)

    def _before(self, effect: Effect) -> None:
        index = self.effect_index
        self.effect_index = index + 1
        if self._seam is not None:
            self._seam(index, effect)

    # --- acts ------------------------------------------------------------------
    def _act(self, effect: Effect) -> None:
        do = self.interpreters
        assert do is not None and self.nursery is not None, "Loop.start() first"
        match effect:  # (a case is an isinstance test: the most frequent acts first)
            case RunTool():
                run = partial(do.tools.run, effect, self.state.settings.partial_interval_ms)
                self._spawn_in_call_order(effect, run)
            case CallModel():
                self._spawn(effect, partial(do.models.call, effect, self.state.settings.partial_interval_ms))
            case PollModel():
                self._spawn(effect, partial(do.models.poll, effect, self.state.settings.partial_interval_ms))
            case SelectCut():
                if do.models.select_needs_hooks(effect):
                    self._spawn(effect, partial(do.models.select_cut_with_hooks, effect))
                else:
                    do.models.select_cut(effect)
            case MeasureContext():
                do.models.measure_context(effect)
            case Summarize():
                self._spawn(effect, partial(do.models.summarize, effect, self.state.settings.partial_interval_ms))
            case CancelDeferred():
                job = do.models.cancel_deferred(effect)
                if job is not None:
                    self.nursery.start_soon(job)
            case PrepareTool():
                if do.tools.needs_child(effect):
                    self._spawn(effect, partial(do.tools.prepare_with_hooks, effect))
                else:
                    do.tools.prepare(effect)
            case RunPhase():
                task = self.state.tasks.get(effect.task_id)  # a read-only snapshot, at dispatch
                self._spawn(effect, partial(do.tasks.run_phase, effect, task))
            case MigrateTask():
                self._spawn(effect, partial(do.tasks.migrate, effect))
            case Sleep():
                self._spawn(effect, partial(sleep, self, effect))
            case RunAfterTools():
                self._spawn(effect, partial(do.hooks.after_tools, effect))
            case RunAbortHooks():
                self._spawn(effect, partial(do.tools.abort_hooks, effect))
            case RunReconcile():
                self._spawn(effect, partial(do.tools.reconcile, effect))
            case RenderSystem():
                conv = self.state.conversations.get(effect.conversation_id)
                if conv is None:
                    return  # its task ended later in this batch and the settled conversation left (holding.py)
                self._spawn(effect, partial(do.hooks.render_system, effect, conv.agent))  # a read-only agent snapshot
            case Cancel():
                scope = self.inflight.get(effect.task_id)
                if scope is not None:
                    scope.cancel()
            case Respond():
                self.waits.answer(effect)
            case Commit():
                raise AssertionError("a commit is persisted by _flush, never acted")
            case _:
                assert_never(effect)

    def _spawn(self, effect: Spawned, job: Callable[[], Awaitable[None]]) -> None:
        """``job`` as a child, in a cancel scope kept in ``inflight`` from now on."""
        assert self.nursery is not None
        task_id = effect.task_id
        scope = trio.CancelScope()
        self.inflight[task_id] = scope

        async def guarded() -> None:
            try:
                with scope:
                    await job()
            except Exception as e:  # a bug in one invocation faults its task only
                self._invocation_failed(effect, e)
            finally:
                self._left(task_id, scope)

        self.nursery.start_soon(guarded)

    def _spawn_in_call_order(self, effect: RunTool, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """``job`` (a tool body) as a child, started once the body acted before
        it in this flush for the same conversation has started: the bodies of
        a parallel round start in call order, deterministically (Trio runs
        newly spawned tasks in an arbitrary order). Only the round's first
        task is spawned here (``_round``); a body that finishes without
        suspending is followed by the next one in the same task and the same
        cancel scope, and one that suspends hands the rest of the round to a
        new task just before it does (no event, no wait; a task and a scope
        fewer per body that never waits, issue 11 item 2; ``rounds.py``). A
        body cancelled before it started still lets the next one start, and
        never runs."""
        assert self.nursery is not None
        body = self._round_body(effect, job)
        round_ = self._tool_rounds.get(effect.conversation_id)
        if round_ is None:
            round_ = self._tool_rounds[effect.conversation_id] = []
            self.nursery.start_soon(self._round, round_, 0)
        round_.append(body)

    async def _round(self, round_: _Round, k: int) -> None:
        """Bodies ``k``, ``k + 1``... of a round, one after the other in one
        cancel scope, until one hands the rest to a new task (``_hand_off``).
        Each runs in its own copy of this task's context, as in a task of its
        own (a context variable one body sets is not seen by the next)."""
        turn = Turn(copy_context(), [False], trio.CancelScope())
        with turn.scope:
            while k < len(round_) and not turn.handed[0]:
                await round_[k](round_, k, turn)
                k += 1

    def _hand_off(self, round_: _Round, k: int, handed: list[bool]) -> None:
        """Bodies ``k``... of ``round_`` to a new task (once per task)."""
        if not handed[0]:
            handed[0] = True
            if k < len(round_):
                assert self.nursery is not None
                self.nursery.start_soon(self._round, round_, k)

    def _round_body(self, effect: RunTool, job: Callable[[], Coroutine[Any, Any, None]]) -> _Body:
        """Body ``k`` of a round as ``_round`` runs it; in ``inflight`` from now on."""
        task_id = effect.task_id
        slot = self.inflight[task_id] = Slot()

        async def body(round_: _Round, k: int, turn: Turn) -> None:
            then = partial(self._hand_off, round_, k + 1, turn.handed)
            try:
                if k > 0:
                    # as a body waiting for the previous one's start would: one
                    # cancelled before it starts never runs (nor any once the harness closes)
                    await trio.lowlevel.checkpoint_if_cancelled()
                    if slot.cancelled:
                        return
                if slot.cancelled:  # the round's first body starts in its cancelled scope
                    with trio.CancelScope() as own:
                        own.cancel()
                        slot.scope = own
                        await until_suspended(job(), turn.context.copy(), then)
                else:
                    slot.scope = turn.scope
                    await until_suspended(job(), turn.context.copy(), then)
            except Exception as e:  # a bug in one invocation faults its task only
                self._invocation_failed(effect, e)
            except BaseException:  # (a cancellation) the rest of the round starts as it would have
                then()
                raise
            finally:
                self._left(task_id, slot)

        return body

    def _left(self, task_id: TaskId, flight: trio.CancelScope | Slot) -> None:
        """An invocation left: its ``inflight`` entry goes, waiters wake."""
        if self.inflight.get(task_id) is flight:
            del self.inflight[task_id]
            self.waits.wake()

    def _invocation_failed(self, effect: Effect, error: Exception) -> None:
        """Interpreting ``effect`` raised: report it, and fault its task (the
        run it serves settles ``unanswered/faulted``); other work goes on."""
        task_id: TaskId | None = getattr(effect, "task_id", None)
        log.error("interpreting %s for task %s failed", type(effect).__name__, task_id, exc_info=error)
        if task_id is not None:
            message = f"Internal error while running {type(effect).__name__}: {type(error).__name__}: {error}"
            self.send(InvocationFailed(now=self.clock(), task_id=task_id, message=message))
