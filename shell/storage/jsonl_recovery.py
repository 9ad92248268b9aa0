"""Reading a JSONL store back at open (jsonl.py's module comment, *Open*):
its commit lines with their markers, every sidecar file checked against
them, and the record rows a store rebuilt from reclaimed files needs mended.
Everything here reads and checks; jsonl.py repairs once all of it passed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from . import codec
from . import jsonl_lines
from . import jsonl_sidecars as sidecars
from .base import DamagedRecord, Row, StorageError, _DECODE_ERRORS, _why, encode_write
from .jsonl_sidecars import Position, Sidecar

#: The first layout (header ``schema``) whose ``main.jsonl`` may hold markers.
SIDECAR_LAYOUT = 6

#: What open found of each sidecar file main refers to or the directory
#: holds: the file as read (None: absent) and its confirmed records' rows.
Found = dict[str, tuple[Sidecar | None, dict[Position, Row]]]


@attrs.frozen(kw_only=True)
class Ref:
    """A marker of a main line: its write's record is in ``file``."""

    file: str
    ordinal: int


@attrs.frozen(kw_only=True)
class CommitLine:
    """A commit line read at open, before its sidecar records are."""

    number: int  #: its line in main.jsonl
    seq: int
    format: int
    digest: str
    events: str
    slots: list[Row | Ref]


def read_commit(main: Path, number: int, obj: Any, last_seq: int, layout: int) -> tuple[CommitLine, bool]:
    """The commit on line ``number`` of ``main`` and its ``more`` flag: its
    inline writes rebuilt into rows, its markers kept to be filled from the
    sidecars."""
    where = f"Store file {main} line {number}"
    try:
        seq, fmt, digest, events, writes, more = jsonl_lines.fields(obj, layout)
    except ValueError as e:
        raise DamagedRecord(f"{where}: {e}") from e
    if not (type(seq) is int and type(fmt) is int and isinstance(digest, str)):
        raise DamagedRecord(f"{where}: damaged commit (seq, format or digest)")
    if not (isinstance(events, list) and isinstance(writes, list) and isinstance(more, bool)):
        raise DamagedRecord(f"{where}: damaged commit (events, writes or more)")
    if fmt > codec.FORMAT_VERSION:
        raise StorageError(f"{where}: journal format {fmt} is newer than this pidurable reads; upgrade pidurable")
    if seq <= last_seq:
        raise DamagedRecord(f"{where}: seq {seq} does not increase (the line before has {last_seq})")
    slots: list[Row | Ref] = []
    try:
        for ordinal, data in enumerate(writes):
            if isinstance(data, list) and isinstance(obj, list):  # schema 7: a compact write
                compact = jsonl_lines.compact_marker(data)
                if compact is not None:
                    slots.append(Ref(file=sidecars.file_name(*compact), ordinal=ordinal))
                    continue
                data = jsonl_lines.journal_data(data)
            marker = sidecars.marker_of(data)
            if marker is None:
                slots.append(encode_write(codec.write_from_data(data), seq)[0])
                continue
            kind, ident, said = marker
            if layout < SIDECAR_LAYOUT:
                raise ValueError(f"a {kind} marker in a store of schema {layout} (before sidecars)")
            if said != ordinal:
                raise ValueError(f"a {kind} marker with ordinal {said} at write {ordinal}")
            slots.append(Ref(file=sidecars.file_name(kind, ident), ordinal=ordinal))
        events_text = codec.dumps(events)
    except _DECODE_ERRORS as e:
        raise DamagedRecord(f"{where}: damaged record in commit {seq}: {_why(e)}") from e
    return CommitLine(number=number, seq=seq, format=fmt, digest=digest, events=events_text, slots=slots), more


