"""The ``Storage`` protocol shared by every adapter, and its errors.

A storage holds the records (conversations, entries, submissions, tasks), the
per-conversation documents, and the journal (the events behind each commit).

- ``load()`` returns what the core needs at open: live records only, plus the
  id and sequence high-water marks. It never reads transcript bodies.
- ``commit(seq, writes, events)`` is ONE atomic transaction: all writes and the
  journal row, or nothing.
- reads (``entries``, ``submission``, ``task``...) serve the shell and hosts.

Methods are synchronous: a commit is short and bounded, and the runtime runs it
inline on the Trio thread (a thread hop per commit would triple step cost).
A store whose commit is a network round trip (PostgreSQL) also offers
``OffThreadCommits.commit_many_async``, which the reducer awaits instead.

Every adapter serializes records with the one codec and stores JSON text, so
the memory adapter behaves exactly like SQLite (a non-JSON value fails the
same way in both); the conformance suite in ``tests/shell`` runs against all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, assert_never, runtime_checkable

import attrs
import cattrs
from cattrs.errors import BaseValidationError

from pidurable.core.builtins import BUILTINS, builtin_address
from pidurable.core.builtins import base_revision as builtin_base
from pidurable.core.chord import OpError, rebuild
from pidurable.core.effects import (
    DocumentRevision,
    PutAgent,
    PutDocument,
    PutConversation,
    PutEntry,
    PutInbox,
    PutLive,
    PutSubmission,
    PutTask,
    PutUsage,
    PutContext,
    Write,
)
from pidurable.core.events import Event
from pidurable.core.model import (
    AgentConfig,
    Conversation,
    ConversationId,
    Entry,
    EntryId,
    Submission,
    SubmissionId,
    Task,
    TaskId,
    TaskStatus,
)
from pidurable.core.state import (
    AGENT_DOC,
    INBOX_DOC,
    LIVE_DOC,
    USAGE_DOC,
    CONTEXT_DOC,
    ContextDoc,
    ConvState,
    DocHistory,
    DocScope,
    DocumentState,
    ForkPolicy,
    InboxItem,
    Live,
    UsageDoc,
)

from . import codec

#: Version of the persisted layout; stored in every store, checked at open.
#: 2: host-defined documents (``document_records``, ``document_revisions``).
#: 3: forks (``conversations.parent_id`` / ``fork_at``).
#: 4: lean rows (issue 11): a task or entry record leaves out what its row's
#: columns hold (:data:`ROW_COLUMNS`), a terminal task's record its execution
#: state (:data:`TERMINAL_DROPS`); rows written before decode as they did.
#: 5: the built-in documents (``pi.agent``...) as document records and
#: revisions (issue 10, core/builtins.py); the ``documents`` table is gone.
SCHEMA_VERSION = 5


class StorageError(Exception):
    """A storage could not be opened or used (a readable message names the
    file and the operation). Every storage failure is one: a raw
    ``sqlite3``/``OSError``/decoding error never reaches the host."""


class StoreLocked(StorageError):
    """Another live process (or another open harness) holds the store."""


class StoreMissing(StorageError):
    """The store does not exist (or is an empty file) and was not to be created."""


class NotAStore(StorageError):
    """The file is not a pidurable store (not SQLite, or SQLite without
    pidurable's tables). It was left as it was."""


class DamagedRecord(StorageError):
    """A stored record cannot be decoded (invalid JSON or a wrong shape)."""


class StoreFenced(StorageError):
    """The store was fenced (simulated crash): nothing more is written."""


class LeaseLost(StorageError):
    """A worker's lease on a conversation tree was taken by another worker
    (or released): its commit was refused and nothing was written. The
    worker stops that tree (the new owner recovers it as after a restart)."""


@attrs.frozen(kw_only=True)
class Loaded:
    """What ``load()`` returns: the live state and the counters."""

    next_id: int
    next_seq: int
    conversations: tuple[ConvState, ...]
    tasks: tuple[Task, ...]
    submissions: tuple[Submission, ...]
    store_id: str
    #: The live host-defined documents, values rebuilt from their revisions.
    documents: tuple[DocumentState, ...] = ()


@attrs.frozen(kw_only=True)
class JournalRow:
    seq: int
    events: str  # JSON array of tagged events
    #: Format 1: the JSON array of tagged writes; format 2: its digest
    #: (``codec.writes_digest``; replay recomputes the writes).
    writes: str
    #: The journal format the row was written in (``codec.FORMAT_VERSION``
    #: of the code that wrote it; a row written in this process has this
    #: code's); replay refuses a format it does not read (``journal.py``).
    format: int = codec.FORMAT_VERSION


class Storage(Protocol):
    """What the runtime needs from a store (memory, SQLite, ...)."""

    name: str

    def load(self) -> Loaded: ...

    def load_live(self, roots: Sequence[ConversationId] | None = None) -> Loaded:
        """The live work only (what open needs; live.py); ``roots``: only these trees."""
        ...

    def load_conversations(self, ids: Sequence[ConversationId]) -> tuple[tuple[ConvState, ...], tuple[DocumentState, ...]]:
        """These conversations (the ones stored) and their live host-defined documents."""
        ...

    def commit(self, seq: int, writes: Sequence[Write], events: Sequence[Event]) -> None: ...

    def commit_many(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None: ...

    def entries(
        self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None
    ) -> list[Entry]: ...

    def entry(self, entry_id: int) -> Entry | None: ...

    def entry_seq(self, entry_id: int) -> int | None: ...

    def lineage(self, conversation_id: ConversationId) -> Lineage: ...

    def submission(self, submission_id: SubmissionId) -> Submission | None: ...

    def submission_by_request(self, conversation_id: ConversationId, request_id: str) -> Submission | None: ...

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]: ...

    def task(self, task_id: TaskId) -> Task | None: ...

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]: ...

    def conversation(self, conversation_id: ConversationId) -> Conversation | None: ...

    def conversations(self) -> list[Conversation]: ...

    def document(self, conversation_id: ConversationId, kind: str) -> Any: ...

    def document_state(self, scope: DocScope, owner: int, kind: str) -> DocumentState | None: ...

    def document_at(self, conversation_id: ConversationId, kind: str, seq: int) -> DocumentState | None: ...

    def journal(self) -> list[JournalRow]: ...

    def fence(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class OffThreadCommits(Protocol):
    """A store whose commit is a network round trip (PostgreSQL): the
    reducer awaits ``commit_many_async`` - the same transaction, run in a
    worker thread - so the Trio thread is free meanwhile. Stores without it
    commit inline (``commit_many``), as the module comment says."""

    async def commit_many_async(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None: ...


# --- forks: whose entries a conversation reads -----------------------------------

#: A conversation's transcript as segments ``(conversation, cap)``: its own
#: entries (cap None), then each ancestor's entries with ids up to ``cap``
#: (the smallest fork point on the way down). Entry ids grow globally, so
#: the segments' entries, merged by id, are the transcript in order.
Lineage = tuple[tuple[ConversationId, EntryId | None], ...]


def lineage_of(conversation: Callable[[ConversationId], Conversation | None], cid: ConversationId, store: str = "") -> Lineage:
    """Follow ``parent_id`` from ``cid`` (a fork's fork point caps what it
    sees of every conversation above it)."""
    out: list[tuple[ConversationId, EntryId | None]] = [(cid, None)]
    cap: EntryId | None = None
    record = conversation(cid)
    while record is not None and record.parent_id is not None and record.fork_at is not None:
        cap = record.fork_at if cap is None else min(cap, record.fork_at)
        if any(c == record.parent_id for c, _ in out):
            raise DamagedRecord(f"Store {store}: damaged record in conversations (id {record.id}): its parents form a cycle")
        out.append((record.parent_id, cap))
        record = conversation(record.parent_id)
    return tuple(out)


def sees(lineage: Lineage, entry: Entry) -> bool:
    """Is ``entry`` in the transcript of the conversation ``lineage`` is of?"""
    return any(entry.conversation_id == c and (cap is None or entry.id <= cap) for c, cap in lineage)


# --- row encoding shared by the adapters ------------------------------------


@attrs.frozen(kw_only=True)
class Row:
    """One write as a table row: ``table`` and its column values."""

    table: str
    key: tuple[Any, ...]
    columns: dict[str, Any]


#: Schema 4 (issue 11: a lean store): the fields of a task or entry that its
#: row holds as columns, left out of the row's record text and put back when
#: the row is read (:func:`decode_row`). The journal (and its digest) still
#: encodes the whole record.
ROW_COLUMNS: dict[str, tuple[str, ...]] = {
    "tasks": ("id", "conversation_id", "kind", "status", "owner"),
    "entries": ("id", "conversation_id"),
}
#: The task columns a read selects before ``record`` (SQL).
TASK_COLUMNS = ", ".join(ROW_COLUMNS["tasks"])
#: What a terminal task's row leaves out besides: the execution state only a
#: live task reads (its checkpoint - a tool's arguments are in the assistant
#: entry, its result in the result entry -, what it waited on, its memos).
#: It keeps its kind, owner, input, outcome and times: what ``inspect``,
#: ``transcript``, the recovery report and a host's ``harness.task`` read.
TERMINAL_DROPS = frozenset({"checkpoint", "on", "memos", *ROW_COLUMNS["tasks"]})


def as_stored(task: Task) -> Task:
    """``task`` as a store reads it back (schema 4): a terminal task without
    its execution state (:data:`TERMINAL_DROPS`), a live one whole."""
    if task.status is not TaskStatus.TERMINAL:
        return task
    return attrs.evolve(task, checkpoint={}, on=(), memos=None)


def encode_write(w: Write, seq: int) -> tuple[Row, str]:
    """The row a write upserts, and its journal text; the codec encodes the
    record once for both (same for every adapter), and the row keeps the
    lean part of it (:data:`ROW_COLUMNS`)."""
    rec, journal = codec.encode_write(w)
    return _row(w, seq, _lean(w, rec)), journal


def _lean(w: Write, rec: str) -> str:
    """A record's row text: without what the row's columns hold (a prefix of
    the text, as attrs orders the fields: cut, not encoded again) and, for a
    terminal task, without its execution state (encoded again: a small
    record once per task)."""
    match w:
        case PutEntry(entry=e):
            return _cut(rec, f'{{"id":{e.id},"conversation_id":{e.conversation_id},')
        case PutTask(task=t) if t.status is TaskStatus.TERMINAL:
            data = codec.stored.unstructure(t)
            return codec.dumps({k: v for k, v in data.items() if k not in TERMINAL_DROPS})
        case PutTask(task=t):
            return _cut(rec, f'{{"id":{t.id},"conversation_id":{t.conversation_id},"kind":{codec.dumps(t.kind)},')
    return rec


def _cut(rec: str, prefix: str) -> str:
    return "{" + rec[len(prefix) :] if rec.startswith(prefix) else rec


def _row(w: Write, seq: int, rec: str) -> Row:
    """The table row of ``w``, whose record is the JSON text ``rec``."""
    match w:
        case PutConversation(conversation=c):
            return Row(
                table="conversations",
                key=(c.id,),
                columns={
                    "id": c.id,
                    "owner_task_id": c.owner_task_id,
                    "parent_id": c.parent_id,
                    "fork_at": c.fork_at,
                    "record": rec,
                },
            )
        case PutEntry(entry=e):
            return Row(
                table="entries",
                key=(e.id,),
                columns={"id": e.id, "conversation_id": e.conversation_id, "seq": seq, "record": rec},
            )
        case PutSubmission(submission=s):
            return Row(
                table="submissions",
                key=(s.id,),
                columns={
                    "id": s.id,
                    "conversation_id": s.conversation_id,
                    "request_id": s.request_id,
                    "status": s.status.value,
                    "record": rec,
                },
            )
        case PutTask(task=t):
            return Row(
                table="tasks",
                key=(t.id,),
                columns={
                    "id": t.id,
                    "conversation_id": t.conversation_id,
                    "kind": t.kind,
                    "status": t.status.value,
                    "owner": t.owner,
                    "record": rec,
                },
            )
        case PutAgent() | PutLive() | PutInbox() | PutUsage() | PutContext():
            # a whole-value write of journal formats 1-3 (a JSONL line): a base
            return legacy_row(w, seq)
        case PutDocument(document_id=did, revision=r):
            return _revision_row(did, r, seq, rec)
    assert_never(w)


def _revision_row(did: int, r: DocumentRevision, seq: int, content: str) -> Row:
    """The row of revision ``r``, whose whole record is the JSON text ``content``."""
    return _lean_revision_row(did, r, seq, _lean_revision(r, content))


def _lean_revision_row(did: int, r: DocumentRevision, seq: int, lean: str) -> Row:
    """The row of revision ``r`` with its lean text (:func:`_lean_revision`)."""
    # "reclaims": the revisions before this one go (a base or a retirement of a current-only document)
    # (``_value_``: an enum member's value, without the ``value`` property's call)
    action, scope, history = r.action._value_, r.scope, r.history
    reclaims = action != "delta" and (history is DocHistory.LATEST or scope is DocScope.TASK)
    return Row(
        table="document_revisions",
        key=(did, seq),
        columns={
            "document_id": did, "seq": seq, "action": action, "scope": scope._value_, "owner": r.owner,
            "kind": r.kind, "version": r.version, "history": history._value_, "fork": r.fork._value_,
            "reclaims": reclaims, "content": lean,
        },
    )


def _lean_revision(r: DocumentRevision, rec: str) -> str:
    """A revision row's text without what its ``document_records`` row holds
    (scope, owner, kind, history, fork: ``{"version":1,"action":"delta",
    "ops":[...]}``, cut from the record's text, not encoded again); a
    revision reads back with them (:func:`document_state`). The journal keeps
    the whole write."""
    head = f'{{"scope":{codec.dumps(r.scope.value)},"owner":{r.owner},"kind":{codec.dumps(r.kind)},"version":{r.version},'
    if not rec.startswith(head):
        return rec
    rest = rec[len(head) :]
    for name, value in (("history", r.history.value), ("fork", r.fork.value)):
        rest = rest.removeprefix(f'"{name}":{codec.dumps(value)},')
    return f'{{"version":{r.version},' + rest


_LEGACY_KINDS: dict[type, tuple[str, str]] = {PutAgent: (AGENT_DOC, "agent"), PutLive: (LIVE_DOC, "live"),
    PutInbox: (INBOX_DOC, "items"), PutUsage: (USAGE_DOC, "usage"), PutContext: (CONTEXT_DOC, "context")}


def legacy_row(w: Write, seq: int) -> Row:
    """The row of a built-in's whole-value write (journal formats 1-3, the
    ``documents`` table of schema 3 and before): a base revision of it."""
    kind, field = _LEGACY_KINDS[type(w)]
    did, revision = builtin_base(w.conversation_id, kind, getattr(w, field))  # type: ignore[union-attr]
    return _revision_row(did, revision, seq, codec.dumps(codec.stored.unstructure(revision)))


def writes_json(writes: Sequence[Write], seq: int = 0, fmt: int = codec.FORMAT_VERSION) -> str:
    """The journal text of a commit's writes (what replay compares); ``seq``
    only goes into rows, never into the journal text."""
    return codec.writes_json(writes, fmt)


def encode_commit(seq: int, writes: Sequence[Write], events: Sequence[Event]) -> tuple[list[Row], str, str]:
    """Everything a commit stores, encoded before any I/O (so an encoding
    failure leaves the store untouched): rows, events text, writes digest."""
    rows, events_text, writes_text = encode_commit_text(seq, writes, events)
    # the journal keeps the events and a digest of the writes (format 2)
    return rows, events_text, codec.writes_digest(writes_text)


def encode_commit_text(seq: int, writes: Sequence[Write], events: Sequence[Event]) -> tuple[list[Row], str, str]:
    """Like :func:`encode_commit`, with the writes' JSON itself (what the
    digest is of; the JSONL store keeps it to rebuild its tables)."""
    rows, pieces = [], []
    for w in writes:
        row, piece = encode_write_fast(w, seq)
        rows.append(row)
        pieces.append(piece)
    return rows, codec.events_json(events), codec.journal_writes(pieces)


# --- the write path, encoded once (issue 11 item 2: a cheap write path) ---------
#
# :func:`encode_write` encodes a record whole, then cuts its row's lean text
# out of that text (or, for a terminal task, unstructures and encodes it a
# second time). The writes of every step (entries, tasks, document
# revisions) go the other way round: the record is unstructured once with
# ``codec.plain``, the fields its row's columns hold are taken out of that
# dict, the rest is encoded once (the row's text), and the journal's text is
# that text with the fields spliced back in front - the same bytes
# :func:`encode_write` gives (tests/shell/test_codec_plain.py). A value that
# is not plain JSON data (``codec.NotPlain``) goes the reference way.


def _leading(cl: type, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The fields a record's text starts with that its row's columns hold:
    its first fields (attrs order) while they are columns without a default
    (so always written) - what :func:`_lean` cuts off."""
    out = []
    for f in attrs.fields(cl):
        if f.name not in columns or f.default is not attrs.NOTHING:
            break
        out.append(f.name)
    return tuple(out)


#: The fields :func:`_fast_entry` and :func:`_fast_task` splice in front of
#: the row's text (checked against the classes and ROW_COLUMNS here).
_ENTRY_LEADING = ("id", "conversation_id")
_TASK_LEADING = ("id", "conversation_id", "kind")
assert _leading(Entry, ROW_COLUMNS["entries"]) == _ENTRY_LEADING
assert _leading(Task, ROW_COLUMNS["tasks"]) == _TASK_LEADING
#: ``codec.plain``'s hooks without the spliced fields (the row's text, whole).
_ENTRY_REST = codec.plain_hook(Entry, _ENTRY_LEADING)
_TASK_REST = codec.plain_hook(Task, _TASK_LEADING)
#: A revision's row text leaves out what its ``document_records`` row holds
#: (:func:`_lean_revision`); its version goes in front of both texts.
_REVISION_REST = codec.plain_hook(DocumentRevision, ("scope", "owner", "kind", "version", "history", "fork"))
#: The journal text of a write before its record (``{"type":"entry","entry":``).
_ENTRY_JOURNAL = codec.WRITE_WIRE[PutEntry].head + codec.WRITE_WIRE[PutEntry].record_key
_TASK_JOURNAL = codec.WRITE_WIRE[PutTask].head + codec.WRITE_WIRE[PutTask].record_key
_DOCUMENT_WIRE = codec.WRITE_WIRE[PutDocument]
assert not codec.WRITE_WIRE[PutEntry].keys and not codec.WRITE_WIRE[PutTask].keys
assert [attr for attr, _ in _DOCUMENT_WIRE.keys] == ["document_id"]


def _int(value: Any) -> int:
    """An id spliced into a text with ``str`` (what JSON writes for an int;
    a bool or an int subclass goes the reference way)."""
    if type(value) is not int:
        raise codec.NotPlain(f"{type(value).__name__} is not an int")
    return value


def _splice(head: str, rest: str) -> tuple[str, str]:
    """The record text (``head`` = its leading fields, ``{"id":1,...``) and
    the row text (``rest``, the other fields' object)."""
    if rest == "{}":  # nothing but the columns: the row keeps the whole text, as _cut does
        record = head + "}"
        return record, record
    return head + "," + rest[1:], rest


def _fast_entry(w: PutEntry, seq: int) -> tuple[Row, str]:
    e = w.entry
    record, lean = _splice(
        f'{{"id":{_int(e.id)},"conversation_id":{_int(e.conversation_id)}', codec.plain_dumps(_ENTRY_REST(e))
    )
    columns = {"id": e.id, "conversation_id": e.conversation_id, "seq": seq, "record": lean}
    return Row(table="entries", key=(e.id,), columns=columns), _ENTRY_JOURNAL + record + "}"


def _fast_task(w: PutTask, seq: int) -> tuple[Row, str]:
    t = w.task
    data = _TASK_REST(t)
    head = f'{{"id":{_int(t.id)},"conversation_id":{_int(t.conversation_id)},"kind":{codec.plain_scalar(t.kind)}'
    record, lean = _splice(head, codec.plain_dumps(data))
    status = t.status
    if status is TaskStatus.TERMINAL:
        lean = codec.plain_dumps({k: v for k, v in data.items() if k not in TERMINAL_DROPS})
    columns = {"id": t.id, "conversation_id": t.conversation_id, "kind": t.kind, "status": status._value_, "owner": t.owner, "record": lean}
    return Row(table="tasks", key=(t.id,), columns=columns), _TASK_JOURNAL + record + "}"


def _fast_document(w: PutDocument, seq: int) -> tuple[Row, str]:
    r = w.revision
    rest = codec.plain_dumps(_REVISION_REST(r))[1:]  # '"action":...}': the action is always written
    version = _int(r.version)
    scalar = codec.plain_scalar
    record = (
        f'{{"scope":{scalar(r.scope)},"owner":{_int(r.owner)},"kind":{scalar(r.kind)},"version":{version},'
        f'"history":{scalar(r.history)},"fork":{scalar(r.fork)},{rest}'
    )
    wire = _DOCUMENT_WIRE
    journal = wire.head + wire.keys[0][1] + str(w.document_id) + wire.record_key + record + "}"
    return _lean_revision_row(w.document_id, r, seq, f'{{"version":{version},{rest}'), journal


#: The writes every step makes, encoded once; the others go through :func:`encode_write`.
_FAST_WRITES: dict[type, Callable[[Any, int], tuple[Row, str]]] = {
    PutEntry: _fast_entry,
    PutTask: _fast_task,
    PutDocument: _fast_document,
}


def encode_write_fast(w: Write, seq: int) -> tuple[Row, str]:
    """:func:`encode_write`'s row and journal text, each record encoded once
    (the reference way for a write of another type or a value that is not
    plain JSON data)."""
    fast = _FAST_WRITES.get(type(w))
    if fast is not None:
        try:
            return fast(w, seq)
        except codec.NotPlain:
            pass
    return encode_write(w, seq)


DOC_TYPES: dict[str, Any] = {
    AGENT_DOC: AgentConfig,
    LIVE_DOC: Live,
    INBOX_DOC: tuple[InboxItem, ...],
    USAGE_DOC: UsageDoc,
    CONTEXT_DOC: ContextDoc,
}


# --- decoding stored rows ------------------------------------------------------

T = TypeVar("T")

#: What the converter raises on text that is not JSON or not the record's shape.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, BaseValidationError)


def decode_record(store: str, table: str, key: Any, text: str | bytes, cl: type[T]) -> T:
    """Decode one stored record; a damaged one raises :class:`DamagedRecord`
    naming the store, the table and the row. A record whose own id differs
    from its row's id is damaged too."""
    try:
        record = codec.from_json(text, cl)
    except _DECODE_ERRORS as e:
        raise DamagedRecord(f"Store {store}: damaged record in {table} {_key(key)}: {_why(e)}") from e
    rid = getattr(record, "id", key)
    if isinstance(key, int) and rid != key:
        raise DamagedRecord(f"Store {store}: damaged record in {table} {_key(key)}: it says id {rid!r}")
    return record


def decode_row(store: str, table: str, columns: dict[str, Any], text: str | bytes, cl: type[T]) -> T:
    """Decode a task or entry row (:data:`ROW_COLUMNS`): its record text with
    the row's columns put back (a row written before schema 4 holds them in
    its text too, and its own id must be the row's)."""
    key = columns["id"]
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"a record is a JSON object, not {type(data).__name__}")
        rid = data.get("id", key)
        if rid != key:
            raise DamagedRecord(f"Store {store}: damaged record in {table} {_key(key)}: it says id {rid!r}")
        data.update(columns)
        return codec.converter.structure(data, cl)
    except _DECODE_ERRORS as e:
        raise DamagedRecord(f"Store {store}: damaged record in {table} {_key(key)}: {_why(e)}") from e


def decode_doc(kind: str, value: str | bytes, store: str = "", conversation_id: Any = None) -> Any:
    """A built-in's value as schema 3 and before stored it (``documents``)."""
    if kind not in DOC_TYPES:
        raise DamagedRecord(f"Store {store}: damaged record in documents {_key((conversation_id, kind))}: unknown kind")
    return decode_record(store, "documents", (conversation_id, kind), value, DOC_TYPES[kind])


def builtin_value(doc: DocumentState, store: str = "") -> Any:
    """A stored built-in document's typed value (core/builtins.py)."""
    try:
        return codec.converter.structure(doc.value, DOC_TYPES[doc.kind])
    except _DECODE_ERRORS as e:
        raise DamagedRecord(f"Store {store}: damaged record in document_revisions (document {doc.id}): {_why(e)}") from e


def split_builtins(
    docs: Iterable[DocumentState],
) -> tuple[dict[ConversationId, dict[str, DocumentState]], tuple[DocumentState, ...]]:
    """Live documents as the built-ins by conversation (for :func:`conv_state`)
    and the host's own (``Loaded.documents``)."""
    builtins: dict[ConversationId, dict[str, DocumentState]] = {}
    host = []
    for d in docs:
        address = builtin_address(d.id)
        if address is not None:
            builtins.setdefault(address[0], {})[address[1]] = d
        else:
            host.append(d)
    return builtins, tuple(host)


def _key(key: Any) -> str:
    if isinstance(key, tuple):
        return "(" + ", ".join(f"{k!r}" if isinstance(k, str) else str(k) for k in key) + ")"
    return f"id {key}"


def _why(e: BaseException) -> str:
    if isinstance(e, BaseValidationError):
        text = "; ".join(cattrs.transform_error(e))
    elif isinstance(e, json.JSONDecodeError):
        text = f"invalid JSON ({e})"
    else:
        text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:299] + "…"


def conv_state(conversation: Conversation, docs: Mapping[str, DocumentState], store: str = "") -> ConvState:
    """Assemble a conversation from its stored built-in documents by kind
    (:func:`split_builtins`; absent ones are initial)."""
    values = {BUILTINS[kind].field: builtin_value(d, store) for kind, d in docs.items()}
    return ConvState(conversation=conversation, **values, stored={kind: d.deltas for kind, d in docs.items()})


# --- host-defined documents ------------------------------------------------------


@attrs.frozen(kw_only=True)
class DocumentRow:
    """A ``document_records`` row."""

    id: int
    scope: str
    owner: int
    kind: str
    version: int
    history: str
    fork: str
    created_seq: int
    retired_seq: int | None = None


def _revision(store: str, row: DocumentRow, seq: int, content: str | bytes) -> DocumentRevision:
    """A revision row (lean: its record row fills in the rest, :func:`_lean_revision`)."""
    try:
        data = json.loads(content)
        if not isinstance(data, dict):
            raise TypeError(f"a revision is a JSON object, not {type(data).__name__}")
        for name in ("scope", "owner", "kind", "history", "fork"):
            data.setdefault(name, getattr(row, name))
        return codec.converter.structure(data, DocumentRevision)
    except _DECODE_ERRORS as e:
        raise DamagedRecord(f"Store {store}: damaged record in document_revisions {_key((row.id, seq))}: {_why(e)}") from e


def document_state(store: str, row: DocumentRow, revisions: Sequence[tuple[int, str]], upto: int | None = None) -> DocumentState | None:
    """The document's value from its ``(seq, content)`` revisions (oldest
    first), as of commit ``upto`` (None: now); None if it did not exist then
    or was retired. A history without its base is damaged (or, as of an
    earlier commit, reclaimed: ``latest`` keeps only the newest base)."""
    if row.retired_seq is not None and (upto is None or row.retired_seq <= upto):
        return None
    if upto is not None and upto < row.created_seq:
        return None
    taken: list[tuple[str, Any]] = []
    version = row.version
    for seq, content in revisions:
        if upto is not None and seq > upto:
            break
        r = _revision(store, row, seq, content)
        taken.append((r.action.value, r.value if r.action.value == "base" else r.ops))
        version = r.version
    try:
        value, deltas = rebuild(taken)
    except OpError as e:
        if upto is not None and row.history == DocHistory.LATEST:
            raise StorageError(
                f"Store {store}: document {row.kind!r} keeps only its latest revisions (history='latest'); "
                f"its value as of commit {upto} is gone"
            ) from None
        raise DamagedRecord(f"Store {store}: damaged record in document_revisions (document {row.id}): {e}") from e
    return DocumentState(
        id=row.id,
        scope=DocScope(row.scope),
        owner=row.owner,
        kind=row.kind,
        version=version,
        history=DocHistory(row.history),
        fork=ForkPolicy(row.fork),
        value=value,
        deltas=deltas,
    )
