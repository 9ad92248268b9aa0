"""A throwaway PostgreSQL server for the tests (issue 13 item 5).

``postgres_server`` (a session fixture, registered in tests/conftest.py)
starts one server for the whole run: Debian's binaries (``initdb``,
``pg_ctl``; found under /usr/lib/postgresql/*/bin, or on PATH), a cluster in a
temporary directory made with ``--auth=trust``, listening on 127.0.0.1 on a
free port (and a Unix socket in the same directory), run as user
``postgres`` when the tests run as root (initdb refuses root); stopped
(``-m immediate``) and deleted at the end. ``PIDURABLE_PG_DSN`` points the
tests at an existing server instead.

Each store a test opens lives in its own PostgreSQL schema
(``fresh_schema()``), so tests share the server and never see each other's
tables; the fixture drops every schema it handed out at the end.

A test that needs the server is skipped - with the reason - only when no
server can be started: no PostgreSQL binaries, no psycopg, or initdb/pg_ctl
failing (their output is in the reason).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

_counter = itertools.count(1)


@attrs.define
class PgServer:
    """A running server: its DSN and the schemas handed out so far."""

    dsn: str
    schemas: list[str] = attrs.field(factory=list)

    def fresh_schema(self) -> str:
        """A schema name no store has used in this run."""
        name = f"t{os.getpid()}_{next(_counter)}"
        self.schemas.append(name)
        return name


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], as_user: str | None) -> None:
    if as_user is not None:
        cmd = ["runuser", "-u", as_user, "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-800:]}")


def _start() -> tuple[str, Path, Path, str | None]:
    """Start a server; (dsn, bindir, data dir, user it runs as)."""
    bindir = _bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries (apt-get install postgresql)")
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        if shutil.which("runuser") is None:
            raise RuntimeError("running as root and runuser is missing (initdb refuses root)")
    base = Path(tempfile.mkdtemp(prefix="pidurable-pg-"))
    data = base / "data"
    if user is not None:
        shutil.chown(base, user)
    port = _free_port()
    _run([str(bindir / "initdb"), "-D", str(data), "-U", "app", "--auth=trust", "-E", "UTF8", "--no-sync"], user)
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off -c max_connections=200"
    _run([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(base / "log"), "-w", "start"], user)
    return f"host=127.0.0.1 port={port} user=app dbname=postgres", bindir, data, user


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the test session (see the module comment)."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("PostgreSQL tests need psycopg (pip install -e '.[test]')")
    given = os.environ.get("PIDURABLE_PG_DSN")
    started: tuple[str, Path, Path, str | None] | None = None
    if given:
        dsn = given
    else:
        try:
            started = _start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot start a throwaway PostgreSQL: {e}")
        dsn = started[0]
    server = PgServer(dsn=dsn)
    try:
        yield server
    finally:
        if started is None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for name in server.schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        else:
            _, bindir, data, user = started
            try:
                _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user)
            finally:
                shutil.rmtree(data.parent, ignore_errors=True)
