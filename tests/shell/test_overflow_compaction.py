"""Overflow -> compact once -> retry, end to end (issue 9 item 4): an
OpenAI-compatible loopback server with a 300-token window answers a prompt
that is too long with the real ``context_length_exceeded`` error body; the
generation compacts (the summarization request goes to the same server) and
sends again, and every turn of a long conversation is answered."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import trio

from pidurable.core.compaction import SUMMARY_PREFIX, SUMMARY_SYSTEM_PROMPT
from pidurable.core.model import EntryKind, ModelRef, SubmissionStatus
from pidurable.shell import AgentConfig, CompactionSettings, Harness, Input, MemoryStorage, Registry, Settings
from pidurable.shell.providers import Models, OpenAIChat

SECRET = "sk-test-SECRET"
WINDOW = 300  # tokens, as the server counts them (characters / 4)
OVERFLOW_BODY = {
    "error": {
        "message": (
            f"This model's maximum context length is {WINDOW} tokens. However, your messages resulted in "
            "{n} tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _send_json(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    h.send_response(status, "OK" if status == 200 else "Bad Request")
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


class Loopback:
    """A threaded HTTP server on 127.0.0.1:0 (the pattern of
    test_providers_sse.py): every POST body is recorded and answered by
    ``reply``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[Any] = []
        self.reply: Any = None
        app = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with app.lock:
                    app.bodies.append(json.loads(raw))
                app.reply(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


class SmallWindow:
    """The server's model: a summarization request (the summarizer's system
    prompt) is answered with a short summary, measured by the conversation it
    summarizes; any other request is answered when its messages fit the
    window, else refused with ``context_length_exceeded``."""

    def __init__(self, server: Loopback) -> None:
        self.server = server
        self.summaries = 0
        self.answers = 0

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        with self.server.lock:
            body = self.server.bodies[-1]
        messages = body["messages"]
        summarizing = bool(messages) and _text(messages[0]) == SUMMARY_SYSTEM_PROMPT
        if summarizing:
            text = _text(messages[-1])
            measured = text[text.index("<conversation>") : text.index("</conversation>")]
        else:
            measured = "".join(_text(m) for m in messages)
        tokens = -(-len(measured) // 4)
        if tokens > WINDOW:
            error = {"error": {**OVERFLOW_BODY["error"], "message": OVERFLOW_BODY["error"]["message"].format(n=tokens)}}
            _send_json(h, 400, error)
            return
        if summarizing:
            self.summaries += 1
            text = f"SUMMARY {self.summaries}: the user asked questions"
        else:
            self.answers += 1
            text = f"answer {self.answers} " + "a" * 200
        completion = {
            "id": f"chatcmpl-{self.summaries}-{self.answers}",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
        _send_json(h, 200, completion)


@pytest.fixture
def server() -> Iterator[Loopback]:
    s = Loopback()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


async def test_ten_turns_over_a_small_window_all_settle_done(server: Loopback) -> None:
    """Ten long turns overflow a 300-token window again and again; each overflow compacts once and the retried request carries the summary, so every turn ends ``done``."""
    model = SmallWindow(server)
    server.reply = model
    models = Models({"openai": OpenAIChat(f"{server.url}/v1", SECRET, stream=False)})
    settings = Settings(compaction=CompactionSettings(keep_recent_tokens=100))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None, settings=settings) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "small")))
        with trio.fail_after(20):
            for i in range(10):
                settled = await (await conv.submit(Input(f"question {i} " + "q" * 200))).wait()
                assert settled.status == SubmissionStatus.DONE, settled
        transcript = await conv.transcript()
    markers = [e for e in transcript if e.kind == EntryKind.COMPACTION]
    assert len(markers) >= 2 and all((e.data or {}).get("reason") == "overflow" for e in markers)
    errors = [e for e in transcript if e.kind == EntryKind.ASSISTANT and e.is_error]
    assert len(errors) == len(markers) and all("context_length_exceeded" in e.text or "maximum context" in e.text for e in errors)
    # After every refused request: one summarization request, then the same
    # turn sent again, now starting with the summary.
    chats = [body["messages"] for body in server.bodies]
    refused = 0
    for k, messages in enumerate(chats):
        if _text(messages[0]) == SUMMARY_SYSTEM_PROMPT or -(-len("".join(_text(m) for m in messages)) // 4) <= WINDOW:
            continue
        refused += 1
        summarize, retried = chats[k + 1], chats[k + 2]
        assert _text(summarize[0]) == SUMMARY_SYSTEM_PROMPT
        assert _text(retried[0]).startswith(SUMMARY_PREFIX) and "SUMMARY" in _text(retried[0])
        assert _text(retried[-1]) == _text(messages[-1])  # the same question
    assert refused == len(markers) == model.summaries
    assert model.answers == 10
