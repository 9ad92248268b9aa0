"""The ``pidurable`` command line.

Commands
--------
``pidurable demo [--db FILE] [--keep]``
    A scripted durable run on an embedded SQLite file, no network: two real
    child processes are killed with SIGKILL mid-tool and a fresh process
    resumes each (see :mod:`pidurable.shell.demo`).
``pidurable inspect --db FILE [--all]``
    Conversations, their submissions and the live tasks as a tree. Strictly
    read-only: the file is opened with SQLite's ``mode=ro`` and the store's
    lock is never taken, so a store held by a live process can be inspected
    too (a consistent snapshot, read in one read transaction).

Errors are one readable line on stderr and a non-zero exit status (2 for a
missing store, a file that is not a pidurable store, or bad usage; 1 otherwise,
e.g. a locked or damaged store); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence

from pidurable.core.model import Task, TaskStatus
from pidurable.core.state import INBOX_DOC, LIVE_DOC

from .storage.base import NotAStore, StorageError, StoreMissing
from .storage.readonly import ReadOnlySqlite, lock_holder, open_readonly

EXIT_FAILURE = 1
EXIT_USAGE = 2


def storage_exit_status(e: StorageError) -> int:
    """A missing store or a file that is not one is a bad argument (2); any
    other storage failure (locked, damaged, disk full...) is 1."""
    return EXIT_USAGE if isinstance(e, (StoreMissing, NotAStore)) else EXIT_FAILURE


class CliError(Exception):
    """A failure with a readable message and an exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


# --- read-only access to a SQLite store ----------------------------------------
# ReadOnlySqlite, open_readonly and lock_holder live in storage/readonly.py; they
# are imported above and stay importable from here (demo, agent_cli).


# --- formatting shared by inspect and demo ----------------------------------------


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_task(t: Task) -> str:
    """One line: ``#12 pi.tool edit  running  phase=execute replay=unsafe``."""
    kind = t.kind
    if t.kind == "pi.tool" and "name" in t.input:
        kind = f"pi.tool {t.input['name']}"
    parts = [f"#{t.id}", kind, t.status.value]
    if t.status is TaskStatus.TERMINAL and t.outcome is not None:
        detail = t.outcome.status.value
        err = (t.outcome.error or {}).get("message")
        if err:
            detail += f": {_short(err, 60)}"
        parts[-1] += f" ({detail})"
    if t.phase is not None:
        parts.append(f"phase={t.phase}")
    if t.kind == "pi.tool" and t.phase == "execute" and "replay" in t.checkpoint:
        parts.append(f"replay={t.checkpoint['replay']}")
    if t.on:
        parts.append("on=[" + ", ".join(f"#{i}" for i in t.on) + "]")
    if t.background:
        parts.append("background")
    if t.abort_requested:
        parts.append("abort-requested")
    return "  ".join(parts)


def task_tree(tasks: Iterable[Task], indent: str = "  ") -> list[str]:
    """Tasks as a tree: owner -> children, in id order. A task whose owner is
    not among ``tasks`` is a root (its owner is named)."""
    tasks = sorted(tasks, key=lambda t: t.id)
    ids = {t.id for t in tasks}
    children: dict[int, list[Task]] = {}
    roots: list[Task] = []
    for t in tasks:
        if t.owner is not None and t.owner in ids:
            children.setdefault(t.owner, []).append(t)
        else:
            roots.append(t)
    out: list[str] = []

    def walk(t: Task, prefix: str, branch: str, last: bool) -> None:
        line = describe_task(t)
        if t.owner is not None and t.owner not in ids:
            line += f"  (owner #{t.owner})"
        out.append(indent + prefix + branch + line)
        kids = children.get(t.id, [])
        sub = prefix + ("" if not branch else ("   " if last else "│  "))
        for i, k in enumerate(kids):
            walk(k, sub, "└─ " if i == len(kids) - 1 else "├─ ", i == len(kids) - 1)

    for r in roots:
        walk(r, "", "", True)
    return out


# --- inspect ------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    store = open_readonly(args.db)
    try:
        holder = lock_holder(store.file)
        store.begin()
        try:
            lines = _inspect_lines(store, show_all=args.all, holder=holder)
        finally:
            store.end()
    finally:
        store.close()
    print("\n".join(lines))
    return 0


