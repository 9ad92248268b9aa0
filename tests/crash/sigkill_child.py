"""A real process life for test_sigkill.py: run the scenario on a SQLite store
(or a JSONL store: tests/shell/test_store_jsonl.py).

argv: DB WORKDIR [sqlite|jsonl]. The "deploy" tool (unsafe) appends a line to WORKDIR/deploys
and then, on the first life, blocks so the parent can SIGKILL this process
while the tool is running. "probe" (safe) appends to WORKDIR/probes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Registry,
    define_tool,
    open_jsonl_storage,
    open_sqlite_storage,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

db, work = sys.argv[1], Path(sys.argv[2])
open_storage = open_jsonl_storage if sys.argv[3:] == ["jsonl"] else open_sqlite_storage


async def deploy(ctx, args):  # type: ignore[no-untyped-def]
    with open(work / "deploys", "a") as f:
        f.write(f"{ctx.idempotency_key}\n")
    (work / "deploy-started").write_text("yes")
    await trio.sleep(60)  # the parent kills us here
    return "deployed"


async def probe(ctx, args):  # type: ignore[no-untyped-def]
    with open(work / "probes", "a") as f:
        f.write("probe\n")
    return "probe ok"


async def main() -> None:
    registry = Registry()
    registry.install(define_tool("deploy", "deploy", {"type": "object"}, deploy, replay="unsafe"))
    registry.install(define_tool("probe", "probe", {"type": "object"}, probe, replay="safe"))
    models = ScriptedModels(
        [
            reply(tool_calls=[tool_call("probe"), tool_call("deploy")]),
            reply(text="Deploy state reported."),
        ]
    )
    async with Harness.open(open_storage(db), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "t")))
        sub = await conv.submit(Input("deploy it", request_id="deploy-1"))
        rec = await sub.wait()
        print(rec.status, rec.reason)


trio.run(main)
