"""Who owns a store file: the lock on the file itself, the owner sidecar, and
this process's descriptors of store files.

Theory of operation
-------------------
A store has ONE owner, whatever name it is opened by. The owner holds an
exclusive ``flock`` on a descriptor of the database file itself (opened via
its real path), so a hard link or a symlink reaches the same lock: a lock
follows the inode, not the name. SQLite's unix VFS locks with POSIX ``fcntl``
byte-range locks, which Linux keeps apart from ``flock``, so the two do not
disturb each other. The OS drops the flock when its owner dies.

One POSIX rule shapes this module: closing ANY descriptor of a file drops
every POSIX lock the process holds on that file, including the locks of
SQLite connections still open on it. So a descriptor of a store file is never
closed while one of our SQLite connections to that inode is open in this
process: :func:`release_fd` hands it to :data:`_FILES`, which closes it after
the last connection closed (:func:`connection_closed`). Connections a host
opens itself with ``sqlite3.connect`` are not known here; don't keep one open
on a store file of this process.

After taking the lock the owner writes ``<file>.owner`` (JSON: pid, host,
process start time) so a refused opener can say who holds the store. The
sidecar is a courtesy: if it cannot be written, the store works anyway (the
failure is logged), and :func:`flock_holder` still finds the owner's pid in
``/proc/locks``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path

import attrs
from cattrs.errors import BaseValidationError

from . import codec

log = logging.getLogger("pidurable")

#: An inode: (st_dev, st_ino).
Inode = tuple[int, int]


@attrs.frozen(kw_only=True)
class Owner:
    """The process that holds a store (what ``<file>.owner`` says)."""

    pid: int
    host: str
    #: When the owning process started (seconds since the epoch).
    started: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        me = " (this process)" if self.pid == os.getpid() and self.host == socket.gethostname() else ""
        return f"pid {self.pid}{me} on host {self.host} since {when}"


def _process_started() -> float:
    """This process's start time: ``/proc/self/stat`` field 22 (clock ticks
    after boot) plus the boot time; the time of the first call elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration) as e:
        log.debug("process start time unknown (%s); using the current time", e)
        return time.time()


_ME: Owner | None = None


def me() -> Owner:
    global _ME
    if _ME is None or _ME.pid != os.getpid():  # a forked child is a new owner
        _ME = Owner(pid=os.getpid(), host=socket.gethostname(), started=_process_started())
    return _ME


# --- the owner sidecar ----------------------------------------------------------


def sidecar(file: Path) -> Path:
    return Path(str(file) + ".owner")


def write_owner(file: Path) -> bool:
    """Write ``<file>.owner`` for this process; False (logged) if it cannot."""
    try:
        fd = os.open(sidecar(file), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, codec.to_json(me()).encode())
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("Store %s: cannot write the owner file %s (%s); the store is locked anyway", file, sidecar(file), e)
        return False
    return True


def read_owner(file: Path) -> Owner | None:
    """What ``<file>.owner`` says, or None if it is absent or unreadable."""
    try:
        return codec.from_json(sidecar(file).read_bytes(), Owner)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, BaseValidationError) as e:
        log.debug("owner file %s is unreadable (%s)", sidecar(file), e)
        return None


def remove_owner(file: Path) -> None:
    try:
        os.unlink(sidecar(file))
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("Store %s: cannot remove the owner file %s (%s)", file, sidecar(file), e)


# --- /proc/locks --------------------------------------------------------------------


def flock_holder(inode: Inode) -> int | None:
    """The pid holding a FLOCK on ``inode`` per ``/proc/locks``; None if
    nobody does. Raises ``OSError`` where ``/proc/locks`` is unreadable.

    Lines look like ``1: FLOCK  ADVISORY  WRITE 5258 fe:00:2148379 0 EOF``
    (device major:minor in hex, inode in decimal). The device is matched when
    it can be (overlay file systems may report another st_dev than the lock
    table), else the inode alone is."""
    with open("/proc/locks", encoding="ascii", errors="replace") as f:
        lines = f.read().splitlines()
    dev, ino = inode
    exact = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    by_inode: int | None = None
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue  # "->" marks a waiter, not a holder
        try:
            pid, where = int(parts[4]), parts[5]
            lock_ino = int(where.rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if where == exact:
            return pid
        if lock_ino == ino and by_inode is None:
            by_inode = pid
    return by_inode


# --- this process's store descriptors -------------------------------------------


class _Files:
    """Per inode: how many of our SQLite connections are open, which inodes
    this process owns (holds the flock of), and descriptors waiting to be
    closed until the last connection is gone (see the module comment)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections: dict[Inode, int] = {}
        self.owned: set[Inode] = set()
        self.deferred: dict[Inode, list[int]] = {}


_FILES = _Files()


def inode_of(st: os.stat_result) -> Inode:
    return (st.st_dev, st.st_ino)


def owned_here(inode: Inode) -> bool:
    with _FILES.lock:
        return inode in _FILES.owned


def connection_opened(inode: Inode) -> None:
    with _FILES.lock:
        _FILES.connections[inode] = _FILES.connections.get(inode, 0) + 1


def connection_closed(inode: Inode) -> None:
    with _FILES.lock:
        left = _FILES.connections.get(inode, 0) - 1
        if left > 0:
            _FILES.connections[inode] = left
            return
        _FILES.connections.pop(inode, None)
        fds = _FILES.deferred.pop(inode, [])
    for fd in fds:
        _close(fd)


def release_fd(inode: Inode, fd: int) -> None:
    """Close ``fd`` now, or after the last connection to ``inode`` closed."""
    with _FILES.lock:
        if _FILES.connections.get(inode):
            _FILES.deferred.setdefault(inode, []).append(fd)
            return
    _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError as e:
        log.warning("closing a store descriptor failed: %s", e)


def try_lock(inode: Inode, fd: int) -> bool:
    """Take the exclusive flock on ``fd``: True if taken, False if another
    open file (this process or another) holds it."""
    with _FILES.lock:
        if inode in _FILES.owned:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        _FILES.owned.add(inode)
        return True


def unlock(inode: Inode, fd: int) -> None:
    """Give up ownership. ``LOCK_UN`` (not closing ``fd``) so SQLite's POSIX
    locks stay; the descriptor goes through :func:`release_fd`."""
    with _FILES.lock:
        _FILES.owned.discard(inode)
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        release_fd(inode, fd)
