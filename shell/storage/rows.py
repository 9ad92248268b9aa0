"""Rows: how each write becomes a table row and its journal text (split out
of :mod:`.base`, which re-exports every name here).

Every adapter stores the rows :func:`encode_commit` gives: the same record
texts, the same journal digest (issue 11: lean rows; item 2: a cheap write
path, each record encoded once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as _encode_str
from operator import itemgetter
from typing import Any, NamedTuple, assert_never

import attrs

from pidurable.core.builtins import base_revision as builtin_base
from pidurable.core.effects import (
    DocumentRevision,
    PutAgent,
    PutContext,
    PutConversation,
    PutDocument,
    PutEntry,
    PutInbox,
    PutLive,
    PutSubmission,
    PutTask,
    PutUsage,
    RevisionAction,
    WRITE_TYPES,
    Write,
)
from pidurable.core.events import Event
from pidurable.core.model import Entry, Outcome, OutcomeStatus, Task, TaskStatus, WaitPolicy
from pidurable.core.state import AGENT_DOC, CONTEXT_DOC, INBOX_DOC, LIVE_DOC, USAGE_DOC, DocHistory, DocScope, ForkPolicy

from . import codec, spelt


# --- row encoding shared by the adapters ------------------------------------


class Row(NamedTuple):
    """One write as a table row: ``table`` and its column values. (A named
    tuple, built positionally on the write path: one is made for every write
    of every commit, and a frozen attrs class's ``__init__`` cost 4-5 times
    as much; issue 11 item 2.)"""

    table: str
    key: tuple[Any, ...]
    columns: dict[str, Any]


#: How a write becomes its row and journal text (:func:`encode_write`).
_Encoder = Callable[[Any, int], tuple[Row, str]]
_ROW, _PIECE = itemgetter(0), itemgetter(1)


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


def encode_write_reference(w: Write, seq: int) -> tuple[Row, str]:
    """The row a write upserts, and its journal text, the reference way: the
    codec encodes the record once for both, and the row keeps the lean part
    of it (:data:`ROW_COLUMNS`). :func:`encode_write` gives the same bytes
    cheaper; this is what it falls back to and is tested against."""
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
    reclaims = _reclaims(action, history, scope)
    columns = {
        "document_id": did, "seq": seq, "action": action, "scope": scope._value_, "owner": r.owner,
        "kind": r.kind, "version": r.version, "history": history._value_, "fork": r.fork._value_,
        "reclaims": reclaims, "content": lean,
    }
    return Row("document_revisions", (did, seq), columns)


def _reclaims(action: str, history: DocHistory, scope: DocScope) -> bool:
    """Whether a revision row reclaims the revisions before it: a base or a
    retirement of a current-only document (``latest``, or a task's)."""
    return action != "delta" and (history is _LATEST or scope is _TASK_SCOPE)


#: (enum members read once: a member read through its class is a slow attribute lookup in 3.11)
_LATEST, _TASK_SCOPE = DocHistory.LATEST, DocScope.TASK


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
    # (encode_write, inline: one call per write; the rows and pieces split in C, issue 11 item 2)
    spelt.last_calls = spelt.NO_CALLS  # (an assistant entry's tool calls are shared with this commit's events only)
    encoded = [_ENCODE[type(w)](w, seq) for w in writes]
    return list(map(_ROW, encoded)), spelt.events_json(events, True), "[" + ",".join(map(_PIECE, encoded)) + "]"


# --- the write path, encoded once (issue 11 item 2: a cheap write path) ---------
#
# :func:`encode_write_reference` encodes a record whole, then cuts its row's lean text
# out of that text (or, for a terminal task, unstructures and encodes it a
# second time). The writes of every step (entries, tasks, document
# revisions) go the other way round: the record's fields but the ones its
# row's columns hold are unstructured as ``codec.plain`` does (its hook,
# spelt out below), encoded once (the row's text), and the journal's text is
# that text with those fields spliced back in front - the same bytes
# :func:`encode_write_reference` gives (tests/shell/test_codec_plain.py). A value that
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
#: A revision's row text leaves out what its ``document_records`` row holds
#: (:func:`_lean_revision`); its version goes in front of both texts.
_REVISION_LEADING = ("scope", "owner", "kind", "version", "history", "fork")

#: What :func:`_fast_entry`, :func:`_fast_task` and :func:`_fast_document`
#: spell out (a field left out at its default, compared with ``!=`` as
#: plain's hook does; ``is not None`` for a None default).
spelt.check_spelt(Entry, _ENTRY_LEADING, (
    ("kind", spelt.NO_DEFAULT, True), ("text", "", True), ("tool_calls", (), False), ("tool_call_id", None, True),
    ("tool_name", None, True), ("is_error", False, True), ("stop_reason", None, True), ("usage", None, False),
    ("by_task_id", None, True), ("at", 0, True), ("data", None, True),
))  # fmt: skip
spelt.check_spelt(Task, _TASK_LEADING, (
    ("version", 1, True), ("input", {}, True), ("owner", None, True), ("background", False, True),
    ("abort_requested", False, True), ("status", TaskStatus.PENDING, True), ("checkpoint", {}, True),
    ("on", (), True), ("policy", WaitPolicy.ALL_SETTLED, True), ("outcome", None, False), ("memos", None, True),
    ("started_at", None, True), ("ended_at", None, True),
))  # fmt: skip
spelt.check_spelt(Outcome, (), (("status", spelt.NO_DEFAULT, True), ("result", None, True), ("error", None, True)))
spelt.check_spelt(DocumentRevision, _REVISION_LEADING, (("action", spelt.NO_DEFAULT, True), ("value", None, True), ("ops", (), True)))
_PENDING, _ALL_SETTLED, _TERMINAL = TaskStatus.PENDING, WaitPolicy.ALL_SETTLED, TaskStatus.TERMINAL
#: What a terminal task's row text leaves out besides its leading fields (:data:`TERMINAL_DROPS`; :func:`_fast_task`).
assert TERMINAL_DROPS - set(_TASK_LEADING) == {"checkpoint", "memos", "on", "owner", "status"}

#: The journal text of a write before its record (``{"type":"entry","entry":``).
_ENTRY_JOURNAL = codec.WRITE_WIRE[PutEntry].head + codec.WRITE_WIRE[PutEntry].record_key
_TASK_JOURNAL = codec.WRITE_WIRE[PutTask].head + codec.WRITE_WIRE[PutTask].record_key
_DOCUMENT_WIRE = codec.WRITE_WIRE[PutDocument]
#: ``{"type":"document","document_id":``, and ``,"revision":``.
_DOCUMENT_JOURNAL = _DOCUMENT_WIRE.head + _DOCUMENT_WIRE.keys[0][1]
_REVISION_KEY = _DOCUMENT_WIRE.record_key
#: The JSON text of each member of the enums a revision's record starts with
#: (looked up, not encoded for every revision; another value goes the reference way).
_ENUM_TEXT: dict[Any, str] = {m: codec.plain_scalar(m) for e in (DocScope, DocHistory, ForkPolicy) for m in e}
assert not codec.WRITE_WIRE[PutEntry].keys and not codec.WRITE_WIRE[PutTask].keys
assert [attr for attr, _ in _DOCUMENT_WIRE.keys] == ["document_id"]

#: ``codec.plain_dumps`` without its call: ``"".join(_chunks(value, 0))``,
#: which raises one of these for what is not plain JSON data (issue 11 item 2).
_chunks = codec.plain_chunks
_NOT_PLAIN = (codec.NotPlain, TypeError, ValueError, RecursionError)
#: ``Row(...)`` without the named tuple's ``__new__`` (a Python function).
_new = tuple.__new__

# Each encoder below gives :func:`encode_write_reference`'s row and text, and
# takes that way itself for what it does not take: ids that are not exactly
# ints (spliced by formatting), a value that is not plain JSON data.


def _entry_by_dict(w: PutEntry, seq: int) -> tuple[Row, str]:
    e = w.entry
    eid, cid = e.id, e.conversation_id
    if type(eid) is not int or type(cid) is not int:
        return encode_write_reference(w, seq)
    data: dict[str, Any] = {"kind": e.kind}
    if e.text != "":
        data["text"] = e.text
    if e.tool_calls != ():
        data["tool_calls"] = spelt.plain_tool_calls(e.tool_calls)
    if e.tool_call_id is not None:
        data["tool_call_id"] = e.tool_call_id
    if e.tool_name is not None:
        data["tool_name"] = e.tool_name
    if e.is_error != False:  # noqa: E712 - as plain's hook compares
        data["is_error"] = e.is_error
    if e.stop_reason is not None:
        data["stop_reason"] = e.stop_reason
    if e.usage is not None:
        data["usage"] = spelt.plain_usage(e.usage)
    if e.by_task_id is not None:
        data["by_task_id"] = e.by_task_id
    if e.at != 0:
        data["at"] = e.at
    if e.data is not None:
        data["data"] = e.data
    try:
        lean = "".join(_chunks(data, 0))  # (never "{}": the kind is always written)
    except _NOT_PLAIN:
        pass  # (the reference way below, outside the handler: its own error unchained)
    else:
        columns = {"id": eid, "conversation_id": cid, "seq": seq, "record": lean}
        return _new(Row, ("entries", (eid,), columns)), f'{_ENTRY_JOURNAL}{{"id":{eid},"conversation_id":{cid},{lean[1:]}}}'
    return encode_write_reference(w, seq)


def _task_by_dict(w: PutTask, seq: int) -> tuple[Row, str]:
    t = w.task
    tid = t.id
    cid = t.conversation_id
    kind = t.kind
    status = t.status
    owner = t.owner
    if type(tid) is not int or type(cid) is not int:
        return encode_write_reference(w, seq)
    data: dict[str, Any] = {}
    if t.version != 1:
        data["version"] = t.version
    if t.input != {}:
        data["input"] = t.input
    if owner is not None:
        data["owner"] = owner
    if t.background != False:  # noqa: E712 - as plain's hook compares
        data["background"] = t.background
    if t.abort_requested != False:  # noqa: E712
        data["abort_requested"] = t.abort_requested
    if status != _PENDING:
        data["status"] = status
    if t.checkpoint != {}:
        data["checkpoint"] = t.checkpoint
    if t.on != ():
        data["on"] = t.on
    if t.policy != _ALL_SETTLED:
        data["policy"] = t.policy
    if (o := t.outcome) is not None:
        outcome: dict[str, Any] = {"status": o.status}
        if o.result is not None:
            outcome["result"] = o.result
        if o.error is not None:
            outcome["error"] = o.error
        data["outcome"] = outcome
    if t.memos is not None:
        data["memos"] = t.memos
    if t.started_at is not None:
        data["started_at"] = t.started_at
    if t.ended_at is not None:
        data["ended_at"] = t.ended_at
    try:
        lean = "".join(_chunks(data, 0))
        head = f'{{"id":{tid},"conversation_id":{cid},"kind":{_encode_str(kind) if type(kind) is str else codec.plain_scalar(kind)}'
        if lean == "{}":  # nothing but the columns: the row keeps the whole text, as _cut does
            record = lean = head + "}"
        else:
            record = head + "," + lean[1:]
        if status is _TERMINAL:  # without its execution state (TERMINAL_DROPS; ``data`` is this call's)
            pop = data.pop
            pop("owner", None)
            del data["status"]  # (TERMINAL is not the default: written)
            pop("checkpoint", None)
            pop("on", None)
            pop("memos", None)
            lean = "".join(_chunks(data, 0))
    except _NOT_PLAIN:
        pass
    else:
        columns = {"id": tid, "conversation_id": cid, "kind": kind, "status": status._value_, "owner": owner, "record": lean}
        return _new(Row, ("tasks", (tid,), columns)), _TASK_JOURNAL + record + "}"
    return encode_write_reference(w, seq)


# The usual entries and tasks skip even the dict (issue 11 item 2: a commit's
# JSON was ~7 encoder calls, ~150K machine instructions, most of it per key):
# their record text is joined from pieces whose keys are constants - a string
# field encoded alone (a str subclass too, as the encoder does; anything else:
# TypeError), an int formatted (exactly an int: JSON writes a bool as
# ``true``), a container by one encoder call. A field of another type, or a
# rare field set, goes the dict way above: the same text either way
# (tests/shell/test_codec_plain.py). (Tested field by field, not as one tuple
# of the fields' types: that is fewer bytecodes but ~5K more machine
# instructions a record.)

#: Each TaskStatus as its record's piece (PENDING, the default: none); each OutcomeStatus as an outcome's head.
_STATUS_PIECE: dict[Any, str] = {s: "" if s is _PENDING else f',"status":{codec.plain_scalar(s)}' for s in TaskStatus}
_OUTCOME_HEAD: dict[Any, str] = {s: f',"outcome":{{"status":{codec.plain_scalar(s)}' for s in OutcomeStatus}
#: The keys of the pieces.
_TEXT, _CALLS, _CALL_ID, _NAME, _IS_ERROR, _STOP, _USAGE, _BY, _AT, _DATA = (
    ',"text":', ',"tool_calls":', ',"tool_call_id":', ',"tool_name":', ',"is_error":true', ',"stop_reason":',
    ',"usage":', ',"by_task_id":', ',"at":', ',"data":',
)
_INPUT, _OWNER, _CHECKPOINT, _ON, _RESULT, _ERROR, _STARTED, _ENDED = (
    ',"input":', ',"owner":', ',"checkpoint":', ',"on":', ',"result":', ',"error":', ',"started_at":', ',"ended_at":',
)


def _fast_entry(w: PutEntry, seq: int) -> tuple[Row, str]:
    e = w.entry
    eid, cid, by, at, is_error = e.id, e.conversation_id, e.by_task_id, e.at, e.is_error
    if (
        type(eid) is not int or type(cid) is not int or (by is not None and type(by) is not int)
        or type(at) is not int or (is_error is not False and is_error is not True)
    ):
        return _entry_by_dict(w, seq)
    text, calls, call_id, name, stop, usage, data = e.text, e.tool_calls, e.tool_call_id, e.tool_name, e.stop_reason, e.usage, e.data
    try:
        if text == "":
            text_j = ""
        else:  # (kept: the commit's ToolFinished / ModelResponded has the same text, spelt.last_text)
            spelt.last_text = (text, text_j := _encode_str(text))
            text_j = _TEXT + text_j
        call_id_j = "" if call_id is None else _CALL_ID + _encode_str(call_id)
        name_j = "" if name is None else _NAME + _encode_str(name)
        stop_j = "" if stop is None else _STOP + _encode_str(stop)
        kind_j = _encode_str(e.kind)
    except TypeError:  # a string field that is not a string
        return _entry_by_dict(w, seq)
    try:
        calls_j = "" if calls == () else _CALLS + spelt.tool_calls_json(calls)
        usage_j = "" if usage is None else _USAGE + "".join(_chunks(spelt.plain_usage(usage), 0))
        data_j = "" if data is None else _DATA + "".join(_chunks(data, 0))
    except _NOT_PLAIN:
        return encode_write_reference(w, seq)
    # the record without its brace, once for the row's text and the journal's (no slice of either)
    body = (
        f'"kind":{kind_j}{text_j}{calls_j}{call_id_j}{name_j}{_IS_ERROR if is_error else ""}{stop_j}{usage_j}'
        f'{"" if by is None else f"{_BY}{by}"}{"" if at == 0 else f"{_AT}{at}"}{data_j}}}'
    )
    columns = {"id": eid, "conversation_id": cid, "seq": seq, "record": "{" + body}
    return _new(Row, ("entries", (eid,), columns)), f'{_ENTRY_JOURNAL}{{"id":{eid},"conversation_id":{cid},{body}}}'


def _fast_task(w: PutTask, seq: int) -> tuple[Row, str]:
    t = w.task
    tid, cid, kind, status, owner, o = t.id, t.conversation_id, t.kind, t.status, t.owner, t.outcome
    inp, ck, on, started, ended = t.input, t.checkpoint, t.on, t.started_at, t.ended_at
    if (
        type(tid) is not int or type(cid) is not int or type(kind) is not str or type(status) is not TaskStatus
        or type(inp) is not dict or type(ck) is not dict or type(on) is not tuple
        or (owner is not None and type(owner) is not int) or (started is not None and type(started) is not int)
        or (ended is not None and type(ended) is not int) or (o is not None and type(o.status) is not OutcomeStatus)
        or t.version != 1 or t.background is not False or t.abort_requested is not False
        or t.policy is not _ALL_SETTLED or t.memos is not None
    ):
        return _task_by_dict(w, seq)
    try:
        inp_j = "" if inp == {} else _INPUT + "".join(_chunks(inp, 0))
        ck_j = "" if ck == {} else _CHECKPOINT + "".join(_chunks(ck, 0))
        on_j = "" if on == () else _ON + "".join(_chunks(on, 0))
        o_j = ""
        if o is not None:
            result, error = o.result, o.error
            result_j = "" if result is None else _RESULT + "".join(_chunks(result, 0))
            error_j = "" if error is None else _ERROR + "".join(_chunks(error, 0))
            o_j = f"{_OUTCOME_HEAD[o.status]}{result_j}{error_j}}}"
    except _NOT_PLAIN:
        return encode_write_reference(w, seq)
    # (the fields after ``on``, which a terminal task's row keeps too)
    tail = f'{o_j}{"" if started is None else f"{_STARTED}{started}"}{"" if ended is None else f"{_ENDED}{ended}"}'
    rest = f'{inp_j}{"" if owner is None else f"{_OWNER}{owner}"}{_STATUS_PIECE[status]}{ck_j}{on_j}{tail}'
    # (the journal's text joined at once, the record not built alone: one string less)
    journal = f'{_TASK_JOURNAL}{{"id":{tid},"conversation_id":{cid},"kind":{_encode_str(kind)}{rest}}}}}'
    if status is _TERMINAL:  # without its execution state (TERMINAL_DROPS)
        lean = f"{{{inp_j[1:]}{tail}}}" if inp_j else f"{{{tail[1:]}}}"
    elif rest:
        lean = f"{{{rest[1:]}}}"
    else:  # nothing but the columns: the row keeps the whole record, as _cut does
        lean = journal[len(_TASK_JOURNAL) : -1]
    columns = {"id": tid, "conversation_id": cid, "kind": kind, "status": status._value_, "owner": owner, "record": lean}
    return _new(Row, ("tasks", (tid,), columns)), journal


def _fast_document(w: PutDocument, seq: int) -> tuple[Row, str]:
    r = w.revision
    did = w.document_id
    version = r.version
    owner = r.owner
    kind = r.kind
    action = r.action
    if type(version) is not int or type(owner) is not int or type(did) is not int:
        return encode_write_reference(w, seq)
    value, ops = r.value, r.ops
    has_value, has_ops = value is not None, ops != ()
    try:
        # '"action":...}': the record's last fields, each piece alone (the keys: constants)
        rest = (
            f'"action":{_ACTION_TEXT[action]}{_VALUE + "".join(_chunks(value, 0)) if has_value else ""}'
            f'{_OPS + "".join(_chunks(ops, 0)) if has_ops else ""}}}'
        )
        scope, history, fork = r.scope, r.history, r.fork
        # (a scope, history or fork that is not a member of its enum: a KeyError, the reference way)
        scope_text, history_text, fork_text = _ENUM_TEXT[scope], _ENUM_TEXT[history], _ENUM_TEXT[fork]
        ktext = _encode_str(kind) if type(kind) is str else codec.plain_scalar(kind)
    except (*_NOT_PLAIN, KeyError):
        pass
    else:
        # (the journal's text joined at once, the record not built alone: one string less)
        journal = (
            f'{_DOCUMENT_JOURNAL}{did}{_REVISION_KEY}{{"scope":{scope_text},"owner":{owner},"kind":{ktext},'
            f'"version":{version},"history":{history_text},"fork":{fork_text},{rest}}}'
        )
        # _lean_revision_row, inline
        value = action._value_
        columns = {
            "document_id": did, "seq": seq, "action": value, "scope": scope._value_, "owner": owner,
            "kind": kind, "version": version, "history": history._value_, "fork": fork._value_,
            "reclaims": _reclaims(value, history, scope),
            "content": f'{{"version":{version},{rest}',
        }
        return _new(Row, ("document_revisions", (did, seq), columns)), journal
    return encode_write_reference(w, seq)


#: A revision's action as its JSON text (another value: a KeyError, the reference way), and the keys after it.
_ACTION_TEXT: dict[Any, str] = {m: codec.plain_scalar(m) for m in RevisionAction}
_VALUE, _OPS = ',"value":', ',"ops":'


#: Each write class's encoder: the writes every step makes encoded once, the
#: others :func:`encode_write_reference` (what is not a write: a KeyError, as there).
_ENCODE: dict[type, _Encoder] = {
    **{cl: encode_write_reference for cl in WRITE_TYPES},
    PutEntry: _fast_entry,
    PutTask: _fast_task,
    PutDocument: _fast_document,
}


def encode_write(w: Write, seq: int) -> tuple[Row, str]:
    """The row a write upserts, and its journal text (the same for every
    adapter): :func:`encode_write_reference`'s bytes, each record encoded
    once (the reference way for a write of another type or a value that is
    not plain JSON data)."""
    return _ENCODE[type(w)](w, seq)
