"""``pidurable.sync``: the harness API as plain blocking calls, for scripts
and the REPL::

    with pidurable.sync.open("agent.sqlite", models=models) as harness:
        record = harness.root(agent=...).submit(Input("hi")).wait()

Theory of operation
-------------------
Each ``open`` starts one thread running ``trio.run``, whose main task holds
``pidurable.shell.Harness.open`` entered (``_bridge.hold``). Each call is a
Trio task in that harness's nursery (``_bridge.Job``) that settles a
``concurrent.futures.Future`` the calling thread blocks on. Ctrl-C
(``KeyboardInterrupt``) during a blocking call cancels that Trio task only,
waits for it to leave, and re-raises: an interrupted ``wait()`` leaves the
durable run going. Leaving the ``with`` block closes the harness and joins
the thread.

Not for async hosts: a blocking call in an asyncio loop's thread stalls
every other task of the loop, so every call raises ``RuntimeError`` there
(use ``pidurable.aio``), and in a Trio task (use ``pidurable.shell``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import trio

from pidurable import shell
from pidurable.core.model import ConversationId, Settings, SubmissionId
from pidurable.shell.interpreters.hooks import HookReport
from pidurable.shell.loop import Hooks
from pidurable.shell.providers.base import Models
from pidurable.shell.storage import open_sqlite_storage
from pidurable.shell.storage.base import Storage
from pidurable.shell.watch import ConversationView, TaskGraphView

from ._bridge import Bridged, Facade, Job, Portal, closed_harness, configure, each, fail, hold, keep, leave_error, maybe

__all__ = ["Conversation", "ConversationView", "Harness", "SubmissionHandle", "TaskGraphView", "Views", "open"]

T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")
U = TypeVar("U")
V = TypeVar("V")
P = ParamSpec("P")


def check_blocking_allowed() -> None:
    """A blocking call is refused where it would stall an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "pidurable.sync blocks the calling thread, and this thread runs an asyncio event loop: "
            "use pidurable.aio there (async with pidurable.aio.Harness.open(...) as harness); "
            "in Jupyter, whose kernel runs a loop, use pidurable.aio with top-level await"
        )
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            "pidurable.sync blocks the calling thread, and this thread runs Trio: use pidurable.shell.Harness there"
        )


def _interrupted(portal: Portal, job: Job[Any], finished: threading.Event) -> None:
    """The caller was interrupted (Ctrl-C): stop its Trio task, and join it."""
    portal.cancel(job)
    finished.wait()


def run(portal: Portal, fn: Callable[[], Awaitable[T]]) -> T:
    """Run the shell coroutine ``fn()`` as a Trio task in ``portal``; block for it."""
    check_blocking_allowed()
    result: Future[T] = Future()
    finished = threading.Event()
    job = Job(fn, result, finished.set)
    portal.start(job)
    try:
        return result.result()
    except BaseException:
        if not result.done():
            _interrupted(portal, job, finished)
        raise


@contextmanager
def held(
    portal: Portal, cm: Callable[[], AbstractAsyncContextManager[T]], closed: Callable[[], BaseException]
) -> Iterator[tuple[T, Portal]]:
    """Keep ``cm()`` entered by a Trio task in ``portal`` while the block runs."""
    check_blocking_allowed()
    entered: Future[tuple[T, Portal]] = Future()
    exited: Future[None] = Future()
    finished = threading.Event()
    job = Job(lambda: hold(cm, entered, closed), exited, finished.set)
    portal.start(job)
    try:
        value, inner = entered.result()
    except BaseException:
        if not entered.done():
            _interrupted(portal, job, finished)
        finished.wait()
        raise
    try:
        yield value, inner
    finally:
        inner.release()
        finished.wait()
        error = leave_error(exited.exception())
        if error is not None:
            raise error


