"""Server-Sent Events over loopback TCP (Hypercorn's Trio worker): the first
view is the current one, views arrive in order, 50 clients of one busy
conversation see the same committed views, and a slow client is skipped
ahead without the server's memory growing."""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import httpx
import trio

from pidurable.shell import Settings

from .conftest import live, sse_events

FAST = Settings(partial_interval_ms=10)


async def _submit_and_wait(client: httpx.AsyncClient, content: str) -> dict[str, Any]:
    sub = (await client.post("/api/conversations/1/submissions", json={"content": content})).json()
    done: dict[str, Any] = (await client.get(f"/api/submissions/{sub['id']}?wait=30")).json()
    assert done["status"] == "done", done
    return done


async def test_a_connect_gets_the_current_view_not_a_replay() -> None:
    """A new stream starts with the conversation as it is (all its window,
    ``complete``), then only what is new; a reconnect starts from now again."""
    async with live() as (_, client, _url):
        await _submit_and_wait(client, "quick one")
        await _submit_and_wait(client, "quick two")
        entries = (await client.get("/api/conversations/1/transcript")).json()
        for _ in range(2):  # connect, then reconnect
            async with client.stream("GET", "/api/conversations/1/events") as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                events = sse_events(r)
                event, view = await events.__anext__()
                assert event == "view" and view["complete"] and view["idle"] and view["live"] is None
                assert [e["id"] for e in view["entries"]] == [e["id"] for e in entries]
                first_seq = view["seq"]
                event, tree = await events.__anext__()
                assert event == "tasks" and tree["tasks"] == []
                await client.post("/api/conversations/1/submissions", json={"content": "quick three"})
                newer = []
                async for event, data in events:
                    if event == "view":
                        assert data["seq"] > first_seq and not data["complete"]
                        newer.extend(data["entries"])
                        if data["idle"] and any(e["kind"] == "assistant" for e in newer):
                            break
                assert {e["kind"] for e in newer} >= {"user", "assistant"}
                assert all(e["id"] > entries[-1]["id"] for e in newer)
            entries = (await client.get("/api/conversations/1/transcript")).json()


def _summary(view: dict[str, Any]) -> dict[str, Any]:
    """What a follower keeps of a view (not the view: the test's own memory
    must not grow with the views it saw)."""
    live = view["live"]
    partial = live["partial"] if live else None
    return {
        "seq": view["seq"],
        "idle": view["idle"],
        "complete": view["complete"],
        "entries": [{"id": e["id"], "kind": e["kind"]} for e in view["entries"]],
        "partial": None if partial is None else (len(partial), partial[:40]),
        "live": None if live is None else hash(json.dumps(live, sort_keys=True)),
    }


async def _follow(client: httpx.AsyncClient, seen: list[dict[str, Any]], started: trio.Event, done: Any, *, pause: float = 0.0) -> None:
    async with client.stream("GET", "/api/conversations/1/events") as r:
        async for event, data in sse_events(r):
            if event != "view":
                continue
            seen.append(_summary(data))
            if len(seen) == 1:
                started.set()
            if done(data):
                return
            if pause:
                await trio.sleep(pause)


async def test_fifty_clients_see_the_same_committed_views_in_order() -> None:
    """50 clients of one conversation streaming an answer: each sees views in
    strictly increasing seq, all end on the same view, the partial grows, and
    each client's entries add up to the transcript."""
    async with live(settings=FAST, view_interval_ms=0) as (_, client, _url):
        n = 50
        seen: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        final: dict[str, Any] = {}

        def done(view: dict[str, Any]) -> bool:
            return bool(final) and view["seq"] >= final["seq"]

        async with trio.open_nursery() as nursery:
            starts = [trio.Event() for _ in range(n)]
            for i in range(n):
                nursery.start_soon(_follow, client, seen[i], starts[i], done)
            for s in starts:
                await s.wait()
            await _submit_and_wait(client, "big 4000")
            async with client.stream("GET", "/api/conversations/1/events") as r:  # the settled view, as a new client sees it
                async for event, data in sse_events(r):
                    if event == "view":
                        final.update(data)
                        break
            await _submit_and_wait(client, "quick nudge")  # one more commit wakes every follower past `final`
        transcript = (await client.get("/api/conversations/1/transcript")).json()
        for views in seen:
            seqs = [v["seq"] for v in views]
            assert seqs == sorted(set(seqs)), seqs
            assert views[0]["complete"]
            partials = [v["partial"] for v in views if v["partial"]]
            assert len(partials) >= 2 and all(a[0] < b[0] and a[1] == b[1] for a, b in zip(partials, partials[1:]))
            ids = [e["id"] for v in views for e in v["entries"]]
            assert ids == sorted(set(ids))  # no entry twice
            assert set(ids) <= {e["id"] for e in transcript}
            assert {e["id"] for e in final["entries"]} <= set(ids)  # every entry up to the settled view, once
        # every client saw the views the hub published in the same order (a
        # fast client each one; any two agree on the seqs both saw)
        reference = {v["seq"]: v for v in seen[0]}
        for views in seen[1:]:
            for v in views:
                if v["seq"] in reference:
                    assert v["live"] == reference[v["seq"]]["live"] and v["idle"] == reference[v["seq"]]["idle"]


