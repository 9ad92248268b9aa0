"""JSONL storage: a store is a directory, its commits lines of ``main.jsonl``.

Theory of operation
-------------------
Layout of a store directory::

    main.jsonl      line 1: {"pidurable":"jsonl","schema":3,"store_id":"…"}
                    then one line per commit, oldest first:
                    {"seq":7,"format":3,"digest":"b2:…","events":[…],"writes":[…]}
    lock            the owner's exclusive flock (empty file)
    lock.owner      who holds it (pid, host, start time; see owner.py)

A commit line holds what the journal row of every adapter holds (``seq``,
``format``, the events, the ``digest`` of the writes) and the writes
themselves, in their journal form (``{"type": TAG, ids…, record}``: the
codec's text of the line's format, spliced in, nothing encoded twice). The
digest is of exactly that ``writes`` array's text; ``journal()`` gives each
line's own format, events and digest, so replay reads a JSONL store as it
reads any other. (A line of an older format is rebuilt into rows by today's
encoder: the rows decode to the same records.) ``open`` reads ``main.jsonl`` once and rebuilds
the tables - the same in-memory tables as :class:`~.memory.MemoryStorage`,
through the same row encoding (``base.encode_write``) - so every read is
the memory adapter's. Cost: open is O(file) (every line is parsed and each
write is decoded and re-encoded into its row: about 20 µs a write here,
10,000 commits of a task version and an entry open in 0.36 s), and
the tables stay in memory (O(store), not O(live)). Reads that scan a table
(``entries``, ``submission_by_request``) are O(table).

Durability rules:

- A commit counts once ``main.jsonl`` holds its whole line: the batch's lines
  are appended by one ``write`` to a descriptor opened ``O_APPEND`` (no
  buffer of ours in between), then ``fsync`` when ``fsync=True``. Only then
  are the in-memory tables updated. Encoding (and every check) happens before
  any I/O, so a refused commit writes nothing.
- ``commit_many`` is all or nothing across a crash: every line of a batch but
  the last carries ``"more":true``; at open, a batch without its last line
  is cut off whole.
- A torn tail (a crash mid-append: the bytes after the last newline, or an
  unparsable last line) is truncated on open at the exact byte offset where
  its line (or its unfinished batch) starts; a warning names it.
- Real corruption - a line that is not the last and is not JSON, a commit of
  the wrong shape, a record that does not decode, seqs that do not
  increase - raises :class:`DamagedRecord` naming the file and the line; the
  file is left as it was.
- A failed append is undone (the file truncated back); if even that fails the
  store is poisoned: every later commit raises until it is reopened (open
  repairs the tail). A failed ``fsync`` poisons too (the line may or may not
  be durable: the next open tells).
- One owner per directory: an exclusive ``flock`` on ``lock`` (found by the
  directory's real path, so a symlink reaches the same file; a lock follows
  the inode, so a hard link of ``lock`` does too); see :mod:`.owner`.

Why no sidecars. The reference (pi-durable-spec §2.8) writes a live task's
versions to ``task-<id>.jsonl`` and document contents to ``doc-<id>.jsonl``,
with markers in ``main.jsonl``, so that a task's intermediate states and a
current-only document's old revisions can be deleted (main is never
compacted). That costs a commit one append (and one fsync) per touched file
plus the main one, an ordering protocol between them, and an open that must
cut unconfirmed sidecar tails and prove every referenced record present. This
store keeps the same guarantees with one file: a commit is one append (one
fsync), atomic by construction, and there is nothing to reconcile at open.
The price is size: every version of every task record and every document
revision stays in ``main.jsonl`` (as they did in the SQLite journal before
format 2). Compaction (rewrite the live tables as one synthetic commit) would
reclaim it; it is not done yet.
"""

from __future__ import annotations

import errno
import json
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
from .base import (
    SCHEMA_VERSION,
    DamagedRecord,
    Loaded,
    NotAStore,
    StorageError,
    StoreFenced,
    StoreLocked,
    StoreMissing,
    _DECODE_ERRORS,
    _why,
    encode_write,
)
from .memory import Encoded, MemoryStorage

log = logging.getLogger("pidurable")

