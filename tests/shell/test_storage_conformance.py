"""One conformance suite for every storage adapter (memory, SQLite, JSONL,
PostgreSQL).

Each test builds commits directly from core records, writes and events (no
runtime involved), so a failure points at the adapter, not at the core. The
``adapter`` fixture yields a small handle that can open the store, "reopen" it
as a new process would (memory: the same object after ``close``; SQLite: a new
``SqliteStorage`` on the same file; JSONL: a new ``JsonlStorage`` on the same
directory; PostgreSQL: a new ``PostgresStorage`` on the same schema of the
session's throwaway server, tests/pg_server.py) and try a second concurrent
open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from pidurable.core.effects import (
    DocumentRevision,
    PutDocument,
    RevisionAction,
    PutAgent,
    PutConversation,
    PutEntry,
    PutInbox,
    PutContext,
    PutLive,
    PutSubmission,
    PutTask,
    PutUsage,
    WRITE_TYPES,
    Write,
)
from pidurable.core.fork_events import ForkPoint, ForkRequested, PointStatus
from pidurable.core.events import (
    Event,
    InputSubmitted,
    ModelResponded,
    Opened,
    RootRequested,
    ToolFinished,
)
from pidurable.core.model import (
    COMPACTION,
    GENERATION,
    TOOL,
    AgentConfig,
    Conversation,
    ConversationId,
    Entry,
    EntryId,
    EntryKind,
    ModelRef,
    Outcome,
    OutcomeStatus,
    Submission,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    TaskStatus,
    ToolCall,
    ToolInfo,
    Usage,
)
from pidurable.core.state import (
    DocHistory,
    DocScope,
    DocumentState,
    ForkPolicy,
    ContextDoc,
    AGENT_DOC,
    INBOX_DOC,
    LIVE_DOC,
    ConvState,
    InboxItem,
    Live,
    RunInfo,
    ToolSlot,
    UsageDoc,
    UsageTotals,
)
from pidurable.shell.storage import JsonlStorage, MemoryStorage, SqliteStorage, StorageError, StoreFenced, StoreLocked
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import as_stored

# --- sample records ------------------------------------------------------------

C1 = ConversationId(1)
C2 = ConversationId(10)

CONV1 = Conversation(id=C1)
CONV2 = Conversation(id=C2, owner_task_id=TaskId(7))

AGENT = AgentConfig(
    model=ModelRef("scripted", "m1"),
    cwd="/work",
    instructions="be brief",
    tools=("read", "bash"),
    tool_execution="sequential",
)
AGENT_V2 = attrs.evolve(AGENT, instructions="be thorough", tools=None)
LIVE = Live(
    run=RunInfo(task_id=TaskId(5), inputs=(SubmissionId(3),)),
    tools=(ToolSlot(call_id="c0", name="read", task_id=TaskId(7), status="running"),),
    attempt=2,
)
INBOX = (InboxItem(submission_id=SubmissionId(9), mode="follow_up", content="later, please"),)

USER = Entry(id=EntryId(4), conversation_id=C1, kind=EntryKind.USER, text="hi ü", at=10)
CALL = ToolCall(id="c0", name="read", arguments={"path": "a.txt", "n": [1, 2.5, None, True], "o": {"k": "v"}})
ASSISTANT = Entry(
    id=EntryId(6),
    conversation_id=C1,
    kind=EntryKind.ASSISTANT,
    tool_calls=(CALL,),
    stop_reason="tool_use",
    usage=Usage(input_tokens=3, output_tokens=4),
    by_task_id=TaskId(5),
    at=20,
    data={"nested": {"x": [1, "two"]}},
)
RESULT = Entry(
    id=EntryId(8),
    conversation_id=C1,
    kind=EntryKind.TOOL_RESULT,
    text="boom",
    tool_call_id="c0",
    tool_name="read",
    is_error=True,
    by_task_id=TaskId(7),
    at=30,
)
CHILD_ENTRY = Entry(id=EntryId(12), conversation_id=C2, kind=EntryKind.SYSTEM, text="child system")

PLACED = Submission(
    id=SubmissionId(3),
    conversation_id=C1,
    type="input",
    status=SubmissionStatus.PLACED,
    request_id="r1",
    entry_id=EntryId(4),
)
QUEUED = Submission(id=SubmissionId(9), conversation_id=C1, type="input", status=SubmissionStatus.QUEUED, request_id="r2")
# The highest id in the store is this settled submission: load() must count it.
SETTLED = Submission(
    id=SubmissionId(15),
    conversation_id=C2,
    type="write",
    status=SubmissionStatus.UNANSWERED,
    request_id="r1",
    reason="aborted",
    detail="withdrawn",
)

GEN_PENDING = Task(id=TaskId(5), conversation_id=C1, kind=GENERATION, checkpoint={"phase": "prepare", "attempt": 1})
GEN_WAITING = attrs.evolve(
    GEN_PENDING,
    status=TaskStatus.WAITING,
    checkpoint={"phase": "tools", "assistant": 6, "tools": [7], "pending": []},
    on=(TaskId(7),),
    started_at=11,
)
TOOL_RUNNING = Task(
    id=TaskId(7),
    conversation_id=C1,
    kind=TOOL,
    input={"assistant": 6, "call_id": "c0", "name": "read"},
    owner=TaskId(5),
    status=TaskStatus.RUNNING,
    checkpoint={"phase": "execute", "arguments": {"path": "a.txt"}, "replay": "safe"},
    memos={"m": {"v": 1}},
    started_at=21,
)
TOOL_DONE = attrs.evolve(
    TOOL_RUNNING,
    status=TaskStatus.TERMINAL,
    outcome=Outcome(status=OutcomeStatus.FAILED, result={"entry_id": 8}, error={"message": "Tool read threw"}),
    ended_at=31,
)
TERMINAL = Task(
    id=TaskId(14),
    conversation_id=C2,
    kind=COMPACTION,
    version=2,
    background=True,
    abort_requested=True,
    status=TaskStatus.TERMINAL,
    checkpoint={"phase": "done"},
    outcome=Outcome(status=OutcomeStatus.ABORTED),
    ended_at=99,
)

EV_ROOT = RootRequested(now=1, ticket=1, agent=AGENT)
EV_INPUT = InputSubmitted(now=2, ticket=2, conversation_id=C1, content="hi ü", request_id="r1", existing=SETTLED)
EV_MODEL = ModelResponded(
    now=3, task_id=TaskId(5), attempt=1, tool_calls=(CALL,), stop_reason="tool_use", usage=Usage(input_tokens=3)
)
EV_OPENED = Opened(
    now=4,
    next_id=5,
    next_seq=3,
    conversations=(ConvState(conversation=CONV1, agent=AGENT, live=LIVE, inbox=INBOX),),
    tasks=(GEN_WAITING,),
    submissions=(PLACED,),
    catalog=(ToolInfo(name="read", replay="safe"),),
    resume=False,
)

#: (seq, writes, events) of the sample history. Seqs have a gap on purpose:
#: next_seq is "last seq + 1", not "number of commits + 1".
HISTORY: list[tuple[int, list[Write], list[Event]]] = [
    (
        1,
        [
            PutConversation(conversation=CONV1),
            PutAgent(conversation_id=C1, agent=AGENT),
            PutLive(conversation_id=C1, live=Live()),
            PutInbox(conversation_id=C1, items=()),
        ],
        [EV_ROOT],
    ),
    (
        2,
        [
            PutEntry(entry=USER),
            PutSubmission(submission=PLACED),
            PutTask(task=GEN_PENDING),
            PutLive(conversation_id=C1, live=LIVE),
        ],
        [EV_INPUT],
    ),
    (
        3,
        [
            PutEntry(entry=ASSISTANT),
            PutTask(task=GEN_WAITING),
            PutTask(task=TOOL_RUNNING),
            PutConversation(conversation=CONV2),
            PutEntry(entry=CHILD_ENTRY),
            PutSubmission(submission=QUEUED),
            PutInbox(conversation_id=C1, items=INBOX),
            PutSubmission(submission=SETTLED),
            PutTask(task=TERMINAL),
        ],
        [EV_MODEL, EV_OPENED],
    ),
    # Entry 8 is committed after entry 12: reads must still order by id.
    (7, [PutEntry(entry=RESULT)], []),
]
LAST_SEQ = 7
MAX_ID = 15


# --- adapters ------------------------------------------------------------------


class Adapter:
    """Opens one kind of store and can reopen it as a new process would."""

    def __init__(self, kind: str, tmp_path: Path, pg: Any = None) -> None:
        self.kind = kind
        #: PostgreSQL: the server's DSN and this test's own schema
        self.pg = (pg.dsn, pg.fresh_schema()) if pg is not None else None
        self.path = tmp_path / ("store" if kind == "jsonl" else "store.sqlite")
        self.store: Any = None
        self._opened: list[Any] = []

    def open(self) -> Any:
        if self.kind == "memory":
            self.store = MemoryStorage() if self.store is None else self.store
        else:
            self.store = self._new()
            self._opened.append(self.store)
        return self.store

    def _new(self) -> Any:
        if self.pg is not None:
            from pidurable.shell.storage.postgres import PostgresStorage

            return PostgresStorage(self.pg[0], schema=self.pg[1])
        return JsonlStorage(self.path) if self.kind == "jsonl" else SqliteStorage(self.path)

    def reopen(self) -> Any:
        """Close the store and open it again (a new process life)."""
        self.store.close()
        if self.kind == "memory":
            return self.store
        return self.open()

    def second_open(self) -> Any:
        """Open the store again while ``self.store`` still holds it (after
        a ``load()``, as a harness does)."""
        if self.kind == "memory":
            return self.store.load()
        other = self._new()
        self._opened.append(other)
        return other

    def close_all(self) -> None:
        for s in self._opened:
            s.close()


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Adapter]:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    a = Adapter(request.param, tmp_path, pg)
    yield a
    a.close_all()


def populate(store: Any, history: Sequence[tuple[int, Sequence[Write], Sequence[Event]]] = HISTORY) -> None:
    for seq, writes, events in history:
        store.commit(seq, writes, events)


def snapshot(store: Any) -> dict[str, Any]:
    """Everything a reader can see, for before/after comparisons."""
    convs = store.conversations()
    cids = sorted({c.id for c in convs} | {C1, C2})
    return {
        "conversations": convs,
        "entries": {cid: store.entries(cid) for cid in cids},
        "submissions": store.submissions(),
        "tasks": store.tasks(),
        "documents": {(cid, k): store.document(cid, k) for cid in cids for k in (AGENT_DOC, LIVE_DOC, INBOX_DOC)},
        "journal": store.journal(),
    }


# --- round trips ---------------------------------------------------------------


def test_every_record_type_reads_back_equal(adapter: Adapter) -> None:
    """Every record and document written by a commit reads back equal to what was written."""
    store = adapter.open()
    populate(store)

    assert store.conversation(C1) == CONV1
    assert store.conversation(C2) == CONV2
    assert store.conversations() == [CONV1, CONV2]
    for e in (USER, ASSISTANT, RESULT, CHILD_ENTRY):
        assert store.entry(e.id) == e
    assert store.submission(PLACED.id) == PLACED
    assert store.submission(QUEUED.id) == QUEUED
    assert store.submission(SETTLED.id) == SETTLED
    assert store.task(GEN_WAITING.id) == GEN_WAITING
    assert store.task(TOOL_RUNNING.id) == TOOL_RUNNING
    assert store.task(TERMINAL.id) == as_stored(TERMINAL)
    assert store.document(C1, AGENT_DOC) == AGENT
    assert store.document(C1, LIVE_DOC) == LIVE
    assert store.document(C1, INBOX_DOC) == INBOX


def test_absent_records_read_as_none(adapter: Adapter) -> None:
    """Reading an id or document that was never written gives None or an empty list, not an error."""
    store = adapter.open()
    populate(store)
    assert store.entry(EntryId(999)) is None
    assert store.submission(SubmissionId(999)) is None
    assert store.task(TaskId(999)) is None
    assert store.conversation(ConversationId(999)) is None
    assert store.document(C2, LIVE_DOC) == Live()  # a built-in never stored reads as its initial value (core/builtins.py)
    assert store.entries(ConversationId(999)) == []
    assert store.tasks(ConversationId(999)) == []


def test_upsert_replaces_tasks_submissions_and_documents(adapter: Adapter) -> None:
    """A later write of the same task, submission or document replaces the earlier one everywhere it is read."""
    store = adapter.open()
    populate(store)
    done = attrs.evolve(QUEUED, status=SubmissionStatus.DONE, entry_id=EntryId(16), answer_entry_id=EntryId(17))
    live2 = Live(run=RunInfo(task_id=TaskId(5), inputs=(SubmissionId(3), SubmissionId(9))))
    store.commit(
        8,
        [
            PutTask(task=TOOL_DONE),
            PutSubmission(submission=done),
            PutAgent(conversation_id=C1, agent=AGENT_V2),
            PutLive(conversation_id=C1, live=live2),
            PutInbox(conversation_id=C1, items=()),
        ],
        [ToolFinished(now=5, task_id=TaskId(7), text="ok")],
    )

    assert store.task(TOOL_DONE.id) == as_stored(TOOL_DONE)
    assert [t for t in store.tasks() if t.id == TOOL_DONE.id] == [as_stored(TOOL_DONE)]
    assert store.submission(done.id) == done
    assert [s for s in store.submissions() if s.id == done.id] == [done]
    assert store.submission_by_request(C1, "r2") == done
    assert store.document(C1, AGENT_DOC) == AGENT_V2
    assert store.document(C1, LIVE_DOC) == live2
    assert store.document(C1, INBOX_DOC) == ()

    loaded = store.load()
    assert [t.id for t in loaded.tasks] == [GEN_WAITING.id]
    assert [s.id for s in loaded.submissions] == [PLACED.id]
    # the whole-value writes of older journals are bases of the built-ins (core/builtins.py)
    stored = {"pi.agent": 0, "pi.live": 0, "pi.inbox": 0}
    assert loaded.conversations[0] == ConvState(conversation=CONV1, agent=AGENT_V2, live=live2, inbox=(), stored=stored)


# --- load ----------------------------------------------------------------------


def test_load_of_an_empty_store(adapter: Adapter) -> None:
    """An empty store loads with nothing live, next_id 2 (id 1 is the root) and next_seq 1."""
    loaded = adapter.open().load()
    assert loaded.conversations == ()
    assert loaded.tasks == ()
    assert loaded.submissions == ()
    assert loaded.next_id == 2
    assert loaded.next_seq == 1
    assert isinstance(loaded.store_id, str) and loaded.store_id


def test_load_returns_only_live_records_and_the_counters(adapter: Adapter) -> None:
    """load() returns every conversation with its documents, only live tasks and unsettled submissions, next_id = max id + 1 and next_seq = last seq + 1."""
    store = adapter.open()
    populate(store)
    loaded = store.load()
    # each whole-value write of an older journal is a base of its built-in (core/builtins.py)
    assert {k: n for k, n in loaded.conversations[0].stored.items() if k != "pi.usage" and k != "pi.context"} == {
        "pi.agent": 0, "pi.live": 0, "pi.inbox": 0
    }
    assert tuple(attrs.evolve(c, stored={}) for c in loaded.conversations) == (
        ConvState(conversation=CONV1, agent=AGENT, live=LIVE, inbox=INBOX),
        ConvState(conversation=CONV2),  # absent documents load as their initial values
    )
    assert loaded.tasks == (GEN_WAITING, TOOL_RUNNING)
    assert loaded.submissions == (PLACED, QUEUED)
    assert loaded.next_id == MAX_ID + 1
    assert loaded.next_seq == LAST_SEQ + 1


def test_next_id_counts_entries_and_terminal_tasks(adapter: Adapter) -> None:
    """next_id is above the highest id of ANY record, including entries and terminal tasks that load() does not return."""
    store = adapter.open()
    store.commit(1, [PutConversation(conversation=CONV1)], [])
    store.commit(2, [PutEntry(entry=attrs.evolve(USER, id=EntryId(40)))], [])
    store.commit(3, [PutTask(task=attrs.evolve(TERMINAL, id=TaskId(30), conversation_id=C1))], [])
    loaded = store.load()
    assert loaded.tasks == ()
    assert loaded.next_id == 41
    assert loaded.next_seq == 4


# --- reads ---------------------------------------------------------------------


def test_entries_filter_by_conversation_and_upto_and_order_by_id(adapter: Adapter) -> None:
    """entries(conversation, upto) returns only that conversation's entries with id <= upto, ordered by id whatever the commit order."""
    store = adapter.open()
    populate(store)
    assert store.entries(C1) == [USER, ASSISTANT, RESULT]
    assert store.entries(C1, upto=8) == [USER, ASSISTANT, RESULT]
    assert store.entries(C1, upto=7) == [USER, ASSISTANT]
    assert store.entries(C1, upto=6) == [USER, ASSISTANT]
    assert store.entries(C1, upto=4) == [USER]
    assert store.entries(C1, upto=3) == []
    assert store.entries(C2) == [CHILD_ENTRY]
    assert store.entries(C2, upto=11) == []


