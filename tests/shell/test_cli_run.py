"""``pidurable run`` and ``resume`` against a loopback OpenAI-compatible server,
with a real SIGKILL of the CLI process in the middle of a tool."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


def _call(name: str, **arguments: object) -> bytes:
    return _calls((name, arguments))


def _calls(*calls: tuple[str, dict]) -> bytes:
    """One assistant turn making ``calls`` (name, arguments) in parallel."""
    deltas = [
        {"index": i, "id": f"call_{i}_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]
    return _sse(
        {"choices": [{"index": 0, "delta": {"tool_calls": deltas}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )


Script = Callable[[dict], "bytes | tuple[int, bytes] | None"]


def _serve(script: Script) -> tuple[ThreadingHTTPServer, list[dict]]:
    """A loopback OpenAI-compatible server: ``script(payload)`` gives the SSE
    body, or ``(status, json body)``, or None to hang until the client leaves."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            payload = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append(payload)
            answer = script(payload)
            if answer is None:
                time.sleep(60)
                return
            status, body = answer if isinstance(answer, tuple) else (200, answer)
            self.send_response(status)
            self.send_header("content-type", "text/event-stream" if status == 200 else "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a killed client hangs up mid-request

    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, seen


def _results(payload: dict) -> list[str]:
    return [m["content"] for m in payload["messages"] if m["role"] == "tool"]


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict]]]:
    """First turn: run a slow bash command; once a tool result is in the
    context: answer with what it said."""

    def script(payload: dict) -> bytes:
        results = _results(payload)
        if results:
            return _answer("The command said: " + results[-1][:120])
        return _bash_call("echo $$ > bash.pid; echo started >> runs.log; sleep 30; echo finished")

    srv, seen = _serve(script)
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", seen
    srv.shutdown()


ANSWER_PIECES = ["The answer ", "is forty-two, ", "said slowly ", "in five ", "pieces."]


