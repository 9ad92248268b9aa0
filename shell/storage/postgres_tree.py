"""Leased conversation trees on PostgreSQL (issue 13 items 2-4).

Many workers share one store. The unit of ownership is a *conversation
tree*: a top-level conversation with everything created from it - the
conversations its tasks own (sub-agents), its forks, and their tasks and
submissions. Every such row carries the tree's root id (``tree`` column,
``postgres_layout`` version 2), so a tree is one indexed filter away.

Leases. One row per tree: ``leases(root, owner, epoch, expires_at, work_at,
pinned)``. ``work_at`` is set while the tree wants an owner (a submission
arrived through the intake; live work found when the store was upgraded or
swept) and cleared when its owner releases it idle. A worker *claims* up to
its free capacity in one transaction: ``SELECT ... FOR UPDATE SKIP LOCKED``
among wanted rows that are free or expired (and pinned to nobody, or to this
worker), setting ``owner``, ``epoch + 1`` and ``expires_at`` (the database's
clock: one clock for everyone). It renews ``expires_at`` every renew
interval for all its trees in one statement; a row that no longer has its
(owner, epoch) is a lost lease.

Fencing. A claimed tree's view (:class:`TreeStorage`) commits through
``PostgresStorage.commit_fenced``: the transaction's first statement is
``fence(root, epoch, owner)``, which locks the lease row and raises unless it
still holds exactly that owner and epoch. So a commit of a worker whose lease
was taken - paused past its lease, partitioned, or simply slow - rolls back
and raises :class:`LeaseLost`; and since the claim that bumps the epoch
takes the same row lock, no commit of the old epoch can land after the new
owner's claim (``journal.landed`` records the order; the chaos test checks
it). A lease that expired but was not taken yet still commits: nobody else
can have acted on the tree.

Ids. The core allocates ids and commit sequence numbers from counters in its
state. Each claim draws a fresh block from the ``id_blocks`` sequence: ids
and seqs of the claim start at ``block << 32``. A later block is above every
id and seq of every earlier block, so ids stay unique across workers and
increase within a tree across takeovers (the core's entry order and the
fork reads rely on it), and journal rows never collide.

Opening a claimed tree is a restart of that tree: :meth:`TreeStorage.load`
reads its conversations, live tasks, unsettled submissions and live
documents in one snapshot, and ``Harness.open`` steps ``Opened`` as always
(running -> pending, the same recovery rules).

Intake. A host that does not own a tree submits through the database
(:func:`submit`): one transaction inserts an ``intake`` row (keyed by
conversation and request id, so a retried submit is the same row), marks the
tree wanted and ``NOTIFY``s the store's channel with the tree id. The owner
steps each pending row as an ordinary host submission with that request id
(the core's request-id dedup makes it exactly once across crashes) and then
records the submission id on the row (or why it was refused).
"""

from __future__ import annotations

import json
import math
import uuid
from contextlib import nullcontext
from collections.abc import Sequence
from typing import Any

import attrs
import psycopg
import trio

from pidurable.core.model import Conversation, ConversationId, Submission, Task

from . import live
from . import postgres_layout as layout
from .base import Loaded, LeaseLost, StorageError, StoreFenced, conv_state, document_state, encode_commit
from .postgres import Batch, PostgresStorage, _write_document

__all__ = ["Claim", "LeaseLost", "LeaseSettings", "TreeStorage"]

#: Ids and commit seqs of one claim lie in [block << ID_BLOCK_BITS, (block + 1) << ID_BLOCK_BITS).
ID_BLOCK_BITS = 32


