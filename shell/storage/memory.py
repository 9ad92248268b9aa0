"""``MemoryStorage``: the in-memory adapter (tests, examples).

Same behaviour as SQLite, including JSON encoding of every record (a value
that SQLite would refuse is refused here too) and atomic commits. A
``MemoryStorage`` object outlives a ``Harness`` that uses it, so tests can
"restart" by opening a new harness on the same object. ``fence()`` simulates a
crash: every later commit raises and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

from pidurable.core.builtins import BUILTINS
from pidurable.core.effects import Write
from pidurable.core.events import Event
from pidurable.core.state import ConvState, DocScope, DocumentState
from pidurable.core.model import (
    Conversation,
    ConversationId,
    Entry,
    Submission,
    SubmissionId,
    Task,
    TaskId,
)

from . import codec, live
from .base import (
    DOC_TYPES,
    JournalRow,
    Row,
    Lineage,
    Loaded,
    StorageError,
    StoreFenced,
    StoreLocked,
    DocumentRow,
    builtin_value,
    conv_state,
    decode_doc,
    split_builtins,
    document_state,
    ROW_COLUMNS,
    decode_record,
    decode_row,
    encode_commit_text,
    lineage_of,
)

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class Encoded:
    """One commit, encoded and checked, not yet applied."""

    seq: int
    rows: list[Row]
    events: str  #: the events' JSON
    writes: str  #: the writes' JSON (the JSONL store keeps it)
    digest: str  #: what the journal row keeps (a digest of ``writes``)
    #: The journal format it was written in (a JSONL line read back may be older).
    format: int = codec.FORMAT_VERSION


_TABLES = ("conversations", "entries", "submissions", "tasks", "document_records", "document_revisions")


class MemoryStorage:
    def __init__(self) -> None:
        self.name = "memory"
        self._tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in _TABLES}
        self._journal: list[JournalRow] = []
        #: ``document_revisions`` by document: seq -> content (an index of the table).
        self._by_document: dict[int, dict[int, str]] = {}
        self._store_id = str(uuid.uuid4())
        self._fenced = False
        self._owned = False
        #: Number of commits applied (for tests and benchmarks).
        self.commits = 0

    # lifecycle -------------------------------------------------------------
    def load(self) -> Loaded:
        if self._owned:
            raise StoreLocked("The memory store is already open in another harness")
        self._owned = True
        self._fenced = False
        return self._loaded()

    def load_live(self, roots: Sequence[ConversationId] | None = None) -> Loaded:
        """What open needs: the live work only (live.py)."""
        if self._owned:
            raise StoreLocked("The memory store is already open in another harness")
        self._owned = True
        self._fenced = False
        return self._live_loaded(roots)

    def _live_loaded(self, roots: Sequence[ConversationId] | None) -> Loaded:
        tasks = tuple(self._decode("tasks", r, Task) for _, r in sorted(self._tables["tasks"].items()) if r["status"] != "terminal")
        subs = tuple(
            self._decode("submissions", r, Submission)
            for _, r in sorted(self._tables["submissions"].items())
            if r["status"] in ("queued", "placed")
        )
        owned = [(r["id"], r["owner_task_id"]) for r in self._tables["conversations"].values() if r["owner_task_id"] is not None]
        convs, docs = self.load_conversations(live.live_conversation_ids(tasks, subs, owned))
        task_docs = tuple(
            d
            for row in self._document_rows(lambda r: r.scope == "task" and r.retired_seq is None)
            if (d := document_state(self.name, row, self._revisions(row.id))) is not None
        )
        loaded = Loaded(
            next_id=max(
                (k[0] for t in ("conversations", "entries", "submissions", "tasks", "document_records") for k in self._tables[t]),
                default=1,
            ) + 1,
            next_seq=(self._journal[-1].seq + 1) if self._journal else 1,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=self._store_id,
            documents=tuple(sorted(docs + task_docs, key=lambda d: d.id)),
        )
        if roots is None:
            return loaded
        owner_of = lambda cid: (c.owner_task_id if (c := self.conversation(cid)) is not None else None)  # noqa: E731
        return live.in_trees(loaded, roots, owner_of, self.task)

    def load_conversations(
        self, ids: Sequence[ConversationId]
    ) -> tuple[tuple[ConvState, ...], tuple[DocumentState, ...]]:
        """These conversations (the ones stored, by id) and their live host-defined documents."""
        table, builtins = self._tables["conversations"], self.live_builtins(list(ids))
        convs = []
        for cid in sorted(set(ids)):
            r = table.get((cid,))
            if r is None:
                continue
            convs.append(conv_state(self._decode("conversations", r, Conversation), builtins.get(cid, {}), self.name))
        held = {c.id for c in convs}
        rows = self._document_rows(
            lambda r: r.scope == "conversation" and r.retired_seq is None and r.owner in held and r.id >= 0
        )
        return tuple(convs), tuple(d for row in rows if (d := document_state(self.name, row, self._revisions(row.id))) is not None)

    def _loaded(self) -> Loaded:
        """The live state and counters from the tables (shared with the
        JSONL store, whose tables are this class's, rebuilt at open)."""
        docs = self.live_builtins()
        convs = tuple(
            conv_state(self._decode("conversations", r, Conversation), docs.get(r["id"], {}), self.name)
            for _, r in sorted(self._tables["conversations"].items())
        )
        tasks = tuple(
            self._decode("tasks", r, Task)
            for _, r in sorted(self._tables["tasks"].items())
            if r["status"] != "terminal"
        )
        subs = tuple(
            self._decode("submissions", r, Submission)
            for _, r in sorted(self._tables["submissions"].items())
            if r["status"] in ("queued", "placed")
        )
        max_id = max(
            (k[0] for t in ("conversations", "entries", "submissions", "tasks", "document_records") for k in self._tables[t]),
            default=1,
        )
        live_docs = tuple(
            d
            for row in self._document_rows(lambda r: r.retired_seq is None and r.id >= 0)
            if (d := document_state(self.name, row, self._revisions(row.id))) is not None
        )
        return Loaded(
            next_id=max_id + 1,
            next_seq=(self._journal[-1].seq + 1) if self._journal else 1,
            conversations=convs,
            tasks=tasks,
            submissions=subs,
            store_id=self._store_id,
            documents=live_docs,
        )

    def fence(self) -> None:
        self._fenced = True

    def close(self) -> None:
        self._owned = False

    # writes ----------------------------------------------------------------
    def commit(self, seq: int, writes: Sequence[Write], events: Sequence[Event]) -> None:
        self.commit_many([(seq, writes, events)])

    def commit_many(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> None:
        """Several commits, all or nothing (like SQLite's one transaction)."""
        if self._fenced:
            raise StoreFenced("store is fenced")
        for commit in self._encode_batch(batch):
            self._apply(commit)

    def _encode_batch(self, batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]]) -> list[Encoded]:
        """Validate and encode every commit of ``batch`` before anything is
        applied (a failure leaves the store untouched)."""
        last = self._journal[-1].seq if self._journal else 0
        encoded = []
        seen: set[tuple[Any, ...]] = set()
        for seq, writes, events in batch:
            if seq <= last:
                raise StorageError(f"Commit seq {seq} does not increase (last is {last})")
            last = seq
            rows, ev_text, wr_text = encode_commit_text(seq, writes, events)
            # Entries are written once (SQLite's plain INSERT refuses a rewrite too).
            for row in rows:
                if row.table == "entries":
                    if row.key in self._tables["entries"] or row.key in seen:
                        raise StorageError(f"Entry {row.key[0]} already exists: entries are written once")
                    seen.add(row.key)
            encoded.append(Encoded(seq=seq, rows=rows, events=ev_text, writes=wr_text, digest=codec.writes_digest(wr_text)))
        return encoded

    def _apply(self, commit: Encoded) -> None:
        """Apply one encoded commit to the tables and the journal."""
        for row in commit.rows:
            if row.table == "document_revisions":
                self._write_document(row.columns)
            else:
                self._tables[row.table][row.key] = row.columns
        self._journal.append(JournalRow(seq=commit.seq, events=commit.events, writes=commit.digest, format=commit.format))
        self.commits += 1

    # reads -----------------------------------------------------------------
    def _decode(self, table: str, row: dict[str, Any], cl: type[T]) -> T:
        columns = ROW_COLUMNS.get(table)
        if columns is not None:
            return decode_row(self.name, table, {c: row[c] for c in columns}, row["record"], cl)
        return decode_record(self.name, table, row["id"], row["record"], cl)

    def lineage(self, conversation_id: ConversationId) -> Lineage:
        return lineage_of(self.conversation, conversation_id, self.name)

    def entries(
        self, conversation_id: ConversationId, upto: int | None = None, after: int | None = None
    ) -> list[Entry]:
        """The transcript, fork-aware (a fork reads its parents' entries up
        to its fork point first), oldest first; ``after < id <= upto``."""
        t = self._tables["entries"]
        caps = dict(self.lineage(conversation_id))
        return [
            self._decode("entries", r, Entry)
            for k, r in sorted(t.items())
            if r["conversation_id"] in caps
            and (caps[r["conversation_id"]] is None or k[0] <= caps[r["conversation_id"]])
            and (upto is None or k[0] <= upto)
            and (after is None or k[0] > after)
        ]

    def entry_count(self, conversation_id: int) -> int:
        """The entries written in this conversation (not those a fork
        inherits: what SQLite's ``count(*)`` of its rows gives)."""
        return sum(1 for r in self._tables["entries"].values() if r["conversation_id"] == conversation_id)

    def entry(self, entry_id: int) -> Entry | None:
        r = self._tables["entries"].get((entry_id,))
        return None if r is None else self._decode("entries", r, Entry)

    def entry_seq(self, entry_id: int) -> int | None:
        r = self._tables["entries"].get((entry_id,))
        return None if r is None else int(r["seq"])

    def submission(self, submission_id: SubmissionId) -> Submission | None:
        r = self._tables["submissions"].get((submission_id,))
        return None if r is None else self._decode("submissions", r, Submission)

    def submission_by_request(self, conversation_id: ConversationId, request_id: str) -> Submission | None:
        for r in self._tables["submissions"].values():
            if r["conversation_id"] == conversation_id and r["request_id"] == request_id:
                return self._decode("submissions", r, Submission)
        return None

    def submissions(self, conversation_id: ConversationId | None = None) -> list[Submission]:
        return [
            self._decode("submissions", r, Submission)
            for _, r in sorted(self._tables["submissions"].items())
            if conversation_id is None or r["conversation_id"] == conversation_id
        ]

    def task(self, task_id: TaskId) -> Task | None:
        r = self._tables["tasks"].get((task_id,))
        return None if r is None else self._decode("tasks", r, Task)

    def tasks(self, conversation_id: ConversationId | None = None, live_only: bool = False) -> list[Task]:
        return [
            self._decode("tasks", r, Task)
            for _, r in sorted(self._tables["tasks"].items())
            if (conversation_id is None or r["conversation_id"] == conversation_id)
            and (not live_only or r["status"] != "terminal")
        ]

    def conversation(self, conversation_id: ConversationId) -> Conversation | None:
        r = self._tables["conversations"].get((conversation_id,))
        return None if r is None else self._decode("conversations", r, Conversation)

    def conversations(self) -> list[Conversation]:
        return [self._decode("conversations", r, Conversation) for _, r in sorted(self._tables["conversations"].items())]

    def document(self, conversation_id: ConversationId, kind: str) -> Any:
        """A built-in document's typed value (core/builtins.py): its initial
        value while the conversation has not stored it (None: not a built-in)."""
        if kind not in BUILTINS:
            return None
        doc = self.document_state(DocScope.CONVERSATION, conversation_id, kind)
        return BUILTINS[kind].initial if doc is None else builtin_value(doc, self.name)

    def live_builtins(self, conversations: Sequence[int] | None = None) -> dict[ConversationId, dict[str, DocumentState]]:
        """The built-in documents of every conversation (or of these), by
        conversation and kind (core/builtins.py: their ids are negative)."""
        wanted = None if conversations is None else set(conversations)
        rows = self._document_rows(
            lambda r: r.id < 0 and r.retired_seq is None and (wanted is None or r.owner in wanted)
        )
        return split_builtins(d for r in rows if (d := document_state(self.name, r, self._revisions(r.id))) is not None)[0]

    def _write_document(self, c: dict[str, Any]) -> None:
        """Like SQLite's: the record row, the revision, reclamation."""
        records, revisions = self._tables["document_records"], self._tables["document_revisions"]
        did, seq = c["document_id"], c["seq"]
        if c["action"] == "retire":
            records[(did,)] = {**records[(did,)], "retired_seq": seq}
        else:
            if c["action"] == "base":
                old = records.get((did,))
                records[(did,)] = {
                    "id": did,
                    "scope": c["scope"],
                    "owner": c["owner"],
                    "kind": c["kind"],
                    "version": c["version"],
                    "history": c["history"],
                    "fork": c["fork"],
                    "created_seq": old["created_seq"] if old is not None else seq,
                    "retired_seq": None,
                }
            revisions[(did, seq)] = {"seq": seq, "content": c["content"]}
            self._by_document.setdefault(did, {})[seq] = c["content"]
        if c["reclaims"]:
            keep = None if c["action"] == "retire" else seq
            mine = self._by_document.get(did, {})
            for old_seq in [q for q in mine if keep is None or q < keep]:
                del revisions[(did, old_seq)]
                del mine[old_seq]

    def _document_rows(self, keep: Any) -> list[DocumentRow]:
        rows = [DocumentRow(**r) for _, r in sorted(self._tables["document_records"].items())]
        return [r for r in rows if keep(r)]

    def _revisions(self, document_id: int) -> list[tuple[int, str]]:
        return sorted(self._by_document.get(document_id, {}).items())

    def document_state(self, scope: DocScope, owner: int, kind: str) -> DocumentState | None:
        rows = self._document_rows(
            lambda r: r.scope == scope.value and r.owner == owner and r.kind == kind and r.retired_seq is None
        )
        return document_state(self.name, rows[-1], self._revisions(rows[-1].id)) if rows else None

    def document_at(self, conversation_id: ConversationId, kind: str, seq: int) -> DocumentState | None:
        rows = self._document_rows(
            lambda r: r.scope == "conversation" and r.owner == conversation_id and r.kind == kind and r.created_seq <= seq
        )
        return document_state(self.name, rows[-1], self._revisions(rows[-1].id), upto=seq) if rows else None

    def journal(self) -> list[JournalRow]:
        return list(self._journal)