def test_submission_by_request_is_scoped_to_the_conversation(adapter: Adapter) -> None:
    """submission_by_request finds the submission with that request id in that conversation only."""
    store = adapter.open()
    populate(store)
    assert store.submission_by_request(C1, "r1") == PLACED
    assert store.submission_by_request(C2, "r1") == SETTLED
    assert store.submission_by_request(C1, "r2") == QUEUED
    assert store.submission_by_request(C2, "r2") is None
    assert store.submission_by_request(C1, "nope") is None


def test_submissions_and_tasks_filter_by_conversation_and_liveness(adapter: Adapter) -> None:
    """submissions(conversation) and tasks(conversation, live_only) filter as asked and order by id."""
    store = adapter.open()
    populate(store)
    assert store.submissions() == [PLACED, QUEUED, SETTLED]
    assert store.submissions(C1) == [PLACED, QUEUED]
    assert store.submissions(C2) == [SETTLED]
    assert store.tasks() == [GEN_WAITING, TOOL_RUNNING, as_stored(TERMINAL)]
    assert store.tasks(live_only=True) == [GEN_WAITING, TOOL_RUNNING]
    assert store.tasks(C1) == [GEN_WAITING, TOOL_RUNNING]
    assert store.tasks(C1, live_only=True) == [GEN_WAITING, TOOL_RUNNING]
    assert store.tasks(C2) == [as_stored(TERMINAL)]
    assert store.tasks(C2, live_only=True) == []