def read_sidecars(directory: Path, main: Path, commits: list[CommitLine]) -> Found:
    """Read every sidecar file (and every one main refers to): its
    confirmed records decoded into rows; a record main refers to must be
    there unless it was reclaimed (a later terminal task record, a later
    reclaiming base or retirement of its document)."""
    refs: dict[str, dict[Position, int]] = {}
    main_rows: list[tuple[Position, Row]] = []
    for c in commits:
        for ordinal, slot in enumerate(c.slots):
            if isinstance(slot, Ref):
                refs.setdefault(slot.file, {})[(c.seq, ordinal)] = c.number
            else:
                main_rows.append(((c.seq, ordinal), slot))
    try:
        names = {n for n in os.listdir(directory) if sidecars.NAME.fullmatch(n)}
    except OSError as e:
        raise StorageError(f"Cannot open store {directory}: {e.strerror or e}") from e
    found: Found = {}
    side_rows: list[tuple[Position, Row]] = []
    for name in sorted(names | refs.keys()):
        if name not in names:
            found[name] = (None, {})
            continue
        path = directory / name
        try:
            data = path.read_bytes()
        except OSError as e:
            raise StorageError(f"Cannot open store {directory}: reading {path}: {e.strerror or e}") from e
        side = sidecars.read(path, data, set(refs.get(name, {})))
        rows: dict[Position, Row] = {}
        for rec in side.records:
            try:
                w = codec.write_from_data(rec.write)
                row = encode_write(w, rec.seq)[0]
            except _DECODE_ERRORS as e:
                raise DamagedRecord(f"Store file {path} line {rec.line}: damaged record in commit {rec.seq}: {_why(e)}") from e
            owner_of = sidecars.sidecar_of(w)
            if owner_of is None or sidecars.file_name(*owner_of) != name:
                raise DamagedRecord(f"Store file {path} line {rec.line}: a record of another file ({type(w).__name__})")
            rows[(rec.seq, rec.ordinal)] = row
            side_rows.append(((rec.seq, rec.ordinal), row))
        found[name] = (side, rows)
    tasks, docs = sidecars.reclaimed_points(main_rows, side_rows)
    for name, wanted in refs.items():
        kind, ident = sidecars.parse_name(name)
        gone = (tasks if kind == "task" else docs).get(ident, (0, -1))
        rows = found[name][1]
        for pos, number in wanted.items():
            if pos not in rows and pos >= gone:
                raise DamagedRecord(
                    f"Store file {directory / name}: missing confirmed sidecar record (seq {pos[0]}, ordinal "
                    f"{pos[1]}) that {main} line {number} refers to"
                )
    return found


def commit_rows(c: CommitLine, found: Found, records: dict[tuple[Any, ...], dict[str, Any]]) -> list[Row]:
    """A commit line's rows in write order, its markers' from their files
    (one reclaimed is left out: a later record of main or of its file
    supersedes it). A retired current-only document whose every revision
    was reclaimed has no base to make its record row from: its retirement
    holds the same fields (``created_seq`` is mended by :func:`mend_created_seqs`)."""
    rows = []
    for ordinal, slot in enumerate(c.slots):
        if isinstance(slot, Ref):
            row = found[slot.file][1].get((c.seq, ordinal))
            if row is None:
                continue
        else:
            row = slot
        col = row.columns
        if row.table == "document_revisions" and col["action"] == "retire" and (col["document_id"],) not in records:
            records[(col["document_id"],)] = {
                "id": col["document_id"], "scope": col["scope"], "owner": col["owner"], "kind": col["kind"],
                "version": col["version"], "history": col["history"], "fork": col["fork"],
                "created_seq": col["seq"], "retired_seq": None,
            }
        rows.append(row)
    return rows


def mend_created_seqs(commits: list[CommitLine], records: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """A document was created by its first revision, even one reclaimed
    since (its record row was made from a later base)."""
    first: dict[int, int] = {}
    for c in commits:
        for slot in c.slots:
            if isinstance(slot, Ref) and slot.file.startswith("doc-"):
                first.setdefault(sidecars.parse_name(slot.file)[1], c.seq)
    for did, seq in first.items():
        row = records.get((did,))
        if row is not None and seq < row["created_seq"]:
            records[(did,)] = {**row, "created_seq": seq}


def reclaimable(name: str, tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]]) -> str:
    """What may go of a sidecar, by its task or document as now stored:
    ``delete`` (a terminal task; a retired current-only document),
    ``rewrite`` (a live current-only document: revisions before its
    newest base), ``keep`` (a live task; a rewindable document)."""
    kind, ident = sidecars.parse_name(name)
    if kind == "task":
        row = tables["tasks"].get((ident,))
        return "delete" if row is not None and row["status"] == "terminal" else "keep"
    record = tables["document_records"].get((ident,))
    if record is None or not (record["history"] == "latest" or record["scope"] == "task"):
        return "keep"
    return "delete" if record["retired_seq"] is not None else "rewrite"
