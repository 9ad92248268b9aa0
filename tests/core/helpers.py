"""Helpers for the pure core tests: build states, feed events, read effects.

Nothing here imports Trio or storage. ``Store`` is a tiny dictionary model of
what the shell persists (the last write of each record wins), so a test can
"crash" after any step and build the ``Opened`` event a new process would see.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import attrs

from pidurable.core import State, Step, step
from pidurable.core.builtins import BUILTINS, builtin_address, builtin_id, legacy_writes
from pidurable.core.effects import Accepted, PutDocument, Refusal, Refused
from pidurable.core.effects import (
    Commit,
    PutConversation,
    PutEntry,
    PutSubmission,
    PutTask,
    Respond,
    write_key,
)
from pidurable.core.events import (
    Event,
    InputSubmitted,
    ModelFailed,
    ModelResponded,
    Opened,
    ToolFinished,
    ToolPrepared,
)
from pidurable.core.model import (
    GENERATION,
    ROOT_CONVERSATION_ID,
    TOOL,
    AgentConfig,
    Conversation,
    ConversationId,
    Entry,
    EntryKind,
    ModelRef,
    Submission,
    Task,
    TaskId,
    TaskStatus,
    ToolCall,
    ToolInfo,
)
from pidurable.core.state import LIVE_DOC, ConvState, Live

T = TypeVar("T")

MODEL = ModelRef("scripted", "m1")
ROOT = ROOT_CONVERSATION_ID


# --- building states ---------------------------------------------------------


def conv_state(
    cid: int = ROOT,
    *,
    model: ModelRef | None = MODEL,
    tool_execution: str = "parallel",
    live: Live | None = None,
    inbox: tuple[Any, ...] = (),
) -> ConvState:
    """A conversation as it would be loaded from storage."""
    return ConvState(
        conversation=Conversation(id=ConversationId(cid)),
        agent=AgentConfig(model=model, tool_execution=tool_execution),
        live=live if live is not None else Live(),
        inbox=inbox,
    )


def opened_event(
    *,
    conversations: Sequence[ConvState] | None = None,
    tasks: Sequence[Task] = (),
    submissions: Sequence[Submission] = (),
    catalog: Sequence[ToolInfo] = (),
    resume: bool = True,
    next_id: int | None = None,
    next_seq: int = 1,
    now: int = 0,
    **conv_kw: Any,
) -> Opened:
    convs = tuple(conversations) if conversations is not None else (conv_state(**conv_kw),)
    if next_id is None:
        ids = [c.id for c in convs] + [t.id for t in tasks] + [s.id for s in submissions]
        next_id = max([1, *ids]) + 1
    return Opened(
        now=now,
        next_id=next_id,
        next_seq=next_seq,
        conversations=convs,
        tasks=tuple(tasks),
        submissions=tuple(submissions),
        catalog=tuple(catalog),
        resume=resume,
    )


def opened_state(**kw: Any) -> State:
    """The state right after a process opened a store holding ``kw``
    (default: just the root conversation with a model configured)."""
    return step(State(), opened_event(**kw)).state


# --- feeding events ----------------------------------------------------------


def run_events(state: State, *events: Event) -> list[Step]:
    """Feed ``events`` one after the other; return every Step (chained)."""
    steps: list[Step] = []
    for ev in events:
        st = step(state, ev)
        steps.append(st)
        state = st.state
    return steps


_tickets = itertools.count(1000)


def submit(content: str = "hello", *, cid: int = ROOT, now: int = 10, ticket: int | None = None, **kw: Any) -> InputSubmitted:
    """A host ``submit`` (a fresh ticket unless one is given)."""
    if ticket is None:
        ticket = next(_tickets)
    return InputSubmitted(now=now, ticket=ticket, conversation_id=ConversationId(cid), content=content, **kw)


def answer(task_id: int, text: str = "done", *, attempt: int = 1, now: int = 20) -> ModelResponded:
    return ModelResponded(now=now, task_id=TaskId(task_id), attempt=attempt, text=text)


def calls(task_id: int, *names: str, attempt: int = 1, now: int = 20, prefix: str = "c") -> ModelResponded:
    """A model reply asking for one call per name (ids ``c1, c2, ...``)."""
    tool_calls = tuple(ToolCall(id=f"{prefix}{i}", name=n, arguments={"i": i}) for i, n in enumerate(names, 1))
    return ModelResponded(now=now, task_id=TaskId(task_id), attempt=attempt, text="", tool_calls=tool_calls)


def model_failed(task_id: int, message: str = "boom", *, attempt: int = 1, now: int = 20) -> ModelFailed:
    return ModelFailed(now=now, task_id=TaskId(task_id), attempt=attempt, message=message)


def prepared(task_id: int, *, replay: str = "unsafe", now: int = 30, **arguments: Any) -> ToolPrepared:
    return ToolPrepared(now=now, task_id=TaskId(task_id), arguments=arguments, replay=replay)


def finished(task_id: int, text: str = "ok", *, now: int = 40) -> ToolFinished:
    return ToolFinished(now=now, task_id=TaskId(task_id), text=text)


# --- reading a step ----------------------------------------------------------


def commits(st: Step) -> list[Commit]:
    return [e for e in st.effects if isinstance(e, Commit)]


def the_commit(st: Step) -> Commit:
    """The step's one Commit (fails the test if there is none or several)."""
    cs = commits(st)
    assert len(cs) == 1, f"expected exactly one Commit, got {len(cs)}: {st.effects}"
    assert st.effects[0] is cs[0], "the Commit must be the first effect"
    return cs[0]


