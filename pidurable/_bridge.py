"""The Trio side of the asyncio and blocking facades (``pidurable.aio``,
``pidurable.sync``), and what the two share.

Theory of operation
-------------------
A facade never touches a Trio object from outside Trio. Every facade call is
a :class:`Job`: a Trio task, started in a :class:`Portal`'s nursery through
the run's ``TrioToken`` (``run_sync_soon`` may be called from any thread, and
from a host loop between guest ticks), that awaits one shell coroutine and
settles a *promise* the caller waits on - an ``asyncio.Future`` for
``pidurable.aio`` (Trio's guest run executes in the loop's own thread, so it
sets the future directly), a ``concurrent.futures.Future`` for
``pidurable.sync`` (set from the Trio thread; thread-safe). The caller waits
on the promise; if the caller is cancelled it asks for ``Portal.cancel(job)``
(the job's own ``CancelScope``, nothing else) and joins the job through its
``finished`` callback, which every job calls exactly once, however it ends.

Context managers the shell opens (``Harness.open``, ``watch``) must be
entered and left by one Trio task: :func:`hold` enters one, opens a nursery
inside it - a new portal, where the calls on what it yielded run - reports
``(value, portal)`` and waits for ``Portal.release``. Leaving closes that
portal and cancels its nursery first (pending calls on a harness end with
``HarnessClosed``, a pending ``__anext__`` of a watch with the end of the
iteration), then leaves the context manager; the hold job's result is how
leaving went (a harness whose store failed raises the store's error there).
Holds nest: a watch is held inside its harness's portal, so closing the
harness ends its watches first, as in Trio.

The facades' classes are thin: each method is one :class:`Bridged`
descriptor naming the shell method it stands for (its signature and
docstring come from there) and how to wrap the result (a shell
``Conversation`` becomes the facade's); ``__get__`` is the only per-facade
part (a coroutine function for asyncio, a blocking function for sync).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

import trio

from pidurable.core.model import AgentConfig
from pidurable.shell.conversation import Conversation
from pidurable.shell.errors import HarnessClosed

T = TypeVar("T")
S = TypeVar("S")
U = TypeVar("U")
P = ParamSpec("P")
T_contra = TypeVar("T_contra", contravariant=True)


class Promise(Protocol[T_contra]):
    """What a job settles: ``asyncio.Future`` and ``concurrent.futures.Future``
    both are one."""

    def done(self) -> bool: ...

    def set_result(self, result: T_contra, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


def settle(promise: Promise[T], value: T) -> None:
    if not promise.done():  # a caller that was cancelled cancelled its future
        promise.set_result(value)


def fail(promise: Promise[Any], error: BaseException) -> None:
    if not promise.done():
        promise.set_exception(error)


class Job(Generic[T]):
    """One shell coroutine run as a Trio task for a caller outside Trio."""

    def __init__(self, fn: Callable[[], Awaitable[T]], promise: Promise[T], finished: Callable[[], object]) -> None:
        self._fn = fn
        self._promise = promise
        self._finished: Callable[[], object] | None = finished
        self._scope: trio.CancelScope | None = None
        self._cancelled = False

    async def run(self, closed: Callable[[], BaseException]) -> None:
        try:
            with trio.CancelScope() as self._scope:
                if self._cancelled:
                    self._scope.cancel()
                try:
                    value = await self._fn()
                except Exception as exc:  # the caller's error, with its type (InvalidInput, ...)
                    fail(self._promise, exc)
                else:
                    settle(self._promise, value)
        finally:
            # Cancelled by the caller (who no longer waits) or by the portal
            # closing (then the caller learns why).
            self.abandon(closed())

    def cancel(self) -> None:
        """In Trio: cancel this job only (before it started, too)."""
        self._cancelled = True
        if self._scope is not None:
            self._scope.cancel()

    def abandon(self, error: BaseException) -> None:
        """The job ends (or will never run): fail the promise if still open,
        and tell the caller it is over (once)."""
        fail(self._promise, error)
        finished, self._finished = self._finished, None
        if finished is not None:
            finished()


class Portal:
    """A nursery inside a held context (or the run's main one) where jobs run."""

    def __init__(self, token: trio.lowlevel.TrioToken, nursery: trio.Nursery, closed: Callable[[], BaseException]) -> None:
        self._token = token
        self._nursery = nursery
        #: The error a call gets once the portal is closed.
        self.closed = closed
        self.open = True
        self._release = trio.Event()

    def start(self, job: Job[Any]) -> None:
        """From anywhere: run ``job`` in this portal."""
        self._soon(job, self._start, job)

    def cancel(self, job: Job[Any]) -> None:
        """From anywhere: cancel ``job`` (only it)."""
        self._soon(job, job.cancel)

    def release(self) -> None:
        """From anywhere: leave the held context this portal lives in."""
        try:
            self._token.run_sync_soon(self._release.set)
        except trio.RunFinishedError:  # the run is over: so is the context
            pass

    def _soon(self, job: Job[Any], fn: Callable[..., object], *args: object) -> None:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:  # the Trio run is over: nothing will run the job
            job.abandon(self.closed())

    def _start(self, job: Job[Any]) -> None:
        if self.open:
            self._nursery.start_soon(job.run, self.closed)
        else:
            job.abandon(self.closed())


async def hold(
    cm: Callable[[], AbstractAsyncContextManager[T]],
    entered: Promise[tuple[T, Portal]],
    closed: Callable[[], BaseException],
) -> None:
    """Enter ``cm()``, report ``(value, portal)`` and keep it entered until
    the portal is released (see the module docstring). An error before
    entering fails ``entered`` too."""
    try:
        async with cm() as value:
            async with trio.open_nursery() as nursery:
                portal = Portal(trio.lowlevel.current_trio_token(), nursery, closed)
                if entered.done():  # the caller gave up while we entered
                    return
                entered.set_result((value, portal))
                try:
                    await portal._release.wait()
                finally:
                    portal.open = False
                    nursery.cancel_scope.cancel()
    except Exception as exc:
        fail(entered, exc)
        raise
    except BaseException:
        fail(entered, closed())
        raise


@asynccontextmanager
async def nothing() -> AsyncIterator[None]:
    """The context a facade's run holds at its root (its portal is the run's)."""
    yield


class Facade(Generic[S]):
    """A facade object: the shell object it stands for, and the portal its
    calls run through. Equal when the shell objects are."""

    __slots__ = ("_portal", "_shell")

    def __init__(self, portal: Portal, shell: S) -> None:
        self._portal = portal
        self._shell = shell

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._shell == self._shell

    def __hash__(self) -> int:
        return hash(self._shell)

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}({self._shell!r})"


