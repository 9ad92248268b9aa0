"""``pidurable run`` and ``resume`` against a loopback OpenAI-compatible server,
with a real SIGKILL of the CLI process in the middle of a tool."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def _sse(*chunks: dict) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return body.encode()


def _answer(text: str) -> bytes:
    return _sse(
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )


def _bash_call(command: str) -> bytes:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    return _sse(
        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict]]]:
    """First turn: run a slow bash command; once a tool result is in the
    context: answer with what it said."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            payload = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append(payload)
            results = [m for m in payload["messages"] if m["role"] == "tool"]
            if results:
                body = _answer("The command said: " + results[-1]["content"][:120])
            else:
                body = _bash_call("echo started >> runs.log; sleep 30; echo finished")
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", seen
    srv.shutdown()


def _cli(*args: str, url: str, cwd: Path, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-cli-SECRET", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "pidurable.shell.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


@pytest.mark.slow
def test_run_is_killed_mid_tool_and_resume_finishes(server: tuple[str, list[dict]], tmp_path: Path) -> None:
    """`pidurable run` shows the tool call; after a SIGKILL while bash runs,
    `pidurable resume` reports the unsafe bash call as interrupted (not
    re-run), the model answers, and the key never reaches the store."""
    url, seen = server
    db = tmp_path / "agent.sqlite"
    run = _cli("run", "check the thing", "--db", str(db), "--model", "openai:gpt-test", "--cwd", str(tmp_path), url=url, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "runs.log").exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait(10)

    resume = _cli("resume", "--db", str(db), "--cwd", str(tmp_path), url=url, cwd=tmp_path)
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0, err
    assert "Tool bash was interrupted and may have partially run" in out
    assert "The command said: Tool bash was interrupted" in out
    assert "submission #2: done" in out
    assert (tmp_path / "runs.log").read_text() == "started\n"  # bash ran once

    conn = sqlite3.connect(db)
    try:
        blob = "".join(str(r) for table in ("entries", "journal", "documents") for r in conn.execute(f"SELECT * FROM {table}"))
    finally:
        conn.close()
    assert "sk-cli-SECRET" not in blob
    assert len(seen) == 2 and seen[0]["model"] == "gpt-test"


def test_run_with_an_unconfigured_provider_is_a_clear_error(tmp_path: Path) -> None:
    """Asking for a provider without a key fails with one readable line."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    out = subprocess.run(
        [sys.executable, "-m", "pidurable.shell.cli", "run", "hi", "--db", str(tmp_path / "x.sqlite"), "--model", "anthropic:claude"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no anthropic provider is configured" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_chat_queues_lines_typed_while_the_agent_works(server: tuple[str, list[dict]], tmp_path: Path) -> None:
    """Two lines sent at once to `pidurable chat`: the second is queued as a
    follow-up while the first runs; at end of input both are answered."""
    url, seen = server
    db = tmp_path / "chat.sqlite"
    (tmp_path / "runs.log").write_text("")
    chat = _cli("chat", "--db", str(db), "--model", "openai:gpt-test", "--tools", "none", url=url, cwd=tmp_path, stdin=subprocess.PIPE)
    out, err = chat.communicate("first question\nsecond question\n", timeout=60)
    assert chat.returncode == 0, err
    conn = sqlite3.connect(db)
    try:
        statuses = [json.loads(r[0])["status"] for r in conn.execute("SELECT record FROM submissions ORDER BY id")]
    finally:
        conn.close()
    assert statuses == ["done", "done"]
    assert out.count("The command said: Tool bash is not available") == 2  # both inputs answered


@pytest.mark.slow
def test_ctrl_c_aborts_the_run_cleanly(server: tuple[str, list[dict]], tmp_path: Path) -> None:
    """SIGINT while bash runs: the tool is aborted (its process cancelled), the
    input ends unanswered/aborted, and the CLI exits 1 without a traceback."""
    url, _ = server
    db = tmp_path / "agent.sqlite"
    run = _cli("run", "check", "--db", str(db), "--model", "openai:gpt-test", "--cwd", str(tmp_path), url=url, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "runs.log").exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 1, (out, err)
    assert "Tool bash was aborted" in out
    assert "[unanswered: aborted]" in err and "Traceback" not in err
