"""A real process kill on a JSONL store: SIGKILL a subprocess mid-tool,
reopen in another process, and check the invariants on the store it left
(the JSONL twin of test_sigkill.py, same child script)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidurable.shell import open_jsonl_storage

import invariants

CHILD = Path(__file__).with_name("sigkill_child.py")


def _probe_committed(store: Path) -> bool:
    """Read main.jsonl without the lock: is probe's result in?"""
    try:
        return b'"tool_name":"probe"' in (store / "main.jsonl").read_bytes()
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_sigkill_mid_unsafe_tool_then_reopen_in_another_process_jsonl(tmp_path: Path) -> None:
    """A process killed with SIGKILL while an unsafe tool runs leaves a JSONL
    store that a new process opens (the dead owner's lock is gone) and
    finishes: the tool is reported interrupted, never re-run, the safe tool's
    result is kept, and the submission settles once."""
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, str(CHILD), str(store), str(tmp_path), "jsonl"]
    first = subprocess.Popen(args, env=env)
    deadline = time.monotonic() + 30
    while not ((tmp_path / "deploy-started").exists() and _probe_committed(store)):
        assert first.poll() is None, "child exited before the tool started"
        assert time.monotonic() < deadline, "tool never started"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["done", "None"]

    assert (tmp_path / "deploys").read_text().count("\n") == 1, "the unsafe tool ran twice"
    storage = open_jsonl_storage(store)
    try:
        entries = storage.entries(1)
        results = {e.tool_name: e for e in entries if e.kind == "tool_result"}
        assert results["deploy"].is_error
        assert "Tool deploy was interrupted and may have partially run" in (results["deploy"].text or "")
        assert results["probe"].text == "probe ok"
        assert (tmp_path / "probes").read_text().count("\n") == 1, "a finished tool ran again"
        invariants.submissions_settle_once(storage)
        invariants.one_result_per_call(entries)
        invariants.nothing_live_after_settlement(storage)
        invariants.replay_is_deterministic(storage)
    finally:
        storage.close()
