"""Leased conversation trees on PostgreSQL (issue 13 items 2-4): claims,
fenced commits and LeaseLost, id blocks, a claimed tree opened like a
restart, the intake (submit without owning the tree), release when idle,
pinning, and the v1 -> v2 migration. The server: tests/pg_server.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from pidurable.shell import Harness, Input, Write
from pidurable.shell.errors import ConversationBusy, InvalidInput, NotFound
from pidurable.shell.storage import StoreLocked, open_postgres_storage
from pidurable.shell.storage.base import LeaseLost
from pidurable.shell.storage.postgres import PostgresStorage
from pidurable.shell.storage import postgres_layout as layout
from pidurable.shell.storage import postgres_tree as trees
from pidurable.shell.storage.postgres_tree import ID_BLOCK_BITS, LeaseSettings, TreeStorage
from pidurable.shell.worker import Client, Worker

from pg_server import PgServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import worker_app  # noqa: E402

FAST = LeaseSettings(duration=2.0, renew_interval=0.5, poll_interval=0.5)


@pytest.fixture
def pg(postgres_server: PgServer) -> Iterator[tuple[str, str]]:
    yield postgres_server.dsn, postgres_server.fresh_schema()


def _sql(dsn: str, schema: str, sql: str, params: Any = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}".encode())
        cur = conn.execute(sql.encode(), params)
        return cur.fetchall() if cur.description else []


def _worker(dsn: str, schema: str, name: str, **kw: Any) -> Worker:
    s = worker_app.setup()
    return Worker(dsn, registry=s.registry, models=s.models, schema=schema, worker_id=name, leases=kw.pop("leases", FAST), **kw)


async def test_a_worker_runs_submissions_made_through_the_database(pg: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client (here the worker's own, ``worker.client()``) creates
    conversations and submits without owning them; the worker claims each
    tree, runs the tool round and the answer, releases the idle tree; ids
    come from the claim's block; the same request id is one submission;
    closing the worker's client leaves the worker's store open."""
    monkeypatch.setenv("PIDURABLE_WORKER_LOG", str(tmp_path / "log"))
    dsn, schema = pg
    async with trio.open_nursery() as nursery:
        worker = _worker(dsn, schema, "w1")
        await nursery.start(worker.run)
        with worker.client() as client:  # host code in the worker's process: the same intake
            cids = [await client.create_conversation(worker_app.AGENT) for _ in range(3)]
            subs = [await client.submit(cid, Input("go", request_id=f"r{cid}")) for cid in cids]
            again = await client.submit(cids[0], Input("go", request_id=f"r{cids[0]}"))
            assert again.intake_id == subs[0].intake_id
            records = [await s.wait() for s in subs]
            assert [r.status for r in records] == ["done"] * 3
            for cid, rec in zip(cids, records):
                assert rec.conversation_id == cid and rec.id >> ID_BLOCK_BITS > cid >> ID_BLOCK_BITS
            with pytest.raises(NotFound):
                await client.submit(12345, Input("x"))
            with pytest.raises(InvalidInput):
                await client.submit(cids[0], Input("bad \ud800"))
            # a write, through the same path
            w = await client.submit(cids[1], Write("a note"))
            assert (await w.wait()).status == "done"
        assert worker.store is not None and worker.store.schema_version == layout.PG_SCHEMA_VERSION  # still open
        with pytest.raises(InvalidInput):
            Client()
        with trio.fail_after(20):
            while _sql(dsn, schema, "SELECT count(*) FROM leases WHERE owner IS NOT NULL OR work_at IS NOT NULL")[0][0]:
                await trio.sleep(0.05)
        assert worker.statistics().released >= 3 and worker.statistics().lost == 0
        nursery.cancel_scope.cancel()
    starts = [l for l in (tmp_path / "log").read_text().splitlines() if l.startswith("start")]
    assert len(starts) == 3 and len({l.split()[1] for l in starts}) == 3