def test_journal_holds_the_events_and_writes_of_each_commit(adapter: Adapter) -> None:
    """Each commit leaves one journal row whose JSON decodes to exactly its events and writes, tagged by wire TAG."""
    store = adapter.open()
    populate(store)
    rows = store.journal()
    assert [r.seq for r in rows] == [seq for seq, _, _ in HISTORY]
    for row, (_, writes, events) in zip(rows, HISTORY, strict=True):
        ev_data = codec.loads(row.events)
        assert [codec.event_from_data(d) for d in ev_data] == list(events)
        assert [d["type"] for d in ev_data] == [type(e).TAG for e in events]
        # a lean (format 3) row keeps a digest of exactly these writes' JSON
        assert row.format == codec.FORMAT_VERSION == 4
        assert row.writes == codec.writes_digest(codec.writes_json(writes))
        wr_data = codec.loads(codec.writes_json(writes))
        assert [codec.write_from_data(d) for d in wr_data] == list(writes)
        assert [d["type"] for d in wr_data] == [type(w).TAG for w in writes]


TODO_BASE = DocumentRevision(
    scope=DocScope.CONVERSATION,
    owner=C1,
    kind="todo",
    version=1,
    history=DocHistory.REWINDABLE,
    fork=ForkPolicy.AS_OF,
    action=RevisionAction.BASE,
    value={"items": []},
)
TODO_DELTA = attrs.evolve(
    TODO_BASE, action=RevisionAction.DELTA, value=None, ops=(["p", ["items"], 0, 0, [{"text": "milk ü"}]],)
)

