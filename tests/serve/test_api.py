"""The JSON API against the ASGI app (httpx's ASGI transport): the token, bad
input as 400s with the library's reason, sizes, unknown ids, idempotent
submits, and each operation doing what the library call does."""

from __future__ import annotations

import json

import trio

from pidurable.shell.serve.schema import MAX_ID

from .conftest import AUTH, TOKEN, served


async def test_api_requires_the_bearer_token() -> None:
    """Every /api route but the OpenAPI document answers 401 (JSON, with
    WWW-Authenticate) without the token or with a wrong one; the page needs none."""
    async with served() as (_, client, _app):
        for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN}):
            r = await client.get("/api/conversations", headers=headers)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
        r = await client.post("/api/conversations/1/submissions", json={"content": "hi"}, headers={"Authorization": "Bearer x"})
        assert r.status_code == 401
        assert (await client.get("/api/transcript-of-nothing", headers={"Authorization": ""})).status_code == 401
        assert (await client.get("/api/openapi.json", headers={"Authorization": ""})).status_code == 200
        page = await client.get("/", headers={"Authorization": ""})
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert (await client.get("/api/conversations")).status_code == 200


async def test_bad_input_is_a_400_with_the_reason_and_stores_nothing() -> None:
    """Bodies that do not fit the schema, or that the library refuses
    (InvalidInput), are 400s naming the problem; nothing is stored."""
    async with served() as (harness, client, _app):
        before = len((await client.get("/api/conversations/1/transcript")).json())
        cases = [
            ({"content": ""}, "must be a non-empty string"),
            ({"content": "   "}, "must be a non-empty string"),
            ({"content": 5}, "is not of type 'string'"),
            ({}, "'content' is a required property"),
            ({"content": "x", "bogus": 1}, "'bogus' was unexpected"),
            ({"content": "x", "when_busy": "later"}, "when_busy"),
            ({"content": "x", "request_id": ""}, "request_id"),
            ({"content": "x", "kind": "write", "when_busy": "steer"}, "when_busy applies to inputs"),
            ({"content": "x", "data": {"a": 1}}, "apply to writes"),
            ([1, 2], "is not of type 'object'"),
        ]
        for body, reason in cases:
            r = await client.post("/api/conversations/1/submissions", json=body)
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"]["code"] == "invalid_input"
            assert reason in r.json()["error"]["message"], (body, r.json())
        raw = [
            (b'{"content": "\\ud800"}', "not valid UTF-8"),  # a lone surrogate: the library's check_text
            (b'{"content": NaN}', "not JSON"),
            (b"{nope", "not JSON"),
            (b'\xff\xfe{"content": "x"}', "not UTF-8"),
        ]
        for body, reason in raw:
            r = await client.post("/api/conversations/1/submissions", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (body, r.text)
            assert reason in r.json()["error"]["message"], (body, r.json())
        assert (await client.post("/api/conversations/1/fork", json={"at": 0})).status_code == 400
        assert (await client.post("/api/conversations/1/abort", json={"background": "yes"})).status_code == 400
        assert (await client.get("/api/submissions/1?wait=-1")).status_code == 400
        assert (await client.get("/api/submissions/1?wait=abc")).status_code == 400
        assert (await client.get("/api/conversations/1/transcript?after=x")).status_code == 400
        assert len((await client.get("/api/conversations/1/transcript")).json()) == before
        assert harness.runtime.storage.submissions() == []


async def test_bodies_over_the_limit_are_413() -> None:
    """A body over ``max_body`` bytes is refused with 413 (declared or streamed)."""
    async with served(max_body=2048) as (_, client, _app):
        r = await client.post("/api/conversations/1/submissions", json={"content": "x" * 4096})
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "too_large"

        async def chunks():  # no Content-Length: counted as it streams
            for _ in range(8):
                yield b" " * 512

        r = await client.post("/api/conversations/1/submissions", content=chunks())
        assert r.status_code == 413
        assert (await client.post("/api/conversations/1/submissions", json={"content": "quick"})).status_code == 201


async def test_unknown_ids_are_404() -> None:
    """A conversation, submission or route that does not exist is a JSON 404."""
    async with served() as (_, client, _app):
        for path in (
            "/api/conversations/99",
            "/api/conversations/99/transcript",
            "/api/conversations/abc",
            f"/api/conversations/{MAX_ID + 1}/transcript",
            "/api/conversations/0",
            "/api/submissions/12345",
            "/api/submissions/%C2%B2",
            "/api/nothing-here",
        ):
            r = await client.get(path)
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "not_found"
        r = await client.post("/api/conversations/99/submissions", json={"content": "hi"})
        assert r.status_code == 404
        r = await client.delete("/api/conversations/1")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_the_same_request_id_returns_the_existing_submission() -> None:
    """Retrying a submit with the same request_id returns the same record
    (200 instead of 201) and stores nothing new."""
    async with served() as (_, client, _app):
        first = await client.post("/api/conversations/1/submissions", json={"content": "quick hello", "request_id": "r-1"})
        assert first.status_code == 201
        again = await client.post("/api/conversations/1/submissions", json={"content": "quick hello", "request_id": "r-1"})
        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        done = await client.get(f"/api/submissions/{first.json()['id']}?wait=10")
        assert done.json()["status"] == "done"
        late = await client.post("/api/conversations/1/submissions", json={"content": "quick hello", "request_id": "r-1"})
        assert late.status_code == 200 and late.json()["status"] == "done"
        entries = (await client.get("/api/conversations/1/transcript")).json()
        assert [e["kind"] for e in entries].count("user") == 1
        # a write reusing an input's request_id is refused (the library's rule)
        clash = await client.post("/api/conversations/1/submissions", json={"content": "w", "kind": "write", "request_id": "r-1"})
        assert clash.status_code == 400


async def test_submit_modes_abort_and_busy() -> None:
    """Steer joins the run after the tool round, reject on a busy conversation
    is a 409 storing nothing, abort returns once idle with the run unanswered."""
    async with served() as (_, client, _app):
        work = (await client.post("/api/conversations/1/submissions", json={"content": "long work please"})).json()
        busy = await client.post("/api/conversations/1/submissions", json={"content": "now", "when_busy": "reject"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "busy"
        for _ in range(100):
            tasks = (await client.get("/api/inspect?conversation=1")).json()["tasks"]
            if any(t["tool"] == "count" and t["state"] == "running" for t in tasks):
                break
            await trio.sleep(0.05)
        generation = next(t for t in tasks if t["kind"] == "pi.generation")
        assert generation["state"] == "waiting" and generation["waiting_on"]
        steer = await client.post("/api/conversations/1/submissions", json={"content": "quick, also this", "when_busy": "steer"})
        assert steer.status_code == 201 and steer.json()["status"] == "queued"
        write = await client.post("/api/conversations/1/submissions", json={"content": "a note", "kind": "write", "entry_kind": "note", "data": {"x": 1}})
        assert write.status_code == 201
        r = await client.post("/api/conversations/1/abort", json={})
        assert r.status_code == 200 and r.json()["idle"] is True
        rec = (await client.get(f"/api/submissions/{work['id']}?wait=5")).json()
        assert (rec["status"], rec["reason"]) == ("unanswered", "aborted")
        written = (await client.get(f"/api/submissions/{write.json()['id']}")).json()
        assert written["status"] == "queued"  # a write survives the abort: placed by the next run
        after = (await client.post("/api/conversations/1/submissions", json={"content": "quick again"})).json()
        assert (await client.get(f"/api/submissions/{after['id']}?wait=5")).json()["status"] == "done"
        kinds = [e["kind"] for e in (await client.get("/api/conversations/1/transcript")).json()]
        assert "note" in kinds


async def test_conversations_fork_compact_usage_and_transcript() -> None:
    """Create, list, read, fork from an entry, compact, usage, transcript?after."""
    async with served() as (_, client, _app):
        r = await client.post("/api/conversations/1/submissions", json={"content": "quick first question"})
        await client.get(f"/api/submissions/{r.json()['id']}?wait=10")
        entries = (await client.get("/api/conversations/1/transcript")).json()
        user = next(e for e in entries if e["kind"] == "user")
        assert (await client.get(f"/api/conversations/1/transcript?after={user['id']}")).json() == [
            e for e in entries if e["id"] > user["id"]
        ]
        listed = (await client.get("/api/conversations")).json()
        assert listed[0]["id"] == 1 and listed[0]["title"] == "quick first question" and listed[0]["root"]
        fork = await client.post("/api/conversations/1/fork", json={"at": user["id"]})
        assert fork.status_code == 201
        child = fork.json()
        assert (child["parent_id"], child["fork_at"]) == (1, user["id"])
        bad = await client.post("/api/conversations/1/fork", json={"at": 10**6})
        assert bad.status_code == 400
        new = await client.post("/api/conversations")
        assert new.status_code == 201 and new.json()["agent"]["model"] == {"provider": "scripted", "model_id": "demo"}
        assert {c["id"] for c in (await client.get("/api/conversations")).json()} == {1, child["id"], new.json()["id"]}
        compact = await client.post("/api/conversations/1/compact", json={"instructions": "keep it short"})
        assert compact.status_code == 202 and isinstance(compact.json()["task_id"], int)
        usage = (await client.get("/api/usage")).json()
        assert usage["models"]["scripted:demo"]["calls"] >= 1
        detail = (await client.get("/api/conversations/1")).json()
        assert detail["usage"]["models"]["scripted:demo"]["calls"] >= 1


async def test_cors_is_off_unless_origins_are_given() -> None:
    """No Access-Control-Allow-Origin by default; the given origin otherwise
    (its preflight answered before the token check)."""
    origin = {"Origin": "http://app.example"}
    async with served() as (_, client, _app):
        r = await client.get("/api/conversations", headers=origin)
        assert "access-control-allow-origin" not in r.headers
    async with served(cors_origins=("http://app.example",)) as (_, client, _app):
        r = await client.get("/api/conversations", headers=origin)
        assert r.headers["access-control-allow-origin"] == "http://app.example"
        pre = await client.options(
            "/api/conversations",
            headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization", "Authorization": ""},
        )
        assert pre.status_code == 200


async def test_openapi_document_describes_every_route() -> None:
    """/api/openapi.json is OpenAPI 3.1 with the operations the app routes."""
    async with served() as (_, client, app):
        doc = (await client.get("/api/openapi.json")).json()
        assert doc["openapi"].startswith("3.1")
        ops = {(path, method) for path, item in doc["paths"].items() for method in item}
        routed = {(r.path, m.lower()) for r in app.routes if r.path.startswith("/api/") and r.path != "/api/openapi.json" for m in r.methods - {"HEAD"}}
        assert routed == ops
        json.dumps(doc)
        assert AUTH