async def test_a_slow_client_skips_ahead_and_memory_stays_flat() -> None:
    """Large views to 10 fast clients, 6 that stall and one that pauses: the
    pausing one gets fewer views but the newest at the end; the stalled ones
    hold nothing in the server: over three streamed 60 KB answers (~120
    views, ~20 MB if each stalled client's views were kept) the Python
    memory grows by less than 5 MB (the store's own growth is about 1.5 MB)."""
    async with live(settings=FAST, view_interval_ms=0) as (harness, client, url):
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=url, headers=dict(client.headers), timeout=60, limits=limits) as stalled_client:
            stalled = []
            for _ in range(6):  # connected, never read: their sockets fill up
                r = await stalled_client.send(stalled_client.build_request("GET", "/api/conversations/1/events"), stream=True)
                stalled.append(r)
            fast: list[list[dict[str, Any]]] = [[] for _ in range(10)]
            slow: list[dict[str, Any]] = []
            stop: dict[str, int] = {}

            def done(view: dict[str, Any]) -> bool:
                return "seq" in stop and view["seq"] >= stop["seq"]

            await _submit_and_wait(client, "big 60000")  # warm up: buffers, caches
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                async with trio.open_nursery() as nursery:
                    starts = [trio.Event() for _ in range(11)]
                    for i in range(10):
                        nursery.start_soon(_follow, client, fast[i], starts[i], done)
                    nursery.start_soon(lambda: _follow(client, slow, starts[10], done, pause=0.5))
                    for s in starts:
                        await s.wait()
                    for _ in range(3):
                        await _submit_and_wait(client, "big 60000")
                    stop["seq"] = harness.runtime.state.next_seq - 1
                    await _submit_and_wait(client, "quick end")
                gc.collect()  # the followers are done; the stalled clients are still connected
                grown = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            for r in stalled:
                await r.aclose()
        assert grown < 5_000_000, f"the server's Python memory grew by {grown} bytes with stalled clients"
        most = max(len(v) for v in fast)
        assert len(slow) < most, (len(slow), most)  # skipped ahead, not queued
        assert slow[-1]["seq"] >= stop["seq"] and slow[-1]["idle"]
        seqs = [v["seq"] for v in slow]
        assert seqs == sorted(set(seqs))


async def test_streams_end_when_the_harness_closes() -> None:
    """A follower's stream ends when the harness closes, and one that starts
    after the close ends at once (the server keeps serving)."""
    from pidurable.shell import Harness, MemoryStorage, Registry
    from pidurable.shell.serve.hub import Hubs

    async with trio.open_nursery() as nursery:
        async with Harness.open(MemoryStorage(), models=None, registry=Registry()) as harness:
            conv = await harness.root()
            hubs = Hubs(harness)
            await nursery.start(hubs.run)
            following = hubs.follow(conv)  # stays open across the close
            hub = await following.__aenter__()
            frames = hub.frames()
            assert (await frames.__anext__()).startswith(b"retry:")
            assert (await frames.__anext__()).startswith(b"event: view")
        with trio.fail_after(5):
            assert [f async for f in frames] == []  # ended by the close, not by leaving
            assert hub.closed
            await following.__aexit__(None, None, None)
            async with hubs.follow(conv) as late:
                assert [f async for f in late.frames()] == [b"retry: 2000\n\n"]
        nursery.cancel_scope.cancel()
