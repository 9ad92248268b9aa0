"""``pidurable demo``: durable runs that survive a real SIGKILL.

Three parts run one after the other in the root conversation of one embedded
SQLite store (``--storage jsonl``: a JSONL store directory), each in real
child processes with a scripted model (no network); ``scenarios.toml`` says
what they are:

1. *Config fix* (``read -> edit -> read -> answer``). The first child's
   ``edit`` really edits ``config/dev.json`` (8080 -> 8081) and then kills its
   own process with SIGKILL, before the result is committed. ``edit`` is
   replay-unsafe, so the next process settles the call as "Tool edit was
   interrupted and may have partially run" instead of editing again; the model
   re-reads the file (8081) and answers.
2. *Vienna trip*: three replay-safe queries ``weather``, ``museums``, ``trains``
   run in parallel. ``trains`` is slow; once the store shows weather and
   museums committed and trains running, the parent SIGKILLs the child. The
   next process keeps the two stored results, re-runs only ``trains``
   (stored replay ``safe`` and installed tool ``safe``), and the model writes the
   itinerary.
3. *Booking the train*: ``book_train`` is replay-unsafe and has a
   ``reconcile``. The first child books the seat at the booking service (a
   JSON file keyed by the call's idempotency key) and kills itself before the
   result is committed. The next process asks the tool's reconcile, which
   finds the booking under the same idempotency key: the call settles with the
   real booking (``data.reconciled = "done"``), not "may have partially run",
   and the seat is booked once.

The demo is an application of the library: :mod:`.child` is one process life,
:mod:`.parent` spawns and kills the children, :mod:`.report` reads the store
and explains it, :mod:`.model` is the scripted model, :mod:`.scenarios` reads
the data.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from ..common import EXIT_USAGE, CliError, Subparsers
from .child import STORAGES
from .parent import DemoFailed, Parent
from .report import read_runs
from .scenarios import SCENARIOS


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="a scripted durable run killed mid-tool (SIGKILL) and resumed; no network",
        description="Run two scripted agent tasks in child processes, SIGKILL them mid-tool, "
        "resume each in a fresh process, and explain what the store held and what recovery did.",
    )
    p.add_argument(
        "--db", metavar="PATH", help="store to create: a SQLite file, or a JSONL store's directory with "
        "--storage jsonl (default: in a temporary directory)"
    )
    p.add_argument(
        "--storage", choices=STORAGES, default="sqlite",
        help="the store the children share: an embedded SQLite file (default) or a JSONL directory",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (store and work files)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(db=args.db, keep=args.keep, storage=args.storage)


#: How the banner names each kind of store.
STORE_KIND = {"sqlite": "embedded SQLite", "jsonl": "a JSONL store directory"}


def _call_order(call_id: str) -> tuple[int, ...]:
    """``call_3_1`` -> (3, 1): the order the scripted model made its calls."""
    try:
        return tuple(int(p) for p in call_id.split("_")[1:])
    except ValueError:
        return (1 << 30,)


def run_demo(db: str | None = None, keep: bool = False, storage: str = "sqlite") -> int:
    if storage not in STORAGES:
        raise CliError(f"--storage must be one of {', '.join(STORAGES)}, not {storage!r}", EXIT_USAGE)
    tmp = Path(tempfile.mkdtemp(prefix="pidurable-demo-"))
    try:
        if db is not None:
            store = Path(db).absolute()
            if store.exists():
                what = "store file" if storage == "sqlite" else "store directory"
                raise CliError(f"{store} already exists; the demo needs a new {what}", EXIT_USAGE)
            if not store.parent.is_dir():
                raise CliError(f"Cannot create {store}: directory {store.parent} does not exist", EXIT_USAGE)
        else:
            store = tmp / ("demo.sqlite" if storage == "sqlite" else "demo-jsonl")
        work = tmp / "work"
        logs = tmp / "logs"
        work.mkdir()
        logs.mkdir()
        for part in SCENARIOS.parts:
            for name, content in part.files.items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_text(content)
        print("pidurable demo: agent runs that survive a real SIGKILL (scripted model, no network)")
        print(f"  store:    {store} ({STORE_KIND[storage]})")
        print(f"  work dir: {work}")
        parent = Parent(store, work, logs, storage)
        started = time.monotonic()
        try:
            for part in SCENARIOS.parts:
                parent.run_part(part)
        except DemoFailed as e:
            print(f"\nDEMO FAILED: {e}")
            if db is not None or keep:
                print(f"  inspect the store with: pidurable inspect --db {store} --all")
            return 1
        finally:
            parent.cleanup()
        runs = read_runs(work)
        print(f"\nTool body runs across all processes (from {SCENARIOS.runs_file}):")
        counts: dict[str, list[int]] = {}
        for life, name, _ in sorted(runs, key=lambda r: (_call_order(r[2]), r[0])):
            counts.setdefault(name, []).append(life)
        for name, lives in counts.items():
            per = ", ".join(f"life {lf}" for lf in lives)
            print(f"  {name:10} {len(lives)}  ({per})")
        print(f"\nAll {len(SCENARIOS.parts)} submissions are done ({time.monotonic() - started:.1f} s).")
        if db is not None or keep:
            print(f"  Look at the store: pidurable inspect --db {store} --all")
            print(f"  Read the conversation: pidurable transcript --db {store}")
            print(f"  Re-run its journal through the core: pidurable replay --check --db {store}")
        return 0
    finally:
        if keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