class Bridged(Generic[S, P, U]):
    """A facade method standing for the shell method ``fn``; its result is
    passed through ``wrap(portal, result)``. Subclasses define ``__get__``
    (what calling it looks like from the host)."""

    def __init__(self, fn: Callable[Concatenate[S, P], Any], wrap: Callable[[Portal, Any], U]) -> None:
        self.fn = fn
        self.wrap = wrap
        self.__doc__ = fn.__doc__
        signature = inspect.signature(fn)
        #: The shell method's signature without ``self`` (for help() and IDEs).
        self.signature = signature.replace(parameters=list(signature.parameters.values())[1:])

    def shaped(self, call: Callable[..., T]) -> Callable[..., T]:
        """``call`` named and documented as the shell method."""
        call.__name__ = call.__qualname__ = self.fn.__name__
        call.__doc__ = self.fn.__doc__
        call.__signature__ = self.signature  # type: ignore[attr-defined]
        return call


def same_parameters(like: Callable[P, object]) -> Callable[[Callable[..., T]], Callable[P, T]]:
    """Give the decorated function ``like``'s parameters: for the type
    checker (``P``) and for ``help()`` (``__signature__``)."""

    def give(fn: Callable[..., T]) -> Callable[P, T]:
        fn.__signature__ = inspect.signature(like).replace(return_annotation=inspect.Signature.empty)  # type: ignore[attr-defined]
        return fn

    return give


def leave_error(error: BaseException | None) -> BaseException | None:
    """What leaving a held context raises: its own failure (a store that
    failed), never that it was already closed (``HarnessClosed``) or ended."""
    return None if isinstance(error, (HarnessClosed, StopAsyncIteration)) else error


async def configure(conversation: Any, /, **changes: Any) -> AgentConfig:
    return await cast(Conversation, conversation).configure(**changes)


# ``self`` positional-only: a ParamSpec cannot carry ``**changes`` beside a
# parameter named ``self``
configure.__doc__ = Conversation.configure.__doc__


def keep(portal: Portal, value: T) -> T:
    """The result as it is (a record)."""
    return value


def each(cls: Callable[[Portal, S], U]) -> Callable[[Portal, list[S]], list[U]]:
    """Wrap every shell object of a list."""
    return lambda portal, values: [cls(portal, v) for v in values]


def maybe(cls: Callable[[Portal, S], U]) -> Callable[[Portal, S | None], U | None]:
    """Wrap a shell object, or keep None."""
    return lambda portal, value: None if value is None else cls(portal, value)


def closed_harness() -> BaseException:
    return HarnessClosed("Harness is closed; open a new one on the store")
