"""``pidurable run``, ``resume``, ``chat`` and ``replay``: agents against real
providers, from a terminal.

Keys and base URLs come from ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` and
``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` (or ``--api-key``/``--base-url``)
and are never written to the store. Ctrl-C aborts the running work cleanly
(tools get "was aborted" results, the input ends ``unanswered/aborted``);
``pidurable resume`` continues whatever a crash left unfinished.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import sys
from pathlib import Path
from typing import Any, TextIO

import trio

from pidurable.core.model import AgentConfig, ModelRef
from pidurable.core.state import LIVE_DOC

from .env import LocalEnv
from .harness import Conversation, Harness, Input
from .journal import replay
from .providers.models import Models
from .registry import Registry
from .storage import open_sqlite_storage
from .tools.coding import coding_tools


class Problem(Exception):
    """A user-facing error: the CLI prints it as one line."""


def parse_model(text: str) -> ModelRef:
    provider, sep, model_id = text.partition(":")
    if not sep or not provider or not model_id:
        raise Problem(f"--model must look like PROVIDER:MODEL (e.g. openai:gpt-4o-mini), not {text!r}")
    return ModelRef(provider, model_id)


def _models(args: argparse.Namespace, ref: ModelRef | None) -> Models:
    overrides: dict[str, str] = {}
    if ref is not None and getattr(args, "api_key", None):
        overrides[f"{ref.provider}_api_key"] = args.api_key
    if ref is not None and getattr(args, "base_url", None):
        overrides[f"{ref.provider}_base_url"] = args.base_url
    models = Models.from_env(**overrides)
    if ref is not None and models.resolve(ref) is None:
        known = ", ".join(sorted(models.providers)) or "none"
        raise Problem(
            f"no {ref.provider} provider is configured (set {ref.provider.upper()}_API_KEY, "
            f"or pass --api-key); configured: {known}"
        )
    return models


def _registry(args: argparse.Namespace) -> Registry:
    registry = Registry()
    if getattr(args, "tools", None) == "coding":
        registry.install(coding_tools())
    return registry


def _db(args: argparse.Namespace, *, must_exist: bool) -> Path:
    path = Path(args.db)
    if must_exist and not path.exists():
        raise Problem(f"store {path} does not exist")
    return path


class Printer:
    """Prints a conversation's progress from committed state: the streamed
    partial, tool calls as they start, results, the final answer."""

    def __init__(self, harness: Harness, conv: Conversation, out: TextIO) -> None:
        self.harness, self.conv, self.out = harness, conv, out
        self.seen = max((e.id for e in harness.runtime.storage.entries(conv.id)), default=0)
        self.partial = ""

    def update(self) -> None:
        storage = self.harness.runtime.storage
        live = storage.document(self.conv.id, LIVE_DOC)
        partial = (live.partial or "") if live is not None else ""
        if partial.startswith(self.partial) and len(partial) > len(self.partial):
            self.out.write(partial[len(self.partial) :])
            self.out.flush()
        self.partial = partial
        for e in storage.entries(self.conv.id, after=self.seen):  # only what is new
            self.seen = e.id
            if e.kind == "assistant":
                if e.stop_reason == "error":
                    self.out.write(f"\n[model error] {e.text}\n")
                elif e.stop_reason != "aborted":
                    shown = self.partial if self.partial and e.text.startswith(self.partial) else ""
                    self.out.write(e.text[len(shown) :] + ("\n" if e.text else ""))
                    for c in e.tool_calls:
                        args = ", ".join(f"{k}={v!r}" for k, v in c.arguments.items())
                        self.out.write(f"  -> {c.name}({args[:200]})\n")
                self.partial = ""
            elif e.kind == "tool_result":
                mark = "error" if e.is_error else "ok"
                first = e.text.strip().splitlines()[0] if e.text.strip() else ""
                self.out.write(f"  <- {e.tool_name} [{mark}] {first[:160]}\n")
        self.out.flush()


async def _follow(harness: Harness, conv: Conversation, printer: Printer, done: Any) -> None:
    """Print progress after every commit until ``done()`` holds."""
    rt = harness.runtime
    while True:
        printer.update()
        if done():
            return
        await rt.next_commit()


@asynccontextmanager
async def _session(args: argparse.Namespace) -> AsyncIterator[tuple[Harness, Conversation]]:
    """Open the store with the chosen model and tools; the root conversation
    configured for them."""
    ref = parse_model(args.model)
    models = _models(args, ref)
    cwd = Path(args.cwd or ".").resolve()
    storage = open_sqlite_storage(_db(args, must_exist=False))
    async with Harness.open(storage, models=models, registry=_registry(args), env=LocalEnv(cwd)) as harness:
        conv = await harness.root(agent=AgentConfig(model=ref, cwd=str(cwd)))
        await conv.configure(model=ref, cwd=str(cwd))
        yield harness, conv


async def _run(args: argparse.Namespace) -> int:
    async with _session(args) as (harness, conv):
        sub = await conv.submit(Input(args.prompt))
        printer = Printer(harness, conv, sys.stdout)
        status = await _until_settled(harness, conv, sub, printer)
    return status


async def _until_settled(harness: Harness, conv: Conversation, sub: Any, printer: Printer) -> int:
    """Follow one submission; Ctrl-C aborts the conversation cleanly."""
    rt = harness.runtime
    async with trio.open_nursery() as nursery:

        async def on_sigint() -> None:
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    print("\n[aborting: Ctrl-C]", file=sys.stderr)
                    await conv.abort()
                    return

        nursery.start_soon(on_sigint)
        await _follow(harness, conv, printer, lambda: (r := rt.storage.submission(sub.id)) is not None and r.settled)
        nursery.cancel_scope.cancel()
    record = await sub.record()
    if record.status == "done":
        return 0
    print(f"[unanswered: {record.reason}{': ' + record.detail if record.detail else ''}]", file=sys.stderr)
    return 1


async def _resume(args: argparse.Namespace) -> int:
    storage = open_sqlite_storage(_db(args, must_exist=True))
    ref = parse_model(args.model) if args.model else None
    models = _models(args, ref) if ref is not None else Models.from_env()
    async with Harness.open(storage, models=models, registry=_registry(args), env=LocalEnv(Path(args.cwd or "."))) as harness:
        pending = [s for s in storage.submissions() if not s.settled]
        live = storage.tasks(live_only=True)
        if not pending and not live:
            print("nothing to resume: every submission is settled")
            return 0
        print(f"resuming {len(live)} live task(s) and {len(pending)} unsettled submission(s)")
        convs = {s.conversation_id for s in pending}
        for cid in sorted(convs or {1}):
            conv = await harness.conversation(cid)
            if conv is None:
                continue
            printer = Printer(harness, conv, sys.stdout)
            for s in pending:
                if s.conversation_id == cid:
                    handle = await harness.submission(s.id)
                    await _until_settled(harness, conv, handle, printer)
        await harness.wait_idle()
        for s in pending:
            r = storage.submission(s.id)
            print(f"submission #{s.id}: {r.status}" + (f" ({r.reason})" if r.reason else ""))
    return 0


async def _chat(args: argparse.Namespace) -> int:
    async with _session(args) as (harness, conv):
        printer = Printer(harness, conv, sys.stdout)
        print("chat: type a message; while the agent works a line is queued as a follow-up;")
        print("      /steer TEXT joins the running work, /abort stops it, /quit leaves at once")
        print("      (end of input waits for the queued work).")
        stdin = trio.wrap_file(sys.stdin)
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                await _follow(harness, conv, printer, lambda: False)

            nursery.start_soon(follow)
            quit_now = False
            async for line in stdin:
                text = line.strip()
                if not text:
                    continue
                if text == "/quit":
                    quit_now = True  # unfinished work stays stored: `pidurable resume`
                    break
                if text == "/abort":
                    await conv.abort()
                    continue
                if text.startswith("/steer "):
                    await conv.submit(Input(text[len("/steer ") :], when_busy="steer"))
                    continue
                await conv.submit(Input(text))
            if not quit_now:
                await conv.wait_idle()  # end of input: let the queued work finish
                printer.update()
            nursery.cancel_scope.cancel()
    return 0


def _replay(args: argparse.Namespace) -> int:
    from .cli import open_readonly

    store = open_readonly(_db(args, must_exist=True))
    bad = 0
    count = 0
    try:
        for t in replay(store):
            count += 1
            flag = "ok " if t.matches else "DIFF"
            print(f"[{flag}] commit {t.seq}: {' + '.join(t.events)}")
            if args.verbose or not t.matches:
                for w in t.writes:
                    print(f"        {w}")
                if t.acts:
                    print(f"        then: {', '.join(t.acts)}")
            if not t.matches:
                bad += 1
                print(f"        stored:   {t.stored[:300]}")
                print(f"        replayed: {t.replayed[:300]}")
    finally:
        store.close()
    print(f"{count} commits replayed through the pure core: {count - bad} identical, {bad} different")
    return 0 if bad == 0 else 1


def run_command(args: argparse.Namespace) -> int:
    try:
        if args.command == "run":
            return trio.run(_run, args)
        if args.command == "resume":
            return trio.run(_resume, args)
        if args.command == "chat":
            return trio.run(_chat, args)
        if args.command == "replay":
            return _replay(args)
    except Problem as e:
        print(f"pidurable: error: {e}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    model.add_argument("--tools", choices=["coding", "none"], default="coding", help="tools to offer (default coding)")
    model.add_argument("--cwd", metavar="DIR", help="working directory of the tools (default .)")
    model.add_argument("--base-url", metavar="URL", help="provider base URL (default from the environment)")
    model.add_argument("--api-key", metavar="KEY", help="provider API key (default from the environment)")

    p = sub.add_parser("run", parents=[common, model], help="run one prompt against a real model, durably")
    p.add_argument("prompt", metavar="PROMPT")
    p.add_argument("--model", required=True, metavar="PROVIDER:MODEL", help="e.g. openai:gpt-4o-mini")
    p.set_defaults(func=run_command)

    p = sub.add_parser("resume", parents=[common, model], help="continue unfinished work after a crash or Ctrl-C")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="a model to configure for it (default: as stored)")
    p.set_defaults(func=run_command)

    p = sub.add_parser("chat", parents=[common, model], help="an interactive, durable chat loop")
    p.add_argument("--model", required=True, metavar="PROVIDER:MODEL")
    p.set_defaults(func=run_command)

    p = sub.add_parser("replay", parents=[common], help="re-run the journal through the pure core and compare")
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    p.add_argument("-v", "--verbose", action="store_true", help="show every commit's writes")
    p.set_defaults(func=run_command)
