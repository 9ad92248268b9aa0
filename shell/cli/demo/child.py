"""One process life of one demo part (``python -m pidurable.shell.cli.demo
child PART --db PATH --work DIR --life N [--storage sqlite|jsonl]``).

The child opens the store, installs the demo's tools and the scripted model,
submits the part's prompt under its request id (a killed life already stored
that submission, so a later life finds it) and waits for it to settle. Every
tool body first appends ``life name call_id`` to the runs file in the work
directory, so the parent can count body runs across processes. In life 1 the
part's ``self_kill_after`` tool kills its own process with SIGKILL after its
body ran, before the result can be committed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from pidurable.core.model import AgentConfig, ModelRef, Submission, SubmissionStatus

from ...env import LocalEnv
from ...harness import Harness, Input
from ...providers.scripted import ScriptedModels
from ...registry import (
    Execute,
    Extension,
    Reconciled,
    Registry,
    ToolCallContext,
    ToolDefinition,
    ToolResult,
    define_extension,
    define_tool,
)
from ...storage.jsonl import open_jsonl_storage
from ...storage.sqlite import open_sqlite_storage
from ...tools.coding import coding_tools
from .model import demo_model
from .scenarios import SCENARIOS, Booking, Query

def record_run(work: Path, life: int, name: str, call_id: str) -> None:
    """Append one body run to the runs file before the body does anything."""
    fd = os.open(work / SCENARIOS.runs_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{life}\t{name}\t{call_id}\n".encode())
    finally:
        os.close(fd)


def _kill_self() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - SIGKILL is not delivered late


def booking_tool(work: Path, booking: Booking, recorded: Any) -> ToolDefinition:
    """``book_train``: books at the booking service (a JSON file in ``work``,
    keyed by the call's idempotency key); its ``reconcile`` looks the key up
    there: a stored booking is ``done`` with its confirmation, none is
    ``not_done`` (book now)."""
    service = work / booking.service_file

    def bookings() -> dict[str, str]:
        return dict(json.loads(service.read_text())) if service.exists() else {}

    async def book(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        reference = "PNR-" + ctx.idempotency_key.rsplit(":", 1)[1].rjust(6, "0")
        confirmation = booking.confirmation.format(reference=reference, **args)
        service.write_text(json.dumps({**bookings(), ctx.idempotency_key: confirmation}))
        return confirmation

    async def look_up(ctx: ToolCallContext, args: dict[str, Any]) -> Reconciled:
        found = bookings().get(ctx.idempotency_key)
        return Reconciled.done(found) if found is not None else Reconciled.not_done()

    execute = recorded(booking.name, book)
    return define_tool(
        booking.name, booking.description, dict(booking.parameters), execute, replay="unsafe", reconcile=look_up
    )


def demo_tools(work: Path, life: int) -> Extension:
    """The demo's tools for process life ``life`` (1 = the life that dies):
    the coding tools ``read`` and ``edit`` (real files in ``work``), the
    queries of scenarios.toml and its booking tool."""
    coding = {t.name: t for t in coding_tools().tools}
    killers = {p.self_kill_after for p in SCENARIOS.parts if p.self_kill_after} if life == 1 else set()

    def recorded(name: str, body: Execute) -> Execute:
        async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult | str:
            record_run(work, life, name, ctx.call_id)
            result = await body(ctx, args)  # the real tool, on disk
            if name in killers:
                _kill_self()  # dies before the result can be committed
            return result

        return execute

    def query(q: Query) -> Execute:
        async def answer(ctx: ToolCallContext, args: dict[str, Any]) -> str:
            await trio.sleep(q.delay(life))
            return q.answer

        return answer

    return define_extension(
        "demo",
        tools=[
            *(attrs.evolve(coding[n], execute=recorded(n, coding[n].execute)) for n in ("read", "edit")),
            *(
                define_tool(q.name, q.description, dict(q.parameters), recorded(q.name, query(q)), replay="safe")
                for q in SCENARIOS.queries
            ),
            booking_tool(work, SCENARIOS.booking, recorded),
        ],
    )


#: The stores a demo can run on (``--storage``).
STORAGES = ("sqlite", "jsonl")


async def _child(part: str, db: Path, work: Path, life: int, storage_kind: str = "sqlite") -> Submission:
    registry = Registry()
    registry.install(demo_tools(work, life))
    models = ScriptedModels(demo_model)
    storage = open_jsonl_storage(db) if storage_kind == "jsonl" else open_sqlite_storage(db)
    p = SCENARIOS.part(part)
    async with Harness.open(storage, models=models, registry=registry, env=LocalEnv(work)) as harness:
        conv = await harness.root(agent=AgentConfig(model=ModelRef("scripted", "demo"), cwd=str(work)))
        # The same request id finds the submission a killed life already stored.
        handle = await conv.submit(Input(p.prompt, request_id=p.request_id))
        with trio.fail_after(30):
            return await handle.wait()


def child_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pidurable.shell.cli.demo child")
    p.add_argument("part", choices=sorted(part.key for part in SCENARIOS.parts))
    p.add_argument("--db", required=True, type=Path)
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--life", required=True, type=int)
    p.add_argument("--storage", choices=STORAGES, default="sqlite")
    a = p.parse_args(argv)
    rec = trio.run(_child, a.part, a.db, a.work, a.life, a.storage)
    print(json.dumps({"submission": rec.id, "status": rec.status.value, "reason": rec.reason}))
    return 0 if rec.status is SubmissionStatus.DONE else 1
