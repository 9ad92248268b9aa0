"""Where a durable step's work goes, counted rather than timed: Python
bytecodes executed per durable step, by part and by function.

Timing on a small shared machine moves 10-20% from run to run, more than
most single changes. This counts instead: ``sys.settrace`` with opcode
events over bench/steps.py's workload (R rounds of one model step with 3
tool calls + 3 tool steps, scripted model, no-op tools, SQLite WAL NORMAL),
once at ``--rounds A`` and once at ``B`` (after a short warm-up run: first-use
set-up is not a step's); the difference over ``4 (B - A)``
steps is the marginal count per durable step (opening, the first request and
closing cancel out). The same code gives the same counts on any machine, so
two checkouts can be compared exactly (run this script from each: it
measures the pidurable its python imports, like steps.py).

What it does not count: work in C - SQLite's statements, the JSON encoder,
dict and list operations - which callgrind sees (docs/performance.md says
how). A Python call costs about the same as a few bytecodes, so the calls per
step are printed too.

Parts: ``core`` (the pure reducer), ``records`` (the ``__init__`` /
``__eq__`` attrs generates for the records, nearly all the core's: a frozen
record is made anew for each change), ``storage`` (shell/storage: rows,
codec, the SQLite adapter, and the unstructure functions cattrs generates
for it), ``shell`` (the rest of shell/: loop, edge, interpreters,
observers), ``trio``, ``other`` (stdlib and other libraries).

    python bench/bytecodes.py                     # R=40 and 140, the top 30 functions
    python bench/bytecodes.py --rounds 40 540 --top 60
    python bench/bytecodes.py --quick             # R=10 and 30
    python bench/bytecodes.py --flat 1000 5000    # last/first 10% of one run, in bytecodes

``--flat R``: one run of R rounds, counting only the total, read at every
model call; prints bytecodes per step over the first and the last 10% of
rounds and their ratio - issue 11's "last-10% / first-10%" without this
machine's timing noise (1.00: a step does the same Python work however
long the history).

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402

Counts = collections.Counter[CodeType]


class _AtModelCalls(list[float]):
    """Given to the workload as its ``cpu_marks``: at each model call it
    records the bytecodes counted so far instead of the CPU time."""

    def __init__(self, total: list[int]) -> None:
        super().__init__()
        self.total = total

    def append(self, _: float) -> None:
        super().append(float(self.total[0]))


def count(rounds: int, per_code: bool = True) -> tuple[Counts, Counts, _AtModelCalls]:
    """One traced run of ``rounds``: bytecodes and calls per code object
    (empty unless ``per_code``: the total alone traces faster), and the total
    so far at each model call."""
    ops: Counts = collections.Counter()
    calls: Counts = collections.Counter()
    total = [0]

    def on_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            total[0] += 1
            if per_code:
                ops[frame.f_code] += 1
        return on_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        frame.f_trace_opcodes = True
        if per_code:
            calls[frame.f_code] += 1
        return on_opcode

    marks = _AtModelCalls(total)

    async def run(directory: Path) -> None:
        sys.settrace(on_call)
        try:
            await workload.run_once(rounds, directory / "s.db", "NORMAL", cpu_marks=marks)
        finally:
            sys.settrace(None)

    with tempfile.TemporaryDirectory() as d:
        trio.run(run, Path(d))
    return ops, calls, marks


def flat(rounds: int) -> tuple[float, float]:
    """Bytecodes per durable step over the first and the last 10% of rounds
    of one run (counted at each model call, a round being 4 steps)."""
    return workload.tenth_ratio(count(rounds, per_code=False)[2], rounds)


def part(code: CodeType) -> str:
    path = code.co_filename
    if path.startswith("<attrs generated"):
        return "records"
    if path.startswith("<cattrs generated"):
        return "storage"  # the store's unstructure functions (codec.py)
    if "site-packages/" in path:
        return "trio" if "site-packages/trio/" in path else "other"
    p = Path(path)
    try:
        rel = p.resolve().relative_to(workload.ROOT)
    except (ValueError, OSError):
        return "trio" if "/trio/" in path else "other"
    top = rel.parts[0] if rel.parts else ""
    if top == "core":
        return "core"
    if top == "shell":
        return "storage" if rel.parts[1:2] == ("storage",) else "shell"
    return "other"


def where(code: CodeType) -> str:
    if "site-packages/" in code.co_filename:
        return f"{code.co_filename.rsplit('site-packages/', 1)[-1]}:{code.co_firstlineno} {code.co_name}"
    try:
        rel = str(Path(code.co_filename).resolve().relative_to(workload.ROOT))
    except (ValueError, OSError):
        rel = code.co_filename.rsplit("site-packages/", 1)[-1]
    return f"{rel}:{code.co_firstlineno} {code.co_name}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, nargs=2, default=[40, 140], metavar=("A", "B"), help="the two runs (A < B)")
    p.add_argument("--top", type=int, default=30, help="functions to list")
    p.add_argument("--quick", action="store_true", help="R=10 -> 30 (a few seconds)")
    p.add_argument("--flat", type=int, nargs="+", metavar="R", help="last/first 10%% of one run of R rounds, in bytecodes")
    args = p.parse_args(argv)
    if args.flat:
        print("## Bytecodes per durable step over the first and the last 10% of rounds, one run each\n")
        print(f"pidurable at {workload.ROOT}\n")
        print("| R | first 10% | last 10% | last/first |")
        print("|---:|---:|---:|---:|")
        count(2, per_code=False)  # warm-up, as below: first-use set-up is not a step's
        for rounds in args.flat:
            if rounds < 10:
                p.error("--flat needs R >= 10")
            first, last = flat(rounds)
            print(f"| {rounds} | {first:,.0f} | {last:,.0f} | {last / first:.3f} |", flush=True)
        return 0
    a, b = (10, 30) if args.quick else args.rounds
    if not 0 < a < b:
        p.error("--rounds A B needs 0 < A < B")
    count(2)  # warm-up: lazy imports, caches and first-use set-up are not per step
    ops_a, calls_a, _ = count(a)
    ops_b, calls_b, _ = count(b)
    steps = 4 * (b - a)
    ops = {c: ops_b[c] - ops_a[c] for c in set(ops_a) | set(ops_b)}
    calls = {c: calls_b[c] - calls_a[c] for c in set(calls_a) | set(calls_b)}
    total = sum(ops.values())
    print(f"## Bytecodes per durable step (R={a} -> R={b}: {steps} steps; pidurable at {workload.ROOT})\n")
    print(f"total {total / steps:,.0f} bytecodes, {sum(calls.values()) / steps:,.0f} Python calls per durable step\n")
    by_part: collections.Counter[str] = collections.Counter()
    calls_by_part: collections.Counter[str] = collections.Counter()
    for code, n in ops.items():
        by_part[part(code)] += n
    for code, n in calls.items():
        calls_by_part[part(code)] += n
    print("| part | bytecodes/step | share | calls/step |")
    print("|---|---:|---:|---:|")
    for name in ("core", "records", "storage", "shell", "trio", "other"):
        n = by_part[name]
        print(f"| {name} | {n / steps:,.0f} | {100 * n / total:.1f}% | {calls_by_part[name] / steps:,.1f} |")
    print("\n| function | bytecodes/step | share | calls/step |")
    print("|---|---:|---:|---:|")
    for code, n in sorted(ops.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| `{where(code)}` | {n / steps:,.1f} | {100 * n / total:.1f}% | {calls[code] / steps:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
