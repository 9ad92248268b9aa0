"""``pidurable run``, ``resume`` and ``chat``: agents against real providers,
from a terminal.

Keys and base URLs come from ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` and
``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` (or ``--api-key``/``--base-url``)
and are never written to the store. The model gets the read-only tools unless
``--tools coding`` is given (``bash`` runs any command as the user). Ctrl-C
aborts the running work cleanly (tools get "was aborted" results, the input
ends ``unanswered/aborted``); ``pidurable resume`` continues whatever a crash
left unfinished, in the conversation's stored working directory, and says
what recovery did with each call that was in flight.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio

from pidurable.core.model import GENERATION, TOOL, AgentConfig, ConversationId, ModelRef, Submission, Task
from pidurable.core.state import AGENT_DOC, LIVE_DOC
from pidurable.core.diagnostics import interrupted_message

from ..env import LocalEnv
from ..harness import Conversation, Harness, Input, SubmissionHandle
from ..providers.models import Models
from ..registry import Registry
from ..storage import open_sqlite_storage
from ..storage.base import Storage
from ..tools.coding import TOOL_SETS, coding_tools, read_tools
from .common import EXIT_USAGE, CliError, Subparsers, existing_store

#: The tool sets ``--tools`` chooses from; the default is read-only.
TOOL_CHOICES = ("read", "coding", "none")

#: The providers ``Models.from_env`` knows, and the variable holding each key.
PROVIDER_KEYS: Mapping[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def usage_error(message: str) -> CliError:
    """A bad flag or an unusable provider: one line, exit status 2."""
    return CliError(message, EXIT_USAGE)


def parse_model(text: str) -> ModelRef:
    provider, sep, model_id = text.partition(":")
    if not sep or not provider or not model_id:
        raise usage_error(f"--model must look like PROVIDER:MODEL (e.g. openai:gpt-4o-mini), not {text!r}")
    return ModelRef(provider, model_id)


def _models(args: argparse.Namespace, ref: ModelRef | None, env: Mapping[str, str] | None = None) -> Models:
    """The providers configured from ``env`` (default: the process
    environment) and the flags; ``ref``, if given, must resolve."""
    overrides: dict[str, str] = {}
    if ref is not None and getattr(args, "api_key", None):
        overrides[f"{ref.provider}_api_key"] = args.api_key
    if ref is not None and getattr(args, "base_url", None):
        overrides[f"{ref.provider}_base_url"] = args.base_url
    models = Models.from_env(env, **overrides)
    if ref is not None and models.resolve(ref) is None:
        configured = ", ".join(sorted(models.providers)) or "none"
        if ref.provider not in PROVIDER_KEYS:
            known = ", ".join(sorted(PROVIDER_KEYS))
            raise usage_error(f"unknown provider {ref.provider!r} in {ref} (known: {known}); configured: {configured}")
        raise usage_error(
            f"no {ref.provider} provider is configured for {ref} (set {PROVIDER_KEYS[ref.provider]}, "
            f"or pass --api-key); configured: {configured}"
        )
    return models


def _registry(args: argparse.Namespace) -> Registry:
    registry = Registry()
    if args.tools == "coding":
        registry.install(coding_tools())
    elif args.tools == "read":
        registry.install(read_tools())
    return registry


def _announce_tools(args: argparse.Namespace) -> None:
    """Say which tools the model has (on stderr: stdout is the conversation)."""
    names = ", ".join(t.name for t in TOOL_SETS[args.tools]) or "none"
    hint = "" if args.tools == "coding" else " (--tools coding adds write, edit and bash, which runs any command as you)"
    print(f"tools: {names}{hint}", file=sys.stderr)


class Printer:
    """Prints a conversation's progress from committed state: the streamed
    partial, tool calls as they start, results, the final answer.

    ``shown`` is the streamed text of the current answer already printed. It
    is kept until the assistant entry arrives (the commit that stores the
    answer also clears the partial), so the answer is never printed twice.
    """

    def __init__(self, harness: Harness, conv: Conversation, out: TextIO, *, after: int | None = None) -> None:
        self.harness, self.conv, self.out = harness, conv, out
        if after is None:
            after = max((e.id for e in harness.runtime.storage.entries(conv.id)), default=0)
        self.seen = after
        self.shown = ""

    def update(self) -> None:
        storage = self.harness.runtime.storage
        live = storage.document(self.conv.id, LIVE_DOC)
        partial = (live.partial or "") if live is not None else ""
        if partial and not partial.startswith(self.shown):
            self.out.write("\n")  # a new stream (a retry): start it on its own line
            self.shown = ""
        if len(partial) > len(self.shown):
            self.out.write(partial[len(self.shown) :])
            self.shown = partial
        for e in storage.entries(self.conv.id, after=self.seen):  # only what is new
            self.seen = e.id
            if e.kind == "assistant":
                shown, self.shown = self.shown, ""
                if shown and not e.text.startswith(shown):
                    self.out.write("\n")  # what was streamed is not this entry
                    shown = ""
                if shown and e.stop_reason in ("error", "aborted"):
                    self.out.write("\n")  # end the line the partial left open
                if e.stop_reason == "error":
                    self.out.write(f"[model error] {e.text}\n")
                elif e.stop_reason != "aborted":
                    rest = e.text[len(shown) :]
                    self.out.write(rest + ("\n" if e.text else ""))
                    for c in e.tool_calls:
                        args = ", ".join(f"{k}={v!r}" for k, v in c.arguments.items())
                        self.out.write(f"  -> {c.name}({args[:200]})\n")
            elif e.kind == "tool_result":
                mark = "error" if e.is_error else "ok"
                self.out.write(f"  <- {e.tool_name} [{mark}] {_result_line(e.text, e.data)[:160]}\n")
        self.out.flush()


def _result_line(text: str, data: Any) -> str:
    """A tool result in one line: the first line of its content, then its
    problems (the messages of its diagnostics, core/diagnostics.py; the
    ``<harness>`` block the model reads is not repeated)."""
    items = data.get("diagnostics") if isinstance(data, dict) else None
    problems = [str(d.get("message")) for d in items if isinstance(d, dict) and d.get("severity") != "info"] if isinstance(items, list) else []
    content = text.rpartition("<harness>\n")[0].removesuffix("\n") if items else text
    first = content.strip().splitlines()[0] if content.strip() else ""
    if not problems:
        return first
    return f"{first} ({'; '.join(problems)})" if first else "; ".join(problems)


async def _follow(harness: Harness, conv: Conversation, printer: Printer, done: Callable[[], bool]) -> None:
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
    if not cwd.is_dir():
        raise usage_error(f"--cwd {args.cwd} is not a directory")
    storage = open_sqlite_storage(Path(args.db))
    _announce_tools(args)
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


async def _until_settled(harness: Harness, conv: Conversation, sub: SubmissionHandle, printer: Printer) -> int:
    """Follow one submission; Ctrl-C aborts the conversation cleanly.
    0 if it ends done, else 1 (the reason printed on stderr)."""
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


# --- resume ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AtOpen:
    """What the store held before recovery: the live tasks, the finished tool
    calls of a live round (their results are kept), the unsettled
    submissions, and the last entry of each conversation."""

    live: tuple[Task, ...]
    kept: tuple[Task, ...]
    pending: tuple[Submission, ...]
    last_entry: Mapping[ConversationId, int]

    @classmethod
    def read(cls, storage: Storage) -> "AtOpen":
        live = tuple(storage.tasks(live_only=True))
        waited = sorted({i for t in live if t.kind == GENERATION and t.phase == "tools" for i in t.on})
        kept = tuple(
            t for i in waited if (t := storage.task(i)) is not None and not t.live and t.kind == TOOL
        )
        pending = tuple(s for s in storage.submissions() if not s.settled)
        last = {c.id: max((e.id for e in storage.entries(c.id)), default=0) for c in storage.conversations()}
        return cls(live=live, kept=kept, pending=pending, last_entry=last)


def recovery_report(at_open: AtOpen, storage: Storage, registry: Registry) -> list[str]:
    """What recovery did with each task that was live at open (read from
    the store after the resumed work settled), in task order."""
    lines: list[str] = []
    for t in at_open.kept:
        lines.append(f"{t.input.get('name')} (task #{t.id}): kept - its stored result was reused, not run again")
    for t in at_open.live:
        after = storage.task(t.id)
        ended = "still live" if after is None or after.live else (after.outcome.status.value if after.outcome else "ended")
        if t.kind == TOOL:
            name = str(t.input.get("name"))
            tool = registry.tool(name)
            installed = f"installed replay={tool.replay}" if tool is not None else "not installed now"
            stored = t.checkpoint.get("replay", "?")
            if t.phase != "execute":
                lines.append(f"{name} (task #{t.id}): had not started; prepared and run now -> {ended}")
            elif after is not None and after.outcome is not None and (after.outcome.error or {}).get("message") == interrupted_message(name):
                lines.append(
                    f"{name} (task #{t.id}): reported interrupted, NOT run again (stored replay={stored}, {installed})"
                )
            else:
                lines.append(f"{name} (task #{t.id}): re-run (stored replay={stored}, {installed}) -> {ended}")
        elif t.kind == GENERATION:
            m = t.checkpoint.get("model") or {}
            model = f"{m.get('provider')}:{m.get('model_id')}" if m else "?"
            attempt = t.checkpoint.get("attempt", "?")
            what = {
                "prepare": "model request prepared and sent",
                "request": f"model request re-sent as pinned ({model}, attempt {attempt})",
                "retry": f"retry backoff resumed ({model}, attempt {attempt})",
                "poll": f"deferred model reply polled again ({model})",
            }.get(t.phase or "")
            if what is not None:
                lines.append(f"generation (task #{t.id}): {what} -> {ended}")
        else:
            lines.append(f"{t.kind} (task #{t.id}): resumed at phase {t.phase} -> {ended}")
    return lines


def _resume_cwd(args: argparse.Namespace, agent: AgentConfig | None) -> Path:
    """``--cwd``, else the root conversation's stored cwd, else ``.``."""
    if args.cwd:
        cwd = Path(args.cwd).resolve()
        if not cwd.is_dir():
            raise usage_error(f"--cwd {args.cwd} is not a directory")
        return cwd
    if agent is not None and agent.cwd:
        cwd = Path(agent.cwd)
        if not cwd.is_dir():
            raise usage_error(f"the conversation's working directory {agent.cwd} does not exist (pass --cwd DIR)")
        return cwd.resolve()
    return Path(".").resolve()