async def test_a_paused_owners_commit_is_refused_after_a_takeover(pg: tuple[str, str]) -> None:
    """Worker A holds a tree; its lease expires (A paused) and B claims it
    (epoch + 1): A's next commit raises LeaseLost, writes nothing, and the
    tree's harness stops; B's commits land."""
    dsn, schema = pg
    s = worker_app.setup()
    store = PostgresStorage(dsn, schema=schema, shared=True, worker_id="A")
    try:
        trees.bump_id_blocks(store)
        cid = trees.create_conversation(store, worker_app.AGENT)
        trees.submit(store, cid, "input", {"content": "hi", "when_busy": "follow_up"}, "r1")
        (a,) = trees.claim(store, "A", 5, 60.0)
        assert a.tree == cid and a.epoch == 1
        with pytest.raises(LeaseLost, match="no longer held by A"):
            async with Harness.open(TreeStorage(store, a), models=s.models, registry=s.registry, resume=False) as h:
                # the pause: A's lease runs out and B takes the tree
                _sql(dsn, schema, "UPDATE leases SET expires_at = now() - interval '1 second'")
                (b,) = trees.claim(store, "B", 5, 60.0)
                assert b.epoch == 2 and b.id_base > a.id_base
                conv = await h.conversation(cid)
                assert conv is not None
                await conv.submit(Input("late", request_id="late"))  # its commit is fenced out
        assert _sql(dsn, schema, "SELECT count(*) FROM submissions WHERE request_id = 'late'") == [(0,)]
        assert _sql(dsn, schema, "SELECT count(*) FROM journal WHERE epoch = 1 AND tree = %s", [cid])[0][0] <= 1
        # B opens the tree like a restart and admits the pending intake row
        async with Harness.open(TreeStorage(store, b), models=s.models, registry=s.registry, resume=False) as h:
            conv = await h.conversation(cid)
            assert conv is not None
            handle = await conv.submit(Input("hi", request_id="r1"))
            assert handle.id > b.id_base
        with pytest.raises(LeaseLost):
            trees.release(store, a, idle=True)
        assert trees.release(store, b, idle=False)
    finally:
        store.close()


async def test_a_takeover_recovers_the_tree_like_a_restart(pg: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker dies inside the unsafe tool's body (its view fenced, no
    release); once its lease expires a second worker claims the tree and
    recovers it as a restart would: the unsafe call is settled interrupted
    (not run again), the safe one re-run, the submission settles once."""
    log = tmp_path / "log"
    monkeypatch.setenv("PIDURABLE_WORKER_LOG", str(log))
    monkeypatch.setenv("PIDURABLE_WORKER_DELAY", "0.3")
    dsn, schema = pg
    s = worker_app.setup()
    store = PostgresStorage(dsn, schema=schema, shared=True, worker_id="A")
    try:
        trees.bump_id_blocks(store)
        cid = trees.create_conversation(store, worker_app.AGENT)
        _sql(dsn, schema, "UPDATE leases SET work_at = now()")
        (a,) = trees.claim(store, "A", 5, 1.0)
        view = TreeStorage(store, a)
        async with Harness.open(view, models=s.models, registry=s.registry) as h:
            conv = await h.conversation(cid)
            assert conv is not None
            await conv.submit(Input("go", request_id="r1"))
            with trio.fail_after(10):
                while not log.exists():
                    await trio.sleep(0.01)
            view.fence()  # the process dies here: nothing more reaches the store
        monkeypatch.setenv("PIDURABLE_WORKER_DELAY", "0.01")
        async with trio.open_nursery() as nursery:
            worker = _worker(dsn, schema, "B")
            await nursery.start(worker.run)
            with trio.fail_after(20):
                while worker.statistics().released < 1:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        (sub,) = store.submissions(cid)
        assert sub.status == "done"
        results = [e for e in store.entries(cid) if e.kind == "tool_result"]
        assert len(results) == 2
        booked = [e for e in results if "may have partially run" in e.text]
        assert len(booked) == 1
        assert sum(1 for l in log.read_text().splitlines() if l.startswith("start")) == 1
        epochs = [e for (e,) in _sql(dsn, schema, "SELECT epoch FROM journal WHERE tree = %s ORDER BY landed", [cid])]
        assert epochs == sorted(epochs) and set(epochs) == {1, 2}
    finally:
        store.close()


async def test_an_expired_lease_stops_acting_before_the_database_says_so(
    pg: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its local deadline (as if the worker had been paused longer than
    its lease) a tree stops at once - its tool body cancelled, no further
    effect started - and, its lease still being its own in the store, is
    handed back still wanted; claimed again, it recovers like a restart (the
    unsafe call answered interrupted, its body not started again)."""
    log = tmp_path / "log"
    monkeypatch.setenv("PIDURABLE_WORKER_LOG", str(log))
    monkeypatch.setenv("PIDURABLE_WORKER_TOOL_DELAY", "3.0")
    dsn, schema = pg
    async with trio.open_nursery() as nursery:
        worker = _worker(dsn, schema, "w", leases=LeaseSettings(duration=2.0, renew_interval=0.5, poll_interval=0.2))
        await nursery.start(worker.run)
        with Client(dsn, schema=schema) as client:
            cid = await client.create_conversation(worker_app.AGENT)
            sub = await client.submit(cid, Input("go"))
            with trio.fail_after(10):
                while not log.exists():  # inside the unsafe body
                    await trio.sleep(0.01)
            worker._runs[cid].deadline = trio.current_time() - 1  # as if the renewals stopped long ago
            with trio.fail_after(10):
                while worker.statistics().handed_back < 1:
                    await trio.sleep(0.01)
            monkeypatch.setenv("PIDURABLE_WORKER_TOOL_DELAY", "0.01")
            with trio.fail_after(20):
                assert (await sub.wait()).status == "done"
        stats = worker.statistics()
        assert stats.claimed == 2 and stats.lost == 0 and stats.failed == 0
        nursery.cancel_scope.cancel()
    lines = log.read_text().splitlines()
    assert [l.split()[0] for l in lines] == ["start"]  # cancelled in its body, never started again
    with PostgresStorage(dsn, schema=schema, shared=True) as store:
        results = [e for e in store.entries(cid) if e.kind == "tool_result"]
        assert len(results) == 2 and sum("may have partially run" in e.text for e in results) == 1


