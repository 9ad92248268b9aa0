"""examples/fastapi_app.py: a FastAPI app on ``pidurable.aio``, driven with
httpx's ASGI transport under ``asyncio.run`` (the lifespan opens the harness
on a SQLite file, as under uvicorn)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("fastapi")  # the `test` extra installs it

import httpx  # noqa: E402

from pidurable.shell import AgentConfig, ModelRef  # noqa: E402
from pidurable.shell.providers import ScriptedModels, reply  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app.py"
AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


def example() -> ModuleType:
    """The example module, loaded from its file (examples/ is no package)."""
    module = sys.modules.get("fastapi_app")
    if module is None:
        spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = sys.modules["fastapi_app"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def client(db: Path, models: ScriptedModels) -> AsyncIterator[httpx.AsyncClient]:
    app = example().create_app(db, models=models, agent=AGENT)
    async with app.router.lifespan_context(app):  # httpx's transport does not run the lifespan
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            yield http


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(main(), 30))


def events(body: str) -> list[dict[str, Any]]:
    """The ``view`` events of a Server-Sent Events body, decoded."""
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        assert lines["event"] == "view"
        out.append(json.loads(lines["data"]))
    return out


def test_submit_wait_transcript_and_events(tmp_path: Path) -> None:
    """POST a submission (the same request_id returns the same one), wait
    for it over GET, read the transcript, and stream the views over SSE:
    seq increases, the stream ends at the idle view holding the answer."""

    async def main() -> None:
        models = ScriptedModels([reply(text="Hello over HTTP.", delay=0.1, stream=4)])
        async with client(tmp_path / "app.sqlite", models) as http:
            r = await http.post("/conversations/1/submissions", json={"content": "hi", "request_id": "req-1"})
            assert r.status_code == 200, r.text
            sid = r.json()["id"]
            assert r.json()["request_id"] == "req-1"
            stream = await http.get("/conversations/1/events", params={"until_idle": "true"})
            assert stream.headers["content-type"].startswith("text/event-stream")
            views = events(stream.text)
            assert [v["seq"] for v in views] == sorted({v["seq"] for v in views})
            assert views[-1]["idle"] and views[-1]["entries"][-1]["text"] == "Hello over HTTP."
            again = await http.post("/conversations/1/submissions", json={"content": "hi", "request_id": "req-1"})
            assert again.json()["id"] == sid
            settled = (await http.get(f"/submissions/{sid}", params={"wait": 5})).json()
            assert settled["status"] == "done"
            texts = [e["text"] for e in (await http.get("/conversations/1/transcript")).json()]
            assert texts == ["hi", "Hello over HTTP."]

    run(main)


def test_a_wait_that_times_out_leaves_the_run_going(tmp_path: Path) -> None:
    """``GET /submissions/{id}?wait=0.05`` returns the unsettled record when
    the asyncio timeout cancels the wait; the run finishes regardless."""

    async def main() -> None:
        models = ScriptedModels([reply(text="slow", delay=0.4)])
        async with client(tmp_path / "app.sqlite", models) as http:
            sid = (await http.post("/conversations/1/submissions", json={"content": "wait"})).json()["id"]
            early = (await http.get(f"/submissions/{sid}", params={"wait": 0.05})).json()
            assert early["status"] in ("queued", "placed")
            late = (await http.get(f"/submissions/{sid}", params={"wait": 5})).json()
            assert late["status"] == "done"

    run(main)


def test_errors_are_json_with_status_codes(tmp_path: Path) -> None:
    """Bad input is a 400, an unknown conversation or submission a 404, a
    rejected input on a busy conversation a 409, each with a JSON error."""

    async def main() -> None:
        models = ScriptedModels([reply(text="busy", delay=0.3)])
        async with client(tmp_path / "app.sqlite", models) as http:
            r = await http.post("/conversations/1/submissions", json={"content": ""})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
            r = await http.post("/conversations/1/submissions", json={"content": "x", "when_busy": "sometimes"})
            assert r.status_code == 400 and "when_busy" in r.json()["error"]["message"]
            assert (await http.get("/conversations/7/transcript")).status_code == 404
            assert (await http.get("/submissions/99")).json()["error"]["code"] == "not_found"
            await http.post("/conversations/1/submissions", json={"content": "start"})
            r = await http.post("/conversations/1/submissions", json={"content": "no", "when_busy": "reject"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "busy"

    run(main)