def _inspect_lines(store: ReadOnlySqlite, *, show_all: bool, holder: int | None) -> list[str]:
    out = [f"store {store.path} (schema {store.schema_version}, {store.commits()} commits, id {store.store_id()})"]
    if holder is not None:
        out.append(f"  in use by process {holder}: this is a read-only snapshot of a live store")
    convs = store.conversations()
    if not convs:
        out.append("no conversations")
        return out
    all_tasks = store.tasks()
    for c in convs:
        title = f"conversation {c.id}" + (" (root)" if c.id == 1 else "")
        if c.owner_task_id is not None:
            title += f" (owned by task #{c.owner_task_id})"
        live = store.document(c.id, LIVE_DOC)
        inbox = store.document(c.id, INBOX_DOC) or ()
        busy = live is not None and live.run is not None
        state = "busy" if busy else "idle"
        out.append(f"{title}: {state}, {store.entry_count(c.id)} entries")
        agent = store.document(c.id, "pi.agent")
        if agent is not None and agent.model is not None:
            out.append(f"  model {agent.model}" + (f", cwd {agent.cwd}" if agent.cwd else ""))
        if busy:
            inputs = ", ".join(f"#{s}" for s in live.run.inputs)
            out.append(f"  run: generation #{live.run.task_id} answering [{inputs}]")
        subs = store.submissions(c.id)
        out.append(f"  submissions ({len(subs)}):" if subs else "  submissions: none")
        for s in subs:
            line = f"    #{s.id} {s.type} {s.status.value}"
            if s.reason:
                line += f" reason={s.reason}"
            if s.request_id:
                line += f" request={s.request_id}"
            if s.answer_entry_id is not None:
                line += f" answer=entry #{s.answer_entry_id}"
            if s.detail:
                line += f" — {_short(s.detail, 60)}"
            out.append(line)
        if inbox:
            out.append(f"  inbox: {len(inbox)} waiting")
            for item in inbox:
                out.append(f"    submission #{item.submission_id} {item.mode}: {_short(item.content, 60)}")
        tasks = [t for t in all_tasks if t.conversation_id == c.id]
        shown = tasks if show_all else [t for t in tasks if t.live]
        label = "tasks" if show_all else "live tasks"
        if not shown:
            out.append(f"  {label}: none")
        else:
            out.append(f"  {label} ({len(shown)}):")
            out.extend(task_tree(shown, indent="    "))
    return out


# --- demo ---------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run_demo(db=args.db, keep=args.keep)


# --- entry point --------------------------------------------------------------------


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pidurable")
    except PackageNotFoundError:  # running from a source tree that is not installed
        import pidurable

        return pidurable.__version__


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    parser = argparse.ArgumentParser(
        prog="pidurable",
        description="Durable LLM agents: demo, run/resume/chat against real models, inspect, replay.",
        epilog="`pidurable COMMAND --help` describes each command.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"pidurable {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = sub.add_parser(
        "demo",
        parents=[common],
        help="a scripted durable run killed mid-tool (SIGKILL) and resumed; no network",
        description="Run two scripted agent tasks in child processes, SIGKILL them mid-tool, "
        "resume each in a fresh process, and explain what the store held and what recovery did.",
    )
    p.add_argument("--db", metavar="FILE", help="SQLite store to create (default: in a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (store and work files)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="conversations, submissions and live tasks of a store (read-only)",
        description="Print a store's conversations, their submissions and the live tasks as a tree. "
        "Read-only; works on a store held by a live process.",
    )
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    p.add_argument("--all", action="store_true", help="show finished (terminal) tasks too")
    p.set_defaults(func=cmd_inspect)

    from .agent_cli import add_commands

    add_commands(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # stdout was closed early (``pidurable inspect ... | head``): stop quietly,
        # with the status a SIGPIPE death would give
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # keep the interpreter's final flush quiet
        except (OSError, ValueError):
            pass
        return 128 + 13
    except KeyboardInterrupt:
        if debug:
            raise
        print("pidurable: interrupted", file=sys.stderr)
        return 130
    except CliError as e:
        if debug:
            raise
        print(f"pidurable: error: {e}", file=sys.stderr)
        return e.status
    except StorageError as e:
        if debug:
            raise
        print(f"pidurable: error: {e}", file=sys.stderr)
        return storage_exit_status(e)
    except Exception as e:  # noqa: BLE001 - the CLI's promise: one line, no traceback
        if debug:
            raise
        message = str(e) or type(e).__name__
        print(f"pidurable: error: {message} ({type(e).__name__}; rerun with --debug for details)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    # Run the imported module's main, so that ``python -m pidurable.shell.cli``
    # and the demo (which imports this module) share one ``CliError`` class.
    from pidurable.shell.cli import main as _main

    sys.exit(_main())