MAIN = "main.jsonl"
LOCK = "lock"
#: How the first line of every ``main.jsonl`` starts (a torn first line is
#: truncated only if it is a piece of this, so a stranger's file is never cut).
HEADER_PREFIX = b'{"pidurable":"jsonl","schema":'


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
        self._size = 0  # bytes of main.jsonl that hold whole commits
        self._poisoned: str | None = None
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
        else:
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

    def _create(self) -> None:
        header = codec.dumps({"pidurable": "jsonl", "schema": SCHEMA_VERSION, "store_id": self._store_id})
        self._append((header + "\n").encode("utf-8"))
        if self.fsync:  # the new file's name must survive a power loss too
            _fsync_dir(self.dir)

    def _replay(self, data: bytes) -> None:
        """Rebuild the tables from ``main.jsonl``; cut a torn tail."""
        lines = _split(data)
        keep = len(data)
        pending: list[Encoded] = []  # an unfinished batch's commits
        batch_start = 0  # where that batch's first line starts
        last_seq = 0
        for number, start, text, whole in lines:
            try:
                if not whole:
                    raise ValueError("no newline at the end")
                obj = json.loads(text)
            except ValueError as e:  # invalid JSON or UTF-8, or torn
                if number == 1 and not (text.startswith(HEADER_PREFIX) or HEADER_PREFIX.startswith(text)):
                    raise NotAStore(f"{self.path}: {self.main} is not a pidurable JSONL store; it was left untouched") from e
                if number < len(lines):
                    raise DamagedRecord(f"Store file {self.main} line {number} is not JSON ({e})") from e
                keep = start  # the last line is torn: a crash mid-append
                break
            if number == 1:
                self._header(obj)
                continue
            commit, more = self._commit_of(number, obj, last_seq)
            last_seq = commit.seq
            if not pending:
                batch_start = start
            pending.append(commit)
            if not more:
                for c in pending:
                    self._apply(c)
                pending = []
        if pending:  # a batch without its last line never counted
            keep = min(keep, batch_start)
        if keep < len(data):
            self._truncate(keep, len(data))
            if keep == 0:  # only a torn header: a store being created
                self._store_id = str(uuid.uuid4())
                self._create()
                return
        self._size = keep

    def _header(self, obj: Any) -> None:
        if not (isinstance(obj, dict) and obj.get("pidurable") == "jsonl"):
            raise NotAStore(f"{self.path}: {self.main} is not a pidurable JSONL store; it was left untouched")
        schema, store_id = obj.get("schema"), obj.get("store_id")
        if type(schema) is not int or not isinstance(store_id, str) or not store_id:
            raise DamagedRecord(f"Store file {self.main} line 1: damaged header")
        if schema > SCHEMA_VERSION:
            raise StorageError(
                f"Store {self.path} has schema version {schema}; this pidurable reads versions up to "
                f"{SCHEMA_VERSION}. Upgrade pidurable."
            )
        self._store_id = store_id

    def _commit_of(self, number: int, obj: Any, last_seq: int) -> tuple[Encoded, bool]:
        """The commit on line ``number``, rows rebuilt from its writes."""
        where = f"Store file {self.main} line {number}"
        if not isinstance(obj, dict):
            raise DamagedRecord(f"{where}: not a commit")
        seq, fmt, digest = obj.get("seq"), obj.get("format"), obj.get("digest")
        events, writes, more = obj.get("events"), obj.get("writes"), obj.get("more", False)
        if not (type(seq) is int and type(fmt) is int and isinstance(digest, str)):
            raise DamagedRecord(f"{where}: damaged commit (seq, format or digest)")
        if not (isinstance(events, list) and isinstance(writes, list) and isinstance(more, bool)):
            raise DamagedRecord(f"{where}: damaged commit (events, writes or more)")
        if fmt > codec.FORMAT_VERSION:
            raise StorageError(f"{where}: journal format {fmt} is newer than this pidurable reads; upgrade pidurable")
        if seq <= last_seq:
            raise DamagedRecord(f"{where}: seq {seq} does not increase (the line before has {last_seq})")
        rows = []
        try:
            for data in writes:
                row, _ = encode_write(codec.write_from_data(data), seq)
                rows.append(row)
            events_text = codec.dumps(events)
        except _DECODE_ERRORS as e:
            raise DamagedRecord(f"{where}: damaged record in commit {seq}: {_why(e)}") from e
        return Encoded(seq=seq, rows=rows, events=events_text, writes="", digest=digest, format=fmt), more

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
        """Several commits as consecutive lines, all or nothing (see the
        module comment); the tables change only once the lines are in."""
        if self._fenced:
            raise StoreFenced(f"store {self.path} is fenced")
        self._descriptor()
        if self._poisoned is not None:
            raise StorageError(f"Store {self.path}: {self._poisoned}; reopen the store")
        encoded = self._encode_batch(batch)
        data = b"".join(_line(c, more=i < len(encoded) - 1) for i, c in enumerate(encoded))
        self._append(data)
        for c in encoded:
            self._apply(c)

    def _append(self, data: bytes) -> None:
        fd = self._descriptor()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            try:
                os.ftruncate(fd, self._size)
            except OSError as undo:
                self._poisoned = f"a failed append could not be undone ({undo.strerror or undo})"
            raise StorageError(f"Store {self.path}: commit failed, nothing was written ({e.strerror or e})") from e
        if self.fsync:
            try:
                os.fsync(fd)
            except OSError as e:
                self._poisoned = f"fsync failed ({e.strerror or e}); whether the last commit is durable is unknown"
                raise StorageError(f"Store {self.path}: {self._poisoned}") from e
        self._size += len(data)


def _line(c: Encoded, *, more: bool) -> bytes:
    """A commit's line: the codec's texts spliced into one object."""
    head = codec.dumps({"seq": c.seq, "format": c.format, "digest": c.digest})[:-1]
    tail = ',"more":true}\n' if more else "}\n"
    return (head + ',"events":' + c.events + ',"writes":' + c.writes + tail).encode("utf-8")


def _split(data: bytes) -> list[tuple[int, int, bytes, bool]]:
    """``(line number, byte offset, text, whole)`` of each line; the bytes
    after the last newline, if any, are a last line that is not whole."""
    out: list[tuple[int, int, bytes, bool]] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            out.append((len(out) + 1, start, data[start:], False))
            break
        out.append((len(out) + 1, start, data[start:end], True))
        start = end + 1
    return out


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


def open_jsonl_storage(path: str | os.PathLike[str], fsync: bool = False, *, create: bool = True) -> JsonlStorage:
    """Open a JSONL store in directory ``path``, creating it (and the
    directory, whose parent must exist) unless ``create=False``. ``fsync``:
    sync every commit to disk before it counts (default: the OS writes it
    back; a process crash loses nothing, a power loss may lose the newest
    commits). Raises ``StoreLocked``, ``NotAStore``, ``DamagedRecord``."""
    return JsonlStorage(path, fsync=fsync, create=create)