async def test_a_stopped_worker_hands_its_trees_back_at_once(pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling a worker (SIGINT/SIGTERM in the command) hands every tree it
    holds back still wanted: no owner, work pending, so another worker claims
    it without waiting for the lease to expire."""
    monkeypatch.setenv("PIDURABLE_WORKER_TOOL_DELAY", "30")
    dsn, schema = pg
    with Client(dsn, schema=schema) as client:
        cid = await client.create_conversation(worker_app.AGENT)
        async with trio.open_nursery() as nursery:
            worker = _worker(dsn, schema, "first", leases=LeaseSettings(duration=60.0, renew_interval=1.0, poll_interval=0.2))
            await nursery.start(worker.run)
            await client.submit(cid, Input("go"))
            with trio.fail_after(10):
                while not _sql(dsn, schema, "SELECT 1 FROM tasks WHERE kind = 'pi.tool' AND status = 'running'"):
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        assert worker.statistics().handed_back == 1
        assert _sql(dsn, schema, "SELECT owner, work_at IS NOT NULL, expires_at FROM leases WHERE root = %s", [cid]) == [
            (None, True, None)
        ]
        (again,) = trees.claim(client.store, "second", 5, 60.0)  # no need to wait out the 60 s lease
        assert again.tree == cid and again.epoch == 2


def test_workers_and_a_single_owner_exclude_each_other(pg: tuple[str, str]) -> None:
    """Workers hold the store lock shared: a single owner is refused while
    one runs (and a worker while a single owner holds it)."""
    dsn, schema = pg
    shared = PostgresStorage(dsn, schema=schema, shared=True, worker_id="w1")
    other = PostgresStorage(dsn, schema=schema, shared=True, worker_id="w2")
    with pytest.raises(StoreLocked, match="worker w"):
        open_postgres_storage(dsn, "solo", schema=schema)
    shared.close()
    other.close()
    solo = open_postgres_storage(dsn, "solo", schema=schema)
    with pytest.raises(StoreLocked, match="worker solo"):
        PostgresStorage(dsn, schema=schema, shared=True, worker_id="w3")
    solo.close()


def test_claims_respect_the_cap_pins_and_fencing(pg: tuple[str, str]) -> None:
    """A claim takes at most n trees, skips trees pinned to another worker,
    never a held live lease; renew reports a lost lease."""
    dsn, schema = pg
    store = PostgresStorage(dsn, schema=schema, shared=True, worker_id="x")
    try:
        trees.bump_id_blocks(store)
        cids = [trees.create_conversation(store) for _ in range(4)]
        for cid in cids:
            trees.submit(store, cid, "input", {"content": "x", "when_busy": "follow_up"}, None)
        trees.pin(store, cids[0], "other")
        got = trees.claim(store, "me", 2, 60.0)
        assert len(got) == 2 and cids[0] not in {c.tree for c in got}
        more = trees.claim(store, "me", 5, 60.0, exclude=[c.tree for c in got])
        assert {c.tree for c in more} == set(cids[1:]) - {c.tree for c in got}
        assert trees.claim(store, "you", 5, 60.0) == []
        (pinned,) = trees.claim(store, "other", 5, 60.0)
        assert pinned.tree == cids[0]
        assert trees.renew(store, got, 60.0) == {c.tree for c in got}
        _sql(dsn, schema, "UPDATE leases SET expires_at = now() - interval '1 second' WHERE root = %s", [got[0].tree])
        (stolen,) = trees.claim(store, "you", 5, 60.0)
        assert stolen.tree == got[0].tree and stolen.epoch == got[0].epoch + 1
        assert trees.renew(store, got, 60.0) == {got[1].tree}
    finally:
        store.close()


def test_a_version_1_store_is_migrated_with_its_trees(pg: tuple[str, str]) -> None:
    """A store written at PostgreSQL layout version 1 gets its tree columns
    backfilled (a sub-agent's conversation and a fork belong to their root's
    tree), a lease row per tree, and trees with live work are wanted."""
    dsn, schema = pg
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}; SET search_path TO {schema}".encode())
        conn.execute(layout.BOOTSTRAP[0].encode())
        conn.execute(layout.BOOTSTRAP[1].encode(), ["v1-store"])
        for statement in layout.MIGRATIONS[1]:
            conn.execute(statement.encode())
        conn.execute(b"UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        # conversation 1 (root), task 2 in it owns conversation 3, 4 forks 3; 5 is a root with nothing live
        rows = [
            "INSERT INTO conversations VALUES (1, NULL, NULL, NULL, '{\"id\":1}')",
            "INSERT INTO conversations VALUES (3, 2, NULL, NULL, '{\"id\":3,\"owner_task_id\":2}')",
            "INSERT INTO conversations VALUES (4, NULL, 3, 9, '{\"id\":4,\"parent_id\":3,\"fork_at\":9}')",
            "INSERT INTO conversations VALUES (5, NULL, NULL, NULL, '{\"id\":5}')",
            "INSERT INTO tasks VALUES (2, 1, 'pi.tool', 'waiting', NULL, '{}')",
            "INSERT INTO tasks VALUES (6, 3, 'pi.generation', 'pending', NULL, '{}')",
            "INSERT INTO submissions VALUES (7, 4, NULL, 'queued', '{}')",
        ]
        for r in rows:
            conn.execute(r.encode())
    PostgresStorage(dsn, schema=schema).close()
    assert _sql(dsn, schema, "SELECT id, tree FROM conversations ORDER BY id") == [(1, 1), (3, 1), (4, 1), (5, 5)]
    assert _sql(dsn, schema, "SELECT id, tree FROM tasks ORDER BY id") == [(2, 1), (6, 1)]
    assert _sql(dsn, schema, "SELECT id, tree FROM submissions") == [(7, 1)]
    assert _sql(dsn, schema, "SELECT root, work_at IS NOT NULL FROM leases ORDER BY root") == [(1, True), (5, False)]
    assert _sql(dsn, schema, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(layout.PG_SCHEMA_VERSION),)]


async def test_what_a_trees_harness_creates_stays_in_the_tree(pg: tuple[str, str]) -> None:
    """A conversation a tree's harness creates (even a top-level one) is
    written with the tree's root, so the next claim of the tree loads its
    live work (and no other tree's claim does)."""
    dsn, schema = pg
    s = worker_app.setup()
    store = PostgresStorage(dsn, schema=schema, shared=True, worker_id="A")
    try:
        trees.bump_id_blocks(store)
        cid = trees.create_conversation(store, worker_app.AGENT)
        other = trees.create_conversation(store, worker_app.AGENT)
        _sql(dsn, schema, "UPDATE leases SET work_at = now() WHERE root = %s", [cid])
        (a,) = trees.claim(store, "A", 5, 60.0)
        async with Harness.open(TreeStorage(store, a), models=s.models, registry=s.registry, resume=False) as h:
            made = await h.create_conversation(agent=worker_app.AGENT)
            queued = await made.submit(Input("later", request_id="q"))
        assert _sql(dsn, schema, "SELECT tree FROM conversations WHERE id = %s", [made.id]) == [(cid,)]
        assert trees.release(store, a, idle=False)
        (b,) = trees.claim(store, "B", 5, 60.0)
        loaded = TreeStorage(store, b).load_live()
        assert [sub.id for sub in loaded.submissions] == [queued.id]
        assert made.id in {c.conversation.id for c in loaded.conversations}
        assert loaded.next_id == b.id_base + 1 > queued.id
        _sql(dsn, schema, "UPDATE leases SET work_at = now() WHERE root = %s", [other])
        (c,) = trees.claim(store, "C", 5, 60.0)
        assert c.tree == other and TreeStorage(store, c).load_live().submissions == ()
    finally:
        store.close()


async def test_without_the_fence_a_paused_owners_commit_lands_and_the_checker_says_so(pg: tuple[str, str]) -> None:
    """The known-bad variant: with fence() made a no-op, the commit of an
    owner whose lease was taken lands after the new owner's, and
    CommitsAreFenced (tests/invariants.py, over the journal in landing
    order) fails - the check the chaos test runs can fail."""
    from invariants import LeaseCommit, commits_are_fenced

    dsn, schema = pg
    s = worker_app.setup()
    store = PostgresStorage(dsn, schema=schema, shared=True, worker_id="A")
    try:
        trees.bump_id_blocks(store)
        cid = trees.create_conversation(store, worker_app.AGENT)
        _sql(dsn, schema, "UPDATE leases SET work_at = now()")
        _sql(dsn, schema, "CREATE OR REPLACE FUNCTION fence(r bigint, e bigint, o text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$")
        (a,) = trees.claim(store, "A", 5, 60.0)
        async with Harness.open(TreeStorage(store, a), models=s.models, registry=s.registry, resume=False) as ha:
            conv_a = await ha.conversation(cid)
            assert conv_a is not None
            await conv_a.submit(Input("a", request_id="a"))
            _sql(dsn, schema, "UPDATE leases SET expires_at = now() - interval '1 second'")
            (b,) = trees.claim(store, "B", 5, 60.0)
            async with Harness.open(TreeStorage(store, b), models=s.models, registry=s.registry, resume=False) as hb:
                conv_b = await hb.conversation(cid)
                assert conv_b is not None
                await conv_b.submit(Input("b", request_id="b"))
            await conv_a.submit(Input("late", request_id="late"))  # lands: nothing fences it
        landed = [
            LeaseCommit(root=int(t), epoch=int(e), worker=str(w), seq=int(n))
            for t, e, w, n in _sql(dsn, schema, "SELECT tree, epoch, worker, landed FROM journal ORDER BY landed")
        ]
        with pytest.raises(AssertionError, match="a fenced-out worker committed"):
            commits_are_fenced(landed)
    finally:
        store.close()


async def test_a_rejected_external_submission_raises_conversation_busy(pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """when_busy='reject' on a busy conversation, submitted through the
    database: the owner refuses it (nothing stored) and the client's handle
    raises ConversationBusy naming the conversation."""
    monkeypatch.setenv("PIDURABLE_WORKER_TOOL_DELAY", "1.0")
    dsn, schema = pg
    async with trio.open_nursery() as nursery:
        worker = _worker(dsn, schema, "w")
        await nursery.start(worker.run)
        with Client(dsn, schema=schema) as client:
            cid = await client.create_conversation(worker_app.AGENT)
            first = await client.submit(cid, Input("go"))
            await first.submission_id()
            with trio.fail_after(10):
                while not _sql(dsn, schema, "SELECT 1 FROM tasks WHERE kind = 'pi.tool' AND status = 'running'"):
                    await trio.sleep(0.02)
            busy = await client.submit(cid, Input("now!", when_busy="reject", request_id="rej"))
            with pytest.raises(ConversationBusy) as e:
                await busy.submission_id()
            assert e.value.conversation_id == cid
            assert (await first.wait()).status == "done"
            assert _sql(dsn, schema, "SELECT count(*) FROM submissions WHERE request_id = 'rej'") == [(0,)]
        nursery.cancel_scope.cancel()


async def test_a_worker_reconnects_its_listen_connection(pg: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends the worker's LISTEN session (a restart, a failover):
    the worker opens a new one, and a later submission is found through its
    notification (polling is set to 30 s, so nothing else would find it)."""
    monkeypatch.setenv("PIDURABLE_WORKER_LOG", str(tmp_path / "log"))
    dsn, schema = pg
    listening = "SELECT pid FROM pg_stat_activity WHERE application_name = 'pidurable lis listen'"
    async with trio.open_nursery() as nursery:
        worker = _worker(dsn, schema, "lis", leases=LeaseSettings(duration=2.0, renew_interval=0.5, poll_interval=30.0))
        await nursery.start(worker.run)
        ((old,),) = _sql(dsn, schema, listening)
        _sql(dsn, schema, "SELECT pg_terminate_backend(%s)", [old])
        with trio.fail_after(10):
            while [p for (p,) in _sql(dsn, schema, listening) if p != old] == []:
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # the kick after reconnecting has come and gone
        with Client(dsn, schema=schema) as client:
            cid = await client.create_conversation(worker_app.AGENT)
            sub = await client.submit(cid, Input("go"))
            with trio.fail_after(10):
                assert (await sub.wait()).status == "done"
        nursery.cancel_scope.cancel()
