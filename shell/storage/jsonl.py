"""JSONL storage: a store is a directory, its commits lines of ``main.jsonl``,
a live task's versions and document revisions in sidecar files.

Theory of operation
-------------------
Layout of a store directory (pi-durable-spec §2.8, in this codec's terms)::

    main.jsonl        line 1: {"pidurable":"jsonl","schema":8,"store_id":"…"}
                      if compacted, snapshot rows (jsonl_snapshot.py), then
                      one line per commit, oldest first (jsonl_lines.py):
                      [7,4,"b3:…",[events…],[writes…]]  (seq, format, digest, …)
    task-<id>.jsonl   a live task's versions: {"seq":7,"ordinal":2,"write":{…}}
    doc-<id>.jsonl    one document incarnation's revisions (same lines)
    lock              the owner's exclusive flock (empty file)
    lock.owner        who holds it (pid, host, start time; see owner.py)

A commit line holds what the journal row of every adapter holds (``seq``,
``format``, the events, the ``digest`` of the writes' journal text) and
what the tables are rebuilt from: each write's row (an entry, a terminal
task: ``["e",…]``, ``["t",…]``; the others in their journal form) - except
two kinds, which go to a sidecar (jsonl_sidecars.py) and leave a marker
(``["T",5]``, ``["D",-10]``: the write's place in the list is its ordinal):

- a task that is not terminal: its record in ``task-5.jsonl``;
- a document revision (a base or a delta; built-ins like ``pi.live`` get one
  on most steps, core/builtins.py): in ``doc--10.jsonl``; a retirement
  stays inline.

A sidecar line carries the write's journal text. The digest is computed
at commit from the whole writes' journal text, so a commit's journal, and
``pidurable replay --check``, are the same whatever the layout:
``journal()`` gives each line's own format, events and digest. (Schema 6
and before: object lines, writes in journal form, jsonl_lines.py.)

Why sidecars: a task's intermediate versions and a current-only document's
old revisions are dead once the task ends or the document has a newer base;
in a sidecar they can be deleted as soon as they are dead (``main.jsonl``
is append-only between compactions). What stays is ``main.jsonl`` (events, entries, submissions,
terminal tasks, markers), the sidecars of live tasks, of rewindable
documents (every revision kept: ``document_at``, forks) and of live
current-only documents since their newest base.

Compaction (:meth:`JsonlStorage.compact`, ``pidurable compact-store``;
jsonl_snapshot.py) rewrites ``main.jsonl`` as the tables' rows and the
journal rows retention keeps (a commit line without writes each), through
``main.jsonl.reclaim`` (flushed, renamed over, the directory flushed), and
deletes every sidecar: open then reads the records and kept rows only.

``open`` reads ``main.jsonl`` and every sidecar once and rebuilds the tables -
the same in-memory tables as :class:`~.memory.MemoryStorage`, through the
same row encoding (``base.encode_write``) - so every read is the memory
adapter's. Cost: open is O(files) (every line parsed, every write decoded and
re-encoded into its row: about 20 µs a write), the tables stay in memory
(O(store), not O(live)), and reads that scan a table (``entries``,
``submission_by_request``) are O(table).

Commit protocol (``commit_many``):

1. Validate and encode everything, lay out the lines of each file
   (``jsonl_sidecars.lay_out``): a failure does no I/O and leaves the store
   usable.
2. Append each touched sidecar's records (one ``write`` per file, to an
   ``O_APPEND`` descriptor; in write order), each ``fsync``ed after its
   append if ``fsync=True`` (then the directory, if a file is new).
3. Append the batch's main lines in one ``write`` (``fsync`` if asked).
   A commit counts once ``main.jsonl`` holds its whole line; its sidecar
   records are there before it.
4. Update the in-memory tables.
5. Reclaim, best effort (a failure is logged; the next open finishes it):
   delete the sidecar of a task whose record in main is now terminal, and of
   a retired current-only document (``latest`` history, or task-scoped);
   after a base of a current-only document, replace its file with that base
   and what follows (written to ``<file>.reclaim``, flushed if ``fsync``,
   renamed over). Rewindable documents are never reclaimed.

Any failure in 2-3 poisons the store (every later commit raises until it is
reopened): the tables were not touched, and open decides from the files.

``commit_many`` is all or nothing across a crash: every main line of a
batch but the last carries ``"more":true``; at open, a batch without its
last line is cut off whole.

Open (jsonl_recovery.py reads and checks; everything is checked before
anything is repaired, so a damaged store is left as it was):

- A torn tail of ``main.jsonl`` (the bytes after the last newline, or an
  unparsable last line) is truncated at the exact byte offset where its line
  (or its unfinished batch) starts; the next commit reuses its seq.
- Every record a kept main line refers to must be in its sidecar, unless it
  was reclaimed: a task's records before its terminal record in main, a
  current-only document's before its newest base (or its retirement). A
  missing one raises :class:`DamagedRecord` ("missing confirmed sidecar
  record") naming the file, the seq and the main line.
- A sidecar's records are a confirmed prefix, then records of commits main
  does not hold (a crash between the sidecar and main appends) and maybe a
  torn line: that tail is truncated at its exact byte offset. A confirmed
  record after an unconfirmed one is corruption.
- Real corruption - a line that is not the last and is not JSON, a commit of
  the wrong shape, a record that does not decode, seqs that do not increase
  - raises :class:`DamagedRecord` naming the file and the line.
- Stray ``*.reclaim`` files are deleted, and interrupted reclamation is
  finished (a terminal task's sidecar deleted, a current-only document's
  file cut to its newest base).
- A store of an older layout (header ``schema`` 7: never compacted; 6:
  object lines; 5 or less: every write inline, no sidecars) opens as it
  did; its header is rewritten to schema 8 (the file renamed over; its
  lines stay as they are). An older pidurable refuses a schema-8 store
  ("upgrade pidurable").

One owner per directory: an exclusive ``flock`` on ``lock`` (found by the
directory's real path, so a symlink reaches the same file; a lock follows
the inode, so a hard link of ``lock`` does too); see :mod:`.owner`.

Durability: with ``fsync=False`` process-crash consistency (a process crash
loses nothing that counted; a power loss may lose the newest commits); with
``fsync=True`` each commit's sidecar records are flushed before its main
line is written, and the main line before it counts.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pidurable.core.effects import Write
from pidurable.core.events import Event
from pidurable.core.model import ConversationId

from . import codec, owner
from . import jsonl_recovery as recovery
from . import jsonl_sidecars as sidecars
from . import jsonl_snapshot as snapshot
from .base import (
    Loaded,
    NotAStore,
    StorageError,
    StoreFenced,
    StoreLocked,
    StoreMissing,
)
from .jsonl_recovery import HEADER_PREFIX as HEADER_PREFIX, LAYOUT, Found, read_sidecars  # HEADER_PREFIX: for tests
from .jsonl_sidecars import Plan
from .jsonl_snapshot import Compacted
from .memory import MemoryStorage
from .sqlite_retention import check_retention

log = logging.getLogger("pidurable")

MAIN = "main.jsonl"
LOCK = "lock"
#: Sidecar descriptors kept open (the most recently written ones).
OPEN_SIDECARS = 32


class JsonlStorage(MemoryStorage):
    """A store in a directory of JSONL files (see the module comment)."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False, create: bool = True) -> None:
        super().__init__()
        self.path = Path(path)
        self.name = str(self.path)
        #: The directory's real path: every name of the store finds one lock.
        self.dir = Path(os.path.realpath(self.path))
        self.main = self.dir / MAIN
        self.fsync = fsync
        self._lock_fd: int | None = None
        self._inode: owner.Inode = (0, 0)
        self._owner_written = False
        self._fd: int | None = None  # main.jsonl, O_APPEND
        self._poisoned: str | None = None
        #: The sidecar files that exist, and the open descriptors of some (O_APPEND, oldest first).
        self._files: set[str] = set()
        self._side_fds: dict[str, int] = {}
        try:
            self._open(create)
        except BaseException:
            self._release()
            raise

    def __enter__(self) -> JsonlStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # opening -----------------------------------------------------------------
    def _open(self, create: bool) -> None:
        if not self.dir.exists():
            if not create:
                raise StoreMissing(f"Store {self.path} does not exist")
            if not self.dir.parent.is_dir():
                raise StorageError(f"Cannot open store {self.path}: directory {self.dir.parent} does not exist")
            try:
                self.dir.mkdir()
            except OSError as e:
                raise StorageError(f"Cannot create store {self.path}: {e.strerror or e}") from e
        elif not self.dir.is_dir():
            raise NotAStore(f"{self.path} is not a directory (a JSONL store is one); it was left untouched")
        if not create and not self.main.exists():
            raise StoreMissing(f"Store {self.path} does not exist (no {MAIN})")
        self._lock()
        try:
            self._fd = os.open(self.main, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            data = _read_all(self._fd)
        except OSError as e:
            raise StorageError(f"Cannot open store {self.path}: {e.strerror or e}") from e
        if not data:
            if not create:
                raise StoreMissing(f"Store {self.path} does not exist ({self.main} is empty)")
            self._create()
        self._replay(data)
        self._owner_written = owner.write_owner(self.dir / LOCK)

    def _lock(self) -> None:
        lock = self.dir / LOCK
        try:
            self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._inode = owner.inode_of(os.fstat(self._lock_fd))
            taken = owner.try_lock(self._inode, self._lock_fd)
        except OSError as e:
            raise StorageError(f"Cannot lock store {self.path}: {e.strerror or e}") from e
        if not taken:
            fd, self._lock_fd = self._lock_fd, None
            owner.release_fd(self._inode, fd)
            raise StoreLocked(f"Store {self.path} is in use by {self._holder()}; close it there first")

    def _holder(self) -> str:
        if owner.owned_here(self._inode):
            return owner.me().describe()
        try:
            pid = owner.flock_holder(self._inode)
        except OSError as e:
            log.debug("/proc/locks unreadable (%s); trusting the owner file", e)
            pid = None
        found = owner.read_owner(self.dir / LOCK)
        if found is not None and (pid is None or found.pid == pid):
            return found.describe()
        return f"pid {pid} on this host" if pid is not None else "another process (its owner file is missing)"

    def _header_line(self) -> bytes:
        return (codec.dumps({"pidurable": "jsonl", "schema": LAYOUT, "store_id": self._store_id}) + "\n").encode("utf-8")

    def _create(self) -> None:
        _write_all(self._descriptor(), self._header_line())
        if self.fsync:  # the new file's name must survive a power loss too
            os.fsync(self._descriptor())
            _fsync_dir(self.dir)

    def _replay(self, data: bytes) -> None:
        """Rebuild the tables from ``main.jsonl`` and the sidecars it refers
        to (jsonl_recovery.py); everything is checked before anything is
        repaired (cut, deleted, rewritten), so a damaged store is left as it was."""
        scan = recovery.scan_main(self.path, self.main, data)
        if scan.store_id is not None:
            self._store_id = scan.store_id
        found = read_sidecars(self.dir, self.main, scan.commits)
        recovery.rebuild(self, scan.commits, found, scan.rows)
        # checked: now repair
        layout = scan.layout
        if scan.keep < len(data):
            self._truncate(scan.keep, len(data))
            if scan.keep == 0:  # only a torn header: a store being created
                self._store_id = str(uuid.uuid4())
                self._create()
                layout = LAYOUT
        self._repair_sidecars(found)
        if layout < LAYOUT and scan.keep > 0:
            self._upgrade(scan.header)

    def _repair_sidecars(self, found: Found) -> None:
        """Cut unconfirmed tails, drop stray ``.reclaim`` files, and finish
        reclamation a crash interrupted (terminal tasks' sidecars, retired
        current-only documents' files, revisions before a newest base)."""
        try:
            strays = [n for n in os.listdir(self.dir) if n.endswith(sidecars.RECLAIM)]
        except OSError as e:
            raise StorageError(f"Cannot open store {self.path}: {e.strerror or e}") from e
        for name in strays:
            log.warning("Store %s: deleting %s, left by an interrupted reclamation", self.path, name)
            self._unlink(name)
        for name, (side, _) in found.items():
            if side is None:
                continue
            if side.keep < side.size:
                log.warning(
                    "Store %s: %s ends with records of no commit (a crash before main.jsonl held them, or during a "
                    "compaction): "
                    "truncated at byte %d (%d bytes dropped)", self.path, name, side.keep, side.size - side.keep,
                )
                try:
                    os.truncate(side.path, side.keep)
                except OSError as e:
                    raise StorageError(f"Store {self.path}: cannot truncate {side.path}: {e.strerror or e}") from e
            self._files.add(name)
            what = recovery.reclaimable(name, self._tables)
            if side.keep == 0 or what == "delete":
                self._delete(name)
                continue
            kind, ident = sidecars.parse_name(name)
            revisions = self._by_document.get(ident, {}) if kind == "doc" else {}
            if what == "rewrite" and side.records and revisions and side.records[0].seq < min(revisions):
                first = next(r for r in side.records if r.seq >= min(revisions))
                data = side.path.read_bytes()[first.start : side.keep]
                self._replace(name, data)

    def _upgrade(self, old_header: bytes) -> None:
        """A store of an older layout: its header says today's layout from
        now on (the file rewritten whole and renamed over, so a
        crash leaves one or the other)."""
        fd = self._descriptor()
        try:
            data = _read_all(fd)
            if not data.startswith(old_header):
                raise StorageError(f"Store {self.path}: {self.main} changed while opening")
            self._write_replacement(MAIN, self._header_line() + data[len(old_header) :])
            if self.fsync:  # the rename must not be lost while sidecar markers follow
                _fsync_dir(self.dir)
            new_fd = os.open(self.main, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as e:
            raise StorageError(f"Store {self.path}: cannot upgrade {self.main} to schema {LAYOUT}: {e.strerror or e}") from e
        self._fd = new_fd
        os.close(fd)
        log.info("Store %s: upgraded to JSONL schema %d (jsonl_lines.py)", self.path, LAYOUT)

    def _truncate(self, keep: int, size: int) -> None:
        log.warning(
            "Store %s: %s ends with a torn commit (a crash mid-append): truncated at byte %d (%d bytes dropped)",
            self.path, self.main, keep, size - keep,
        )
        try:
            os.ftruncate(self._descriptor(), keep)
            if self.fsync:
                os.fsync(self._descriptor())
        except OSError as e:
            raise StorageError(f"Store {self.path}: cannot truncate the torn tail of {self.main}: {e.strerror or e}") from e

    def _descriptor(self) -> int:
        if self._fd is None:
            raise StorageError(f"Store {self.path} is closed")
        return self._fd

    # lifecycle -----------------------------------------------------------------
    def load(self) -> Loaded:
        self._descriptor()
        return self._loaded()

    def load_live(self, roots: Sequence[ConversationId] | None = None) -> Loaded:
        self._descriptor()
        return self._live_loaded(roots)

    def close(self) -> None:
        """Release the store (the lock on every path); nothing is written."""
        self._release()

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        for name in list(self._side_fds):
            try:
                self._close_sidecar(name)
            except OSError as e:
                log.warning("Store %s: closing %s failed (%s)", self.path, name, e)
        try:
            if fd is not None:
                os.close(fd)
        except OSError as e:
            log.warning("Store %s: closing %s failed (%s)", self.path, self.main, e)
        finally:
            lock_fd, self._lock_fd = self._lock_fd, None
            if lock_fd is not None:
                if self._owner_written:
                    self._owner_written = False
                    owner.remove_owner(self.dir / LOCK)
                try:
                    owner.unlock(self._inode, lock_fd)
                except OSError as e:
                    log.warning("Store %s: unlocking failed (%s)", self.path, e)

    # writes ------------------------------------------------------------------
    def commit_many(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None:
        """Several commits as consecutive main lines, all or nothing (see the
        module comment); the tables change only once the lines are in."""
        if self._fenced:
            raise StoreFenced(f"store {self.path} is fenced")
        self._descriptor()
        if self._poisoned is not None:
            raise StorageError(f"Store {self.path}: {self._poisoned}; reopen the store")
        plan = sidecars.lay_out(batch, self._journal[-1].seq if self._journal else 0, self._tables["entries"])
        self._write(plan)
        for c in plan.encoded:
            self._apply(c)
        self._reclaim(plan)

    def _write(self, plan: Plan) -> None:
        """Sidecars first (flushed if ``fsync``), then the main lines: a
        commit counts once main holds it, and then its records are there.
        Any failure poisons the store: what landed is sorted out at open."""
        try:
            created = False
            for name, lines in plan.appends.items():
                step = f"append to {name}"
                fd, new = self._sidecar_fd(name)
                created |= new
                _write_all(fd, b"".join(lines))
                if self.fsync:  # now: a batch of many files may close this descriptor (OPEN_SIDECARS)
                    step = f"fsync {name}"
                    os.fsync(fd)
            if created and self.fsync:
                step = "fsync the store directory"
                _fsync_dir(self.dir)
            step = f"append to {MAIN}"
            _write_all(self._descriptor(), plan.main)
            if self.fsync:
                step = f"fsync {MAIN}"
                os.fsync(self._descriptor())
        except (OSError, StorageError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._poisoned = f"a commit failed ({step}: {why}); whether it counts is known at the next open"
            raise StorageError(f"Store {self.path}: {self._poisoned}") from e

    def _sidecar_fd(self, name: str) -> tuple[int, bool]:
        """An ``O_APPEND`` descriptor of sidecar ``name`` (and whether the file is new)."""
        fd = self._side_fds.pop(name, None)
        new = False
        if fd is None:
            new = name not in self._files
            fd = os.open(self.dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._files.add(name)
            if len(self._side_fds) >= OPEN_SIDECARS:
                self._close_sidecar(next(iter(self._side_fds)))
        self._side_fds[name] = fd  # the most recent last
        return fd, new

    def _close_sidecar(self, name: str) -> None:
        fd = self._side_fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def _reclaim(self, plan: Plan) -> None:
        """After the commit counts: delete the sidecars of tasks now terminal
        and of retired current-only documents; a current-only document's
        file becomes its newest base and what follows. Best effort: a failure
        is logged, and the next open finishes it."""
        for name, done in plan.terminal.items():
            if done and name in self._files:
                self._delete(name)
        for name in plan.retired:
            if name in self._files:
                self._delete(name)
        for name, index in plan.bases.items():
            if name in self._files:
                self._replace(name, b"".join(plan.appends[name][index:]))

    # compaction ----------------------------------------------------------------
    def compact(self, journal_retention: int | str = "all") -> Compacted:
        """Rewrite ``main.jsonl`` as the store's tables (snapshot rows) and
        the journal rows ``journal_retention`` keeps (jsonl_snapshot.py), and
        delete every sidecar (their records are in the snapshot now). The
        store must be open here (so this process holds its lock).

        Crash safety: the new file is written to ``main.jsonl.reclaim``,
        flushed, renamed over ``main.jsonl`` and the directory flushed -
        whatever ``fsync`` says, as a rename that outlived its data would
        lose the store. Before the rename a crash leaves the old store (the
        stray ``.reclaim`` is deleted at open); after it, the sidecars left
        hold records no line refers to, which open deletes. A sidecar this
        cannot delete poisons the store (a later record appended to it would
        follow records of no commit); the next open deletes it."""
        retention = check_retention(journal_retention)
        if self._fenced:
            raise StoreFenced(f"store {self.path} is fenced")
        old_fd = self._descriptor()
        if self._poisoned is not None:
            raise StorageError(f"Store {self.path}: {self._poisoned}; reopen the store")
        try:
            data, kept, rows = snapshot.compacted(self._header_line(), self._tables, self._journal, retention)
        except ValueError as e:
            raise StorageError(f"Store {self.path} cannot be compacted: {e}") from e
        for name in list(self._side_fds):
            self._close_sidecar(name)
        try:
            self._write_replacement(MAIN, data, sync=True)
        except OSError as e:
            self._unlink(MAIN + sidecars.RECLAIM)
            raise StorageError(f"Store {self.path}: cannot compact {self.main}: {e.strerror or e}") from e
        # renamed: main.jsonl is the compacted file; what follows must finish before a commit
        try:
            _fsync_dir(self.dir)
            self._fd = os.open(self.main, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            os.close(old_fd)
        except (OSError, StorageError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._poisoned = f"compaction could not finish ({why}); the next open reads the compacted file"
            raise StorageError(f"Store {self.path}: {self._poisoned}") from e
        dropped = len(self._journal) - len(kept)
        self._journal = kept
        names = sorted(self._files)  # every sidecar: open found them all, this store made the rest
        failed = [n for n in names if not self._unlink(n)]
        self._files = set(failed)
        if failed:
            self._poisoned = f"compaction could not delete {', '.join(failed)}; the next open deletes them"
            raise StorageError(f"Store {self.path}: {self._poisoned}")
        log.info("Store %s: compacted (%d snapshot rows, %d journal rows dropped, %d sidecars deleted)",
                 self.path, rows, dropped, len(names))
        return Compacted(rows=rows, dropped=dropped, kept=(kept[0].seq, kept[-1].seq) if kept else None, sidecars=len(names))

    def _delete(self, name: str) -> None:
        self._close_sidecar(name)
        if self._unlink(name):
            self._files.discard(name)

    def _unlink(self, name: str) -> bool:
        try:
            os.unlink(self.dir / name)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            log.warning("Store %s: cannot delete %s (%s); the next open retries", self.path, name, e.strerror or e)
            return False

    def _replace(self, name: str, data: bytes) -> None:
        self._close_sidecar(name)  # its descriptor would append to the old file
        try:
            self._write_replacement(name, data)
        except OSError as e:
            log.warning("Store %s: cannot reclaim %s (%s); the next open retries", self.path, name, e.strerror or e)
            self._unlink(name + sidecars.RECLAIM)

    def _write_replacement(self, name: str, data: bytes, *, sync: bool | None = None) -> None:
        """``name``'s new content, written to ``name.reclaim`` (flushed if
        ``sync``, by default if ``fsync``) and renamed over it."""
        tmp = self.dir / (name + sidecars.RECLAIM)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
            if self.fsync if sync is None else sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise StorageError(f"Cannot sync directory {path}: {e.strerror or e}") from e
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):  # some file systems cannot sync a directory
            raise StorageError(f"Cannot sync directory {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def open_jsonl_storage(
    path: str | os.PathLike[str], fsync: bool = False, *, create: bool = True, journal_retention: int | str = "all"
) -> JsonlStorage:
    """Open a JSONL store in directory ``path``, creating it (and the
    directory, whose parent must exist) unless ``create=False``. ``fsync``:
    sync every commit's sidecar records, then its main line, before it
    counts (default: the OS writes them back; a process crash loses nothing,
    a power loss may lose the newest commits). ``journal_retention``: only
    ``"all"`` - a JSONL store drops journal rows when it is compacted
    (``JsonlStorage.compact(journal_retention=N)``, ``pidurable
    compact-store --journal-retention N``), a rewrite of the whole store,
    which SQLite's prune every :data:`~.sqlite_retention.PRUNE_EVERY`
    commits would make O(store) per thousand commits; a number is refused
    (ValueError), not ignored. Raises ``StoreLocked``, ``NotAStore``,
    ``DamagedRecord``."""
    for name, flag in (("fsync", fsync), ("create", create)):
        if type(flag) is not bool:  # ("no" is truthy: refused, not taken for True)
            raise ValueError(f"{name} must be True or False, not {flag!r}")
    if check_retention(journal_retention) != "all":
        raise ValueError(
            f"journal_retention={journal_retention!r}: a JSONL store keeps its whole journal while open; it drops "
            "old journal rows only when compacted (JsonlStorage.compact(journal_retention=N), or pidurable "
            "compact-store --db DIR --journal-retention N), since dropping them rewrites the whole main.jsonl"
        )
    return JsonlStorage(path, fsync=fsync, create=create)
