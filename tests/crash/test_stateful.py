"""A Hypothesis state machine that fuzzes recovery: host operations, model
replies and tool results, process lives and crashes before effect ``k``.

Theory of operation
-------------------
One machine is one store (``MemoryStorage``, or SQLite on a temporary file)
and one ``World`` that outlive process lives. Rules *queue* host operations
(submit an input as ``follow_up`` or ``steer``, submit a ``Write``, abort the
conversation, withdraw a queued input) and *run* process lives:

- ``life(crash_at=k)`` opens a fresh ``Harness`` on the store, performs the
  pending operations in order (each after ``wait`` more effects of this life,
  so they land at varied points of a run) and then waits until the harness is
  idle - unless the ``Recorder`` fences the store and raises
  ``SimulatedCrash`` before effect ``k``. An operation is marked done in the
  World once its call returned (a host that retries: a submit redone after a
  crash is deduplicated by its stable request id; an abort redone is a no-op
  or finishes the job).
- ``life_to_end()`` queues one more input and runs a life with no crash
  until every submission has settled and the harness is idle. An idle
  conversation may still hold queued items - the ``Write``s an abort leaves,
  and the follow-ups queued behind a run that ended unanswered (``_fail`` in
  core/generation.py leaves the inbox alone) - so while any is unsettled the
  life submits one more input, whose admission places them.

One process life = one ``trio.run`` under ``MockClock(autojump_threshold=0)``
(the harness clock is the virtual clock plus a base that grows across lives),
with Trio's scheduler seeded per life: a failure replays. No hypothesis-trio.

The model is a deterministic function of (seed, ``request.turn``, the last
user message): a re-sent request after a crash gets the same reply. After
every life the invariants of tests/invariants.py that hold at that point are
checked; after a life that ended with everything settled, all of them
(``check_all``), and once more after a final clean life in ``teardown``.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import hypothesis  # noqa: F401  (imported before trio runs: deterministic scheduling)
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pidurable.core.model import AgentConfig, ModelRef, RetryPolicy, Settings
from pidurable.core.ownership import conversation_is_idle
from pidurable.shell import Harness, Input, MemoryStorage, Registry, ToolResult, Write, define_tool, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.providers.base import ModelDeferredReply, ModelReply
from pidurable.shell.storage.base import StoreFenced

import invariants
from harness import Life, Recorder, Scenario, SimulatedCrash, World, _seed_trio, check_all, until
from reconciling import notify_tool, pay_tool, ship_tool

#: Unsafe tools whose body never runs twice (``pay`` runs again after a
#: ``not_done`` verdict: ReconciledEffectHappensOnce covers it).
UNSAFE = ("launch", "notify", "ship")
SETTINGS = Settings(retry=RetryPolicy(base_delay_ms=1), partial_interval_ms=1)
QUEUE_MODES = ("one_at_a_time", "all")
#: A life that has not finished after this much virtual time is a liveness bug.
LIFE_TIMEOUT = 120.0
#: ... and so is one that runs this many effects (a livelock that never sleeps).
MAX_EFFECTS = 5000
#: Inputs a clean life submits to place what an idle conversation left queued.
MAX_NUDGES = 30
#: Tool rounds in a row after which the model answers (bounds a run).
MAX_ROUNDS = 4

#: Examples and steps per backend, by Hypothesis profile (conftest.py).
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
BUDGET: dict[str, dict[str, tuple[int, int]]] = {
    "dev": {"memory": (15, 20), "sqlite": (5, 20)},
    "ci": {"memory": (200, 40), "sqlite": (70, 40)},
    "deep": {"memory": (1500, 60), "sqlite": (500, 60)},
}

#: Totals over every machine run in this process (reported by the test).
STATS: Counter[str] = Counter()


# --- the model ------------------------------------------------------------------


def _pool_call(rng: random.Random) -> Any:
    kind = rng.choice(("safe", "safe", "unsafe", "reconciled", "raises", "unknown", "invalid", "poison"))
    if kind == "safe":
        return tool_call("tally", n=rng.randint(1, 9))
    if kind == "poison":  # a value the edge must refuse (the reply settles model_error)
        return tool_call("tally", n=rng.choice((math.nan, math.inf, -math.inf)))
    if kind == "unsafe":
        return tool_call("launch", target=rng.choice(("api", "web")))
    if kind == "reconciled":  # issue 15: reconcile answers done / not_done (pay), unknown (notify), raises (ship)
        return rng.choice((tool_call("pay", amount=rng.randint(1, 99)), tool_call("pay", amount=5), tool_call("notify"), tool_call("ship")))
    if kind == "raises":
        return tool_call("boom")
    if kind == "unknown":
        return tool_call("ghost", x=1)
    return tool_call("tally", n="many")  # invalid arguments


def model_reply(seed: int, request: Any) -> Any:
    """The reply to ``request``: a function of (seed, turn, last user message)
    only (plus a cap on tool rounds in a row, itself a function of the
    request), so a re-sent request gets the same reply."""
    users = [m.text for m in request.messages if m.role == "user"]
    last_user = users[-1] if users else ""
    rounds = 0
    for m in reversed(request.messages):
        if m.role == "user":
            break
        rounds += m.role == "assistant"
    rng = random.Random(f"{seed}|{request.turn}|{last_user}")
    roll = rng.random()
    text = f"answer t{request.turn} to {last_user!r}"
    spice = rng.random()
    if spice < 0.1:
        text += " with a lone \ud800 surrogate"  # stored as U+FFFD
    elif spice < 0.13:
        text += " huge " + "x" * 100_000
    if roll < 0.2 or rounds >= MAX_ROUNDS:
        return reply(text=text)
    if roll < 0.64:
        return reply(tool_calls=[_pool_call(rng) for _ in range(rng.randint(1, 3))])
    if roll < 0.76:
        return reply(error="503 overloaded", retryable=True)
    if roll < 0.82:
        return reply(error="400 invalid request")
    if roll < 0.93:
        return reply(text=text + " (streamed in pieces)", stream=rng.randint(2, 4), delay=0.004)
    return reply(text=text, deferred=rng.randint(1, 2), poll_after_ms=2)


class Models(ScriptedModels):
    """``ScriptedModels(fn)`` whose deferred answers come from the handle.

    ``ScriptedModels.poll`` calls ``fn`` again with the poll request, which
    carries no messages (turn 0): the answer would not be the deferred
    request's. The handle holds the request's index ``k``; the "server" (this
    method, a pure function of the handle) answers from it."""

    async def poll(self, request: Any, handle: Any) -> ModelReply | ModelDeferredReply:
        self.polls.append(handle)
        k, left = int(handle["k"]), int(handle["left"])
        if left > 0:
            return ModelDeferredReply(handle={"k": k, "left": left - 1}, poll_after_ms=2)
        return ModelReply(text=f"deferred answer {k}")


# --- the tools --------------------------------------------------------------------


def _tools(world: World) -> list[Any]:
    async def tally(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[("tally", ctx.task_id)] += 1
        await trio.sleep(0.002)
        n = args["n"]
        if n == 7:  # output with lone surrogates (stored as U+FFFD)
            return ToolResult(text=f"tally {n} \udcff\ud800")
        if n == 8:  # a huge output
            return ToolResult(text=f"tally {n} " + "y" * 200_000)
        return ToolResult(text=f"tally {n}")

    async def launch(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[("launch", ctx.task_id)] += 1
        await trio.sleep(0.005)  # a crash or an abort may land mid-body
        return ToolResult(text=f"launched {args.get('target')}")

    async def boom(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[("boom", ctx.task_id)] += 1
        await trio.sleep(0)
        raise RuntimeError("boom exploded")

    obj = {"type": "object"}
    return [
        define_tool(
            "tally",
            "count safely",
            {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            tally,
            replay="safe",
        ),
        define_tool(
            "launch",
            "launch once",
            {"type": "object", "properties": {"target": {"type": "string"}}},
            launch,
            replay="unsafe",
        ),
        define_tool("boom", "always raises", obj, boom, replay="safe"),
        pay_tool(world, pause=0.05, before=0),
        notify_tool(world),
        ship_tool(world),
    ]


SCENARIO = Scenario(name="stateful", script=(), tools=_tools, unsafe=UNSAFE, same_outcome=False)


# --- host operations --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Op:
    n: int
    #: input | write | abort | withdraw | compact | reset
    kind: str
    #: perform after this many more effects of the life (or once idle)
    wait: int = 0
    request_id: str = ""
    when_busy: str = "follow_up"
    #: withdraw: the request id of the submission to withdraw
    target: str = ""

    def story(self) -> str:
        if self.kind == "input":
            return f"op{self.n}: submit Input {self.request_id} ({self.when_busy}) after {self.wait} effects"
        if self.kind == "write":
            return f"op{self.n}: submit Write {self.request_id} after {self.wait} effects"
        if self.kind == "abort":
            return f"op{self.n}: conv.abort() after {self.wait} effects"
        if self.kind in ("compact", "reset"):
            return f"op{self.n}: conv.{self.kind}() after {self.wait} effects"
        return f"op{self.n}: abort_submission({self.target}) after {self.wait} effects"


class StepRecorder(Recorder):
    """The harness Recorder, with a bound on effects per life."""

    def before_effect(self, index: int, effect: Any) -> None:
        if len(self.effects) >= MAX_EFFECTS:
            raise AssertionError(f"Liveness: a life ran {MAX_EFFECTS} effects without becoming idle")
        super().before_effect(index, effect)


def _idle(h: Harness) -> bool:
    st = h.runtime.state
    return all(
        conversation_is_idle(st, c.id)
        for c in st.conversations.values()
        if c.conversation.owner_task_id is None
    )


async def _perform(h: Harness, conv: Any, op: Op) -> str:
    if op.kind == "input":
        handle = await conv.submit(Input(f"question {op.n}", request_id=op.request_id, when_busy=op.when_busy))
        return f"submission {handle.id}"
    if op.kind == "write":
        handle = await conv.submit(Write(f"note {op.n}", request_id=op.request_id))
        return f"submission {handle.id}"
    if op.kind == "compact":
        return f"compaction task {await conv.compact()}"
    if op.kind == "reset":
        return f"reset submission {(await conv.reset(f'handoff {op.n}')).id}"
    storage = h.runtime.storage
    if op.kind == "abort":
        await conv.abort()
        assert await conv.idle(), "NothingLiveAfterAbort: conv.abort() returned with the conversation busy"
        queued = [s.request_id for s in storage.submissions(conv.id) if s.type == "input" and s.status == "queued"]
        assert not queued, f"AbortWithdrawsQueuedInputs: still queued after conv.abort(): {queued}"
        return "idle"
    sub = storage.submission_by_request(conv.id, op.target)
    # the host's submit returned before this operation ran, in this life or an
    # earlier one: what was acknowledged must be durable
    assert sub is not None, f"AckedInputIsDurable: {op.target} was accepted by an earlier operation but is not stored"
    result = await h.abort_submission(sub.id)
    after = storage.submission(sub.id)
    assert after is not None
    if result == "aborted":
        assert (after.status, after.reason, after.entry_id) == ("unanswered", "aborted", None), (
            f"WithdrawnInputNeverPlaced: {op.target} withdrawn but stored as {after}"
        )
    else:
        assert sub.status != "queued" or after.status != "queued", f"abort_submission({op.target}) -> {result}: {after}"
    return result


def _unsettled(storage: Any) -> list[str]:
    return [f"{s.request_id}:{s.status}" for s in storage.submissions() if not s.settled]


def _settled_at_most_once(storage: Any) -> None:
    """The half of SubmissionsSettleOnce that holds at any time."""
    hist = invariants._submission_history(storage)
    for sid, versions in hist.items():
        n = sum(1 for v in versions if v["status"] in ("done", "unanswered"))
        assert n <= 1, f"SubmissionsSettleOnce: submission {sid} settled {n} times"


# --- the machine ----------------------------------------------------------------------


class RecoveryMachine(RuleBasedStateMachine):
    """Host operations and process lives (crashing before effect k) on one store."""

    BACKEND = "memory"
    submitted = Bundle("submitted")

    def __init__(self) -> None:
        super().__init__()
        self.tmp: str | None = None
        self.storage: Any = None
        self.world = World()
        self.tools = _tools(self.world)  # built once: the world outlives lives
        self.world.flags["done"] = set()
        self.ops: list[Op] = []
        self.lives: list[Life] = []
        self.seed = 0
        self.sequential = False
        self.settings = SETTINGS
        self.broken = False

    # --- setup ----------------------------------------------------------------------
    @initialize(seed=st.integers(0, 2**32 - 1), sequential=st.booleans(), queue_mode=st.sampled_from(QUEUE_MODES))
    def setup(self, seed: int, sequential: bool, queue_mode: str) -> None:
        self.seed, self.sequential = seed, sequential
        self.settings = attrs.evolve(SETTINGS, follow_up_mode=queue_mode, steering_mode=queue_mode)
        if self.BACKEND == "memory":
            self.storage = MemoryStorage()
        else:
            self.tmp = tempfile.mkdtemp(prefix="pidurable-stateful-")
            self.storage = Path(self.tmp) / "store.sqlite"
        note(
            f"model seed {seed}, {self.BACKEND} store, tools {'sequential' if sequential else 'parallel'}, "
            f"queue mode {queue_mode}"
        )

    def _open(self) -> Any:
        if self.BACKEND == "memory":
            return self.storage
        return open_sqlite_storage(self.storage)

    def _close(self, storage: Any) -> None:
        if self.BACKEND != "memory":
            storage.close()

    # --- queueing host operations ----------------------------------------------------
    def _queue(self, op: Op) -> None:
        self.ops.append(op)
        note(f"queue {op.story()}")

    @rule(target=submitted, when_busy=st.sampled_from(["follow_up", "steer"]), wait=st.integers(0, 12))
    def submit_input(self, when_busy: str, wait: int) -> Any:
        n = len(self.ops)
        rid = f"in-{n}"
        self._queue(Op(n=n, kind="input", wait=wait, request_id=rid, when_busy=when_busy))
        return rid

    @rule(wait=st.integers(0, 12))
    def submit_write(self, wait: int) -> None:
        n = len(self.ops)
        self._queue(Op(n=n, kind="write", wait=wait, request_id=f"w-{n}"))

    @precondition(lambda self: any(op.kind == "input" for op in self.ops))
    @rule(wait=st.integers(0, 16))
    def abort(self, wait: int) -> None:
        self._queue(Op(n=len(self.ops), kind="abort", wait=wait))

    @precondition(lambda self: any(op.kind == "input" for op in self.ops))
    @rule(kind=st.sampled_from(["compact", "reset"]), wait=st.integers(0, 16))
    def compact_or_reset(self, kind: str, wait: int) -> None:
        """Issue 9: a manual compaction or a reset lands anywhere in the run."""
        self._queue(Op(n=len(self.ops), kind=kind, wait=wait))

    @rule(rid=submitted, wait=st.integers(0, 12))
    def abort_submission(self, rid: str, wait: int) -> None:
        self._queue(Op(n=len(self.ops), kind="withdraw", wait=wait, target=rid))

    # --- process lives ------------------------------------------------------------------
    def _pending(self) -> list[Op]:
        return [op for op in self.ops if op.n not in self.world.flags["done"]]

    def _run_life(self, crash_at: int | None, to_end: bool) -> Life:
        storage = self._open()
        has_data = bool(storage.journal())
        terminal = invariants.terminal_ids(storage) if has_data else frozenset()
        seq_at_start = len(storage.journal())
        recorder = StepRecorder(storage, crash_at)
        registry = Registry()
        for t in self.tools:
            registry.install(t)
        seed = self.seed
        models = Models(lambda request: model_reply(seed, request))
        pending = self._pending()
        base = self.world.flags.get("clock", 0) + 1000
        latest = [base]
        agent = AgentConfig(
            model=ModelRef("scripted", "fuzz"), tool_execution="sequential" if self.sequential else "parallel"
        )
        story: list[str] = []

        def clock() -> int:
            now = base + int(trio.current_time() * 1000)
            latest[0] = max(latest[0], now)
            return now

        async def main() -> None:
            with trio.fail_after(LIFE_TIMEOUT):
                async with Harness.open(
                    storage, models=models, registry=registry, hooks=recorder, settings=self.settings, clock=clock
                ) as h:
                    conv = await h.root(agent=agent)
                    mark = len(recorder.effects)
                    for op in pending:
                        if op.wait:
                            target = mark + op.wait
                            await until(lambda: len(recorder.effects) >= target or _idle(h))
                        result = await _perform(h, conv, op)
                        self.world.flags["done"].add(op.n)
                        story.append(f"op{op.n} at effect {len(recorder.effects)} -> {result}")
                        mark = len(recorder.effects)
                    await h.wait_idle()
                    nudges = 0
                    while to_end and (stuck := _unsettled(h.runtime.storage)):
                        # Idle with queued items: a run that ended unanswered
                        # leaves the inbox alone (core/generation.py ``_fail``),
                        # and an abort leaves writes; the next input places them.
                        nudges += 1
                        assert nudges <= MAX_NUDGES, f"Liveness: still unsettled after {MAX_NUDGES} inputs: {stuck}"
                        rid = f"nudge-{len(self.lives)}-{nudges}"
                        await conv.submit(Input(f"nudge {nudges}", request_id=rid))
                        story.append(f"idle with {stuck} unsettled: submit {rid}")
                        await h.wait_idle()

        _seed_trio(hash((self.seed, len(self.lives))) & 0xFFFFFFFF)
        crashed = False
        try:
            trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        except SimulatedCrash:
            crashed = True
        except BaseExceptionGroup as group:
            # The crash fired in one task (e.g. the host task stepping Opened
            # inline) while another had already been woken with a batch: its
            # commit hits the fence before Trio delivers the cancellation. A
            # killed process would have done neither; both are the crash.
            crashes, rest = group.split(SimulatedCrash)
            if crashes is None or (rest is not None and rest.split(StoreFenced)[1] is not None):
                # an Exception, so that Hypothesis shrinks it
                raise AssertionError(f"life {len(self.lives)} died: {group!r}") from group
            crashed = True
        except trio.TooSlowError:
            raise AssertionError(
                f"Liveness: life {len(self.lives)} did not finish in {LIFE_TIMEOUT} virtual seconds"
            ) from None
        finally:
            self.world.flags["clock"] = latest[0]
            if self.BACKEND != "memory":
                storage.close()  # Harness.open closed it; closing twice is harmless
        life = Life(crashed=crashed, terminal_at_start=terminal, effects=recorder.effects, seq_at_start=seq_at_start)
        self.lives.append(life)
        for line in story:
            note(f"  {line}")
        STATS["lives"] += 1
        STATS["effects"] += len(recorder.effects)
        if crashed:
            STATS["crashes"] += 1
        return life

    def _check(self, life: Life, must_settle: bool) -> None:
        """Every invariant that holds after this life."""
        storage = self._open()
        try:
            subs = storage.submissions()
            settled = all(s.settled for s in subs)
            if must_settle:
                assert settled, "SubmissionsSettleOnce: unsettled after a clean life to the end: " + ", ".join(
                    f"{s.id} {s.request_id} {s.status}" for s in subs if not s.settled
                )
            if settled and not life.crashed:
                check_all(storage, SCENARIO, self.world, self.lives, expected=None)
                if must_settle:  # how reconcile settled calls (reported by the test)
                    for e in storage.entries(1) if storage.conversation(1) is not None else ():
                        if (e.data or {}).get("reconciled"):
                            STATS[f"reconciled {e.data['reconciled']}"] += 1
                return
            invariants.terminal_never_runs([(x.terminal_at_start, x.effects) for x in self.lives])
            invariants.unsafe_tool_runs_at_most_once(self.world.runs, UNSAFE)
            _settled_at_most_once(storage)
            if not life.crashed and storage.conversation(1) is not None:
                invariants.one_result_per_call(storage.entries(1))  # idle: every call answered
            if storage.conversation(1) is not None:
                invariants.reconciled_effect_happens_once(storage.entries(1), self.world.effects)
            invariants.queued_input_placed_at_most_once(storage)
            invariants.withdrawn_input_never_placed(storage)
            invariants.one_child_per_owner(storage)
            invariants.memo_never_changes(storage)
            invariants.deferred_never_requested_again(storage, [(x.seq_at_start, x.effects) for x in self.lives])
            invariants.journal_invariants(storage)
            invariants.life_invariants(storage, [(x.seq_at_start, x.effects) for x in self.lives])
            invariants.stored_text_is_valid_utf8(storage)
            invariants.replay_is_deterministic(storage)
            invariants.resumes_from_snapshot(storage)
        finally:
            self._close(storage)

    def _has_work(self) -> bool:
        """Something for a life to do: queued operations, or a crashed life's
        unfinished work to recover."""
        return self.storage is not None and (bool(self._pending()) or bool(self.lives and self.lives[-1].crashed))

    @precondition(_has_work)
    @rule(crashes=st.lists(st.integers(0, 24) | st.integers(0, 60), min_size=1, max_size=3))
    def life(self, crashes: list[int]) -> None:
        """Process lives, the n-th crashing before effect ``crashes[n]`` (a
        crash during the recovery of a crash); stops at a life that reached
        idle without crashing."""
        self.broken = True
        for crash_at in crashes:
            pending = len(self._pending())
            life = self._run_life(crash_at, to_end=False)
            how = "crashed after" if life.crashed else "ran to idle,"
            note(
                f"life {len(self.lives) - 1} (crash before effect {crash_at}, {pending} ops pending): "
                f"{how} {len(life.effects)} effects"
            )
            self._check(life, must_settle=False)
            if not life.crashed:
                break
        self.broken = False

    @precondition(lambda self: bool(self.lives and self.lives[-1].crashed))
    @rule()
    def life_to_end(self) -> None:
        """Recover from the last crash and run until everything settled."""
        self.broken = True
        self._end()
        self.broken = False

    def _end(self) -> None:
        n = len(self.ops)
        self._queue(Op(n=n, kind="input", request_id=f"end-{n}"))
        life = self._run_life(None, to_end=True)
        note(f"life {len(self.lives) - 1} (no crash, to the end): {len(life.effects)} effects")
        assert not life.crashed
        self._check(life, must_settle=True)

    def teardown(self) -> None:
        try:
            if self.storage is not None and not self.broken:
                self._end()
                STATS["machines"] += 1
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)


class SqliteRecoveryMachine(RecoveryMachine):
    BACKEND = "sqlite"


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_recovery_state_machine(backend: str) -> None:
    """Any interleaving of host operations, model replies and crashes before
    any effect recovers to a settled store that meets every durability
    invariant."""
    machine = RecoveryMachine if backend == "memory" else SqliteRecoveryMachine
    examples, steps = BUDGET.get(PROFILE, BUDGET["ci"])[backend]
    before = STATS.copy()
    run_state_machine_as_test(
        machine,
        settings=settings(
            settings.default,
            max_examples=examples,
            stateful_step_count=steps,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    done = STATS - before
    runs = max(done["machines"], 1)
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(done.items()) if k.startswith("reconciled"))
    print(
        f"\n[{backend}/{PROFILE}] {done['machines']} machines, {done['lives'] / runs:.1f} lives, "
        f"{done['crashes'] / runs:.1f} crashes, {done['effects'] / runs:.0f} effects per machine; "
        f"calls settled by reconcile: {verdicts or 'none'}"
    )
