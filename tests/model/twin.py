"""The Python twin of tla/Durable.tla: an explicit-state exploration of the
real, pure ``pidurable.core.step`` (issue 12 item 4).

Theory of operation
-------------------
A *node* is one global state of the system the TLA+ model describes: the
core's ``State`` after its last step (``mem`` there), the effects of that
step not yet executed (``outbox``), a dictionary model of the store (the
last write of every record: what a commit makes durable, the one thing a
crash keeps), the invocations out in the shell (``inflight``: model calls,
tool preparations, tool bodies), and the world outside the process that
survives crashes (tool-body runs per task, crashes and aborts so far).

The environment chooses the next move among those possible in a node, as
the shell, the model, the tools and the host would:

* ``Execute``: the shell runs the next effect of the outbox. ``Commit``
  applies the writes to the store (and journals the events stepped since
  the previous commit); ``CallModel`` / ``PrepareTool`` / ``RunTool`` start
  an invocation (a tool body counts as run once it starts); ``Cancel`` ends
  one; ``Respond`` answers the host.
* Once the outbox is empty (the reducer takes the next event only then),
  an event: a reply to an invocation in flight (the model answers, calls
  1-2 tools, or fails; a preparation is accepted with the catalog's replay
  promise; a body finishes or fails), or the host submits its next input
  (follow-up or steer) or aborts the conversation.
* ``Crash`` at any effect boundary (the outbox may be half done): only the
  store survives, and the next life opens it (``Opened`` built from the
  store model, stepped on a fresh ``State``, exactly as the shell does).

Nodes are deduplicated by a canonical encoding (everything but the journal,
which is history: it is kept on the node to check the journal invariants
along the path that first reached it). Every invariant of
``tests/invariants.py`` that applies is checked in every node: the
store-level ones on a small storage-like view of the store model
(``StoreView``), the journal-level ones on the journal of the path, the
effect-level ones (intent before effect/request, terminal never runs, one
invocation per task) at the moment the shell starts an effect, and the
end-of-behaviour ones (everything settled, one result per call, the
context pairs calls with results, replay is deterministic) in every
*quiescent* node, where only the host or a crash could move on.

Because the core is pure, this checks the real code, not a model of it; a
broken core (``step`` wrapped or a function patched) is caught like a broken
model (tests/model/test_twin.py).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from pidurable.core import State, Step
from pidurable.core import step as core_step
from pidurable.core.builtins import builtin_address
from pidurable.core.effects import (
    PutDocument,
    CallModel,
    Cancel,
    Commit,
    Effect,
    PrepareTool,
    PutTask,
    Respond,
    RunTool,
    write_key,
)
from pidurable.core.events import (
    ConversationAbortRequested,
    Event,
    InputSubmitted,
    ModelFailed,
    ModelResponded,
    Opened,
    RootRequested,
    ToolFailed,
    ToolFinished,
    ToolPrepared,
)
from pidurable.core.model import AgentConfig, ConversationId, EntryKind, ModelRef, TaskId, TaskStatus, ToolCall, ToolInfo
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import JournalRow

import store_view
from store_view import StoreView, opened_from

import invariants

NOW = 0
ROOT = ConversationId(1)
MODEL = ModelRef("scripted", "twin")


@attrs.frozen(kw_only=True)
class Bounds:
    """The small bounds of one exploration (tla/MCDurable.cfg's, by default)."""

    inputs: int = 2  #: host inputs (the first placed, the second a follow-up or a steer)
    max_batch: int = 2  #: calls in one tool round
    max_rounds: int = 1  #: tool rounds in one behaviour (as the store counts them)
    crashes: int = 1
    aborts: int = 1
    model_errors: bool = True
    tool_failures: bool = True
    #: tool name -> replay promise (the catalog every life installs)
    tools: tuple[tuple[str, str], ...] = (("safe", "safe"), ("unsafe", "unsafe"))
    #: a new life may declare the unsafe tool safe (stored vs current replay)
    redeclare: bool = False


DEFAULT = Bounds()
DEEP = Bounds(max_rounds=2, crashes=2, redeclare=True)


def bounds_from_env() -> Bounds:
    """``PIDURABLE_TWIN=deep`` explores bigger bounds (minutes, opt-in)."""
    return DEEP if os.environ.get("PIDURABLE_TWIN") == "deep" else DEFAULT


@attrs.frozen(kw_only=True)
class Flight:
    """An invocation out in the shell, waiting for its reply."""

    what: str  #: "model" | "prepare" | "tool"
    task_id: int
    attempt: int = 0
    name: str = ""
    arguments: str = ""  #: JSON of the call's arguments


@attrs.frozen(kw_only=True)
class Node:
    core: State
    outbox: tuple[Effect, ...]
    records: tuple[tuple[tuple[str, int], Any], ...]  #: the store model, sorted by key
    next_id: int
    next_seq: int
    inflight: tuple[Flight, ...]
    catalog: tuple[tuple[str, str], ...]
    runs: tuple[tuple[tuple[str, int], int], ...]  #: (tool, task) -> body runs, across lives
    settles: tuple[tuple[int, int], ...]  #: submission -> settling writes in the journal
    crashes: int
    aborts: int
    started: frozenset[tuple[Any, ...]]  #: invocations started in this life
    terminal_at_start: frozenset[int]  #: tasks terminal in the store when this life began
    #: history, not state: the events stepped since the last commit, and the journal
    pending: tuple[Event, ...] = attrs.field(eq=False)
    journal: tuple[JournalRow, ...] = attrs.field(eq=False)

    def key(self) -> bytes:
        data = pickle.dumps((self.core, self.outbox, self.records, self.next_id, self.next_seq, self.inflight,
                             self.catalog, self.runs, self.settles, self.crashes, self.aborts,
                             sorted(self.started), sorted(self.terminal_at_start)), protocol=5)
        return hashlib.blake2b(data, digest_size=16).digest()

    def store(self) -> dict[tuple[str, int], Any]:
        return dict(self.records)

    def view(self) -> StoreView:
        return StoreView(self.store(), self.journal)


class Violation(AssertionError):
    """An invariant failed; the message ends with the behaviour that led there."""


@attrs.define
class Result:
    states: int = 0
    transitions: int = 0
    quiescent: int = 0
    depth: int = 0
    seconds: float = 0.0
    max_states_hit: bool = False


StepFn = Callable[[State, Event], Step]


class Explorer:
    """Breadth first over every interleaving (see the module comment)."""

    def __init__(self, bounds: Bounds = DEFAULT, step: StepFn = core_step, max_states: int = 2_000_000) -> None:
        self.bounds = bounds
        self.step = step
        self.max_states = max_states

    # --- building nodes ---------------------------------------------------

    def catalog_info(self, catalog: Sequence[tuple[str, str]]) -> tuple[ToolInfo, ...]:
        return tuple(ToolInfo(name=n, replay=r) for n, r in catalog)

    def initial(self) -> Node:
        """A store with the root conversation: Opened on an empty store,
        then the host's root request, committed (journal row 1)."""
        catalog = self.bounds.tools
        opened = Opened(now=NOW, next_id=1, next_seq=1, catalog=self.catalog_info(catalog))
        s1 = self.step(State(), opened)
        root = RootRequested(now=NOW, ticket=1, agent=AgentConfig(model=MODEL))
        s2 = self.step(s1.state, root)
        node = Node(core=s2.state, outbox=s2.effects, records=(), next_id=1, next_seq=1, inflight=(),
                    catalog=catalog, runs=(), settles=(), crashes=0, aborts=0, started=frozenset(),
                    terminal_at_start=frozenset(), pending=(opened, root), journal=())
        while node.outbox:  # no crash inside the preamble
            node = self.execute(node)
        return node

    # --- the moves --------------------------------------------------------

    def moves(self, node: Node) -> Iterator[tuple[str, Node]]:
        if node.outbox:
            yield f"execute {node.outbox[0].TAG}", self.execute(node)
        else:
            for label, event, flight in self.events(node):
                yield label, self.feed(node, event, flight)
        if node.crashes < self.bounds.crashes:
            for catalog in self.catalogs():
                yield f"crash; open with {dict(catalog)}", self.crash(node, catalog)

    def catalogs(self) -> list[tuple[tuple[str, str], ...]]:
        base = self.bounds.tools
        if not self.bounds.redeclare:
            return [base]
        return [base, tuple((n, "safe") for n, _ in base)]

    def execute(self, node: Node) -> Node:
        effect, rest = node.outbox[0], node.outbox[1:]
        node = attrs.evolve(node, outbox=rest)
        store = node.store()
        match effect:
            case Commit():
                return self.commit(node, store, effect)
            case CallModel():
                self.check_act(node, store, effect, "request", attempt=effect.attempt)
                flight = Flight(what="model", task_id=effect.task_id, attempt=effect.attempt)
                return self.start(node, flight, ("CallModel", effect.task_id, effect.attempt))
            case PrepareTool():
                self.check_act(node, store, effect, None)
                flight = Flight(what="prepare", task_id=effect.task_id, name=effect.name)
                return self.start(node, flight, ("PrepareTool", effect.task_id))
            case RunTool():
                self.check_act(node, store, effect, "execute", arguments=effect.arguments)
                flight = Flight(what="tool", task_id=effect.task_id, name=effect.name, arguments=codec.dumps(effect.arguments))
                runs = Counter(dict(node.runs))
                runs[(effect.name, effect.task_id)] += 1
                node = attrs.evolve(node, runs=tuple(sorted(runs.items())))
                return self.start(node, flight, ("RunTool", effect.task_id))
            case Cancel():
                return attrs.evolve(node, inflight=tuple(f for f in node.inflight if f.task_id != effect.task_id))
            case Respond():
                return node
        raise Violation(f"the twin does not model effect {effect!r} (unexpected at these bounds)")

    def start(self, node: Node, flight: Flight, key: tuple[Any, ...]) -> Node:
        if key in node.started:
            raise Violation(f"OneInvocationPerTask: {key} started twice in one life")
        return attrs.evolve(node, inflight=tuple(sorted({*node.inflight, flight}, key=repr)),
                            started=node.started | {key})

    def check_act(self, node: Node, store: dict[tuple[str, int], Any], effect: Any, phase: str | None,
                  attempt: int | None = None, arguments: Any = None) -> None:
        name = type(effect).__name__
        put = store.get(("task", effect.task_id))
        task = None if put is None else put.task
        if effect.task_id in node.terminal_at_start or (task is not None and task.status is TaskStatus.TERMINAL):
            raise Violation(f"TerminalNeverRuns: {name} for task {effect.task_id}, terminal in the store")
        if phase is None:
            return
        rule = "IntentBeforeRequest" if phase == "request" else "IntentBeforeEffect"
        cp = None if task is None else task.checkpoint
        if cp is None or cp.get("phase") != phase:
            raise Violation(f"{rule}: {name} for task {effect.task_id} while the store holds checkpoint {cp}")
        if attempt is not None and cp.get("attempt") != attempt:
            raise Violation(f"{rule}: {name} attempt {attempt}, the store holds {cp}")
        if arguments is not None and cp.get("arguments") != arguments:
            raise Violation(f"{rule}: {name} with arguments {arguments}, the store holds {cp}")

    def commit(self, node: Node, store: dict[tuple[str, int], Any], c: Commit) -> Node:
        if c.seq != node.next_seq:
            raise Violation(f"commit seq {c.seq}, expected {node.next_seq}")
        settles = Counter(dict(node.settles))
        for w in c.writes:
            key = write_key(w)
            address = builtin_address(w.document_id) if isinstance(w, PutDocument) else None
            if address is not None:  # a built-in (core/builtins.py): its value, deltas and history as stored
                store[("builtin", w.document_id)] = store_view.revised(store.get(("builtin", w.document_id)), c.seq, w.revision)
                continue
            if isinstance(w, PutTask):
                before = store.get(key)
                if before is not None and before.task.status is TaskStatus.TERMINAL and before.task != w.task:
                    raise Violation(f"TerminalNeverRuns: commit {c.seq} changes terminal task {w.task.id}")
            if key[0] == "submission" and w.submission.settled:  # type: ignore[union-attr]
                settles[w.submission.id] += 1  # type: ignore[union-attr]
            store[key] = w
        fmt = codec.FORMAT_VERSION  # the writes as JSON (not a digest), in today's format (its built-ins are documents)
        row = JournalRow(seq=c.seq, format=fmt, events=codec.events_json(node.pending, fmt), writes=codec.writes_json(c.writes, fmt))
        return attrs.evolve(node, records=tuple(sorted(store.items())), next_seq=c.seq + 1, next_id=node.core.next_id,
                            settles=tuple(sorted(settles.items())), pending=(), journal=(*node.journal, row))

    def events(self, node: Node) -> Iterator[tuple[str, Event, Flight | None]]:
        b = self.bounds
        for f in node.inflight:
            tid = TaskId(f.task_id)
            if f.what == "model":
                yield f"model {f.task_id} answers", ModelResponded(now=NOW, task_id=tid, attempt=f.attempt, text="done"), f
                if self.rounds(node) < b.max_rounds:
                    for names in self.batches():
                        calls = tuple(ToolCall(id=f"t{f.task_id}c{i}", name=n, arguments={"i": i})
                                      for i, n in enumerate(names, 1))
                        yield (f"model {f.task_id} calls {list(names)}",
                               ModelResponded(now=NOW, task_id=tid, attempt=f.attempt, tool_calls=calls), f)
                if b.model_errors:
                    yield f"model {f.task_id} fails", ModelFailed(now=NOW, task_id=tid, attempt=f.attempt, message="boom"), f
            elif f.what == "prepare":
                call = self.call_of(node, f.task_id)
                replay = dict(node.catalog)[f.name]
                yield (f"tool {f.task_id} prepared ({replay})",
                       ToolPrepared(now=NOW, task_id=tid, arguments=dict(call.arguments), replay=replay), f)
            else:
                yield f"tool {f.task_id} finishes", ToolFinished(now=NOW, task_id=tid, text=f"{f.name} ok"), f
                if b.tool_failures:
                    yield f"tool {f.task_id} fails", ToolFailed(now=NOW, task_id=tid, message=f"{f.name} exploded"), f
        submitted = self.submitted(node)
        if submitted < b.inputs:
            modes = ("follow_up",) if submitted == 0 else ("follow_up", "steer")
            for mode in modes:
                ev = InputSubmitted(now=NOW, ticket=100 + submitted, conversation_id=ROOT,
                                    content=f"input {submitted + 1}", when_busy=mode)
                yield f"host submits input {submitted + 1} ({mode})", ev, None
        if node.aborts < b.aborts and self.busy(node):
            yield "host aborts", ConversationAbortRequested(now=NOW, ticket=200 + node.aborts, conversation_id=ROOT), None

    def batches(self) -> list[tuple[str, ...]]:
        names = [n for n, _ in self.bounds.tools]
        out: list[tuple[str, ...]] = [(n,) for n in names]
        if self.bounds.max_batch >= 2:
            out += [(a, b) for a in names for b in names]
        return out

    def feed(self, node: Node, event: Event, flight: Flight | None) -> Node:
        inflight = node.inflight if flight is None else tuple(f for f in node.inflight if f != flight)
        st = self.step(node.core, event)
        aborts = node.aborts + isinstance(event, ConversationAbortRequested)
        return attrs.evolve(node, core=st.state, outbox=st.effects, inflight=inflight, aborts=aborts,
                            pending=(*node.pending, event))

    def crash(self, node: Node, catalog: tuple[tuple[str, str], ...]) -> Node:
        store = node.store()
        opened = opened_from(store, next_id=node.next_id, next_seq=node.next_seq, now=NOW,
                             catalog=self.catalog_info(catalog))
        st = self.step(State(), opened)
        terminal = frozenset(w.task.id for k, w in store.items() if k[0] == "task" and w.task.status is TaskStatus.TERMINAL)
        return attrs.evolve(node, core=st.state, outbox=st.effects, inflight=(), catalog=catalog,
                            crashes=node.crashes + 1, started=frozenset(), terminal_at_start=terminal,
                            pending=(opened,))

    # --- reading a node ---------------------------------------------------

    def call_of(self, node: Node, task_id: int) -> ToolCall:
        task = node.core.tasks[TaskId(task_id)]
        for e in node.store().values():
            if getattr(e, "TAG", "") == "entry" and e.entry.id == task.input["assistant"]:
                return next(c for c in e.entry.tool_calls if c.id == task.input["call_id"])
        raise Violation(f"tool task {task_id}: its assistant entry is not stored")

    def rounds(self, node: Node) -> int:
        """Tool rounds so far, as the core sees them (stored, or just stepped)."""
        ids = {t.input.get("assistant") for t in node.core.tasks.values() if t.kind == "pi.tool"}
        ids |= {w.entry.id for k, w in node.records if k[0] == "entry" and w.entry.tool_calls}
        return len(ids)

    def submitted(self, node: Node) -> int:
        """Inputs the core knows of (a crash loses those not committed: the
        host submits them again)."""
        subs = {k[1] for k, _ in node.records if k[0] == "submission"}
        for ev in node.pending:
            if isinstance(ev, InputSubmitted):
                subs.add(-ev.ticket)
        return len(subs)

    def busy(self, node: Node) -> bool:
        conv = node.core.conversations[ROOT]
        return conv.live.run is not None or bool(conv.inbox)

    # --- the invariants ---------------------------------------------------

    def check(self, node: Node) -> None:
        view = node.view()
        for sid, n in node.settles:
            if n > 1:
                raise Violation(f"SubmissionsSettleOnce: submission {sid} settled {n} times")
        invariants.unsafe_tool_runs_at_most_once(dict(node.runs), [n for n, r in self.bounds.tools if r == "unsafe"])
        view.check_results_so_far()
        subs = view.submissions()
        if all(s.settled for s in subs):
            invariants.nothing_live_after_settlement(view)

    def check_journal(self, node: Node) -> None:
        view = node.view()
        invariants.journal_invariants(view)
        invariants.queued_input_placed_at_most_once(view)
        invariants.withdrawn_input_never_placed(view)
        invariants.memo_never_changes(view)

    def check_quiescent(self, node: Node, view: StoreView) -> None:
        """Nothing but the host or a crash can move on: every admitted input
        settled (or stranded: queued behind a run that failed or was aborted,
        waiting for the host's next submission), every abort drained."""
        conv = node.core.conversations[ROOT]
        for s in view.submissions():
            stranded = s.status == "queued" and conv.live.run is None
            if not s.settled and not stranded:
                raise Violation(f"EveryInputSettles: submission {s.id} is {s.status} and nothing can move")
        marked = [t.id for t in view.tasks(live_only=True) if t.abort_requested]
        if marked:
            raise Violation(f"AbortDrains: marked tasks {marked} are live and nothing can move")
        if all(s.settled for s in view.submissions()):
            invariants.submissions_settle_once(view)
            invariants.one_result_per_call(view.entries(ROOT))
            invariants.context_pairs_calls_with_results(view)
            if self.submitted(node) == self.bounds.inputs and not self.busy(node):
                # the end of a behaviour (only a crash could follow): its
                # whole journal replays through the core byte for byte
                invariants.replay_is_deterministic(view)

    # --- the search -------------------------------------------------------

    def run(self) -> Result:
        t0 = time.monotonic()
        result = Result()
        first = self.initial()
        seen: dict[bytes, tuple[bytes | None, str]] = {first.key(): (None, "open, root")}
        frontier = [(first.key(), first)]
        depth = 0
        self.guard(first.key(), seen, lambda: self.check(first))
        while frontier and not result.max_states_hit:
            nxt: list[tuple[bytes, Node]] = []
            for key, node in frontier:
                succ = list(self.guard_moves(key, node, seen))
                quiescent = not node.outbox and not node.inflight and all(
                    label.startswith(("host", "crash")) for label, _ in succ)
                if quiescent:
                    result.quiescent += 1
                    self.guard(key, seen, lambda: self.check_quiescent(node, node.view()))
                for label, child in succ:
                    result.transitions += 1
                    k = child.key()
                    if k in seen:
                        continue
                    seen[k] = (key, label)
                    self.guard(k, seen, lambda: self.check(child))
                    if child.journal is not node.journal:
                        self.guard(k, seen, lambda: self.check_journal(child))
                    nxt.append((k, child))
                    if len(seen) >= self.max_states:
                        result.max_states_hit = True
                        break
                if result.max_states_hit:
                    break
            frontier = nxt
            depth += 1 if frontier else 0
        result.states = len(seen)
        result.depth = depth
        result.seconds = time.monotonic() - t0
        return result

    def guard_moves(self, key: bytes, node: Node, seen: dict[bytes, tuple[bytes | None, str]]) -> Iterator[tuple[str, Node]]:
        it = self.moves(node)
        while True:
            try:
                label, child = next(it)
            except StopIteration:
                return
            except AssertionError as e:
                raise Violation(f"{e}\nbehaviour:\n{self.story(key, seen)}") from None
            yield label, child

    def guard(self, key: bytes, seen: dict[bytes, tuple[bytes | None, str]], check: Callable[[], None]) -> None:
        try:
            check()
        except AssertionError as e:
            raise Violation(f"{e}\nbehaviour:\n{self.story(key, seen)}") from None

    def story(self, key: bytes | None, seen: dict[bytes, tuple[bytes | None, str]]) -> str:
        labels = []
        while key is not None and key in seen:
            key, label = seen[key]
            labels.append(label)
        return "\n".join(f"  {n}. {label}" for n, label in enumerate(reversed(labels), 1))


__all__ = ["Bounds", "DEEP", "DEFAULT", "Explorer", "Result", "Violation", "bounds_from_env", "EntryKind"]