@pytest.fixture
def slow_stream() -> Iterator[str]:
    """An OpenAI-compatible server that streams one answer in five chunked
    pieces, 0.3 s apart (the harness commits partials every 100 ms)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            events = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in ANSWER_PIECES]
            events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            for data in [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                time.sleep(0.3)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


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
    run = _cli(
        "run", "check the thing", "--db", str(db), "--model", "openai:gpt-test", "--cwd", str(tmp_path), "--tools", "coding",
        url=url, cwd=tmp_path,
    )
    _wait_for(tmp_path / "runs.log", run)
    run.send_signal(signal.SIGKILL)
    _, run_err = run.communicate(timeout=10)
    assert "tools: read, write, edit, bash" in run_err
    leftover = int((tmp_path / "bash.pid").read_text())
    assert _alive(leftover), "the killed run's command should still be running"

    resume = _cli("resume", "--db", str(db), "--cwd", str(tmp_path), url=url, cwd=tmp_path)
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0, err
    assert "tools: read (" in err
    assert "  <- bash [error] Tool bash was interrupted and may have partially run\n" in out
    assert "The command said: <harness>\n[error] Tool bash was interrupted and may have partially run\n</harness>" in out
    assert re.search(r"bash \(task #\d+\): reported interrupted, NOT run again \(stored replay=unsafe, not installed now\)", out)
    assert "submission #2: done" in out
    assert (tmp_path / "runs.log").read_text() == "started\n"  # bash ran once
    try:
        assert not _alive(leftover), "opening the store kills the command the killed run left running"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leftover, signal.SIGKILL)

    conn = sqlite3.connect(db)
    try:
        blob = "".join(str(r) for table in ("entries", "journal", "document_revisions") for r in conn.execute(f"SELECT * FROM {table}"))
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
    assert err.startswith("tools: none") and "tools" not in seen[0]
    conn = sqlite3.connect(db)
    try:
        statuses = [json.loads(r[0])["status"] for r in conn.execute("SELECT record FROM submissions ORDER BY id")]
    finally:
        conn.close()
    assert statuses == ["done", "done"]
    assert out.count("The command said: <harness>\n[error] Tool bash is not available\n</harness>") == 2  # both answered


@pytest.mark.slow
def test_ctrl_c_aborts_the_run_cleanly(server: tuple[str, list[dict]], tmp_path: Path) -> None:
    """SIGINT while bash runs: the tool is aborted (its process cancelled), the
    input ends unanswered/aborted, and the CLI exits 1 without a traceback."""
    url, _ = server
    db = tmp_path / "agent.sqlite"
    run = _cli("run", "check", "--db", str(db), "--model", "openai:gpt-test", "--cwd", str(tmp_path), "--tools", "coding", url=url, cwd=tmp_path)
    _wait_for(tmp_path / "runs.log", run)
    leader = int((tmp_path / "bash.pid").read_text())
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 1, (out, err)
    assert "  <- bash [error] Tool bash was aborted\n" in out
    assert "[unanswered: aborted]" in err and "Traceback" not in err
    assert not _alive(leader), "the abort killed the command"


@pytest.mark.slow
def test_issue7_streamed_answer_is_printed_once_to_a_pipe(slow_stream: str, tmp_path: Path) -> None:
    """An answer streamed in several delayed chunks, with stdout a pipe, is
    printed exactly once (partials as they come, not again at the end)."""
    run = _cli("run", "question", "--db", str(tmp_path / "s.sqlite"), "--model", "openai:gpt-test", "--tools", "none", url=slow_stream, cwd=tmp_path)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    answer = "".join(ANSWER_PIECES)
    assert out.count("forty-two") == 1, out
    assert answer + "\n" in out


@pytest.mark.slow
def test_issue7_resume_works_in_the_stored_cwd(tmp_path: Path) -> None:
    """`pidurable resume` started from another directory, without --cwd, runs
    the tools in the conversation's stored working directory, and says the
    finished read of the interrupted round was kept."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "notes.txt").write_text("the work notes")
    (elsewhere / "notes.txt").write_text("the wrong notes")

    def script(payload: dict) -> bytes:
        results = _results(payload)
        if not results:
            return _calls(("read", {"path": "notes.txt"}), ("bash", {"command": "echo $$ > runs.log; sleep 30"}))
        if len(results) == 2:
            return _call("read", path="notes.txt")
        return _answer("Notes: " + results[-1])

    srv, _ = _serve(script)
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    try:
        db = tmp_path / "agent.sqlite"
        run = _cli("run", "read the notes", "--db", str(db), "--model", "openai:gpt-test", "--cwd", "work", "--tools", "coding", url=url, cwd=tmp_path)
        _wait_for(work / "runs.log", run)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=10)
        resume = _cli("resume", "--db", str(db), url=url, cwd=elsewhere)
        out, err = resume.communicate(timeout=60)
    finally:
        srv.shutdown()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int((work / "runs.log").read_text()), signal.SIGKILL)  # not this test's concern
    assert resume.returncode == 0, err
    assert f"in {work.resolve()}" in out
    assert re.search(r"^  read \(task #\d+\): kept - its stored result was reused, not run again$", out, flags=re.M)
    assert re.search(r"^  bash \(task #\d+\): reported interrupted, NOT run again", out, flags=re.M)
    assert "  <- read [ok] the work notes" in out
    assert "Notes: the work notes" in out