#: The sample history plus a usage document: every write type once at least.
USAGE = UsageDoc(
    models={"scripted:m1": UsageTotals(input_tokens=3, output_tokens=4, calls=1)},
    tools={"read": UsageTotals(calls=2)},
)
GOLDEN_HISTORY = [
    *HISTORY,
    (8, [PutUsage(conversation_id=C1, usage=USAGE)], []),
    # appended with pi.context (issue 9): the earlier lines are unchanged
    (9, [PutContext(conversation_id=C1, context=ContextDoc(head=EntryId(8)))], []),
    # appended with host-defined documents (issue 10): a base, then a delta
    (10, [PutDocument(document_id=16, revision=TODO_BASE)], []),
    (11, [PutDocument(document_id=16, revision=TODO_DELTA)], []),
    # appended with forks (issue 10 item 2): a fork's record and its request
    (12, [PutConversation(conversation=Conversation(id=ConversationId(30), parent_id=C1, fork_at=EntryId(6)))], [
        ForkRequested(
            now=50, ticket=3, conversation_id=C1, at=EntryId(6), policies={"todo": ForkPolicy.CURRENT},
            point=ForkPoint(status=PointStatus.VISIBLE, seq=3, as_of=(DocumentState(
                id=16, scope=DocScope.CONVERSATION, owner=1, kind="todo", version=1, value={"items": []}),)),
        )
    ]),
]
#: The journal rows of GOLDEN_HISTORY as the schema-1 encoder wrote them
#: (recorded once, never regenerated): stores written since must replay.
GOLDEN_JOURNAL = Path(__file__).parent / "golden" / "journal_v1.jsonl"


