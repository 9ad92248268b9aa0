"""The sidecar files of a JSONL store (see jsonl.py's module comment): which
write goes to which file, the marker that stands for it in ``main.jsonl``,
how a batch is laid out into lines before any I/O (:func:`lay_out`), and
how ``open`` reads a sidecar back, cuts its unconfirmed tail and decides
which records may be missing (with jsonl_recovery.py).

A sidecar line is one record::

    {"seq":7,"ordinal":2,"write":{"type":"task","task":{…}}}

``write`` is the write's journal text (the piece the commit's digest is
over), ``ordinal`` its place in the commit's writes. The commit's line in
``main.jsonl`` has, in that place, the marker ``["T",5]`` (``["D",id]``
for a document; jsonl_lines.py) - in schema 6,
``{"type":"task.sidecar","id":5,"ordinal":2}`` (or ``document.sidecar``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from pidurable.core.effects import PutDocument, PutTask, RevisionAction, Write
from pidurable.core.events import Event
from pidurable.core.model import TaskStatus

from . import codec, spelt
from . import jsonl_lines
from .base import DamagedRecord, Row, StorageError, encode_write
from .memory import Encoded

TASK_MARKER = "task.sidecar"
DOC_MARKER = "document.sidecar"
#: Marker type -> the name of the sidecar file of id N (``prefix-N.jsonl``):
#: a live task's versions, one document incarnation's revisions.
PREFIXES: dict[str, str] = {TASK_MARKER: "task", DOC_MARKER: "doc"}
assert set(jsonl_lines.MARKERS.values()) == set(PREFIXES)
#: A sidecar's file name; any other name in the directory is not ours.
NAME = re.compile(r"(task|doc)-(-?[0-9]+)\.jsonl")
#: The suffix of a file being written to replace a sidecar (rename over it);
#: one left behind by a crash is deleted at open.
RECLAIM = ".reclaim"

#: Where ``(seq, ordinal)`` stands: records in a file, and writes in main,
#: are ordered by it.
Position = tuple[int, int]


def file_name(marker: str, ident: int) -> str:
    return f"{PREFIXES[marker]}-{ident}.jsonl"


def parse_name(name: str) -> tuple[str, int]:
    """``("task" | "doc", id)`` of a sidecar's file name."""
    m = NAME.fullmatch(name)
    assert m is not None, name
    return m.group(1), int(m.group(2))


def sidecar_of(w: Write) -> tuple[str, int] | None:
    """``(marker type, id)`` of a write that goes to a sidecar, None for one
    that stays inline in ``main.jsonl``: a task that is not terminal (its
    versions are dropped once it is), a document revision (a ``latest``
    document's older revisions are dropped at its next base). A terminal
    task, a retirement, and every other write stay in main."""
    match w:
        case PutTask(task=t) if t.status is not TaskStatus.TERMINAL:
            return TASK_MARKER, int(t.id)
        case PutDocument(document_id=did, revision=r) if r.action is not RevisionAction.RETIRE:
            return DOC_MARKER, did
    return None


def record_line(seq: int, ordinal: int, piece: str) -> bytes:
    return f'{{"seq":{seq},"ordinal":{ordinal},"write":{piece}}}\n'.encode("utf-8")


def marker_of(data: Any) -> tuple[str, int, int] | None:
    """``(marker type, id, ordinal)`` if a write of a main line is a marker."""
    if isinstance(data, dict) and data.get("type") in PREFIXES:
        ident, ordinal = data.get("id"), data.get("ordinal")
        if type(ident) is not int or type(ordinal) is not int:
            raise ValueError(f"damaged {data.get('type')} marker")
        return data["type"], ident, ordinal
    return None


@attrs.frozen(kw_only=True)
class Plan:
    """A batch, encoded and laid out, before any I/O."""

    encoded: list[Encoded]
    main: bytes  #: the batch's main lines
    appends: dict[str, list[bytes]]  #: sidecar -> its new record lines, in write order
    bases: dict[str, int]  #: sidecar -> index in ``appends`` of its newest reclaiming base
    terminal: dict[str, bool]  #: a task's sidecar -> is the task's last version in the batch terminal?
    retired: list[str]  #: sidecars of documents retired for good (their revisions go)


