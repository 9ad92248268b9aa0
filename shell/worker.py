"""Workers: many processes on many machines sharing one PostgreSQL store.

A :class:`Worker` holds the store in shared mode (``PostgresStorage(...,
shared=True)``), claims conversation trees with work (leases, fencing and id
blocks: ``storage/postgres_tree.py``) and runs one ``Harness`` per claimed
tree over that tree's fenced view - the same loop, core and recovery as a
single process: opening a claimed tree *is* a restart of that tree.

Theory of operation
-------------------
- Discovery: one LISTEN connection (a thread of its own) on the store's
  channel; ``submit`` and ``release`` NOTIFY the tree id. A notification for
  a tree this worker runs tells that tree to read its intake; any other one
  wakes the claim loop. Without notifications the claim loop still looks
  every ``poll_interval`` (a lost notification, an expired lease of a dead
  worker). Claims never exceed ``concurrency`` trees (fair sharing: a worker
  does not hoard); a tree pinned to another worker is never claimed here.
- Renewal: every ``renew_interval`` one statement extends all leases still
  held. A tree whose lease is gone is cancelled at once. Each tree keeps a
  local deadline (monotonic clock, taken *before* the renewal was sent, so it
  is never later than the database's): past it, the tree's harness refuses to
  start any effect (``_LeaseHooks``) and the tree is cancelled - a worker
  that was paused or cut off stops acting before another may have taken the
  tree, and its commits are refused by the fence in any case.
- A tree is released when it has no live task and no unsettled submission
  and no intake is pending (``release(idle=True)``). A tree stopped while
  its lease may still be ours (a clean stop of the worker, a local deadline
  passed) is handed back still wanted, so another worker takes it at once
  instead of waiting out the lease; a tree that failed is not (its lease
  expires first, so a tree that always fails is not retried in a hot loop).
- Failures stay per tree: ``LeaseLost`` (the fence refused a commit, or the
  lease expired locally) ends that tree quietly; any other error is logged
  and the tree is dropped (its lease expires and another worker retries).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import psycopg
import trio

from pidurable.core.effects import Effect
from pidurable.core.model import AgentConfig, ConversationId, Settings, Submission, SubmissionId

from .conversation import WHEN_BUSY, Conversation
from .host_input import check_agent, check_choice, check_id, check_json_object, check_text
from .errors import ConversationBusy, HarnessClosed, InvalidInput, NotFound
from .harness import Harness
from .loop import Hooks
from .registry import Registry
from .storage import postgres_layout as layout
from .storage import postgres_tree as trees
from .storage.base import LeaseLost, StorageError
from .storage.postgres import PostgresStorage
from .storage.postgres_tree import Claim, LeaseSettings, TreeStorage
from .submissions import Input, Write

__all__ = ["Client", "ExternalSubmission", "LeaseLost", "LeaseSettings", "Worker", "WorkerStatistics"]

log = logging.getLogger("pidurable.worker")

#: Connections a worker's trees share for commits and reads (each commit is
#: one short transaction; more trees queue for them, not for the server's
#: max_connections). The LISTEN and the renewals have one each besides.
POOL_SIZE = 8


@attrs.frozen(kw_only=True)
class WorkerStatistics:
    """Counts since the worker started."""

    running: int
    claimed: int
    #: given up idle
    released: int
    #: stopped while still held (a clean stop, a lease that may have
    #: expired locally but was still ours) and given back, still wanted
    handed_back: int
    #: taken by another worker (the fence or the renewal said so)
    lost: int
    #: ended by an error (the lease is left to expire)
    failed: int


@attrs.define(eq=False)
class _TreeRun:
    claim: Claim
    #: trio.current_time() after which this lease may have expired
    deadline: float
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    #: set when the tree should look at its intake (a notification, the start)
    intake_due: bool = True
    wake: trio.Event = attrs.field(factory=trio.Event)


class _LeaseHooks(Hooks):
    """No effect starts once the tree's lease may have expired."""

    def __init__(self, run: _TreeRun, inner: Hooks | None) -> None:
        self.run, self.inner = run, inner

    def before_effect(self, index: int, effect: Effect) -> None:
        if trio.current_time() >= self.run.deadline:
            c = self.run.claim
            raise LeaseLost(f"lease on tree {c.tree} epoch {c.epoch} may have expired (not renewed in time): stopping it")
        if self.inner is not None:
            self.inner.before_effect(index, effect)