def test_journal_text_is_byte_identical_to_the_recorded_one(adapter: Adapter) -> None:
    """The journal text of a fixed history covering every write type is, byte
    for byte, the recorded schema-1 text - the events as they were, and the
    writes' JSON (format 1 stored it; format 2 stores its digest, which must
    be the digest of exactly that text) - so stores written before replay
    equal."""
    golden = [json.loads(line) for line in GOLDEN_JOURNAL.read_text(encoding="utf-8").splitlines()]
    # the format-1 encoding (every field) is unchanged, byte for byte
    assert [(seq, codec.events_json(evs, 1), codec.writes_json(ws, 1)) for seq, ws, evs in GOLDEN_HISTORY] == [
        (g["seq"], g["events"], g["writes"]) for g in golden
    ]
    # a store written today (format 3) holds the same events and writes, leaner
    store = adapter.open()
    populate(store, GOLDEN_HISTORY)
    rows = store.journal()
    assert [r.seq for r in rows] == [g["seq"] for g in golden]
    for row, g, (_, ws, evs) in zip(rows, golden, GOLDEN_HISTORY, strict=True):
        assert [codec.event_from_data(d) for d in json.loads(row.events)] == [
            codec.event_from_data(d) for d in json.loads(g["events"])
        ]
        assert row.writes == codec.writes_digest(codec.writes_json(ws))
        assert [codec.write_from_data(d) for d in json.loads(codec.writes_json(ws))] == [
            codec.write_from_data(d) for d in json.loads(g["writes"])
        ]
        assert len(row.events) <= len(g["events"])