class _Blocking(Bridged[S, P, U]):
    """A facade method: the shell method, run to completion."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Blocking[S, P, U]: ...

    @overload
    def __get__(self, obj: Facade[S], owner: type[Any] | None = None) -> Callable[P, U]: ...

    def __get__(self, obj: Facade[S] | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        portal, target, fn, wrap = obj._portal, obj._shell, self.fn, self.wrap

        def call(*args: P.args, **kwargs: P.kwargs) -> U:
            return wrap(portal, run(portal, lambda: fn(target, *args, **kwargs)))

        return self.shaped(call)


@overload
def method(fn: Callable[Concatenate[S, P], Awaitable[R]]) -> _Blocking[S, P, R]: ...


@overload
def method(fn: Callable[Concatenate[S, P], Awaitable[R]], wrap: Callable[[Portal, R], U]) -> _Blocking[S, P, U]: ...


def method(fn: Callable[..., Any], wrap: Callable[[Portal, Any], Any] = keep) -> _Blocking[Any, Any, Any]:
    return _Blocking(fn, wrap)


class Views(Generic[V]):
    """A watch's views as a blocking iterator (``for view in views``)."""

    def __init__(self, portal: Portal, views: AsyncIterator[V]) -> None:
        self._portal = portal
        self._views = views

    def __iter__(self) -> Views[V]:
        return self

    def __next__(self) -> V:
        try:
            return run(self._portal, self._views.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None


class _Watcher(Bridged[S, P, U]):
    """A facade ``watch``: the shell's async context manager, held in Trio."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Watcher[S, P, U]: ...

    @overload
    def __get__(self, obj: Facade[S], owner: type[Any] | None = None) -> Callable[P, AbstractContextManager[Views[U]]]: ...

    def __get__(self, obj: Facade[S] | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        portal, target, fn = obj._portal, obj._shell, self.fn

        @contextmanager
        def watch(*args: P.args, **kwargs: P.kwargs) -> Iterator[Views[U]]:
            with held(portal, lambda: fn(target, *args, **kwargs), StopAsyncIteration) as (views, inner):
                yield Views(inner, views)

        return self.shaped(watch)


def watcher(fn: Callable[Concatenate[S, P], AbstractAsyncContextManager[AsyncIterator[V]]]) -> _Watcher[S, P, V]:
    return _Watcher(fn, keep)


# --- the facade ----------------------------------------------------------------------


class SubmissionHandle(Facade[shell.SubmissionHandle]):
    """``pidurable.shell.SubmissionHandle``, blocking."""

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
    """``pidurable.shell.Conversation``, blocking."""

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
    """``pidurable.shell.Harness``, blocking; from :func:`open`."""

    __slots__ = ()

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


@contextmanager
def open(  # noqa: A001 - pidurable.sync.open, as API.md names it
    storage: Storage | str | os.PathLike[str],
    *,
    models: Models | None = None,
    registry: shell.Registry | None = None,
    env: object = None,
    settings: Settings | None = None,
    resume: bool = True,
    hooks: Hooks | None = None,
    clock: Callable[[], int] | None = None,
    on_report: Callable[[HookReport], None] | None = None,
    tracer: object = None,
) -> Iterator[Harness]:
    """``pidurable.shell.Harness.open`` for blocking code: ``storage`` is a
    store, or the path of a SQLite store (``open_sqlite_storage(path)``);
    ``registry`` defaults to an empty ``Registry()``. Starts a thread running
    Trio for this harness; leaving the block closes the harness and ends the
    thread. Raises ``RuntimeError`` inside a running event loop."""
    check_blocking_allowed()
    store = open_sqlite_storage(storage) if isinstance(storage, (str, os.PathLike)) else storage

    def opening() -> AbstractAsyncContextManager[shell.Harness]:
        return shell.Harness.open(
            store,
            models=models,
            registry=registry if registry is not None else shell.Registry(),
            env=env,
            settings=settings,
            resume=resume,
            hooks=hooks,
            clock=clock,
            on_report=on_report,
            tracer=tracer,
        )

    entered: Future[tuple[shell.Harness, Portal]] = Future()
    exited: Future[None] = Future()
    thread = threading.Thread(target=_trio_thread, args=(opening, entered, exited), name="pidurable.sync", daemon=True)
    thread.start()
    try:
        harness, portal = entered.result()
    except BaseException:
        _stop(entered, thread)
        raise
    try:
        yield Harness(portal, harness)
    finally:
        portal.release()
        thread.join()
        error = leave_error(exited.exception())
        if error is not None:
            raise error


def _trio_thread(
    cm: Callable[[], AbstractAsyncContextManager[shell.Harness]],
    entered: Future[tuple[shell.Harness, Portal]],
    exited: Future[None],
) -> None:
    try:
        trio.run(hold, cm, entered, closed_harness)
    except BaseException as exc:  # reported to the opener / the closer, never lost in the thread
        fail(entered, exc if isinstance(exc, Exception) else closed_harness())
        exited.set_exception(exc)
    else:
        fail(entered, closed_harness())
        exited.set_result(None)


def _stop(entered: Future[tuple[shell.Harness, Portal]], thread: threading.Thread) -> None:
    """Opening failed or was interrupted: once it is decided, close what opened."""
    while True:
        try:
            entered.exception()
            break
        except BaseException:  # interrupted again: still wait, the thread must not be left open
            continue
    if entered.exception() is None:
        entered.result()[1].release()
    thread.join()
