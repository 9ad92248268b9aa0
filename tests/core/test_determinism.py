"""Determinism and purity of ``step`` over random but valid histories.

A small driver plays host, model and tools: it submits input, answers the
effects the core asks for (random text, random numbers of tool calls, random
failures), re-delivers stale answers, and "crashes" (a new process opens the
store as the commits left it). On every step it checks the contract of the
core: equal inputs give equal outputs, the input state is never mutated, at
most one Commit and it comes first; and a few durability invariants that
every step must keep (intent before act, terminal is final, one result per
call, an unsafe tool body runs at most once). At the end the whole journal is
replayed from scratch and must reproduce every Step exactly.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
from hypothesis import event, given
from hypothesis import strategies as st

from pidurable.core import State, Step, step
from pidurable.core.effects import (
    EFFECT_TYPES,
    CallModel,
    Commit,
    PrepareTool,
    PutEntry,
    PutSubmission,
    PutTask,
    RunTool,
)
from pidurable.core.events import (
    AgentConfigurationRequested,
    Event,
    InputSubmitted,
    ModelFailed,
    ModelResponded,
    Opened,
    Resumed,
    ToolFailed,
    ToolFinished,
    ToolPrepared,
    ToolRejected,
)
from pidurable.core.model import (
    GENERATION,
    AgentConfig,
    ConversationId,
    EntryKind,
    ModelRef,
    TaskStatus,
    ToolCall,
    ToolInfo,
)

from .helpers import MODEL, Store, conv_state, opened_event, tool_results

CATALOG = (
    ToolInfo(name="safe_tool", replay="safe"),
    ToolInfo(name="unsafe_tool", replay="unsafe"),
    ToolInfo(name="seq_tool", replay="safe", execution_mode="sequential"),
)
TOOL_NAMES = ("safe_tool", "unsafe_tool", "seq_tool", "ghost")  # ghost is not installed
# weights by repetition: mostly answering what the core asked for
ACTIONS = ("submit", "submit", *["answer"] * 7, "stale", "crash", "configure", "resume")


class Driver:
    """Plays host, model and tools against the core, checking every step."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.now = 0
        self.ticket = 0
        self.calls = 0
        opened = opened_event(
            conversations=[conv_state(1), conv_state(2, tool_execution="sequential")],
            catalog=CATALOG,
            resume=True,
        )
        self.state = State()
        # the store already holds the conversations the first process opens
        self.store = Store(step(State(), opened).state)
        self.outstanding: list[Any] = []  # CallModel / PrepareTool / RunTool not answered yet
        self.delivered: list[Event] = []  # answers already given (re-sent as stale events)
        self.journal: list[tuple[bool, Event]] = []  # (fresh process?, event)
        self.outputs: list[Step] = []
        self.runs: dict[int, int] = {}  # RunTool count per task (across crashes)
        self.fresh = True
        #: Whether a state's live tasks were ever a persistent map (index.LARGE).
        self.maps_seen = False
        self.feed(opened)

    # --- drawing ---------------------------------------------------------------
    def draw(self, strategy: st.SearchStrategy[Any], label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def tick(self) -> int:
        self.now += 1
        return self.now

    # --- the checked step ----------------------------------------------------------
    def feed(self, ev: Event) -> Step:
        state = self.state
        before = copy.deepcopy(state)
        before_repr = repr(state)
        ev_copy = copy.deepcopy(ev)

        out = step(state, ev)
        self.maps_seen = self.maps_seen or type(out.state.tasks).__name__ == "Map"

        # Purity: the input state and event are untouched.
        assert state == before, "step mutated its input state"
        assert repr(state) == before_repr, "step mutated its input state"
        assert ev == ev_copy, "step mutated its event"
        # Determinism: equal (not identical) inputs give an equal Step.
        assert step(copy.deepcopy(before), ev_copy) == out
        assert step(state, ev) == out
        self.check_effects(state, ev, out)

        self.journal.append((self.fresh, ev))
        self.fresh = False
        self.outputs.append(out)
        self.check_durability(out)
        self.state = out.state
        for eff in out.effects:
            if isinstance(eff, (CallModel, PrepareTool, RunTool)):
                self.outstanding.append(eff)
        return out

    def check_effects(self, state: State, ev: Event, out: Step) -> None:
        assert isinstance(out.effects, tuple)
        assert all(isinstance(e, EFFECT_TYPES) for e in out.effects)
        commits = [i for i, e in enumerate(out.effects) if isinstance(e, Commit)]
        assert len(commits) <= 1, f"more than one Commit: {out.effects}"
        if commits:
            assert commits == [0], "the Commit must be the first effect"
            commit = out.effects[0]
            base = ev.next_seq if isinstance(ev, Opened) else state.next_seq
            assert commit.seq == base and out.state.next_seq == base + 1
            assert commit.writes, "an empty Commit"
        elif not isinstance(ev, Opened):  # Opened takes the store's counters
            assert out.state.next_seq == state.next_seq
        if not isinstance(ev, Opened):
            assert out.state.next_id >= state.next_id

    def check_durability(self, out: Step) -> None:
        """Invariants over what the store holds once this step's commit is durable."""
        store = self.store
        old_tasks = {t.id: t for t in store.tasks()}
        old_subs = {s.id: s for s in store.submissions()}
        old_entries = {e.id for e in store.entries()}
        for c in out.effects:
            if not isinstance(c, Commit):
                continue
            for w in c.writes:
                if isinstance(w, PutTask) and w.task.id in old_tasks:
                    assert old_tasks[w.task.id].status is not TaskStatus.TERMINAL, "a terminal task changed"
                if isinstance(w, PutSubmission) and w.submission.id in old_subs:
                    assert not old_subs[w.submission.id].settled, "a settled submission changed"
                if isinstance(w, PutEntry):
                    assert w.entry.id not in old_entries, "an entry was rewritten"
        store.apply(out)
        stored = {t.id: t for t in store.tasks()}
        for eff in out.effects:
            if isinstance(eff, CallModel):  # IntentBeforeRequest
                cp = stored[eff.task_id].checkpoint
                assert cp["phase"] == "request" and cp["cutoff"] == eff.cutoff and cp["attempt"] == eff.attempt
                assert cp["model"] == {"provider": eff.model.provider, "model_id": eff.model.model_id}
            if isinstance(eff, RunTool):  # IntentBeforeEffect
                cp = stored[eff.task_id].checkpoint
                assert cp["phase"] == "execute" and cp["arguments"] == eff.arguments
                self.runs[eff.task_id] = self.runs.get(eff.task_id, 0) + 1
                if cp["replay"] == "unsafe":  # UnsafeToolRunsAtMostOnce
                    assert self.runs[eff.task_id] == 1, "an unsafe tool body ran twice"
        for results in tool_results(store.entries()).values():  # OneResultPerCall
            assert len(results) == 1, f"a call has {len(results)} results"
        for conv in out.state.conversations.values():  # RunHasOneOwner
            if conv.live.run is not None:
                owner = out.state.tasks.get(conv.live.run.task_id)
                assert owner is not None and owner.kind == GENERATION, "live.run names no live generation"

    # --- actions -------------------------------------------------------------------
    def act(self) -> None:
        action = self.draw(st.sampled_from(ACTIONS), "action")
        getattr(self, f"do_{action}")()

    def do_submit(self) -> None:
        self.ticket += 1
        content = self.draw(st.sampled_from(["hello", "do it", "  ", "", "more"]), "content")
        self.feed(
            InputSubmitted(
                now=self.tick(),
                ticket=self.ticket,
                conversation_id=ConversationId(self.draw(st.sampled_from([1, 1, 2, 3]), "conversation")),
                content=content,
                request_id=self.draw(st.sampled_from([None, None, "r1", "r2"]), "request_id"),
                when_busy=self.draw(st.sampled_from(["follow_up", "steer", "reject"]), "when_busy"),
            )
        )

    def do_configure(self) -> None:
        self.ticket += 1
        model = self.draw(st.sampled_from([MODEL, ModelRef("other", "m2"), MODEL, None]), "model")
        mode = self.draw(st.sampled_from(["parallel", "sequential"]), "tool_execution")
        self.feed(
            AgentConfigurationRequested(
                now=self.tick(),
                ticket=self.ticket,
                conversation_id=ConversationId(self.draw(st.sampled_from([1, 2]), "conversation")),
                agent=AgentConfig(model=model, tool_execution=mode),
            )
        )

    def do_resume(self) -> None:
        self.feed(Resumed(now=self.tick()))

    def do_crash(self) -> None:
        """Drop the process; a new one opens the store (maybe with another catalog)."""
        catalog = self.draw(
            st.sampled_from([CATALOG, CATALOG[1:], (ToolInfo(name="safe_tool", replay="unsafe"), *CATALOG[1:])]),
            "catalog",
        )
        resume = self.draw(st.booleans(), "resume")
        opened = self.store.opened(now=self.tick(), catalog=catalog, resume=resume)
        self.delivered.extend(self.answer_for(e, quiet=True) for e in self.outstanding)
        self.outstanding = []
        self.state = State()
        self.fresh = True
        self.feed(opened)

    def do_stale(self) -> None:
        if self.delivered:
            ev = self.draw(st.sampled_from(self.delivered), "stale event")
            self.feed(attrs_evolve_now(ev, self.tick()))

    def do_answer(self) -> None:
        if not self.outstanding:
            return
        i = self.draw(st.integers(0, len(self.outstanding) - 1), "which effect")
        eff = self.outstanding.pop(i)
        ev = self.answer_for(eff)
        self.delivered.append(ev)
        self.feed(ev)

    def answer_for(self, eff: Any, quiet: bool = False) -> Event:
        """The event a shell would produce for ``eff`` (random unless ``quiet``)."""
        now = self.tick()
        if isinstance(eff, CallModel):
            kind = "text" if quiet else self.draw(st.sampled_from(["text", "calls", "calls", "fail"]), "reply")
            if kind == "fail":
                return ModelFailed(now=now, task_id=eff.task_id, attempt=eff.attempt, message="provider error")
            n = 0 if kind == "text" else self.draw(st.integers(1, 3), "n calls")
            tool_calls = []
            for _ in range(n):
                self.calls += 1
                name = self.draw(st.sampled_from(TOOL_NAMES), "tool")
                tool_calls.append(ToolCall(id=f"call{self.calls}", name=name, arguments={"n": self.calls}))
            text = "" if quiet else self.draw(st.text(max_size=5), "text")
            return ModelResponded(now=now, task_id=eff.task_id, attempt=eff.attempt, text=text,
                                  tool_calls=tuple(tool_calls))
        if isinstance(eff, PrepareTool):
            info = {i.name: i for i in CATALOG}.get(eff.name)
            if info is None or (not quiet and self.draw(st.integers(0, 5), "reject?") == 0):
                return ToolRejected(now=now, task_id=eff.task_id, code="tool_unavailable", message=f"no {eff.name}")
            return ToolPrepared(now=now, task_id=eff.task_id, arguments={"call": eff.call_id}, replay=info.replay)
        if isinstance(eff, RunTool):
            if not quiet and self.draw(st.integers(0, 4), "throw?") == 0:
                return ToolFailed(now=now, task_id=eff.task_id, message="raised")
            is_error = False if quiet else self.draw(st.booleans(), "is_error")
            return ToolFinished(now=now, task_id=eff.task_id, text=f"out of {eff.name}", is_error=is_error)
        raise AssertionError(eff)

    def drain(self) -> None:
        """Answer everything simply until the core asks for nothing more."""
        if not self.state.scheduling:
            self.do_resume()
        for _ in range(500):
            if not self.outstanding:
                return
            eff = self.outstanding.pop(0)
            self.feed(self.answer_for(eff, quiet=True))
        raise AssertionError("the core did not quiesce")

    # --- final checks ------------------------------------------------------------------
    def check_quiescent(self) -> None:
        """With nothing outstanding, no task is live and every call in the transcript has its result."""
        assert dict(self.state.tasks) == {}, f"live tasks left: {self.state.tasks}"
        for conv in self.state.conversations.values():
            assert conv.live.run is None
        # only inputs queued behind a failed run may stay unsettled (they wait in the inbox)
        queued = {i.submission_id for c in self.state.conversations.values() for i in c.inbox}
        assert set(self.state.submissions) == queued
        results = tool_results(self.store.entries())
        for entry in self.store.entries():
            if entry.kind is EntryKind.ASSISTANT:
                for call in entry.tool_calls:
                    assert len(results.get(call.id, [])) == 1, f"call {call.id} has no single result"

    def check_replay(self) -> None:
        """Re-running the journal from scratch reproduces every Step exactly."""
        state = State()
        for (fresh, ev), expected in zip(self.journal, self.outputs, strict=True):
            if fresh:
                state = State()
            out = step(state, ev)
            assert out == expected
            state = out.state


def attrs_evolve_now(ev: Event, now: int) -> Event:
    return attrs.evolve(ev, now=now)


@given(st.data())
def test_random_histories_are_deterministic_pure_and_durable(data: st.DataObject) -> None:
    """Over a random valid history, each step is deterministic, never mutates its input, emits at most one leading Commit and keeps the durability invariants; replaying the journal reproduces it."""
    random_history(data)


def random_history(data: st.DataObject) -> Driver:
    """A random history of 15-60 actions, drained, checked quiescent and replayed."""
    driver = Driver(data)
    for _ in range(data.draw(st.integers(15, 60), label="length")):
        driver.act()
    driver.drain()
    driver.check_quiescent()
    driver.check_replay()
    return driver


@given(st.data())
def test_random_histories_hold_with_persistent_maps(data: st.DataObject) -> None:
    """The same over random histories with ``index.LARGE`` at 2: the live
    tasks and the task index's mappings are persistent maps from two entries
    on (and dicts again below one), so every put, shrink and growth takes the
    Map path; the scheduler checks the kept index against a fresh build at
    every pass (``CHECK_TOUCHED``)."""
    from pidurable.core import index, scheduling

    saved = index.LARGE, scheduling.CHECK_TOUCHED
    index.LARGE, scheduling.CHECK_TOUCHED = 2, True
    try:
        driver = random_history(data)
        event("live tasks held in a persistent map" if driver.maps_seen else "live tasks always a dict")
    finally:
        index.LARGE, scheduling.CHECK_TOUCHED = saved


def test_step_is_deterministic_on_a_fixed_history() -> None:
    """Two independent runs of the same event list produce equal Steps (no hidden global state)."""
    from .helpers import answer, calls, finished, opened_state, prepared, run_events, submit

    def history() -> list[Step]:
        state = opened_state()
        s1 = run_events(state, submit("hi", ticket=1))
        gen = next(iter(s1[-1].state.tasks))
        s2 = run_events(s1[-1].state, calls(gen, "ls"))
        tid = max(s2[-1].state.tasks)
        s3 = run_events(s2[-1].state, prepared(tid), finished(tid))
        g2 = max(t.id for t in s3[-1].state.tasks.values())
        return s1 + s2 + s3 + run_events(s3[-1].state, answer(g2))

    assert history() == history()


def test_a_fixed_history_is_the_same_with_dicts_and_persistent_maps() -> None:
    """The fixed history above, stepped with dicts (``index.LARGE`` 32) and
    with persistent maps from two entries on (``LARGE`` 2): equal Steps,
    equal task indexes, and the second did hold its live tasks and its
    index in Maps."""
    from immutables import Map

    from pidurable.core import index

    from .helpers import answer, calls, finished, opened_state, prepared, run_events, submit

    def history() -> list[Step]:
        state = opened_state()
        s1 = run_events(state, submit("hi", ticket=1))
        gen = min(s1[-1].state.tasks)
        s2 = run_events(s1[-1].state, calls(gen, "ls", "cat", "pwd"))
        tids = sorted(t for t in s2[-1].state.tasks if t != gen)
        s3 = run_events(s2[-1].state, *[e for t in tids for e in (prepared(t), finished(t))])
        g2 = max(s3[-1].state.tasks)
        return s1 + s2 + s3 + run_events(s3[-1].state, answer(g2))

    plain = history()
    saved = index.LARGE
    index.LARGE = 2
    try:
        persistent = history()
    finally:
        index.LARGE = saved
    assert persistent == plain
    assert [s.state.index.as_dict() for s in persistent] == [s.state.index.as_dict() for s in plain]
    assert any(type(s.state.tasks) is Map for s in persistent)
    assert any(type(m) is Map for s in persistent for m in (s.state.index.waiters, s.state.index.children, s.state.index.in_conversation))
    assert not any(type(s.state.tasks) is Map for s in plain)