class Worker:
    """Claims and runs conversation trees of the store at ``dsn`` (module comment)."""

    def __init__(
        self,
        dsn: str,
        *,
        registry: Registry,
        models: Any,
        env: object = None,
        settings: Settings | None = None,
        schema: str = "pidurable",
        worker_id: str | None = None,
        concurrency: int = 16,
        leases: LeaseSettings | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency must be a whole number >= 1, not {concurrency!r}")
        if not isinstance(registry, Registry):
            raise InvalidInput("registry must be a pidurable.shell.Registry")
        self.dsn, self.schema = dsn, schema
        self.registry, self.models, self.env, self.settings = registry, models, env, settings
        self.concurrency = concurrency
        self.leases = leases if leases is not None else LeaseSettings()
        self.hooks = hooks
        self._worker_id = worker_id
        self.store: PostgresStorage | None = None
        self._runs: dict[int, _TreeRun] = {}
        self._kick = trio.Event()
        self._counts = {"claimed": 0, "released": 0, "handed back": 0, "lost": 0, "failed": 0}
        #: called with (event, tree, epoch) for "claimed", "released", "handed back", "lost", "failed"
        self.on_event: Callable[[str, int, int], None] = lambda what, tree, epoch: None

    @property
    def worker_id(self) -> str:
        assert self.store is not None, "the worker is not running"
        return self.store.worker_id

    def client(self) -> Client:
        """A ``Client`` on this running worker's store: host code in the
        worker's process submits to any tree through it (the intake), held
        here or elsewhere."""
        if self.store is None:
            raise InvalidInput("the worker is not running (start Worker.run first)")
        return Client(store=self.store)

    def statistics(self) -> WorkerStatistics:
        return WorkerStatistics(running=len(self._runs), **{k.replace(" ", "_"): v for k, v in self._counts.items()})

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; then release every held tree (still wanted)."""
        store = await trio.to_thread.run_sync(
            lambda: PostgresStorage(
                self.dsn, worker_id=self._worker_id, schema=self.schema, shared=True, pool_size=POOL_SIZE
            )
        )
        self.store = store
        stop = threading.Event()
        listener: threading.Thread | None = None
        try:
            await trio.to_thread.run_sync(trees.bump_id_blocks, store)
            try:
                swept = await trio.to_thread.run_sync(trees.sweep, store)
            except StorageError as e:  # e.g. a deadlock with another worker's sweep: that one marked them
                log.warning("worker %s: sweeping for work failed (%s)", store.worker_id, e)
                swept = 0
            if swept:
                log.info("worker %s: %d trees with live work were marked wanted", store.worker_id, swept)
            listener = self._listen(store, stop, trio.lowlevel.current_trio_token())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._renew_loop, store)
                task_status.started()
                await self._claim_loop(store, nursery)
        finally:
            stop.set()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                held = [r.claim for r in self._runs.values()]  # the trees hand themselves back; any left
                for c in held:
                    try:
                        await trio.to_thread.run_sync(partial(trees.release, store, c, idle=False))
                    except StorageError as e:
                        log.info("worker %s: releasing tree %s: %s", store.worker_id, c.tree, e)
                if listener is not None:
                    await trio.to_thread.run_sync(listener.join, 2.0)
                await trio.to_thread.run_sync(store.close)

    # --- discovery ---------------------------------------------------------------
    def _listen(self, store: PostgresStorage, stop: threading.Event, token: trio.lowlevel.TrioToken) -> threading.Thread:
        """The LISTEN thread; a lost connection (a database restart or
        failover) is reopened (every second until it succeeds), and the claim
        loop looks at once (notifications were missed meanwhile)."""
        name = f"pidurable {store.worker_id} listen"[:63]

        def connect() -> psycopg.Connection[Any]:
            conn = psycopg.connect(self.dsn, autocommit=True, application_name=name)
            conn.execute(f"LISTEN {layout.channel(self.schema)}".encode())
            return conn

        first = connect()  # at start, a failure is the caller's

        def notified(payload: str) -> None:
            try:
                tree = int(payload)
            except ValueError:
                tree = -1
            run = self._runs.get(tree)
            if run is not None:
                run.intake_due = True
                run.wake.set()
            else:
                self._kick.set()

        def listen() -> None:
            conn: psycopg.Connection[Any] | None = first
            while not stop.is_set():
                try:
                    if conn is None:
                        conn = connect()
                        trio.from_thread.run_sync(self._kick.set, trio_token=token)  # look: notifications were missed
                    for n in conn.notifies(timeout=0.5):
                        trio.from_thread.run_sync(notified, n.payload, trio_token=token)
                        if stop.is_set():
                            break
                except trio.RunFinishedError:
                    break
                except psycopg.Error as e:  # the claim loop's polling still finds work meanwhile
                    log.warning("worker %s: LISTEN connection failed (%s); reconnecting", store.worker_id, e)
                    if conn is not None:
                        conn.close()
                    conn = None
                    stop.wait(min(self.leases.poll_interval, 1.0))
            if conn is not None:
                conn.close()

        thread = threading.Thread(target=listen, name="pidurable-listen", daemon=True)
        thread.start()
        return thread

    async def _claim_loop(self, store: PostgresStorage, nursery: trio.Nursery) -> None:
        me = store.worker_id
        while True:
            self._kick = trio.Event()
            free = self.concurrency - len(self._runs)
            if free > 0:
                started = trio.current_time()
                try:
                    claims = await trio.to_thread.run_sync(
                        lambda: trees.claim(store, me, free, self.leases.duration, exclude=list(self._runs))
                    )
                except StorageError as e:
                    log.warning("worker %s: claiming failed (%s); retrying", me, e)
                    claims = []
                for c in claims:
                    run = _TreeRun(claim=c, deadline=started + self.leases.duration * 0.95)
                    self._runs[c.tree] = run
                    self._counts["claimed"] += 1
                    self.on_event("claimed", c.tree, c.epoch)
                    nursery.start_soon(self._tree, store, run)
                if claims and len(claims) == free:
                    continue  # maybe more to take once capacity frees; loop waits below otherwise
            with trio.move_on_after(self.leases.poll_interval):
                await self._kick.wait()

    async def _renew_loop(self, store: PostgresStorage) -> None:
        # a connection of its own: renewals never queue behind the trees' commits for the pool
        while True:
            try:
                conn = await trio.to_thread.run_sync(
                    lambda: psycopg.connect(self.dsn, autocommit=True, application_name=f"pidurable {store.worker_id} renew"[:63])
                )
                break
            except psycopg.Error as e:  # the trees stop at their deadlines meanwhile
                log.warning("worker %s: cannot connect for renewals (%s); retrying", store.worker_id, e)
                await trio.sleep(self.leases.renew_interval)
        try:
            await self._renewing(store, conn)
        finally:
            conn.close()

    async def _renewing(self, store: PostgresStorage, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET search_path TO {store.schema}".encode())
        while True:
            await trio.sleep(self.leases.renew_interval)
            sent = trio.current_time()
            runs = []
            for r in list(self._runs.values()):
                if sent >= r.deadline:  # paused or cut off past it: stop, even if the renewal would still succeed
                    r.scope.cancel()
                else:
                    runs.append(r)
            if not runs:
                continue
            try:
                held: set[int] | None = await trio.to_thread.run_sync(
                    lambda: trees.renew(store, [r.claim for r in runs], self.leases.duration, conn=conn)
                )
            except StorageError as e:
                log.warning("worker %s: renewing leases failed (%s)", store.worker_id, e)
                held = None
            now = trio.current_time()
            for r in runs:
                if held is not None and r.claim.tree in held:
                    r.deadline = sent + self.leases.duration * 0.95
                elif held is not None:
                    log.info("worker %s: lease on tree %s epoch %s was taken", store.worker_id, r.claim.tree, r.claim.epoch)
                    r.deadline = now
                    r.scope.cancel()
                if now >= r.deadline:
                    r.scope.cancel()

    # --- one tree ------------------------------------------------------------------
    async def _tree(self, store: PostgresStorage, run: _TreeRun) -> None:
        c = run.claim
        outcome = "lost"
        try:
            with run.scope:
                async with Harness.open(
                    TreeStorage(store, c),
                    models=self.models,
                    registry=self.registry,
                    env=self.env,
                    settings=self.settings,
                    hooks=_LeaseHooks(run, self.hooks),
                ) as harness:
                    if await self._drive(store, run, harness):
                        outcome = "released"
        except LeaseLost as e:
            log.info("worker %s: %s", store.worker_id, e)
        except (Exception, BaseExceptionGroup) as e:  # a group: LeaseLost with the cancellations it caused
            lost = _lease_lost(e)
            if lost is not None:
                log.info("worker %s: %s", store.worker_id, lost)
            elif isinstance(e, Exception):  # one tree's failure never stops the worker: its lease expires, another retries
                log.exception("worker %s: tree %s failed", store.worker_id, c.tree)
                outcome = "failed"
            else:
                raise
        finally:
            if outcome == "lost":  # stopped (worker stop, local deadline) or lost: hand it back if still ours
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    try:
                        await trio.to_thread.run_sync(partial(trees.release, store, c, idle=False))
                        outcome = "handed back"
                    except StorageError:  # LeaseLost: another worker has it already
                        pass
            if self._runs.get(c.tree) is run:
                del self._runs[c.tree]
            self._counts[outcome] += 1
            self.on_event(outcome, c.tree, c.epoch)
            self._kick.set()

    async def _drive(self, store: PostgresStorage, run: _TreeRun, harness: Harness) -> bool:
        """Admit intake and wait until the tree is idle; True once released."""
        rt = harness.runtime
        while True:
            if run.intake_due:
                run.intake_due = False
                await self._admit(store, run, harness)
            state = rt.state
            if not state.tasks and not state.submissions and not run.intake_due:
                if await trio.to_thread.run_sync(lambda: trees.release(store, run.claim, idle=True)):
                    return True
                run.intake_due = True
                # the store still shows work (a commit was in flight): look again after the next commit
            run.wake = trio.Event()
            with trio.move_on_after(self.leases.poll_interval) as waited:
                await _first(rt.next_commit, run.wake.wait)
            if waited.cancelled_caught:
                run.intake_due = True  # a missed notification is found by the next look

    async def _admit(self, store: PostgresStorage, run: _TreeRun, harness: Harness) -> None:
        rows = await trio.to_thread.run_sync(trees.pending_intake, store, run.claim.tree)
        for intake_id, cid, rid, kind, payload in rows:
            data = json.loads(payload)
            conv = Conversation(ConversationId(cid), harness.runtime)
            item: Input | Write
            if kind == "write":
                item = Write(data["content"], request_id=rid, kind=data.get("kind", "user"), data=data.get("data"))
            else:
                item = Input(data["content"], request_id=rid, when_busy=data.get("when_busy", "follow_up"))
            submission_id, refused = None, None
            try:
                submission_id = int((await conv.submit(item)).id)
            except (ConversationBusy, InvalidInput, NotFound) as e:
                refused = f"{type(e).__name__}: {e}"
            await trio.to_thread.run_sync(trees.settle_intake, store, run.claim, intake_id, submission_id, refused)


def _lease_lost(e: BaseException) -> LeaseLost | None:
    """The LeaseLost an exception group carries, if nothing but cancellations
    came with it, or a host call (the intake's submit) that the harness closing
    ended (a tree's nursery reports its lost lease so)."""
    if not isinstance(e, BaseExceptionGroup):
        return e if isinstance(e, LeaseLost) else None
    found = None
    for leaf in e.exceptions:
        inner = _lease_lost(leaf)
        if inner is None and not isinstance(leaf, (trio.Cancelled, HarnessClosed)):
            return None
        found = found or inner
    return found


async def _first(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return once any of ``waits`` returns."""
    async with trio.open_nursery() as nursery:
        for wait in waits:

            async def one(wait: Callable[[], Awaitable[object]] = wait) -> None:
                await wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(one)


# --- hosts that own no tree ----------------------------------------------------------


@attrs.frozen
class ExternalSubmission:
    """A submission made through the database (``Client.submit``)."""

    intake_id: int
    conversation_id: int
    request_id: str
    _client: Client = attrs.field(repr=False, eq=False)

    async def submission_id(self, *, poll: float = 0.05) -> int:
        """The submission's id once the tree's owner admitted it; a refusal
        (``when_busy='reject'`` on a busy conversation, invalid input) raises
        ``ConversationBusy`` / ``InvalidInput``."""
        store = self._client.store
        while True:
            sid, refused = await trio.to_thread.run_sync(trees.intake_state, store, self.intake_id)
            if sid is not None:
                return sid
            if refused is not None:
                why = refused.split(": ", 1)[-1]
                if refused.startswith("ConversationBusy"):
                    raise ConversationBusy(self.conversation_id, why)
                raise InvalidInput(why)
            await trio.sleep(poll)

    async def wait(self, *, poll: float = 0.05) -> Submission:
        """The settled ``SubmissionRecord``."""
        sid = await self.submission_id(poll=poll)
        store = self._client.store
        while True:
            record = await trio.to_thread.run_sync(store.submission, SubmissionId(sid))
            if record is not None and record.settled:
                return record
            await trio.sleep(poll)


class Client:
    """A host's handle on a store its workers run: create conversations and
    submit without owning any tree (``submit`` admits in its own
    transaction and notifies the workers)."""

    def __init__(
        self, dsn: str | None = None, *, schema: str = "pidurable", worker_id: str | None = None, store: PostgresStorage | None = None
    ) -> None:
        if (dsn is None) == (store is None):
            raise InvalidInput("Client takes a dsn or a running worker's store (Worker.client()), not both or neither")
        self._owned = store is None
        self.store = store if store is not None else PostgresStorage(str(dsn), schema=schema, shared=True, worker_id=worker_id)

    def close(self) -> None:
        """Close the store (one this client opened; a worker's stays open)."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def create_conversation(self, agent: AgentConfig | None = None) -> int:
        """A new top-level conversation (its own tree); its id."""
        checked = check_agent(agent)
        return await trio.to_thread.run_sync(trees.create_conversation, self.store, checked)

    async def submit(self, conversation_id: int, item: Input | Write) -> ExternalSubmission:
        """Durably accept ``item`` for ``conversation_id``: one transaction
        (the intake row; the same request id finds the same row), then the
        tree's owner admits it. Bad input raises ``InvalidInput``, an unknown
        conversation ``NotFound``; nothing is stored then."""
        if isinstance(item, Write):
            kind = check_id(item.kind, "Write kind")
            if kind is None:
                raise InvalidInput("Write kind must be a non-empty string")
            payload: dict[str, Any] = {
                "content": check_text(item.content, "Write content"),
                "kind": kind,
                "data": check_json_object(item.data, "Write data"),
            }
            type_ = "write"
        elif isinstance(item, Input):
            payload = {
                "content": check_text(item.content, "Input content", empty=False),
                "when_busy": check_choice(item.when_busy, "when_busy", WHEN_BUSY),
            }
            type_ = "input"
        else:
            raise InvalidInput(f"submit() takes an Input or a Write, not {type(item).__name__}")
        request_id = check_id(item.request_id, "request_id")
        if isinstance(conversation_id, bool) or not isinstance(conversation_id, int):
            raise InvalidInput(f"conversation_id must be an int, not {type(conversation_id).__name__}")
        intake_id, rid = await trio.to_thread.run_sync(
            trees.submit, self.store, conversation_id, type_, payload, request_id
        )
        return ExternalSubmission(intake_id, conversation_id, rid, self)

    async def pin(self, tree: int, worker_id: str | None) -> None:
        """Only ``worker_id`` claims ``tree`` from now on (None: any worker)."""
        await trio.to_thread.run_sync(trees.pin, self.store, tree, worker_id)