def writes_of(st: Step, kind: type[T]) -> list[T]:
    """Every write of type ``kind`` in the step's commits, in order; the
    built-ins' revisions read as their whole values (``PutLive``...: the
    writes of journal formats 1-3, ``builtins.legacy_writes``)."""
    return [w for c in commits(st) for w in legacy_writes(c.writes, st.state) if isinstance(w, kind)]


def effects_of(st: Step, kind: type[T]) -> list[T]:
    return [e for e in st.effects if isinstance(e, kind)]


def kinds(st: Step) -> list[type]:
    """The classes of the effects, in order (for ordering assertions)."""
    return [type(e) for e in st.effects]


def put_tasks(st: Step) -> dict[int, Task]:
    return {w.task.id: w.task for w in writes_of(st, PutTask)}


def put_entries(st: Step) -> list[Entry]:
    return [w.entry for w in writes_of(st, PutEntry)]


def put_subs(st: Step) -> dict[int, Submission]:
    return {w.submission.id: w.submission for w in writes_of(st, PutSubmission)}


def put_live(st: Step, cid: int = ROOT) -> Live | None:
    """The conversation's ``pi.live`` as the step's commit stores it, if it does."""
    touched = any(
        isinstance(w, PutDocument) and w.document_id == builtin_id(cid, LIVE_DOC) for c in commits(st) for w in c.writes
    )
    return st.state.conversations[ConversationId(cid)].live if touched else None


def respond(st: Step) -> Respond:
    rs = effects_of(st, Respond)
    assert len(rs) == 1, st.effects
    return rs[0]


def only(items: Iterable[T]) -> T:
    items = list(items)
    assert len(items) == 1, items
    return items[0]


def live_tasks(state: State, kind: str | None = None) -> list[Task]:
    return [t for _, t in sorted(state.tasks.items()) if kind is None or t.kind == kind]


def generation(state: State) -> Task:
    """The one live generation task."""
    return only(live_tasks(state, GENERATION))


def tools(state: State) -> list[Task]:
    return live_tasks(state, TOOL)


# --- a model of the store, for crash / reopen ----------------------------------


class Store:
    """What the shell would have persisted: the last write of every record."""

    def __init__(self, state: State) -> None:
        self.records: dict[tuple[str, int], Any] = {}
        #: The conversations with their built-in documents as stored.
        self.convs: dict[int, ConvState] = {}
        self.next_id = state.next_id
        self.next_seq = state.next_seq
        for conv in state.conversations.values():
            self._put_conv(conv)

    def _put_conv(self, conv: ConvState) -> None:
        self.records[("conversation", conv.id)] = PutConversation(conversation=conv.conversation)
        self.convs[conv.id] = conv

    def apply(self, st: Step) -> None:
        for c in commits(st):
            assert c.seq == self.next_seq, "commits must carry consecutive sequence numbers"
            for w in c.writes:
                self.records[write_key(w)] = w
                if isinstance(w, PutConversation):
                    self.convs[w.conversation.id] = ConvState(conversation=w.conversation)
                address = builtin_address(w.document_id) if isinstance(w, PutDocument) else None
                if address is not None:  # the built-in as stored: its value and its count of deltas
                    cid, kind = address
                    now = st.state.conversations[cid]
                    field = BUILTINS[kind].field
                    old = self.convs[cid]
                    self.convs[cid] = attrs.evolve(
                        old, **{field: getattr(now, field), "stored": {**old.stored, kind: now.stored[kind]}}
                    )
            self.next_seq = c.seq + 1
            self.next_id = st.state.next_id

    def entries(self) -> list[Entry]:
        return sorted((w.entry for w in self.records.values() if isinstance(w, PutEntry)), key=lambda e: e.id)

    def tasks(self) -> list[Task]:
        return sorted((w.task for w in self.records.values() if isinstance(w, PutTask)), key=lambda t: t.id)

    def submissions(self) -> list[Submission]:
        return sorted(
            (w.submission for w in self.records.values() if isinstance(w, PutSubmission)), key=lambda s: s.id
        )

    def conversations(self) -> list[ConvState]:
        return [conv for _, conv in sorted(self.convs.items())]

    def opened(self, *, now: int, catalog: Sequence[ToolInfo] = (), resume: bool = True) -> Opened:
        """The ``Opened`` event of a new process on this store."""
        return Opened(
            now=now,
            next_id=self.next_id,
            next_seq=self.next_seq,
            conversations=tuple(self.conversations()),
            tasks=tuple(t for t in self.tasks() if t.status is not TaskStatus.TERMINAL),
            submissions=tuple(s for s in self.submissions() if not s.settled),
            catalog=tuple(catalog),
            resume=resume,
        )


def tool_results(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """Tool-result entries by call id."""
    out: dict[str, list[Entry]] = {}
    for e in entries:
        if e.kind is EntryKind.TOOL_RESULT:
            assert e.tool_call_id is not None
            out.setdefault(e.tool_call_id, []).append(e)
    return out


class Driver:
    """Feeds events one at a time, keeping the state and (optionally) a
    model of the store (``Store``), for tests that play a whole story."""

    def __init__(self, state: State, store: "Store | None" = None) -> None:
        self.state = state
        self.store = store

    def __call__(self, event: Event) -> Step:
        st = step(self.state, event)
        self.state = st.state
        if self.store is not None:
            self.store.apply(st)
        return st

    def value(self, event: Event) -> int:
        """Feed a host event and return the id it was answered with."""
        r = respond(self(event))
        assert isinstance(r.reply, Accepted), r
        assert r.reply.value is not None
        return r.reply.value
