"""A server on ``pidurable.aio`` killed with SIGKILL mid-run, and started
again: the FastAPI example app (examples/fastapi_app.py) in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidurable.shell import open_sqlite_storage

pytest.importorskip("fastapi")  # the `test` extra installs it

CHILD = Path(__file__).with_name("children") / "fastapi_child.py"


@pytest.mark.slow
def test_sigkill_mid_run_then_the_same_request_id_returns_the_settled_submission(tmp_path: Path) -> None:
    """The first process accepts ``deploy-1`` and is killed while the run's
    tool executes; a new process opens the same store, recovery resumes the
    run, and POSTing ``deploy-1`` again returns the same submission, which
    settles done with the answer."""
    db, marker = tmp_path / "app.sqlite", tmp_path / "deploy.marker"
    with subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(marker)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as first:
        try:
            assert first.stdout is not None
            accepted = json.loads(first.stdout.readline())  # durably accepted before the reply
            assert accepted["request_id"] == "deploy-1" and accepted["status"] in ("queued", "placed")
            deadline = time.monotonic() + 30
            while not marker.exists():  # the run reached the tool
                assert first.poll() is None, first.stderr.read() if first.stderr else ""
                assert time.monotonic() < deadline, "the tool never started"
                time.sleep(0.02)
        finally:
            os.kill(first.pid, signal.SIGKILL)  # mid-run (or on a failure above)
            first.wait(10)
    assert first.returncode == -signal.SIGKILL

    second = subprocess.run(
        [sys.executable, str(CHILD), str(db), str(marker)], capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0, second.stderr
    again, settled = (json.loads(line) for line in second.stdout.splitlines())
    assert again["id"] == accepted["id"]  # the same submission, not a new one
    assert (settled["id"], settled["status"]) == (accepted["id"], "done")
    storage = open_sqlite_storage(db)
    try:
        texts = [e.text for e in storage.entries(1)]
    finally:
        storage.close()
    assert texts[0] == "deploy" and texts[-1] == "Deployed." and any("deployed" in t for t in texts)
