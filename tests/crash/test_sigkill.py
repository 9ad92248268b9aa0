"""Real process kills on SQLite: SIGKILL a subprocess mid-tool, reopen in
another process, and check the invariants on the store it left."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidurable.shell import open_sqlite_storage

import invariants

CHILD = Path(__file__).with_name("sigkill_child.py")


def _probe_committed(db: Path) -> bool:
    """Read the live store without taking its lock: is probe's result in?"""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            (n,) = conn.execute(
                "SELECT count(*) FROM entries WHERE record LIKE '%\"tool_name\":\"probe\"%'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return bool(n)


@pytest.mark.slow
def test_sigkill_mid_unsafe_tool_then_reopen_in_another_process(tmp_path: Path) -> None:
    """A process killed with SIGKILL while an unsafe tool runs leaves a store
    that a new process finishes: the tool is reported interrupted, never re-run,
    the safe tool's result is kept, and the submission settles once."""
    db = tmp_path / "s.sqlite"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, str(CHILD), str(db), str(tmp_path)], env=env)
    deadline = time.monotonic() + 30
    while not ((tmp_path / "deploy-started").exists() and _probe_committed(db)):
        assert first.poll() is None, "child exited before the tool started"
        assert time.monotonic() < deadline, "tool never started"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL

    second = subprocess.run(
        [sys.executable, str(CHILD), str(db), str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["done", "None"]

    assert (tmp_path / "deploys").read_text().count("\n") == 1, "the unsafe tool ran twice"
    storage = open_sqlite_storage(db)
    try:
        entries = storage.entries(1)
        results = {e.tool_name: e for e in entries if e.kind == "tool_result"}
        assert results["deploy"].is_error
        assert results["deploy"].text == "<harness>\n[error] Tool deploy was interrupted and may have partially run\n</harness>"
        assert results["probe"].text == "probe ok"
        assert (tmp_path / "probes").read_text().count("\n") == 1, "a finished tool ran again"
        invariants.submissions_settle_once(storage)
        invariants.one_result_per_call(entries)
        invariants.nothing_live_after_settlement(storage)
        invariants.replay_is_deterministic(storage)
    finally:
        storage.close()


#: A child that commits entries as fast as it can, saying each seq once it is durable.
_COMMITTER = """
import sys
from pidurable.core.effects import PutEntry
from pidurable.core.model import Entry
from pidurable.shell.storage import open_sqlite_storage

store = open_sqlite_storage(sys.argv[1])
seq = store.load().next_seq
while True:
    store.commit(seq, [PutEntry(entry=Entry(id=seq, conversation_id=1, kind="user", text="x" * 200))], [])
    print(seq, flush=True)
    seq += 1
"""


@pytest.mark.slow
def test_sigkill_while_checkpoints_run_on_their_thread_loses_no_commit(tmp_path: Path) -> None:
    """Background WAL checkpoints (shell/storage/sqlite_checkpoints.py) run
    every 100 transactions; a process SIGKILLed at any moment of them leaves
    every commit it reported durable, and a store SQLite finds intact. Three
    lives, each killed after a different number of commits."""
    db = tmp_path / "s.sqlite"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    reported = 0
    for after in (250, 433, 617):  # (not multiples of 100: kills land mid-cycle)
        child = subprocess.Popen(
            [sys.executable, "-c", _COMMITTER, str(db)], env=env, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        last = reported
        for line in child.stdout:
            last = int(line)
            if last >= reported + after:
                break
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        assert last >= reported + after, "the child stopped committing"
        reported = last
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            (top,) = conn.execute("SELECT max(seq) FROM journal").fetchone()
            (n,) = conn.execute("SELECT count(*) FROM entries").fetchone()
        finally:
            conn.close()
        assert top >= reported, f"commit {reported} was reported durable, the store ends at {top}"
        assert n == top
    storage = open_sqlite_storage(db)
    try:
        assert storage.load().next_seq == top + 1
    finally:
        storage.close()