async def _resume(args: argparse.Namespace) -> int:
    storage = open_sqlite_storage(existing_store(args.db), create=False)  # never makes a store
    try:
        at_open = AtOpen.read(storage)
        agent: AgentConfig | None = storage.document(ConversationId(1), AGENT_DOC)
        cwd = _resume_cwd(args, agent)
        ref = parse_model(args.model) if args.model else (agent.model if agent is not None else None)
        work = bool(at_open.pending or at_open.live)
        models = _models(args, ref if work else None)
    except BaseException:
        storage.close()
        raise
    registry = _registry(args)
    async with Harness.open(storage, models=models, registry=registry, env=LocalEnv(cwd), resume=False) as harness:
        if not work:
            print("nothing to resume: every submission is settled")
            return 0
        _announce_tools(args)
        print(f"resuming {len(at_open.live)} live task(s) and {len(at_open.pending)} unsettled submission(s) in {cwd}")
        root = await harness.conversation(1)
        if root is not None and (args.cwd or args.model):
            changes: dict[str, Any] = {"cwd": str(cwd)} if args.cwd else {}
            if args.model:
                changes["model"] = ref
            await root.configure(**changes)
        followed = []
        for cid in sorted({s.conversation_id for s in at_open.pending}):
            conv = await harness.conversation(cid)
            if conv is not None:
                followed.append((conv, Printer(harness, conv, sys.stdout, after=at_open.last_entry.get(cid, 0))))
        await harness.resume()
        failed = 0
        for conv, printer in followed:
            for s in at_open.pending:
                if s.conversation_id == conv.id:
                    handle = await harness.submission(s.id)
                    if handle is not None and await _until_settled(harness, conv, handle, printer) != 0:
                        failed += 1 if s.type == "input" else 0
        await harness.wait_idle()
        print("what recovery did:")
        for line in recovery_report(at_open, storage, registry) or ["nothing was in flight"]:
            print(f"  {line}")
        for s in at_open.pending:
            r = storage.submission(s.id)
            if r is not None:
                print(f"submission #{s.id}: {r.status}" + (f" ({r.reason})" if r.reason else ""))
    return 1 if failed else 0


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


