"""``pidurable.aio``: the harness API for asyncio hosts (FastAPI, Starlette,
aiohttp, Django async...), with no thread per waiting call.

Theory of operation
-------------------
pidurable's shell is Trio. Here Trio runs in **guest mode** inside the host's
running asyncio loop (``trio.lowlevel.start_guest_run``): Trio's scheduler
ticks are callbacks on the asyncio loop (``call_soon``), and only Trio's wait
for I/O happens in one helper thread, which hands the events back with
``call_soon_threadsafe``. Trio tasks therefore run in the loop's thread,
between asyncio callbacks, and can set asyncio futures directly.

One guest run serves every harness opened on a loop (Trio allows one run per
thread): the first ``Harness.open`` starts it, the last one to close ends it
(and waits for it to end). Each harness is held open by a Trio task of that
run (``_bridge.hold``); each facade call is a Trio task in the harness's
nursery that settles an asyncio future (``_bridge.Job``). Cancelling the
asyncio caller cancels that Trio task only, and waits until it has left:
``await handle.wait()`` cancelled by ``asyncio.timeout`` stops waiting and
nothing else - the durable run goes on. Errors cross with their own types
(``InvalidInput``, ``HarnessClosed``, ``NotFound``, ...).

The classes mirror ``pidurable.shell``'s (API.md): every method is the shell
method of the same name (signature, docstring), as an asyncio coroutine;
``watch()`` / ``watch_task_graph()`` are asyncio async context managers
whose views are an asyncio async iterator. docs/asyncio.md has the story and
the limits.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import outcome
import trio

from pidurable import shell
from pidurable.core.model import ConversationId, SubmissionId
from pidurable.shell.errors import HarnessClosed
from pidurable.shell.watch import ConversationView, TaskGraphView

from ._bridge import (
    Bridged,
    Facade,
    Job,
    Portal,
    closed_harness,
    configure,
    each,
    hold,
    keep,
    leave_error,
    maybe,
    nothing,
    same_parameters,
    settle,
)

__all__ = ["Conversation", "ConversationView", "Harness", "SubmissionHandle", "TaskGraphView", "Views"]

T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")
U = TypeVar("U")
V = TypeVar("V")
P = ParamSpec("P")


# --- waiting on Trio from asyncio ----------------------------------------------------


async def _join(done: asyncio.Future[None]) -> None:
    """Wait until ``done`` is set, through cancellations (the Trio side is
    already told to stop and ends promptly), then re-raise a cancellation."""
    cancelled = False
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _job(portal: Portal, fn: Callable[[], Awaitable[T]], promise: asyncio.Future[T]) -> tuple[Job[T], asyncio.Future[None]]:
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    job = Job(fn, promise, lambda: settle(finished, None))
    portal.start(job)
    return job, finished


async def run(portal: Portal, fn: Callable[[], Awaitable[T]]) -> T:
    """Await the shell coroutine ``fn()`` as a Trio task in ``portal``."""
    result: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    job, finished = _job(portal, fn, result)
    try:
        return await result
    except asyncio.CancelledError:
        portal.cancel(job)  # only this call: the harness and its runs go on
        await _join(finished)
        raise


@asynccontextmanager
async def held(
    portal: Portal, cm: Callable[[], AbstractAsyncContextManager[T]], closed: Callable[[], BaseException]
) -> AsyncIterator[tuple[T, Portal]]:
    """Keep the shell context manager ``cm()`` entered by a Trio task in
    ``portal`` while the block runs; yields its value and the portal inside it."""
    loop = asyncio.get_running_loop()
    entered: asyncio.Future[tuple[T, Portal]] = loop.create_future()
    exited: asyncio.Future[None] = loop.create_future()
    job, finished = _job(portal, lambda: hold(cm, entered, closed), exited)
    try:
        value, inner = await entered
    except asyncio.CancelledError:
        portal.cancel(job)
        await _join(finished)
        raise
    except BaseException:
        await _join(finished)
        if not exited.cancelled():
            exited.exception()  # the same error as entered's: retrieved here
        raise
    try:
        yield value, inner
    finally:
        inner.release()
        await _join(finished)
        error = leave_error(exited.exception())
        if error is not None:
            raise error  # how leaving went: a store that failed raises here


class _GuestRun:
    """The Trio guest run of one asyncio loop, shared by its harnesses."""

    _runs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _GuestRun] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self.stopping = False
        self.entered: asyncio.Future[tuple[None, Portal]] = loop.create_future()
        self.done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    @classmethod
    async def acquire(cls) -> _GuestRun:
        loop = _running_loop()
        while (run := cls._runs.get(loop)) is not None and run.stopping:
            await asyncio.shield(run.done)  # the last harness is closing it: start anew after
        if run is None:
            if trio.lowlevel.in_trio_run():
                raise RuntimeError(
                    "pidurable.aio cannot start Trio in this thread: a Trio run is already active here "
                    "(trio-asyncio, or Trio hosting this loop); use pidurable.shell.Harness from Trio"
                )
            run = cls._runs[loop] = cls(loop)
            try:
                run._start()
            except BaseException:
                del cls._runs[loop]
                raise
        run.users += 1
        try:
            await asyncio.shield(run.entered)
        except BaseException:
            await run.release()
            raise
        return run

    def _start(self) -> None:
        trio.lowlevel.start_guest_run(
            hold,
            nothing,
            self.entered,
            lambda: HarnessClosed("pidurable.aio: the Trio guest run has ended"),
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self.loop.call_soon,
            done_callback=self._done,
            # asyncio owns signal.set_wakeup_fd (loop.add_signal_handler):
            # Trio must not take it over
            host_uses_signal_set_wakeup_fd=True,
        )

    def _done(self, result: outcome.Outcome[None]) -> None:
        if not self.entered.done():
            self.entered.set_exception(HarnessClosed(f"pidurable.aio: the Trio guest run ended early: {result!r}"))
        self.done.set_result(result)

    @property
    def portal(self) -> Portal:
        return self.entered.result()[1]

    async def release(self) -> None:
        """One harness fewer; the last one ends the run and waits for it."""
        self.users -= 1
        if self.users:
            return
        self.stopping = True
        if self.entered.done() and not self.entered.exception():
            self.portal.release()
        while not self.done.done():
            try:
                await asyncio.shield(self.done)
            except asyncio.CancelledError:  # finish closing; the cancellation stays requested
                pass
        if self._runs.get(self.loop) is self:
            del self._runs[self.loop]
        self.done.result().unwrap()


def _running_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "pidurable.aio needs a running asyncio loop (call it from async code under asyncio); "
            "under Trio use pidurable.shell, from blocking code pidurable.sync"
        ) from None


# --- the facade's methods ------------------------------------------------------------


class _Coroutine(Bridged[S, P, U]):
    """A facade method: the shell method, awaited from asyncio."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Coroutine[S, P, U]: ...

    @overload
    def __get__(self, obj: Facade[S], owner: type[Any] | None = None) -> Callable[P, Coroutine[Any, Any, U]]: ...

    def __get__(self, obj: Facade[S] | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        portal, target, fn, wrap = obj._portal, obj._shell, self.fn, self.wrap

        async def call(*args: P.args, **kwargs: P.kwargs) -> U:
            return wrap(portal, await run(portal, lambda: fn(target, *args, **kwargs)))

        return self.shaped(call)


@overload
def method(fn: Callable[Concatenate[S, P], Awaitable[R]]) -> _Coroutine[S, P, R]: ...


@overload
def method(fn: Callable[Concatenate[S, P], Awaitable[R]], wrap: Callable[[Portal, R], U]) -> _Coroutine[S, P, U]: ...


def method(fn: Callable[..., Any], wrap: Callable[[Portal, Any], Any] = keep) -> _Coroutine[Any, Any, Any]:
    return _Coroutine(fn, wrap)


class Views(Generic[V]):
    """A watch's views as an asyncio async iterator (``async for view in views``);
    each step waits in Trio for the next committed view (docs/watch.md)."""

    def __init__(self, portal: Portal, views: AsyncIterator[V]) -> None:
        self._portal = portal
        self._views = views

    def __aiter__(self) -> Views[V]:
        return self

    async def __anext__(self) -> V:
        return await run(self._portal, self._views.__anext__)


class _Watcher(Bridged[S, P, U]):
    """A facade ``watch``: the shell's async context manager, held in Trio."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Watcher[S, P, U]: ...

    @overload
    def __get__(
        self, obj: Facade[S], owner: type[Any] | None = None
    ) -> Callable[P, AbstractAsyncContextManager[Views[U]]]: ...

    def __get__(self, obj: Facade[S] | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        portal, target, fn = obj._portal, obj._shell, self.fn

        @asynccontextmanager
        async def watch(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Views[U]]:
            # a watch left while a view is awaited ends that iteration
            async with held(portal, lambda: fn(target, *args, **kwargs), StopAsyncIteration) as (views, inner):
                yield Views(inner, views)

        return self.shaped(watch)


def watcher(fn: Callable[Concatenate[S, P], AbstractAsyncContextManager[AsyncIterator[V]]]) -> _Watcher[S, P, V]:
    return _Watcher(fn, keep)


# --- the facade ----------------------------------------------------------------------


class SubmissionHandle(Facade[shell.SubmissionHandle]):
    """``pidurable.shell.SubmissionHandle``, awaited from asyncio. A
    cancelled ``await handle.wait()`` stops waiting only."""

    __slots__ = ()

    @property
    def id(self) -> SubmissionId:
        return self._shell.id

    record = method(shell.SubmissionHandle.record)
    wait = method(shell.SubmissionHandle.wait)
    abort = method(shell.SubmissionHandle.abort)


def _conversation(portal: Portal, conv: shell.Conversation) -> Conversation:
    return Conversation(portal, conv)


class Conversation(Facade[shell.Conversation]):
    """``pidurable.shell.Conversation``, awaited from asyncio."""

    __slots__ = ()

    @property
    def id(self) -> ConversationId:
        return self._shell.id

    submit = method(shell.Conversation.submit, SubmissionHandle)
    transcript = method(shell.Conversation.transcript)
    context = method(shell.Conversation.context)
    usage = method(shell.Conversation.usage)
    agent = method(shell.Conversation.agent)
    configure = method(configure)
    idle = method(shell.Conversation.idle)
    wait_idle = method(shell.Conversation.wait_idle)
    abort = method(shell.Conversation.abort)
    reset = method(shell.Conversation.reset, SubmissionHandle)
    compact = method(shell.Conversation.compact)
    document = method(shell.Conversation.document)
    update_document = method(shell.Conversation.update_document)
    fork = method(shell.Conversation.fork, _conversation)
    forked_from = method(shell.Conversation.forked_from)
    owned_by = method(shell.Conversation.owned_by)
    watch = watcher(shell.Conversation.watch)


class Harness(Facade[shell.Harness]):
    """``pidurable.shell.Harness`` for asyncio: ``async with
    pidurable.aio.Harness.open(storage, models=..., registry=..., env=...) as
    harness:`` inside a running asyncio loop."""

    __slots__ = ()

    @staticmethod
    @same_parameters(shell.Harness.open)
    def open(*args: Any, **kwargs: Any) -> AbstractAsyncContextManager[Harness]:
        """``pidurable.shell.Harness.open`` (the same parameters) as an asyncio
        async context manager: starts Trio in guest mode on the running loop
        if no harness there has (the last one to close ends it), opens the
        store, runs recovery; leaving closes the harness (pending calls raise
        ``HarnessClosed``) and, with the last harness, ends the guest run."""
        return _open(lambda: shell.Harness.open(*args, **kwargs))

    resume = method(shell.Harness.resume)
    root = method(shell.Harness.root, _conversation)
    conversation = method(shell.Harness.conversation, maybe(_conversation))
    conversations = method(shell.Harness.conversations, each(_conversation))
    conversations_owned_by = method(shell.Harness.conversations_owned_by, each(_conversation))
    create_conversation = method(shell.Harness.create_conversation, _conversation)
    update_settings = method(shell.Harness.update_settings)
    submission = method(shell.Harness.submission, maybe(SubmissionHandle))
    abort_submission = method(shell.Harness.abort_submission)
    entry = method(shell.Harness.entry)
    task = method(shell.Harness.task)
    tasks = method(shell.Harness.tasks)
    create_task = method(shell.Harness.create_task)
    wait_for_task = method(shell.Harness.wait_for_task)
    abort_task = method(shell.Harness.abort_task)
    wait_idle = method(shell.Harness.wait_idle)
    usage = method(shell.Harness.usage)
    inspect = method(shell.Harness.inspect)
    watch_task_graph = watcher(shell.Harness.watch_task_graph)


@asynccontextmanager
async def _open(cm: Callable[[], AbstractAsyncContextManager[shell.Harness]]) -> AsyncIterator[Harness]:
    guest = await _GuestRun.acquire()
    try:
        async with held(guest.portal, cm, closed_harness) as (harness, portal):
            yield Harness(portal, harness)
    finally:
        await guest.release()
