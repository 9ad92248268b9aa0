"""Chaos (issue 13 item 5): three ``pidurable worker`` processes serve one
PostgreSQL store while conversations arrive through the database; every few
hundred ms a random worker is SIGKILLed (and a fresh one started) or
SIGSTOPped for longer than its lease and then SIGCONTed. After the last
fault, all work must finish and:

- every submission settles exactly once (one submission per intake row, each
  ``done``; no conversation has two);
- no unsafe tool body starts twice (the app logs every start, over every
  process: ``UnsafeBodyRunsAtMostOnceAcrossWorkers``);
- no commit of a fenced-out worker lands (``CommitsAreFenced``,
  ``OneWriterPerEpoch``, ``TreeIdsIncrease`` over the journal in landing
  order: tests/invariants.py, tla/Leases.tla);
- nothing is left live, and no lease is held.

Default: 200 conversations, faults for 8 s (well under two minutes here).
``PIDURABLE_CHAOS=big``: 1,000 conversations, faults for 40 s.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import trio

from pidurable.shell import Input
from pidurable.shell.worker import Client

from invariants import LeaseCommit, lease_invariants
from pg_server import PgServer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import worker_app  # noqa: E402
BIG = os.environ.get("PIDURABLE_CHAOS") == "big"
CONVERSATIONS = 1000 if BIG else int(os.environ.get("PIDURABLE_CHAOS_N", "200"))
FAULT_SECONDS = 40.0 if BIG else 8.0
LEASE = 2.0


def _start(dsn: str, schema: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PIDURABLE_WORKER_LOG": str(log), "PIDURABLE_WORKER_DELAY": "0.05"}
    cmd = [
        sys.executable, "-m", "pidurable.shell.cli", "worker", "--debug", "--dsn", dsn, "--app", "worker_app:setup",
        "--schema", schema, "--worker-id", name, "--concurrency", "40",
        "--lease-seconds", str(LEASE), "--renew-seconds", "0.4", "--poll-seconds", "0.5",
    ]  # fmt: skip
    out = open(log.with_name(f"{name}.out"), "wb")
    return subprocess.Popen(cmd, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)


def _sql(dsn: str, schema: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}".encode())
        return [tuple(r) for r in conn.execute(sql.encode()).fetchall()]


@pytest.mark.slow
async def test_three_workers_under_kills_and_pauses_settle_everything_once(postgres_server: PgServer, tmp_path: Path) -> None:
    """Kills and pauses longer than the lease lose nothing and double nothing (module comment)."""
    dsn, schema = postgres_server.dsn, postgres_server.fresh_schema()
    log = tmp_path / "bodies.log"
    rng = random.Random(13)
    client = Client(dsn, schema=schema)  # creates the store (and holds it shared, as workers do)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    lives = 0
    faults: Counter[str] = Counter()
    try:
        for i in range(3):
            lives += 1
            procs[f"w{i}"] = _start(dsn, schema, f"w{i}-{lives}", log)
        cids = [await client.create_conversation(worker_app.AGENT) for _ in range(CONVERSATIONS)]
        subs = []
        for n, cid in enumerate(cids):
            subs.append(await client.submit(cid, Input(f"trip {n}", request_id=f"req-{n}")))
        # faults, every 150-400 ms: SIGKILL (a fresh process takes the slot) or a pause longer than the lease
        stopped: dict[str, float] = {}
        end = trio.current_time() + FAULT_SECONDS
        while trio.current_time() < end:
            await trio.sleep(rng.uniform(0.15, 0.4))
            now = trio.current_time()
            for slot, until in list(stopped.items()):
                if now >= until:
                    procs[slot].send_signal(signal.SIGCONT)
                    del stopped[slot]
            slot = rng.choice(sorted(procs))
            if slot in stopped:
                continue
            if rng.random() < 0.5:
                procs[slot].kill()
                procs[slot].wait()
                lives += 1
                procs[slot] = _start(dsn, schema, f"{slot}-{lives}", log)
                faults["kill"] += 1
            elif len(stopped) < 2:
                procs[slot].send_signal(signal.SIGSTOP)
                stopped[slot] = now + rng.uniform(LEASE * 1.2, LEASE * 2.5)
                faults["pause"] += 1
        for slot in stopped:
            procs[slot].send_signal(signal.SIGCONT)
        # all work finishes after the last fault
        with trio.fail_after(90):
            records = [await s.wait(poll=0.1) for s in subs]
            while _sql(dsn, schema, "SELECT count(*) FROM tasks WHERE status <> 'terminal'")[0][0]:
                await trio.sleep(0.1)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        client.close()
    print(f"\nchaos: {CONVERSATIONS} conversations, {lives} worker lives, faults {dict(faults)}")
    assert faults["kill"] >= 3 and faults["pause"] >= 3

    # every submission settles exactly once
    assert [(r.status, r.reason) for r in records] == [("done", None)] * CONVERSATIONS
    assert len({r.id for r in records}) == CONVERSATIONS
    per_conv = _sql(dsn, schema, "SELECT conversation_id, count(*) FROM submissions GROUP BY 1 HAVING count(*) <> 1")
    assert per_conv == []
    assert _sql(dsn, schema, "SELECT count(*) FROM intake WHERE submission_id IS NULL") == [(0,)]
    assert _sql(dsn, schema, "SELECT count(*) FROM tasks WHERE status <> 'terminal'") == [(0,)]
    assert _sql(dsn, schema, "SELECT count(*) FROM submissions WHERE status IN ('queued','placed')") == [(0,)]

    # unsafe bodies at most once, fenced commits only
    starts = Counter(int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("start"))
    ids: dict[int, list[int]] = {}
    for seq, eid in _sql(dsn, schema, "SELECT seq, id FROM entries ORDER BY id"):
        ids.setdefault(int(seq), []).append(int(eid))  # type: ignore[call-overload]
    landed = [
        LeaseCommit(root=int(tree), epoch=int(epoch), worker=str(worker), seq=int(order), ids=tuple(ids.get(int(seq), ())))  # type: ignore[call-overload]
        for tree, epoch, worker, seq, order in _sql(
            dsn, schema, "SELECT tree, epoch, worker, seq, landed FROM journal WHERE tree IS NOT NULL ORDER BY landed"
        )
    ]
    assert landed
    lease_invariants(landed, starts)
    # each conversation's book call started at most once, somewhere (a kill between its intent and its body: never)
    assert CONVERSATIONS // 2 < len(starts) <= CONVERSATIONS