def cmd_run(args: argparse.Namespace) -> int:
    return trio.run(_run, args)


def cmd_resume(args: argparse.Namespace) -> int:
    return trio.run(_resume, args)


def cmd_chat(args: argparse.Namespace) -> int:
    return trio.run(_chat, args)


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``run``, ``resume`` and ``chat``."""
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    model.add_argument(
        "--tools",
        choices=TOOL_CHOICES,
        default="read",
        help="tools the model gets: read (default: read files under --cwd), coding (adds write, edit "
        "and bash; bash runs any command as you, NOT confined to --cwd), none",
    )
    model.add_argument("--base-url", metavar="URL", help="provider base URL (default from the environment)")
    model.add_argument("--api-key", metavar="KEY", help="provider API key (default from the environment)")
    keys = "Keys and base URLs come from OPENAI_API_KEY/OPENAI_BASE_URL and ANTHROPIC_API_KEY/ANTHROPIC_BASE_URL (or the flags) and are never stored."

    p = sub.add_parser(
        "run",
        parents=[common, model],
        help="run one prompt against a real model, durably",
        description="Send PROMPT to a real model in the store's root conversation, stream the answer and "
        "show tool calls. Ctrl-C aborts cleanly; after a crash `pidurable resume` continues. " + keys,
    )
    p.add_argument("prompt", metavar="PROMPT")
    p.add_argument("--model", required=True, metavar="PROVIDER:MODEL", help="e.g. openai:gpt-4o-mini")
    p.add_argument("--cwd", metavar="DIR", help="the working directory of the tools (default .)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "resume",
        parents=[common, model],
        help="continue unfinished work after a crash or Ctrl-C",
        description="Reopen the store (never creating one), run recovery and finish every unsettled "
        "submission, in the conversation's stored working directory; then say what recovery did with each "
        "call that was in flight (kept, re-run, reported interrupted, model request re-sent). Exits 1 if an "
        "input ends unanswered. " + keys,
    )
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="configure this model from now on (default: as stored)")
    p.add_argument("--cwd", metavar="DIR", help="use this working directory instead of the stored one")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser(
        "chat",
        parents=[common, model],
        help="an interactive, durable chat loop",
        description="Read lines from stdin: a line typed while the agent works is queued as a follow-up; "
        "/steer TEXT joins the running work, /abort stops it, /quit leaves (end of input waits for the "
        "queued work). " + keys,
    )
    p.add_argument("--model", required=True, metavar="PROVIDER:MODEL", help="e.g. openai:gpt-4o-mini")
    p.add_argument("--cwd", metavar="DIR", help="the working directory of the tools (default .)")
    p.set_defaults(func=cmd_chat)
