"""WAL checkpoints off the commit path (issue 11 item 2: a flat step).

A SQLite store in WAL mode appends every commit to ``<file>-wal``; a
*checkpoint* copies those pages back into the main file so the WAL can start
over. Left to SQLite, the connection that commits runs one whenever the WAL
passes 1,000 pages (``wal_autocheckpoint``), inside the commit that crossed
the line: with this workload's ~10 pages a transaction, every ~50th round
stalled for a checkpoint (copying 4 MB and two ``fdatasync``), 10-12% of a
run's wall time in 1% of its rounds (docs/performance.md, round 11).

:class:`Checkpointer` runs them on a thread instead: every
:data:`EVERY_BATCHES` transactions it starts one ``PRAGMA
wal_checkpoint(PASSIVE)`` on a second connection of its own (one at a time;
sqlite3 releases the GIL while SQLite works). A passive checkpoint never
blocks the writer and copies only committed pages, so it changes nothing a
reader or a recovery can see. The connection's own ``wal_autocheckpoint``
(:data:`BACKSTOP_PAGES`) stays on as the backstop: a batch bigger than the thread keeps up with, or a
thread that fails, is checkpointed where it was before. A failure is logged
once on the ``pidurable`` logger and ends the thread's checkpoints for this
store (the backstop takes over); it never fails a commit.

``stop()`` joins the running checkpoint and closes the connection: the store
calls it when it closes, is abandoned, or is fenced (a simulated crash: no
write of this process reaches the file after :meth:`SqliteStorage.fence`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger("pidurable")

#: A checkpoint starts after this many transactions since the last one
#: started: ~1,000 pages of this workload's ~10 a transaction, where SQLite
#: would have checkpointed. Every 32 was measured too: the WAL stayed
#: smaller, but the checkpoints (each with two ``fdatasync``) ran so often
#: that the commits between them got slower (round 11, docs/performance.md).
EVERY_BATCHES = 100
#: ``wal_autocheckpoint`` of the store's own connection: the backstop, above
#: what the thread lets the WAL reach with ~10 pages a transaction, so SQLite
#: checkpoints inside a commit only when the thread cannot keep up (bigger
#: transactions, a failed thread). It bounds the WAL, and with it the index
#: every page read searches (at 10,000 a commit ran ~3% more instructions).
BACKSTOP_PAGES = 3000


class Checkpointer:
    """Checkpoints of one store, each on a short-lived thread (see the module comment)."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        close: Callable[[sqlite3.Connection], None],
        every: int = EVERY_BATCHES,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every!r}")
        self._name = name
        self._connect = connect
        self._close = close
        self._every = every
        self._since = 0
        self._conn: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._failed = False
        #: Checkpoints run to the end so far (tests and benchmarks read it).
        self.runs = 0

    @property
    def active(self) -> bool:
        """Whether later commits still start checkpoints here."""
        return not self._stopped

    def committed(self) -> None:
        """One more transaction is durable: start a checkpoint if one is due
        and none is running."""
        since = self._since + 1
        if since < self._every or self._stopped:
            self._since = since
            return
        running = self._thread
        if running is not None and running.is_alive():
            self._since = since
            return
        self._since = 0
        conn = self._conn
        if conn is None:
            try:
                conn = self._conn = self._connect()
            except Exception as e:  # (StorageError or sqlite3.Error from the store's connect)
                self._give_up(f"cannot open its connection ({e})")
                return
        thread = self._thread = threading.Thread(
            target=self._run, args=(conn,), name=f"pidurable-checkpoint {self._name}", daemon=True
        )
        thread.start()

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as e:
            self._give_up(f"a checkpoint failed ({e})")
            return
        self.runs += 1

    def _give_up(self, why: str) -> None:
        self._stopped = True
        if self._failed:  # (said once)
            return
        self._failed = True
        log.warning(
            "Store %s: background checkpoints stopped: %s; commits checkpoint the WAL themselves from now on",
            self._name,
            why,
        )

    def wait(self) -> None:
        """Join the running checkpoint, if any (before a VACUUM: compact-store)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def stop(self) -> None:
        """No more checkpoints: join the running one, close the connection (idempotent)."""
        self._stopped = True
        self.wait()
        self._thread = None
        conn, self._conn = self._conn, None
        if conn is not None:
            self._close(conn)
