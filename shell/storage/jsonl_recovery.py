"""Reading a JSONL store back at open (jsonl.py's module comment, *Open*):
its header and commit lines with their markers (:func:`scan_main`), every
sidecar file checked against them (:func:`read_sidecars`), and the tables
rebuilt from both (:func:`rebuild`). Everything here reads and checks:
jsonl.py repairs once all of it passed, and the read-only view
(readonly.py: ``pidurable inspect``, ``replay``, ``transcript``) uses the
same reading and never repairs - what it counts is exactly what a
writable open keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from . import codec
from . import jsonl_lines
from . import jsonl_sidecars as sidecars
from . import jsonl_snapshot as snapshot
from .base import DamagedRecord, NotAStore, Row, StorageError, _DECODE_ERRORS, _why, encode_write
from .jsonl_sidecars import Position, Sidecar
from .memory import Encoded, MemoryStorage

#: How the first line of every ``main.jsonl`` starts (a torn first line is
#: truncated only if it is a piece of this, so a stranger's file is never cut).
HEADER_PREFIX = b'{"pidurable":"jsonl","schema":'
#: The header's ``schema``: the directory's layout, which an older pidurable
#: checks (it refuses a number above its own: "upgrade pidurable"). Up to 5
#: it was the shared ``SCHEMA_VERSION`` and every write was inline in
#: ``main.jsonl``; 6: sidecars; 7: array lines, entries and terminal tasks
#: as their rows, markers without ordinals (jsonl_lines.py); 8: a
#: compacted ``main.jsonl`` may start with snapshot rows (jsonl_snapshot.py).
#: An older store is upgraded at open: its lines stay as they are, its
#: header says 8.
LAYOUT = 8
#: The first layout whose ``main.jsonl`` may hold snapshot rows.
SNAPSHOT_LAYOUT = 8
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


@attrs.frozen(kw_only=True)
class MainScan:
    """``main.jsonl`` as read and checked, before any sidecar is."""

    store_id: str | None  #: None: the file holds only a torn header (a store being created)
    layout: int  #: the header's ``schema``
    commits: list[CommitLine]  #: the commits that count, oldest first
    #: A compacted store's snapshot rows (jsonl_snapshot.py), applied before the commits.
    rows: list[snapshot.SnapRow]
    #: The bytes that count: a torn last line, and a batch without its last
    #: line, start at ``keep`` (a writable open truncates there).
    keep: int
    header: bytes  #: the first line as read, with its newline


def scan_main(path: Path, main: Path, data: bytes) -> MainScan:
    """Read ``data`` (the bytes of ``main``, the file of store ``path``):
    its header and the commits that count. A torn last line, or a batch
    without its last line, does not count (``keep`` says where it starts);
    anything else wrong raises ``NotAStore`` (a stranger's file),
    ``DamagedRecord`` (naming file and line) or ``StorageError`` (a newer
    schema)."""
    lines = sidecars.split(data)
    keep = len(data)
    commits: list[CommitLine] = []
    rows: list[snapshot.SnapRow] = []
    pending: list[CommitLine] = []  # an unfinished batch's commits
    batch_start = 0  # where that batch's first line starts
    last_seq = 0
    layout, store_id = LAYOUT, None
    for number, start, text, whole in lines:
        try:
            if not whole:
                raise ValueError("no newline at the end")
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:  # invalid JSON (or nested past the stack) or UTF-8, or torn
            if number == 1 and not (text.startswith(HEADER_PREFIX) or HEADER_PREFIX.startswith(text)):
                raise NotAStore(f"{path}: {main} is not a pidurable JSONL store; it was left untouched") from e
            if number < len(lines):
                raise DamagedRecord(f"Store file {main} line {number} is not JSON ({e})") from e
            keep = start  # the last line is torn: a crash mid-append (or a live writer's append, half read)
            break
        if number == 1:
            layout, store_id = read_header(path, main, obj)
            continue
        if snapshot.is_row_line(obj):
            where = f"Store file {main} line {number}"
            if layout < SNAPSHOT_LAYOUT:
                raise DamagedRecord(f"{where}: a snapshot row in a store of schema {layout} (before schema {SNAPSHOT_LAYOUT})")
            if commits or pending:
                raise DamagedRecord(f"{where}: a snapshot row after a commit line (a compacted store has them first)")
            rows.append(snapshot.read_row(where, obj))
            continue
        commit, more = read_commit(main, number, obj, last_seq, layout)
        last_seq = commit.seq
        if not pending:
            batch_start = start
        pending.append(commit)
        if not more:
            commits.extend(pending)
            pending = []
    if pending:  # a batch without its last line never counted
        keep = min(keep, batch_start)
    header = lines[0][2] + b"\n" if lines else b""
    return MainScan(store_id=store_id, layout=layout, commits=commits, rows=rows, keep=keep, header=header)


def read_header(path: Path, main: Path, obj: Any) -> tuple[int, str]:
    """``(schema, store_id)`` of the header line of store ``path``."""
    if not (isinstance(obj, dict) and obj.get("pidurable") == "jsonl"):
        raise NotAStore(f"{path}: {main} is not a pidurable JSONL store; it was left untouched")
    schema, store_id = obj.get("schema"), obj.get("store_id")
    if type(schema) is not int or not isinstance(store_id, str) or not store_id:
        raise DamagedRecord(f"Store file {main} line 1: damaged header")
    if schema > LAYOUT:
        raise StorageError(
            f"Store {path} has schema version {schema}; this pidurable reads versions up to {LAYOUT}. Upgrade pidurable."
        )
    return schema, store_id


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


def read_files(directory: Path) -> dict[str, bytes]:
    """The bytes of every sidecar file of ``directory``, by name (one
    deleted since it was listed - a live writer reclaimed it, which only a
    read-only view sees - is left out)."""
    try:
        names = sorted(n for n in os.listdir(directory) if sidecars.NAME.fullmatch(n))
    except OSError as e:
        raise StorageError(f"Cannot open store {directory}: {e.strerror or e}") from e
    files: dict[str, bytes] = {}
    for name in names:
        path = directory / name
        try:
            files[name] = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise StorageError(f"Cannot open store {directory}: reading {path}: {e.strerror or e}") from e
    return files


def read_sidecars(directory: Path, main: Path, commits: list[CommitLine], files: dict[str, bytes] | None = None) -> Found:
    """Read every sidecar file (and every one main refers to): its
    confirmed records decoded into rows; a record main refers to must be
    there unless it was reclaimed (a later terminal task record, a later
    reclaiming base or retirement of its document). ``files``: the files'
    bytes as read already (:func:`read_files`; by default read now)."""
    refs: dict[str, dict[Position, int]] = {}
    main_rows: list[tuple[Position, Row]] = []
    for c in commits:
        for ordinal, slot in enumerate(c.slots):
            if isinstance(slot, Ref):
                refs.setdefault(slot.file, {})[(c.seq, ordinal)] = c.number
            else:
                main_rows.append(((c.seq, ordinal), slot))
    if files is None:
        files = read_files(directory)
    found: Found = {}
    side_rows: list[tuple[Position, Row]] = []
    for name in sorted(files.keys() | refs.keys()):
        if name not in files:
            found[name] = (None, {})
            continue
        path, data = directory / name, files[name]
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


def rebuild(store: MemoryStorage, commits: list[CommitLine], found: Found, snap: list[snapshot.SnapRow]) -> None:
    """Put a compacted store's snapshot rows ``snap`` in ``store``'s tables,
    then apply ``commits`` (their markers' rows from ``found``) to its tables
    and journal, as a writable open and the read-only view both do."""
    snapshot.load_rows(store._tables, store._by_document, snap)
    records = store._tables["document_records"]
    for c in commits:
        rows = commit_rows(c, found, records)
        store._apply(Encoded(seq=c.seq, rows=rows, events=c.events, writes="", digest=c.digest, format=c.format))
    mend_created_seqs(commits, records)


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