def test_a_writes_journal_form_is_the_converters_with_the_tag_first() -> None:
    """codec.encode_write encodes the record once and splices it into the
    journal object: the text equals the converter's ``{"type": TAG, **fields}``
    and the record equals the converter's encoding of the record field."""
    writes = [w for _, ws, _ in GOLDEN_HISTORY for w in ws]
    assert {type(w) for w in writes} == set(WRITE_TYPES)
    for w in writes:
        record, journal = codec.encode_write(w)
        assert journal == codec.dumps({"type": type(w).TAG, **codec.stored.unstructure(w)})
        field = attrs.fields(type(w))[-1].name
        assert record == codec.dumps(codec.stored.unstructure(getattr(w, field)))
        legacy_record, legacy_journal = codec.encode_write(w, 1)
        assert legacy_journal == codec.dumps({"type": type(w).TAG, **codec.converter.unstructure(w)})
    assert codec.writes_json(writes) == "[" + ",".join(codec.encode_write(w)[1] for w in writes) + "]"


# --- atomicity -----------------------------------------------------------------

_BAD_INPUT_TASK = Task(id=TaskId(20), conversation_id=C1, kind="custom", input={"tags": {"a", "b"}})
_NAN_TASK = Task(id=TaskId(20), conversation_id=C1, kind="custom", input={"x": float("nan")})
_GOOD_WRITES: list[Write] = [
    PutEntry(entry=Entry(id=EntryId(16), conversation_id=C1, kind=EntryKind.USER, text="new")),
    PutSubmission(submission=attrs.evolve(QUEUED, status=SubmissionStatus.DONE)),
    PutLive(conversation_id=C1, live=Live()),
    PutTask(task=TOOL_DONE),
]

