"""The kill-at-every-effect-boundary harness.

A *scenario* is a scripted model, a set of tools and the inputs a host
submits. ``run_lives`` runs a scenario as a sequence of process lives on one
store: each life opens a fresh ``Harness`` (fresh runtime, fresh state),
(re-)submits the inputs with stable request ids (as a host that retries would),
and runs until everything settled - unless its ``CrashAt`` hook fires before
effect ``k``: then the store is fenced (nothing more reaches it, like SQLite
after a kill) and ``SimulatedCrash`` tears the process life down with no
cleanup. An outside ``World`` survives lives: it counts tool-body runs and
holds the "files" tools change.

One process life = one ``trio.run`` (no hypothesis-trio). Trio's scheduler
randomness is seeded per life so a failure replays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio
import trio.testing

from pidurable.core.effects import Effect
from pidurable.core.model import AgentConfig, ModelRef, Settings
from pidurable.shell import Harness, Hooks, Input, Registry, ToolDefinition, ToolResult, define_tool
from pidurable.shell.providers import ScriptedModels
from pidurable.shell.storage.base import StoreFenced

import invariants


class SimulatedCrash(BaseException):
    """The process died here (raised from the effect seam)."""


class Recorder(Hooks):
    """Records every effect of a life; crashes before effect ``crash_at``."""

    def __init__(self, storage: Any, crash_at: int | None) -> None:
        self.storage = storage
        self.crash_at = crash_at
        self.effects: list[Effect] = []

    def before_effect(self, index: int, effect: Effect) -> None:
        if self.crash_at is not None and index == self.crash_at:
            self.storage.fence()
            raise SimulatedCrash(index)
        self.effects.append(effect)


@attrs.define
class World:
    """What survives process lives: tool-body runs, the files tools touch,
    and flags a host script and tools use to meet (polled, across lives)."""

    runs: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    #: External effects (a charge, a booking) by (tool, task id): what the
    #: fake services of tests/crash/reconciling.py did, across lives.
    effects: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    files: dict[str, str] = attrs.field(factory=dict)
    flags: dict[str, Any] = attrs.field(factory=dict)


async def until(predicate: Callable[[], Any], *, step: float = 0.001) -> None:
    """Poll ``predicate`` (for host scripts and tools meeting across lives)."""
    while not predicate():
        await trio.sleep(step)


#: A host script: does what the host does in one process life (idempotently:
#: stable request ids) and returns the submissions to wait for.
HostScript = Callable[[Any, Any, World], Awaitable[Sequence[Any]]]


ToolFactory = Callable[[World], Sequence[ToolDefinition]]


@attrs.frozen(kw_only=True)
class Scenario:
    name: str
    #: The model's replies (reply k answers a context with k assistant
    #: messages), or a function of the request.
    script: Any
    tools: ToolFactory
    inputs: tuple[str, ...] = ("go",)
    agent: AgentConfig = AgentConfig(model=ModelRef("scripted", "test"))
    files: tuple[tuple[str, str], ...] = ()
    #: Unsafe tools whose result may legitimately be "interrupted".
    unsafe: tuple[str, ...] = ()
    #: What the host does (default: submit ``inputs``).
    host: HostScript | None = None
    #: Compare with the uninterrupted run's transcript (False where timing of
    #: host actions legitimately changes it, e.g. an abort).
    same_outcome: bool = True
    settings: Settings = Settings()
    #: Extra assertions on the uninterrupted run's store (what the scenario
    #: is about: e.g. the abort really aborted).
    baseline_check: Callable[[Any], None] | None = None
    #: Assertions every run must meet, crashed or not.
    final_check: Callable[[Any], None] | None = None
    #: Also crash the recovering life before each of ITS effects (for the
    #: crash positions whose recovery asks a ``reconcile``): a crash during
    #: reconcile, then a third life.
    sweep_recovery: bool = False
    #: ``data["reconciled"]`` verdicts the sweep must have produced (each at
    #: least once over all crash positions).
    verdicts: tuple[str, ...] = ()


@attrs.define
class Life:
    crashed: bool
    terminal_at_start: frozenset[int]
    effects: list[Effect]
    #: commits in the store when this life began
    seq_at_start: int = 0


#: Function scripts by scenario name (for scenarios whose replies depend on
#: the request, e.g. a parent and its sub-agent).
_SCRIPTS: dict[str, Any] = {}


def register_script(name: str, fn: Any) -> None:
    _SCRIPTS[name] = fn


def _seed_trio(seed: int) -> None:
    # Trio shuffles ready tasks with a module-level Random; seeding it makes a
    # process life's interleaving (and so a failure) reproducible.
    from trio._core import _run

    # Trio sorts then shuffles a batch when Hypothesis is imported (its plugin
    # sets this), and only maybe-reverses it otherwise: force the first, so a
    # life interleaves the same under pytest and in a plain process
    # (``python -m tests.golden_scenarios --regenerate``).
    _run._ALLOW_DETERMINISTIC_SCHEDULING = True
    _run._r.seed(seed)


def run_life(
    storage: Any,
    scenario: Scenario,
    world: World,
    crash_at: int | None,
    seed: int = 0,
    *,
    clock: Callable[[], int] | None = None,
    trio_clock: Any = None,
) -> Life:
    """One process life (see the module comment). ``clock`` (the harness's
    millisecond clock) and ``trio_clock`` (e.g. a ``MockClock`` with autojump)
    make its timestamps deterministic (tests/golden_scenarios.py)."""
    terminal = invariants.terminal_ids(storage) if _has_data(storage) else frozenset()
    seq_at_start = len(storage.journal()) if _has_data(storage) else 0
    recorder = Recorder(storage, crash_at)
    registry = Registry()
    for t in scenario.tools(world):
        registry.install(t)
    models = ScriptedModels(scenario.script if scenario.script else _SCRIPTS[scenario.name])

    async def main() -> None:
        async with Harness.open(
            storage, models=models, registry=registry, hooks=recorder, settings=scenario.settings, clock=clock
        ) as h:
            conv = await h.root(agent=scenario.agent)
            if scenario.host is not None:
                handles = list(await scenario.host(h, conv, world))
            else:
                handles = [
                    await conv.submit(Input(text, request_id=f"{scenario.name}-{i}"))
                    for i, text in enumerate(scenario.inputs)
                ]
            for handle in handles:
                await handle.wait()
            await h.wait_idle()

    _seed_trio(seed)
    crashed = False
    try:
        trio.run(main, clock=trio_clock)
    except SimulatedCrash:
        crashed = True
    except BaseExceptionGroup as group:
        # the crash can surface together with the fenced store's refusal of a
        # commit another task had already started: still just a crash
        if not _only_crash(group):
            raise
        crashed = True
    return Life(crashed=crashed, terminal_at_start=terminal, effects=recorder.effects, seq_at_start=seq_at_start)


def run_virtual_life(
    storage: Any, scenario: Scenario, world: World, crash_at: int | None, start_ms: int, seed: int = 0
) -> tuple[Life, int]:
    """:func:`run_life` on virtual time: Trio on a ``MockClock`` that jumps
    when every task waits, and the harness's millisecond clock reading it
    from ``start_ms``. The life's interleaving then depends on ``seed``
    alone, not on how fast the machine runs. Returns the life and the
    clock's last reading (the next life of the store starts after it)."""
    mock = trio.testing.MockClock(autojump_threshold=0)
    last = [start_ms]

    def clock() -> int:
        last[0] = start_ms + int(trio.current_time() * 1000)
        return last[0]

    life = run_life(storage, scenario, world, crash_at, seed=seed, clock=clock, trio_clock=mock)
    return life, last[0]


