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
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs
import cattrs
from cattrs.errors import BaseValidationError

from pidurable.core.builtins import BUILTINS, builtin_address
from pidurable.core.chord import OpError, rebuild
from pidurable.core.effects import DocumentRevision, Write
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
#: 6: SQLite's ``document_revisions`` is a WITHOUT ROWID table (its key
#: (document_id, seq) is the table: no separate index; issue 11 item 2).
SCHEMA_VERSION = 6


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


# --- row encoding shared by the adapters: rows.py (re-exported here) -----------

from .rows import (  # noqa: E402  (re-exported: every adapter imports them from here)
    ROW_COLUMNS as ROW_COLUMNS,
    TASK_COLUMNS as TASK_COLUMNS,
    TERMINAL_DROPS as TERMINAL_DROPS,
    Row as Row,
    as_stored as as_stored,
    encode_commit as encode_commit,
    encode_commit_text as encode_commit_text,
    encode_write as encode_write,
    encode_write_reference as encode_write_reference,
    legacy_row as legacy_row,
    writes_json as writes_json,
)


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
#: (RecursionError: JSON nested deeper than the parser's stack - never written by the edge, MAX_DEPTH)
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError, BaseValidationError)


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