@attrs.frozen(kw_only=True)
class LeaseSettings:
    """How long a lease lasts, how often it is renewed, how often an idle
    worker looks for work without a notification (seconds)."""

    duration: float = 10.0
    renew_interval: float = 3.0
    poll_interval: float = 5.0

    def __attrs_post_init__(self) -> None:
        for name in ("duration", "renew_interval", "poll_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"LeaseSettings.{name} must be a positive number of seconds, not {value!r}")
        if self.renew_interval * 2 > self.duration:
            raise ValueError(
                f"LeaseSettings.renew_interval ({self.renew_interval}) must be at most half the duration "
                f"({self.duration}): one late renewal must not lose the lease"
            )


@attrs.frozen(kw_only=True)
class Claim:
    """A lease this worker holds: the tree, the epoch its commits are
    fenced with, who it is, and the first id of its block."""

    tree: int
    epoch: int
    owner: str
    id_base: int

    @property
    def fence(self) -> tuple[int, int, str]:
        return (self.tree, self.epoch, self.owner)


class TreeStorage:
    """One claimed tree as a ``Storage``: its own ``load`` and fenced
    commits; every read is the shared store's (records are global)."""

    def __init__(self, store: PostgresStorage, claim: Claim) -> None:
        self.store = store
        self.claim = claim
        self.name = f"{store.name} tree {claim.tree}"
        self._fenced = False

    def __getattr__(self, name: str) -> Any:  # the reads (entries, task, ...)
        return getattr(self.store, name)

    # lifecycle -----------------------------------------------------------------
    def load(self) -> Loaded:
        """The tree's live state in one REPEATABLE READ snapshot; the id and
        seq counters start at the claim's block."""
        store, tree = self.store, self.claim.tree
        with store._failing("load"), store._connection() as conn, conn.transaction():
            conn.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            store._tx.conn = conn
            try:
                return self._load(store, tree)
            finally:
                store._tx.conn = None

    def _load(self, store: PostgresStorage, tree: int) -> Loaded:
        name = store.name
        # the store's own record reads (they decode every layout's rows)
        records = store._records("conversations", Conversation, "tree = ?", [tree])
        docs = store.live_builtins([c.id for c in records]) if records else {}  # their built-ins (core/builtins.py)
        convs = tuple(conv_state(c, docs.get(c.id, {}), name) for c in records)
        tasks = tuple(store._records("tasks", Task, "tree = ? AND status <> 'terminal'", [tree]))
        subs = tuple(store._records("submissions", Submission, "tree = ? AND status IN ('queued','placed')", [tree]))
        owners = {c.conversation.id for c in convs}
        live_tasks = {t.id for t in tasks}
        documents = []
        for row in store._document_rows(
            "retired_seq IS NULL AND id >= 0 AND ((scope = 'conversation' AND owner IN (SELECT id FROM conversations WHERE tree = ?)) "
            "OR (scope = 'task' AND owner IN (SELECT id FROM tasks WHERE tree = ? AND status <> 'terminal')))",
            [tree, tree],
        ):
            if (row.scope == "conversation" and row.owner in owners) or (row.scope == "task" and row.owner in live_tasks):
                doc = document_state(name, row, store._revisions(row.id))
                if doc is not None:
                    documents.append(doc)
        first = self.claim.id_base + 1
        return Loaded(
            next_id=first,
            next_seq=first,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=store.store_id,
            documents=tuple(documents),
        )

    def load_live(self, roots: Sequence[int] | None = None) -> Loaded:
        """The tree's live work only (a store with O(live) opening: the live
        tasks and unsettled submissions of the tree - by its ``tree`` column,
        so forks and conversations its harness created are in it - and only
        the conversations the core must hold, read as the store's own
        ``load_conversations`` reads them), in one REPEATABLE READ snapshot,
        with the counters at the claim's block. Only this tree is live here."""
        if roots is not None and list(roots) != [self.claim.tree]:
            raise StorageError(f"Store {self.name}: a tree's view loads only tree {self.claim.tree}, not {list(roots)}")
        store, tree = self.store, self.claim.tree
        with store._failing("load"), store._connection() as conn, conn.transaction():
            conn.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            store._tx.conn = conn
            try:
                tasks = tuple(store._records("tasks", Task, "tree = ? AND status <> 'terminal'", [tree]))
                subs = tuple(store._records("submissions", Submission, "tree = ? AND status IN ('queued','placed')", [tree]))
                owned = store._rows(
                    "load", "SELECT id, owner_task_id FROM conversations WHERE tree = ? AND owner_task_id IS NOT NULL", [tree]
                )
                convs, docs = store.load_conversations(live.live_conversation_ids(tasks, subs, owned))
                task_docs = live._documents(
                    store.name,
                    store._document_rows(
                        "scope = 'task' AND retired_seq IS NULL AND owner IN "
                        "(SELECT id FROM tasks WHERE tree = ? AND status <> 'terminal')",
                        [tree],
                    ),
                    store._revisions,
                )
            finally:
                store._tx.conn = None
        first = self.claim.id_base + 1
        return Loaded(
            next_id=first,
            next_seq=first,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=store.store_id,
            documents=tuple(sorted(docs + task_docs, key=lambda d: d.id)),
        )

    def commit(self, seq: int, writes: Sequence[Any], events: Sequence[Any]) -> None:
        self.commit_many([(seq, writes, events)])

    def commit_many(self, batch: Batch) -> None:
        """One transaction, fenced by this claim's lease (``LeaseLost`` if it moved on)."""
        if self._fenced:
            raise StoreFenced(f"store {self.name} is fenced")
        self.store.commit_fenced(batch, self.claim.fence)

    async def commit_many_async(self, batch: Batch) -> None:
        await trio.to_thread.run_sync(self.commit_many, batch, limiter=self.store._limiter)

    def fence(self) -> None:
        """Simulate a crash: nothing more is written through this view."""
        self._fenced = True

    def close(self) -> None:
        """The worker owns the shared store; closing a view changes nothing."""


# --- lease operations (each one short transaction on a pooled connection) -----------

_CLAIM = """
WITH wanted AS (
    SELECT root FROM leases
    WHERE work_at IS NOT NULL AND (owner IS NULL OR expires_at < clock_timestamp())
      AND (pinned IS NULL OR pinned = %(me)s) AND root <> ALL(%(exclude)s::bigint[]) {only}
    ORDER BY (pinned IS NULL), work_at, root LIMIT %(n)s FOR UPDATE SKIP LOCKED)
UPDATE leases l SET owner = %(me)s, epoch = l.epoch + 1, claimed_at = clock_timestamp(),
    expires_at = clock_timestamp() + %(duration)s * interval '1 second'
FROM wanted WHERE l.root = wanted.root
RETURNING l.root, l.epoch, nextval('id_blocks')
"""


def claim(
    store: PostgresStorage, me: str, n: int, duration: float, *, exclude: Sequence[int] = (), only: int | None = None
) -> list[Claim]:
    """Claim up to ``n`` wanted trees whose lease is free or expired, but
    none in ``exclude`` (the trees this worker still runs) (``only``: just
    that tree)."""
    if n <= 0:
        return []
    sql = _CLAIM.format(only="AND root = %(only)s" if only is not None else "")
    with store._failing("claiming leases"), store._connection() as conn, conn.transaction():
        rows = conn.execute(sql.encode(), {"me": me, "n": n, "duration": duration, "only": only, "exclude": list(exclude)}).fetchall()
    return [Claim(tree=int(r), epoch=int(e), owner=me, id_base=int(b) << ID_BLOCK_BITS) for r, e, b in rows]


def renew(
    store: PostgresStorage, claims: Sequence[Claim], duration: float, *, conn: psycopg.Connection[Any] | None = None
) -> set[int]:
    """Extend the leases still held; the trees whose lease is still ours
    (``conn``: a connection of the caller's, in autocommit mode)."""
    if not claims:
        return set()
    me = claims[0].owner
    with store._failing("renewing leases"), (nullcontext(conn) if conn is not None else store._connection()) as conn:
        rows = conn.execute(
            b"UPDATE leases l SET expires_at = clock_timestamp() + %s * interval '1 second' "
            b"FROM unnest(%s::bigint[], %s::bigint[]) AS m(root, epoch) "
            b"WHERE l.root = m.root AND l.epoch = m.epoch AND l.owner = %s RETURNING l.root",
            [duration, [c.tree for c in claims], [c.epoch for c in claims], me],
        ).fetchall()
    return {int(r) for (r,) in rows}


def release(store: PostgresStorage, c: Claim, *, idle: bool) -> bool:
    """Give the lease up. ``idle``: only if the store holds no live task,
    no unsettled submission and no pending intake for the tree (then it no
    longer wants an owner) - checked under the lease row's lock, so a commit
    still in flight either landed before (and is seen) or is refused after;
    False if the tree still has work (the caller keeps it). Otherwise the
    tree stays wanted and the other workers are told. ``LeaseLost`` if the
    lease had moved on."""
    try:
        with store._failing("releasing a lease"), store._connection() as conn, conn.transaction():
            conn.execute(b"SELECT fence(%s, %s, %s)", list(c.fence))
            if idle:  # the store's word, under the lease lock: a commit in flight has landed or not begun
                pending = conn.execute(
                    b"SELECT EXISTS (SELECT 1 FROM intake WHERE tree = %(t)s AND submission_id IS NULL AND refused IS NULL) "
                    b"OR EXISTS (SELECT 1 FROM tasks WHERE tree = %(t)s AND status <> 'terminal') "
                    b"OR EXISTS (SELECT 1 FROM submissions WHERE tree = %(t)s AND status IN ('queued','placed'))",
                    {"t": c.tree},
                ).fetchone()
                if pending is not None and pending[0]:
                    return False
            conn.execute(
                b"UPDATE leases SET owner = NULL, expires_at = NULL, work_at = CASE WHEN %s THEN NULL ELSE work_at END "
                b"WHERE root = %s",
                [idle, c.tree],
            )
            if not idle:
                conn.execute(b"SELECT pg_notify(%s, %s)", [layout.channel(store.schema), str(c.tree)])
    except StorageError as e:
        cause = e.__cause__
        if isinstance(cause, psycopg.Error) and cause.sqlstate == "PD001":
            raise LeaseLost(f"Store {store.name}: lease on tree {c.tree} epoch {c.epoch} is no longer held") from cause
        raise
    return True


def pending_intake(store: PostgresStorage, tree: int) -> list[tuple[int, int, str, str, str]]:
    """The tree's intake rows not yet admitted: (id, conversation, request id, type, payload)."""
    return [
        (int(i), int(cid), str(rid), str(kind), str(payload))
        for i, cid, rid, kind, payload in store._rows(
            "reading the intake",
            "SELECT id, conversation_id, request_id, type, payload FROM intake "
            "WHERE tree = ? AND submission_id IS NULL AND refused IS NULL ORDER BY id",
            [tree],
        )
    ]


def settle_intake(store: PostgresStorage, c: Claim, intake_id: int, submission_id: int | None, refused: str | None) -> None:
    """Record what became of an intake row (fenced: only the owner says)."""
    try:
        with store._failing("settling an intake row"), store._connection() as conn, conn.transaction():
            conn.execute(b"SELECT fence(%s, %s, %s)", list(c.fence))
            conn.execute(
                b"UPDATE intake SET submission_id = %s, refused = %s WHERE id = %s AND submission_id IS NULL AND refused IS NULL",
                [submission_id, refused, intake_id],
            )
    except StorageError as e:
        cause = e.__cause__
        if isinstance(cause, psycopg.Error) and cause.sqlstate == "PD001":
            raise LeaseLost(f"Store {store.name}: lease on tree {c.tree} epoch {c.epoch} is no longer held") from cause
        raise


def sweep(store: PostgresStorage) -> int:
    """Mark every tree with live work in the store as wanted (a tree whose
    work was created without the intake, e.g. by a single owner before the
    workers started). Returns how many trees it marked."""
    with store._failing("sweeping for work"), store._connection() as conn, conn.transaction():
        conn.execute(
            b"INSERT INTO leases (root) SELECT id FROM conversations WHERE tree = id ON CONFLICT (root) DO NOTHING"
        )
        rows = conn.execute(
            b"UPDATE leases SET work_at = clock_timestamp() WHERE work_at IS NULL AND ("
            b"root IN (SELECT tree FROM tasks WHERE status <> 'terminal') OR "
            b"root IN (SELECT tree FROM submissions WHERE status IN ('queued','placed')) OR "
            b"root IN (SELECT tree FROM intake WHERE submission_id IS NULL AND refused IS NULL)) RETURNING root"
        ).fetchall()
    return len(rows)


def bump_id_blocks(store: PostgresStorage) -> None:
    """Move ``id_blocks`` above every id and seq already stored (a store a
    single owner wrote counts from 1), so a claim's block is fresh."""
    with store._failing("preparing id blocks"), store._connection() as conn, conn.transaction():
        conn.execute(
            b"SELECT setval('id_blocks', greatest((SELECT last_value FROM id_blocks), "
            b"(greatest((SELECT max(id) FROM conversations), (SELECT max(id) FROM entries), (SELECT max(id) FROM tasks), "
            b"(SELECT max(id) FROM submissions), (SELECT max(id) FROM document_records), (SELECT max(seq) FROM journal), 0) "
            b">> %s) + 1))",
            [ID_BLOCK_BITS],
        )


def pin(store: PostgresStorage, tree: int, worker_id: str | None) -> None:
    """Pin ``tree`` to ``worker_id`` (only it claims the tree), or let it float (None).
    A tree already held by another worker stays with it until its lease ends."""
    with store._failing("pinning a tree"), store._connection() as conn, conn.transaction():
        conn.execute(
            b"INSERT INTO leases (root, pinned) VALUES (%s, %s) ON CONFLICT (root) DO UPDATE SET pinned = EXCLUDED.pinned",
            [tree, worker_id],
        )
        conn.execute(b"SELECT pg_notify(%s, %s)", [layout.channel(store.schema), str(tree)])


# --- hosts without a tree: create conversations and submit through the database -----


def create_conversation(store: PostgresStorage, agent: Any = None) -> int:
    """A new top-level conversation (a tree of its own), written directly:
    its records from the codec as the core would write them, ids from a
    fresh block. No worker owns it until work arrives."""
    from pidurable.core.effects import PutAgent, PutConversation, Write
    from pidurable.core.model import AgentConfig, ConversationId

    with store._failing("creating a conversation"), store._connection() as conn, conn.transaction():
        found = conn.execute(b"SELECT nextval('id_blocks')").fetchone()
        assert found is not None
        cid = ConversationId((int(found[0]) << ID_BLOCK_BITS) + 1)
        writes: list[Write] = [PutConversation(conversation=Conversation(id=cid)), PutAgent(conversation_id=cid, agent=agent or AgentConfig())]
        rows, _, _ = encode_commit(0, writes, ())
        for row in rows:  # as PostgresStorage._write_one writes them
            if row.table == "document_revisions":
                _write_document(conn, row.columns)
            else:
                conn.execute(layout.UPSERT[row.table].encode(), {**row.columns, "tree": cid})
        conn.execute(b"INSERT INTO leases (root) VALUES (%s) ON CONFLICT (root) DO NOTHING", [cid])
    return int(cid)


def submit(store: PostgresStorage, conversation_id: int, type_: str, payload: dict[str, Any], request_id: str | None) -> tuple[int, str]:
    """Insert an intake row (or find the one with the same request id),
    mark its tree wanted and notify the workers, in one transaction.
    Returns (intake id, request id)."""
    from ..errors import NotFound

    rid = request_id if request_id is not None else f"intake:{uuid.uuid4()}"
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    with store._failing("submitting"), store._connection() as conn, conn.transaction():
        found = conn.execute(b"SELECT tree FROM conversations WHERE id = %s", [conversation_id]).fetchone()
        if found is None or found[0] is None:
            raise NotFound(f"Conversation {conversation_id} does not exist")
        tree = int(found[0])
        row = conn.execute(
            b"INSERT INTO intake (tree, conversation_id, request_id, type, payload) VALUES (%s, %s, %s, %s, %s) "
            b"ON CONFLICT (conversation_id, request_id) DO NOTHING RETURNING id",
            [tree, conversation_id, rid, type_, text],
        ).fetchone()
        if row is None:
            row = conn.execute(
                b"SELECT id FROM intake WHERE conversation_id = %s AND request_id = %s", [conversation_id, rid]
            ).fetchone()
            assert row is not None
        conn.execute(
            b"INSERT INTO leases (root, work_at) VALUES (%s, clock_timestamp()) "
            b"ON CONFLICT (root) DO UPDATE SET work_at = COALESCE(leases.work_at, EXCLUDED.work_at)",
            [tree],
        )
        conn.execute(b"SELECT pg_notify(%s, %s)", [layout.channel(store.schema), str(tree)])
    return int(row[0]), rid


def intake_state(store: PostgresStorage, intake_id: int) -> tuple[int | None, str | None]:
    """(submission id, refusal) of an intake row."""
    rows = store._rows("reading the intake", "SELECT submission_id, refused FROM intake WHERE id = ?", [intake_id])
    if not rows:
        raise StorageError(f"Store {store.name}: no intake row {intake_id}")
    sid, refused = rows[0]
    return (None if sid is None else int(sid)), refused