UNENCODABLE: dict[str, tuple[list[Write], list[Event]]] = {
    # A good prefix, then one write that cannot be encoded: nothing may land.
    "set in task input": (_GOOD_WRITES + [PutTask(task=_BAD_INPUT_TASK)], []),
    "nan in task input": (_GOOD_WRITES + [PutTask(task=_NAN_TASK)], []),
    "nan in entry data": (
        _GOOD_WRITES + [PutEntry(entry=Entry(id=EntryId(21), conversation_id=C1, kind=EntryKind.USER, data={"x": float("inf")}))],
        [],
    ),
    # Every write is fine, but an event cannot be journaled.
    "nan in event": (
        _GOOD_WRITES,
        [ModelResponded(now=5, task_id=TaskId(5), attempt=1, tool_calls=(ToolCall(id="c", name="n", arguments={"x": float("nan")}),))],
    ),
}


@pytest.mark.parametrize("case", sorted(UNENCODABLE))
def test_unencodable_commit_raises_and_leaves_the_store_unchanged(adapter: Adapter, case: str) -> None:
    """A commit with a write or event that is not strict JSON raises, writes nothing (even after reopen), and its seq stays usable."""
    writes, events = UNENCODABLE[case]
    store = adapter.open()
    populate(store)
    before = snapshot(store)

    with pytest.raises((TypeError, ValueError)):
        store.commit(LAST_SEQ + 1, writes, events)

    assert snapshot(store) == before
    store = adapter.reopen()
    assert snapshot(store) == before
    assert store.load().next_seq == LAST_SEQ + 1
    # The failed commit consumed nothing: the same seq commits fine now.
    store.commit(LAST_SEQ + 1, _GOOD_WRITES, [])
    assert store.task(TOOL_DONE.id) == as_stored(TOOL_DONE)
    assert store.entry(EntryId(16)) is not None


def test_reusing_a_journal_seq_is_refused_and_writes_nothing(adapter: Adapter) -> None:
    """A commit whose seq is already journaled is refused as a whole: none of its writes land."""
    store = adapter.open()
    populate(store)
    before = snapshot(store)
    with pytest.raises((AssertionError, StorageError, sqlite3.IntegrityError)):
        store.commit(LAST_SEQ, _GOOD_WRITES, [])
    assert snapshot(store) == before
    assert snapshot(adapter.reopen()) == before


def test_entries_are_written_once(adapter: Adapter) -> None:
    """A commit that re-puts an existing entry id is refused as a whole, so a transcript is never rewritten."""
    store = adapter.open()
    populate(store)
    before = snapshot(store)
    rewritten = attrs.evolve(USER, text="rewritten history")
    with pytest.raises((StorageError, sqlite3.IntegrityError)):
        store.commit(LAST_SEQ + 1, [PutTask(task=TOOL_DONE), PutEntry(entry=rewritten)], [])
    assert snapshot(store) == before
    assert store.entry(USER.id) == USER


# --- fencing, ownership and reopening ------------------------------------------


def test_fenced_store_refuses_commits_and_writes_nothing(adapter: Adapter) -> None:
    """After fence() every commit raises StoreFenced and nothing reaches the store, while earlier commits survive a reopen."""
    store = adapter.open()
    populate(store)
    before = snapshot(store)
    store.fence()
    with pytest.raises(StoreFenced):
        store.commit(LAST_SEQ + 1, _GOOD_WRITES, [])
    with pytest.raises(StoreFenced):
        store.commit(LAST_SEQ + 2, [PutConversation(conversation=Conversation(id=ConversationId(50)))], [])
    assert snapshot(store) == before

    store = adapter.reopen()
    assert snapshot(store) == before
    store.load()
    store.commit(LAST_SEQ + 1, _GOOD_WRITES, [])  # a new life writes again
    assert store.task(TOOL_DONE.id) == as_stored(TOOL_DONE)