def _only_crash(group: BaseExceptionGroup[Any]) -> bool:
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        else:
            leaves.append(e)
    return any(isinstance(e, SimulatedCrash) for e in leaves) and all(
        isinstance(e, (SimulatedCrash, StoreFenced, trio.Cancelled)) for e in leaves
    )


def _has_data(storage: Any) -> bool:
    try:
        return bool(storage.journal())
    except Exception:
        return False


def check_all(storage: Any, scenario: Scenario, world: World, lives: Sequence[Life], expected: Any) -> None:
    """Every invariant of tests/invariants.py on a finished multi-life run."""
    invariants.submissions_settle_once(storage)
    invariants.terminal_never_runs([(life.terminal_at_start, life.effects) for life in lives])
    invariants.unsafe_tool_runs_at_most_once(world.runs, scenario.unsafe)
    entries = storage.entries(1)
    invariants.one_result_per_call(entries)
    invariants.nothing_live_after_settlement(storage)
    invariants.queued_input_placed_at_most_once(storage)
    invariants.withdrawn_input_never_placed(storage)
    invariants.one_child_per_owner(storage)
    invariants.memo_never_changes(storage)
    invariants.deferred_never_requested_again(storage, [(life.seq_at_start, life.effects) for life in lives])
    invariants.journal_invariants(storage)
    invariants.life_invariants(storage, [(life.seq_at_start, life.effects) for life in lives])
    invariants.context_pairs_calls_with_results(storage)
    invariants.stored_text_is_valid_utf8(storage)
    invariants.bounded_tool_output(storage)
    invariants.reconciled_effect_happens_once(entries, world.effects)
    if scenario.final_check is not None:
        scenario.final_check(storage)
    if expected is not None and scenario.same_outcome:
        invariants.same_outcome_as_uninterrupted(entries, expected, scenario.unsafe)
    invariants.replay_is_deterministic(storage)
    invariants.resumes_from_snapshot(storage)


# --- tools used by the scenarios ----------------------------------------------


def counting_tool(
    world: World,
    name: str,
    *,
    replay: str,
    body: Callable[[World, dict[str, Any]], str] | None = None,
    raises: bool = False,
    execution_mode: str = "parallel",
    properties: dict[str, Any] | None = None,
) -> ToolDefinition:
    """A tool whose body counts its runs in ``world`` before doing anything."""

    async def execute(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[(name, ctx.task_id)] += 1
        await trio.sleep(0)  # a checkpoint: a crash elsewhere may land mid-body
        if raises:
            raise RuntimeError(f"{name} exploded")
        text = body(world, args) if body is not None else f"{name} ok {sorted(args.items())}"
        return ToolResult(text=text)

    return define_tool(
        name,
        f"test tool {name}",
        {"type": "object", "properties": properties or {}},
        execute,
        replay=replay,
        execution_mode=execution_mode,
    )


#: (scenario, backend) -> (effects in an uninterrupted run, boundaries crashed);
#: printed at the end of the test session by tests/conftest.py.
CRASH_REPORT: dict[tuple[str, str], tuple[int, int]] = {}
