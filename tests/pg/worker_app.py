"""The app the worker tests, the chaos test and bench/scale_out.py run
(``pidurable worker --app worker_app:setup`` with tests/pg on the path).

Every conversation's run is one tool round and an answer: the model first
calls ``lookup`` (replay-safe) and ``book`` (replay-unsafe) in parallel, then
answers. ``book`` appends ``start <task id> <pid>`` to the file named by
``PIDURABLE_WORKER_LOG`` before its body's pause and ``end ...`` after it,
so a checker sees every body that started (an unsafe body must start at most
once per task). ``PIDURABLE_WORKER_DELAY`` (seconds, default 0.02): the
model's and each tool's pause; ``PIDURABLE_WORKER_TOOL_DELAY``: the tools'
alone.
"""

from __future__ import annotations

import os

import trio

from pidurable.core.model import ModelRef
from pidurable.shell import AgentConfig, Registry, define_tool
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.serve.setup import Setup

AGENT = AgentConfig(model=ModelRef("scripted", "worker-app"))


def _delay() -> float:
    return float(os.environ.get("PIDURABLE_WORKER_DELAY", "0.02"))


def _tool_delay() -> float:
    return float(os.environ.get("PIDURABLE_WORKER_TOOL_DELAY") or _delay())


def _log(line: str) -> None:
    path = os.environ.get("PIDURABLE_WORKER_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


async def _lookup(call, args):  # type: ignore[no-untyped-def]
    await trio.sleep(_tool_delay())
    return f"found {args['what']}"


async def _book(call, args):  # type: ignore[no-untyped-def]
    _log(f"start {call.task_id} {os.getpid()}")
    await trio.sleep(_tool_delay())
    _log(f"end {call.task_id} {os.getpid()}")
    return f"booked {args['what']}"


def _answer(request):  # type: ignore[no-untyped-def]
    if request.turn == 0:
        return reply(
            tool_calls=[tool_call("lookup", what=f"c{request.conversation_id}"), tool_call("book", what="seat")],
            delay=_delay(),
        )
    return reply(text=f"done {request.conversation_id}", delay=_delay())


def registry() -> Registry:
    reg = Registry()
    params = {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}
    reg.install(define_tool("lookup", "Look something up", params, _lookup, replay="safe"))
    reg.install(define_tool("book", "Book something (not repeatable)", params, _book, replay="unsafe"))
    return reg


def setup() -> Setup:
    return Setup(models=ScriptedModels(_answer, keep_requests=0), registry=registry(), agent=AGENT)
