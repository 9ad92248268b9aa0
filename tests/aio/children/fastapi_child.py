"""One life of the FastAPI example app (examples/fastapi_app.py) for
test_kill_restart.py: ``fastapi_child.py DB MARKER``.

Under ``asyncio.run``, it runs the app's lifespan (the harness opens on DB),
POSTs the input ``deploy`` with ``request_id`` ``deploy-1`` through httpx's
ASGI transport, prints the response, then waits for the submission with
``GET /submissions/{id}?wait=30`` and prints that. The run calls the
``deploy`` tool (replay="safe"): in the first life its body creates MARKER
and hangs there - the parent SIGKILLs the process then; in a later life
MARKER exists and the body returns at once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from pidurable.shell import AgentConfig, ModelRef, Registry, define_tool
from pidurable.shell.providers import ScriptedModels, reply, tool_call

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "fastapi_app.py"


def main(db: str, marker: Path) -> None:
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    async def deploy(call: Any, args: Any) -> str:
        if not marker.exists():
            marker.write_text("the deploy tool ran in the first life\n")
            await trio.sleep_forever()  # killed here
        return "deployed"

    registry = Registry()
    registry.install(define_tool("deploy", "deploy the app", {"type": "object"}, deploy, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("deploy")]), reply(text="Deployed.")])
    app = example.create_app(db, models=models, registry=registry, agent=AgentConfig(model=ModelRef("scripted", "demo")))

    async def life() -> None:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
                r = await http.post("/conversations/1/submissions", json={"content": "deploy", "request_id": "deploy-1"})
                print(json.dumps(r.json()), flush=True)
                settled = await http.get(f"/submissions/{r.json()['id']}", params={"wait": 30})
                print(json.dumps(settled.json()), flush=True)

    asyncio.run(life())


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