def test_reopen_after_close_sees_everything(adapter: Adapter) -> None:
    """Closing and reopening the store (a new process life) shows every record, document, journal row and the same store id."""
    store = adapter.open()
    populate(store)
    first = store.load()
    before = snapshot(store)

    store = adapter.reopen()
    assert snapshot(store) == before
    again = store.load()
    assert again == first
    assert again.store_id == first.store_id


def test_second_open_while_held_raises_store_locked(adapter: Adapter) -> None:
    """While one opener holds the store, a second open raises StoreLocked; after close the store opens again."""
    store = adapter.open()
    store.load()
    with pytest.raises(StoreLocked):
        adapter.second_open()
    store = adapter.reopen()
    store.load()



def test_entries_after_and_upto_bound_the_range(adapter: Adapter) -> None:
    """entries(conversation, upto=, after=) returns exactly the entries with after < id <= upto, oldest first."""
    store = adapter.open()
    populate(store)
    assert store.entries(C1, after=4) == [ASSISTANT, RESULT]
    assert store.entries(C1, after=4, upto=7) == [ASSISTANT]
    assert store.entries(C1, after=8) == []


def test_a_fork_reads_its_parents_entries_up_to_its_fork_point(adapter: Adapter) -> None:
    """Issue 10 item 2: a fork's record keeps its parent and fork point; its
    entries are the parent's up to the fork point (a fork of a fork: capped
    by the smaller point on the way down), then its own - nothing copied;
    ``after``/``upto`` bound the merged range; ``entry_seq`` names the commit
    that stored an entry."""
    store = adapter.open()
    populate(store)  # C1: USER 4 (seq 1), ASSISTANT 6, RESULT 8
    fork = Conversation(id=ConversationId(20), parent_id=C1, fork_at=EntryId(6))
    own = Entry(id=EntryId(21), conversation_id=fork.id, kind=EntryKind.USER, text="fork question")
    grand = Conversation(id=ConversationId(22), parent_id=fork.id, fork_at=EntryId(21))
    late = Entry(id=EntryId(23), conversation_id=C1, kind=EntryKind.USER, text="after the fork")
    store.commit(20, [PutConversation(conversation=fork), PutEntry(entry=own)], [])
    store.commit(21, [PutConversation(conversation=grand), PutEntry(entry=late)], [])
    store = adapter.reopen()
    assert store.conversation(fork.id) == fork
    assert store.lineage(grand.id) == ((grand.id, None), (fork.id, 21), (C1, 6))
    assert store.entries(fork.id) == [USER, ASSISTANT, own]
    assert store.entries(grand.id) == [USER, ASSISTANT, own]
    assert store.entries(fork.id, after=4, upto=20) == [ASSISTANT]
    assert store.entries(C1)[-1] == late and len(store.entries(C1)) == 4
    assert store.entry_seq(21) == 20 and store.entry_seq(4) is not None and store.entry_seq(999) is None


def test_old_event_tags_still_replay() -> None:
    """Issue 8: journals written before the request events were renamed
    (``conversation_created``, ``task_created``, ``task_committed``,
    ``agent_configured``) decode to today's classes."""
    from pidurable.core.events import (
        AgentConfigurationRequested,
        ConversationCreationRequested,
        TaskCommitRequested,
        TaskCreationRequested,
    )

    old = [
        {"type": "conversation_created", "now": 1, "ticket": 1, "owner_task_id": None, "agent": None},
        {"type": "task_created", "now": 1, "ticket": 2, "kind": "k", "conversation_id": 1, "input": {},
         "checkpoint": {"phase": "a"}, "version": 1, "owner": None, "background": False},
        {"type": "task_committed", "now": 1, "ticket": 3, "task_id": 5, "status": "running",
         "checkpoint": {"phase": "b"}, "on": [], "policy": "allSettled", "outcome": None, "mode": "run"},
        {"type": "agent_configured", "now": 1, "ticket": 4, "conversation_id": 1,
         "agent": {"model": None, "cwd": None, "instructions": None, "tools": None, "tool_execution": "parallel"}},
    ]
    decoded = [codec.event_from_data(d) for d in old]
    assert [type(e) for e in decoded] == [
        ConversationCreationRequested,
        TaskCreationRequested,
        TaskCommitRequested,
        AgentConfigurationRequested,
    ]
