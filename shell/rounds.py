"""What the loop needs to run a round's tool bodies in call order with
fewer Trio tasks and cancel scopes (``Loop._spawn_in_call_order``; issue 11
item 2): a body's place in ``inflight`` (``Slot``), what a task running
bodies hands each one (``Turn``), and ``until_suspended``, which tells a
task when a body first suspends.

A task runs a round's bodies one after the other, all in one cancel scope,
while each finishes without suspending; the first that suspends hands the
rest of the round to a new task just before it does. So while a body runs
it is the only one in its scope that can still be cancelled: the bodies
before it have ended, and none after it runs in this task once it
suspends - and only a suspended body can be cancelled (``Cancel`` is acted
by the loop's task, which runs only while the body waits).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, NamedTuple

import trio


class Slot:
    """A round's tool body in ``inflight``, from act time until it ends.
    ``cancel``: once the body runs, its scope is cancelled (the body is the
    only one left in it); before, the body is marked and then never runs
    (the round's first body starts in a cancelled scope, as always)."""

    __slots__ = ("scope", "cancelled")

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class Turn(NamedTuple):
    """What a task running a round's bodies hands each one (``Loop._round``)."""

    #: the task's context as it started: each body runs in a copy of it
    context: Context
    #: set once the rest of the round was handed to a new task
    handed: list[bool]
    #: the scope the task runs its bodies in
    scope: trio.CancelScope


@types.coroutine
def until_suspended(
    coro: Coroutine[Any, Any, None], context: Context, then: Callable[[], None]
) -> Generator[Any, Any, None]:
    """``await coro`` with each of its steps run in ``context``; ``then()``
    once, just before ``coro`` first suspends (never if it finishes first)."""
    try:
        yielded = context.run(coro.send, None)
    except StopIteration:
        return
    then()
    while True:
        try:
            sent = yield yielded
        except BaseException as e:  # what Trio throws in goes on to coro
            try:
                yielded = context.run(coro.throw, e)
            except StopIteration:
                return
        else:
            try:
                yielded = context.run(coro.send, sent)
            except StopIteration:
                return


__all__ = ["Slot", "Turn", "until_suspended"]
