"""The ``pidurable`` command line: the parser, and errors as one line.

One module per command group, each adding its parser:

- :mod:`.demo`: ``pidurable demo`` (scripted runs killed with SIGKILL and
  resumed; an application of the library, with its scenarios as data);
- :mod:`.inspect`: ``pidurable inspect`` (read-only, even on a live store);
- :mod:`.agent`: ``pidurable run``, ``resume``, ``chat`` (real providers);
- :mod:`.check`: ``pidurable check`` (TLC on the TLA+ model in tla/);
- :mod:`.replay`: ``pidurable replay`` (the journal through the pure core);
- :mod:`.transcript`: ``pidurable transcript`` (a conversation, readably);
- :mod:`.serve`: ``pidurable serve`` (a JSON API and a live page; the serve extra);
- :mod:`.compact`: ``pidurable compact-store`` (old journal rows dropped; SQLite VACUUM, a JSONL store rewritten);
- :mod:`.worker`: ``pidurable worker`` (one of many processes on a PostgreSQL store).

Errors are one readable line on stderr and a non-zero exit status (see
:mod:`.common`); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import InvalidInput
from ..storage.base import StorageError
from . import agent, check, compact, demo, inspect, replay, serve, transcript, worker
from .common import EXIT_FAILURE, EXIT_USAGE, CliError, storage_exit_status

__all__ = ["CliError", "build_parser", "main"]


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
        description="Durable LLM agents: demo, run/resume/chat against real models, inspect, transcript, replay, serve.",
        epilog="`pidurable COMMAND --help` describes each command.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"pidurable {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    demo.add_parser(sub, common)
    inspect.add_parser(sub, common)
    agent.add_parsers(sub, common)
    check.add_parser(sub, common)
    replay.add_parser(sub, common)
    transcript.add_parser(sub, common)
    serve.add_parser(sub, common)
    compact.add_parser(sub, common)
    worker.add_parser(sub, common)
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
    except InvalidInput as e:  # input the library refuses (e.g. a prompt that is not UTF-8)
        if debug:
            raise
        print(f"pidurable: error: {e}", file=sys.stderr)
        return EXIT_USAGE
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
