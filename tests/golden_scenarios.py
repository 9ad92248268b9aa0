"""Golden scenarios (issue 12 item 6): the journals of the reference
scenarios, checked in as ``specs/scenarios/*.jsonl``.

Each golden file is what ``pidurable replay --export`` writes for the store a
reference scenario of ``tests/crash/scenarios.py`` leaves behind: one JSONL
line per commit, its events and its writes as readable JSON (a lean row's
digest replaced by the writes the core recomputes, ``shell/cli/replay.py``'s
``_readable``). The scenarios are run by the crash harness's ``run_life`` on a
``MemoryStorage``, with the scripted model, Trio's ``MockClock`` (autojump:
virtual time, so every ``until`` poll and sleep is instantaneous and the
same every run), a harness clock that reads that virtual time from a fixed
epoch, and Trio's scheduler seeded: the bytes are identical run to run.

``tests/test_golden_scenarios.py`` checks every file with ``replay --check``
(the current core reproduces every commit byte for byte) and regenerates it
in memory and compares; a deliberate behaviour change regenerates them:

    .venv/bin/python -m tests.golden_scenarios --regenerate

(``--check`` compares without writing; ``--only NAME`` limits either to one
scenario). See specs/scenarios/README.md.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "tests", ROOT / "tests" / "crash"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


from pidurable.core.effects import RunTool  # noqa: E402
from pidurable.shell import MemoryStorage  # noqa: E402
from pidurable.shell.cli.replay import _readable  # noqa: E402
from pidurable.shell.journal_file import write_journal  # noqa: E402
from pidurable.shell.storage.base import JournalRow  # noqa: E402

import scenarios as crash_scenarios  # noqa: E402
from harness import Life, Scenario, World, run_virtual_life  # noqa: E402

#: Where the golden journals live.
DIR = ROOT / "specs" / "scenarios"
#: The harness clock's reading at virtual time 0 of every life's MockClock
#: (2024-01-01T00:00:00Z): timestamps are this plus virtual milliseconds.
EPOCH_MS = 1_704_067_200_000
#: A later life starts this long after the previous one's last reading (a
#: restart takes time; deadlines stored in wall milliseconds stay in the past
#: or future consistently).
RESTART_GAP_MS = 1_000


@attrs.frozen(kw_only=True)
class Golden:
    """One golden scenario: a reference scenario, and where (if anywhere) its
    first process life crashes."""

    name: str  #: the file is ``specs/scenarios/<name>.jsonl``
    scenario: Scenario
    about: str  #: one line, for the README and ``--list``
    #: Given the uninterrupted run's effects, the index of the effect to crash
    #: before (a second life recovers and finishes); None: one life.
    crash_before: Callable[[list[Any]], int] | None = None


def _after_unsafe_edit_started(effects: list[Any]) -> int:
    """Crash right after the unsafe ``edit`` tool's body was started (before
    the next effect): its intent is committed, its result is not, so
    recovery must not run it again."""
    for i, effect in enumerate(effects):
        if isinstance(effect, RunTool) and effect.name == "edit":
            return i + 1
    raise AssertionError("config_fix ran no edit tool")


GOLDEN: tuple[Golden, ...] = (
    Golden(
        name="config_fix",
        scenario=crash_scenarios.CONFIG_FIX,
        about="read, unsafe edit, read again, answer: three tool rounds in one run",
    ),
    Golden(
        name="config_fix_crash",
        scenario=crash_scenarios.CONFIG_FIX,
        about="config_fix, killed right after the unsafe edit started; the second life recovers "
        "(the edit ends interrupted, never re-run) and finishes",
        crash_before=_after_unsafe_edit_started,
    ),
    Golden(
        name="vienna",
        scenario=crash_scenarios.VIENNA,
        about="three safe tools called in parallel in one round, then the itinerary",
    ),
    Golden(
        name="steer",
        scenario=crash_scenarios.STEER,
        about="a second input steers the run while its tool runs; one answer settles both",
    ),
    Golden(
        name="abort_tool",
        scenario=crash_scenarios.ABORT_TOOL,
        about="abort while an unsafe tool blocks: the run and the queued follow-up end aborted, the "
        "queued write survives, a later input runs",
    ),
    Golden(
        name="subagent",
        scenario=crash_scenarios.SUBAGENT,
        about="a tool delegates to a sub-agent conversation whose answer is the tool's result",
    ),
    Golden(
        name="manual_compaction",
        scenario=crash_scenarios.MANUAL_COMPACTION,
        about="three long turns, a manual compaction task, a turn that sees the summary",
    ),
    Golden(
        name="fork_mid_run",
        scenario=crash_scenarios.FORK_MID_RUN,
        about="a fork at the assistant entry of a running tool round; the fork answers on its own, "
        "the parent's tool finishes",
    ),
)


def _world(scenario: Scenario) -> World:
    world = World()
    world.files.update(dict(scenario.files))
    return world


def _life(storage: Any, scenario: Scenario, world: World, crash_at: int | None, start_ms: int) -> tuple[Life, int]:
    """One deterministic process life; it and the clock's last reading."""
    return run_virtual_life(storage, scenario, world, crash_at, start_ms)


def journal(golden: Golden) -> list[JournalRow]:
    """Run ``golden`` deterministically on a fresh memory store; its journal."""
    scenario = golden.scenario
    crash_at = None
    if golden.crash_before is not None:
        probe, _ = _life(MemoryStorage(), scenario, _world(scenario), None, EPOCH_MS)
        crash_at = golden.crash_before(probe.effects)
    storage = MemoryStorage()
    world = _world(scenario)
    first, end = _life(storage, scenario, world, crash_at, EPOCH_MS)
    if crash_at is not None:
        assert first.crashed, f"{golden.name}: no crash before effect {crash_at}"
        second, _ = _life(storage, scenario, world, None, end + RESTART_GAP_MS)
        assert not second.crashed
    else:
        assert not first.crashed
    return storage.journal()


def render(golden: Golden) -> str:
    """The golden file's text: ``replay --export`` of the scenario's journal."""
    out = io.StringIO()
    write_journal(_readable(journal(golden)), out)
    return out.getvalue()


def path(golden: Golden) -> Path:
    return DIR / f"{golden.name}.jsonl"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.golden_scenarios", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--regenerate", action="store_true", help="rewrite specs/scenarios/*.jsonl")
    mode.add_argument("--check", action="store_true", help="compare with the checked-in files, write nothing")
    mode.add_argument("--list", action="store_true", help="list the golden scenarios")
    p.add_argument("--only", metavar="NAME", action="append", help="only this scenario (repeatable)")
    args = p.parse_args(argv)
    chosen = [g for g in GOLDEN if not args.only or g.name in args.only]
    unknown = set(args.only or ()) - {g.name for g in GOLDEN}
    if unknown:
        p.error(f"no golden scenario {', '.join(sorted(unknown))} (have: {', '.join(g.name for g in GOLDEN)})")
    if args.list:
        for g in chosen:
            print(f"{g.name:20} {g.about}")
        return 0
    changed = 0
    for g in chosen:
        text = render(g)
        target = path(g)
        old = target.read_text(encoding="utf-8") if target.exists() else None
        if old == text:
            print(f"unchanged  {target.relative_to(ROOT)} ({text.count(chr(10))} commits)")
            continue
        changed += 1
        if args.regenerate:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"{'rewrote' if old is not None else 'wrote'}    {target.relative_to(ROOT)} ({text.count(chr(10))} commits)")
        else:
            print(f"DIFFERS    {target.relative_to(ROOT)}" + (" (missing)" if old is None else ""))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
