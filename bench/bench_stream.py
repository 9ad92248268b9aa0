"""Harness overhead per streamed model request, against a loopback SSE server.

A threaded HTTP server on 127.0.0.1 answers every Chat Completions request with
the same streamed answer (CHUNKS text deltas, a usage chunk, [DONE]).

    A) the bare adapter: OpenAIChat.complete() for N requests;
    B) through the harness on SQLite: N inputs, each one durable run
       (admission, prepare, request, streamed answer, answer commit).

Overhead per streamed request = B - A (ms). Measured and printed, never
asserted.

    python bench/bench_stream.py --requests 200 --chunks 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trio

from pidurable.core.context import Message
from pidurable.core.model import AgentConfig, ModelRef
from pidurable.shell import Harness, Input, Registry, open_sqlite_storage
from pidurable.shell.providers import Models, OpenAIChat
from pidurable.shell.providers.base import ModelRequest


def sse_body(chunks: int) -> bytes:
    lines = []
    for i in range(chunks):
        delta = {"choices": [{"index": 0, "delta": {"content": f"word{i} "}, "finish_reason": None}]}
        lines.append(f"data: {json.dumps(delta)}\n\n")
    lines.append('data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    lines.append('data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20}}\n\n')
    lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def serve(chunks: int) -> tuple[ThreadingHTTPServer, str]:
    body = sse_body(chunks)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


async def bare(url: str, n: int) -> float:
    adapter = OpenAIChat(url, "sk-bench")
    request = ModelRequest(model=ModelRef("openai", "bench"), messages=(Message(role="user", text="hi"),))
    t0 = time.perf_counter()
    for _ in range(n):
        await adapter.complete(request, on_partial=lambda text: None)
    return (time.perf_counter() - t0) / n


async def harnessed(url: str, n: int, db: Path) -> float:
    models = Models({"openai": OpenAIChat(url, "sk-bench")})
    async with Harness.open(open_sqlite_storage(db), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("openai", "bench")))
        t0 = time.perf_counter()
        for i in range(n):
            record = await (await conv.submit(Input(f"question {i}"))).wait()
            assert record.status == "done", record
        return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    server, url = serve(args.chunks)
    bares, harns = [], []
    try:
        for _ in range(args.repeat):
            bares.append(trio.run(bare, url, args.requests))
            with tempfile.TemporaryDirectory() as d:
                harns.append(trio.run(harnessed, url, args.requests, Path(d) / "b.sqlite"))
    finally:
        server.shutdown()
    b, h = statistics.median(bares) * 1000, statistics.median(harns) * 1000
    print(f"streamed requests: {args.requests} x {args.repeat}, {args.chunks} chunks each, loopback SSE, SQLite WAL NORMAL")
    print(f"  bare adapter          {b:7.3f} ms/request")
    print(f"  through the harness   {h:7.3f} ms/request (a whole durable run: admission .. answer)")
    print(f"  harness overhead      {h - b:7.3f} ms/request")


if __name__ == "__main__":
    main()