def lay_out(
    batch: Sequence[tuple[int, Sequence[Write], Sequence[Event]]], last: int, entries: Mapping[Any, Any]
) -> Plan:
    """Validate, encode and lay out every commit of ``batch`` (which write
    goes to which sidecar, each file's lines) before any I/O: a failure
    leaves the store untouched and usable. ``last``: the newest seq stored;
    ``entries``: the entries table (an entry is written once, as SQLite's
    plain INSERT refuses a rewrite)."""
    encoded: list[Encoded] = []
    out: list[bytes] = []  # the main lines
    appends: dict[str, list[bytes]] = {}
    bases: dict[str, int] = {}
    terminal: dict[str, bool] = {}
    retired: list[str] = []
    new_entries: set[Any] = set()
    for i, (seq, writes, events) in enumerate(batch):
        if seq <= last:
            raise StorageError(f"Commit seq {seq} does not increase (last is {last})")
        last = seq
        rows, pieces, main = [], [], []
        for ordinal, w in enumerate(writes):
            row, piece = encode_write(w, seq)
            rows.append(row)
            pieces.append(piece)
            side = sidecar_of(w)
            if side is not None:
                name = file_name(*side)
                main.append(jsonl_lines.marker_text(*side))
                mine = appends.setdefault(name, [])
                if row.table == "tasks":
                    terminal[name] = False
                elif row.columns["reclaims"]:  # a base of a current-only document
                    bases[name] = len(mine)
                mine.append(record_line(seq, ordinal, piece))
                continue
            main.append(jsonl_lines.write_text(row, piece))
            if row.table == "tasks":  # inline: terminal
                terminal[file_name(TASK_MARKER, row.key[0])] = True
            elif row.table == "document_revisions" and row.columns["action"] == "retire" and row.columns["reclaims"]:
                retired.append(file_name(DOC_MARKER, row.key[0]))
            elif row.table == "entries":
                if row.key in entries or row.key in new_entries:
                    raise StorageError(f"Entry {row.key[0]} already exists: entries are written once")
                new_entries.add(row.key)
        digest = codec.writes_digest(codec.journal_writes(pieces))
        c = Encoded(seq=seq, rows=rows, events=spelt.events_json(events), writes="", digest=digest)
        encoded.append(c)
        out.append(jsonl_lines.line(seq, c.format, digest, c.events, codec.journal_writes(main), more=i < len(batch) - 1))
    return Plan(encoded=encoded, main=b"".join(out), appends=appends, bases=bases, terminal=terminal, retired=retired)


@attrs.frozen(kw_only=True)
class Record:
    """One confirmed record of a sidecar as read at open."""

    seq: int
    ordinal: int
    line: int
    start: int  #: byte offset of its line
    write: Any  #: the write's data (decoded by the caller)


@attrs.frozen(kw_only=True)
class Sidecar:
    """A sidecar file as open found it: its confirmed records, in order, and
    where its unconfirmed tail (records no kept main line refers to, or a
    torn last line) starts."""

    path: Path
    records: tuple[Record, ...]
    keep: int  #: bytes to keep (the file's size if nothing is cut)
    size: int


def read(path: Path, data: bytes, confirmed: set[Position]) -> Sidecar:
    """Check a sidecar's lines against the positions ``main.jsonl`` refers
    to in it. Its records are a confirmed prefix then an unconfirmed tail
    (a commit whose main line never landed); a confirmed record after an
    unconfirmed one, a malformed line that is not the last, or a record
    twice, is corruption (:class:`DamagedRecord` naming file and line)."""
    lines = split(data)
    records: list[Record] = []
    seen: set[Position] = set()
    keep = len(data)
    unconfirmed = 0  # the line number of the first unconfirmed record
    for number, start, text, whole in lines:
        try:
            if not whole:
                raise ValueError("no newline at the end")
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            seq, ordinal, write = obj.get("seq"), obj.get("ordinal"), obj.get("write")
            if type(seq) is not int or type(ordinal) is not int or not isinstance(write, dict):
                raise ValueError("not a sidecar record (seq, ordinal, write)")
        except (ValueError, RecursionError) as e:
            if number < len(lines):
                raise DamagedRecord(f"Store file {path} line {number} is not a sidecar record ({e})") from e
            if not unconfirmed:
                keep = start  # the last line is torn: a crash mid-append
            break
        if (seq, ordinal) in seen:
            raise DamagedRecord(f"Store file {path} line {number}: record (seq {seq}, ordinal {ordinal}) appears twice")
        seen.add((seq, ordinal))
        if (seq, ordinal) in confirmed:
            if unconfirmed:
                raise DamagedRecord(
                    f"Store file {path} line {number}: confirmed record (seq {seq}) after an unconfirmed one "
                    f"(line {unconfirmed})"
                )
            records.append(Record(seq=seq, ordinal=ordinal, line=number, start=start, write=write))
        elif not unconfirmed:
            unconfirmed, keep = number, start
    return Sidecar(path=path, records=tuple(records), keep=keep, size=len(data))


def reclaimed_points(main_rows: Iterable[tuple[Position, Row]], side_rows: Iterable[tuple[Position, Row]]) -> tuple[dict[int, Position], dict[int, Position]]:
    """Up to where a task's and a document's sidecar records may be gone
    (reclaimed): a task's before its newest terminal record in main (its
    sidecar was deleted), a document's before its newest reclaiming base or
    retirement (a ``latest`` or task-scoped document: the file kept that base
    only, or was deleted). Returns ``(tasks, documents)``: id -> position."""
    tasks: dict[int, Position] = {}
    docs: dict[int, Position] = {}
    for pos, row in (*main_rows, *side_rows):
        c = row.columns
        if row.table == "tasks" and c["status"] == "terminal":
            tasks[c["id"]] = max(pos, tasks.get(c["id"], pos))
        elif row.table == "document_revisions" and c["reclaims"]:
            docs[c["document_id"]] = max(pos, docs.get(c["document_id"], pos))
    return tasks, docs


def split(data: bytes) -> list[tuple[int, int, bytes, bool]]:
    """``(line number, byte offset, text, whole)`` of each line; the bytes
    after the last newline, if any, are a last line that is not whole."""
    out: list[tuple[int, int, bytes, bool]] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            out.append((len(out) + 1, start, data[start:], False))
            break
        out.append((len(out) + 1, start, data[start:end], True))
        start = end + 1
    return out
