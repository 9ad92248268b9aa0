"""The peers' workload for pidurable, shared by the benchmark scripts.

R rounds of one model step returning 3 tool calls, then 3 tool steps, then a
final answer step (R=200 -> 801 durable steps), as in
../shared/bench-peers/peer_bench.py. The model is scripted (O(1) per request,
it only counts the messages) and the tool does nothing, so what a run measures
is the harness: the reducer, the commits, the effect round trips, context
building.

Used by bench_steps.py, steps.py, recovery.py and concurrency.py; not a
script itself. Imports only the public API (``pidurable.shell``), and
configures the store's codec at import (``codec.configure``): since round 17
its converters configure themselves on first use (~0.26 s once per process,
part of ``import pidurable.shell`` before), which would otherwise land in
every measurement's first open; one-time start-up work stays out of the
timed spans, as imports do for pidurable and the peers alike.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pidurable.shell
from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, define_tool, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import codec

getattr(codec, "configure", lambda: None)()  # (a checkout before round 17 configured at import)

MODEL = ModelRef("scripted", "bench")
AGENT = AgentConfig(model=MODEL)
#: The checkout whose code this python imports (shell/__init__.py -> shell -> root),
#: which need not be the one holding these scripts (docs/performance.md: before/after).
ROOT = Path(pidurable.shell.__file__).resolve().parents[1]


def steps_of(rounds: int) -> int:
    """Durable steps of one run: R+1 model steps and 3R tool steps."""
    return rounds * 4 + 1


def make_models(
    rounds: int, marks: list[float] | None = None, cpu_marks: list[float] | None = None
) -> ScriptedModels:
    """A model that asks for 3 tool calls while the conversation has had fewer
    than ``rounds`` tool rounds since its first message, then answers "done".
    ``marks`` (if given) gets the time of every model call (``perf_counter``),
    ``cpu_marks`` the process CPU time then (``process_time``: other
    processes' load moves it far less)."""
    calls = [tool_call("t", i=0), tool_call("t", i=1), tool_call("t", i=2)]
    tool_round = reply(tool_calls=calls)
    final = reply(text="done")

    def script(request):  # type: ignore[no-untyped-def]
        # O(1): each round adds assistant + 3 results to the context.
        k = (len(request.messages) - 1) // 4
        if marks is not None:
            marks.append(time.perf_counter())
        if cpu_marks is not None:
            cpu_marks.append(time.process_time())
        return tool_round if k < rounds else final

    return ScriptedModels(script)


def answering_models(text: str = "done") -> ScriptedModels:
    """A model that answers every request with ``text`` and no tool calls."""
    final = reply(text=text)
    return ScriptedModels(lambda request: final)


async def tool(ctx, args):  # type: ignore[no-untyped-def]
    return "ok"


def make_registry() -> Registry:
    registry = Registry()
    registry.install(define_tool("t", "trivial", {"type": "object"}, tool, replay="safe"))
    return registry


STORAGES = ("sqlite", "jsonl")


def open_storage(kind: str, db: Path, synchronous: str = "NORMAL") -> Any:
    """A store at ``db`` (SQLite: that file, WAL with ``synchronous``) or in
    ``db``'s directory (JSONL: ``open_jsonl_storage(dir, fsync=False)``, once
    the shell has it)."""
    if kind == "sqlite":
        return open_sqlite_storage(db, synchronous=synchronous)
    if kind == "jsonl":
        opener = getattr(pidurable.shell, "open_jsonl_storage", None)
        if opener is None:
            raise SystemExit("this pidurable has no open_jsonl_storage (issue 11 item 5): use --storage sqlite")
        return opener(db.parent / (db.stem + "-jsonl"), fsync=synchronous == "FULL")
    raise SystemExit(f"unknown storage {kind!r}: one of {', '.join(STORAGES)}")


async def run_once(
    rounds: int,
    db: Path,
    synchronous: str,
    *,
    storage_kind: str = "sqlite",
    times: dict[str, float] | None = None,
    cpu_marks: list[float] | None = None,
    on_commit: Callable[[float, Sequence[Any]], None] | None = None,
) -> tuple[float, list[float], int]:
    """One conversation, one input, R tool rounds on a fresh store.
    Returns (seconds from submit to done, the time of every model call, commits).
    ``times`` (if given) gets perf_counter() marks: ``start`` (before the store
    is opened), ``submit``, ``done`` and ``closed``, and the process CPU time
    (``process_time``) at start and done: ``cpu_start``, ``cpu_done``;
    ``cpu_marks`` (if given) the CPU time of every model call; ``on_commit``
    (if given) is called after every storage transaction (``wrap_commits``)."""
    marks: list[float] = []
    models = make_models(rounds, marks, cpu_marks)
    cpu_start = time.process_time()
    start = time.perf_counter()
    storage = open_storage(storage_kind, db, synchronous)
    if on_commit is not None:
        wrap_commits(storage, on_commit)
    async with Harness.open(storage, models=models, registry=make_registry()) as h:
        conv = await h.root(agent=AGENT)
        t0 = time.perf_counter()
        sub = await conv.submit(Input("go"))
        rec = await sub.wait()
        t1 = time.perf_counter()
        cpu_done = time.process_time()
        assert rec.status == "done", rec
        commits = h.runtime.state.next_seq - 1
    if times is not None:
        times.update(start=start, submit=t0, done=t1, closed=time.perf_counter(), cpu_start=cpu_start, cpu_done=cpu_done)
    return t1 - t0, marks, commits


def tenth_ratio(marks: Sequence[float], rounds: int) -> tuple[float, float]:
    """Seconds per step over the first and the last 10% of rounds (each mark
    is one model call; a round is 4 steps)."""
    tenth = max(1, rounds // 10)
    first = (marks[tenth] - marks[0]) / (tenth * 4)
    last = (marks[-1] - marks[-1 - tenth]) / (tenth * 4)
    return first, last


def dir_bytes(directory: Path) -> int:
    """Bytes of every file under ``directory`` (the store and its sidecars)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB: ``VmHWM`` of
    /proc/self/status. Not ru_maxrss: Linux carries a parent's peak into a
    forked child's ru_maxrss across exec, so a child started by a big parent
    would report the parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def source_fingerprint() -> str:
    """A hash of the library's source (core/ and shell/): cached stores built
    by other code are rebuilt, so a store is always written by the code under test."""
    h = hashlib.sha256()
    for directory in ("core", "shell"):
        for path in sorted((ROOT / directory).rglob("*.py")):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def code_version() -> str:
    """Which code a run measures: git HEAD, whether core/ or shell/ differ from
    it (the working tree is what the editable install imports), and the source hash."""
    import subprocess

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return f"{ROOT} (not a git checkout), source {source_fingerprint()}"
    dirty = " + uncommitted changes in core/ or shell/" if git("status", "--porcelain", "--", "core", "shell") else ""
    return f"{ROOT} at {head}{dirty}, source {source_fingerprint()}"


def mixed_versions(fingerprints: set[str]) -> str:
    """A warning line when the children of one run imported different code."""
    if len(fingerprints) <= 1:
        return ""
    return (
        f"WARNING: core/ or shell/ changed while this ran ({len(fingerprints)} source versions: "
        f"{', '.join(sorted(fingerprints))}); the rows mix code versions, run again on a quiet tree"
    )


def wrap_commits(storage: Any, on_commit: Callable[[float, Sequence[Any]], None]) -> None:
    """Time every storage transaction: ``on_commit(seconds, batch)`` after each.

    Wraps the instance's ``commit_many`` (the loop writes one batch of commits
    per transaction through it), or ``commit`` for a storage without it; the
    shell's code is untouched."""
    name = "commit_many" if hasattr(storage, "commit_many") else "commit"
    inner = getattr(storage, name)
    clock = time.perf_counter

    if name == "commit_many":

        def timed(batch):  # type: ignore[no-untyped-def]
            t0 = clock()
            inner(batch)
            on_commit(clock() - t0, batch)

    else:

        def timed(seq, writes, events):  # type: ignore[no-untyped-def]
            t0 = clock()
            inner(seq, writes, events)
            on_commit(clock() - t0, [(seq, writes, events)])

    setattr(storage, name, timed)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def machine() -> str:
    """One line: CPU model, cores, Python, SQLite."""
    import platform
    import sqlite3

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
