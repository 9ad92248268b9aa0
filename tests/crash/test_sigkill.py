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