@pytest.mark.slow
def test_issue7_resume_resends_the_request_and_exits_1_when_unanswered(tmp_path: Path) -> None:
    """Killed while the model request is in flight: resume re-sends the pinned
    request, says so, and when that request fails for good the input ends
    unanswered and resume exits 1."""

    def script(payload: dict) -> bytes | tuple[int, bytes] | None:
        if len(seen) == 1:
            return None  # the first request never answers: the run is killed meanwhile
        return (400, b'{"error": {"message": "model gpt-test was retired", "type": "invalid_request_error"}}')

    srv, seen = _serve(script)
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    try:
        db = tmp_path / "agent.sqlite"
        run = _cli("run", "hello", "--db", str(db), "--model", "openai:gpt-test", url=url, cwd=tmp_path)
        deadline = time.monotonic() + 30
        while not seen:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=10)
        resume = _cli("resume", "--db", str(db), url=url, cwd=tmp_path)
        out, err = resume.communicate(timeout=60)
    finally:
        srv.shutdown()
    assert resume.returncode == 1, (out, err)
    assert len(seen) == 2 and seen[1]["messages"] == seen[0]["messages"]
    assert re.search(r"generation \(task #\d+\): model request re-sent as pinned \(openai:gpt-test, attempt 1\) -> failed", out)
    assert "[model error] 400 Bad Request: model gpt-test was retired" in out
    assert "[unanswered: model_error" in err and "Traceback" not in err
    assert "submission #2: unanswered (model_error)" in out


def test_run_offers_only_read_by_default(server: tuple[str, list[dict]], tmp_path: Path) -> None:
    """Without --tools the model is offered only `read`, the CLI says so, and
    a bash call the model makes anyway is refused, never run."""
    url, seen = server
    run = _cli("run", "check", "--db", str(tmp_path / "a.sqlite"), "--model", "openai:gpt-test", url=url, cwd=tmp_path)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert err.startswith("tools: read (--tools coding adds write, edit and bash")
    assert [t["function"]["name"] for t in seen[0]["tools"]] == ["read"]
    assert "The command said: <harness>\n[error] Tool bash is not available\n</harness>" in out
    assert not (tmp_path / "runs.log").exists()


def test_issue7_non_utf8_prompt_is_a_one_line_error(tmp_path: Path) -> None:
    """A prompt with a byte that is not UTF-8 (a lone surrogate in Python)
    ends with one readable line and exit 2, no traceback."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    out = subprocess.run(
        [sys.executable, "-m", "pidurable.shell.cli", "run", b"caf\xff", "--db", str(tmp_path / "x.sqlite"), "--model", "openai:m"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    err = out.stderr.decode("utf-8", "replace")
    assert out.returncode == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith("tools:")]
    assert len(lines) == 1 and lines[0].startswith("pidurable: error: ")


async def test_issue7_recovery_report_says_a_safe_call_was_rerun(autojump_clock: object) -> None:
    """A safe tool cut off by the end of a process is re-run on reopen; the
    resume report (read before and after the open) says "re-run" with the
    replay promises, and the outcome."""
    import trio

    from pidurable.core.model import ModelRef
    from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, Registry, define_tool
    from pidurable.shell.cli.agent import AtOpen, recovery_report
    from pidurable.shell.providers import ScriptedModels, reply, tool_call

    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    entered = trio.Event()

    async def stuck(ctx: object, args: dict) -> str:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def quick(ctx: object, args: dict) -> str:
        return "fetched"

    def registry(execute: object) -> Registry:
        r = Registry()
        r.install(define_tool("fetch", "Fetch a thing.", schema, execute, replay="safe"))  # type: ignore[arg-type]
        return r

    models = ScriptedModels([reply(tool_calls=[tool_call("fetch")]), reply(text="done")])
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=registry(stuck)) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
        handle = await conv.submit(Input("go"))
        with trio.fail_after(10):
            await entered.wait()
    # the block ended with the call in flight: its task is stored running at execute
    at_open = AtOpen.read(storage)
    assert [t.input["name"] for t in at_open.live if t.kind == "pi.tool"] == ["fetch"]
    life2 = registry(quick)
    async with Harness.open(storage, models=models, registry=life2) as h:
        again = await h.submission(handle.id)
        assert again is not None
        with trio.fail_after(10):
            settled = await again.wait()
        await h.wait_idle()
        lines = recovery_report(at_open, storage, life2)
    assert settled.status == "done"
    assert any(
        re.fullmatch(r"fetch \(task #\d+\): re-run \(stored replay=safe, installed replay=safe\) -> completed", line)
        for line in lines
    ), lines
