"""A compacted JSONL store (schema 8, issue 11: a lean store): what
``JsonlStorage.compact`` writes, and how open reads it back.

``main.jsonl`` grows by a line per commit; its superseded writes (a task's
or submission's old versions, a conversation rewritten, a document's
revisions since reclaimed) and, with journal retention, its old journal
rows stay in it until the store is compacted. Compaction rewrites it as::

    {"pidurable":"jsonl","schema":8,"store_id":"…"}    the header, as before
    ["R","entries",[5,1,3],{…record…}]                   id, conversation, seq, record
    ["R","document_records",[-9,"conversation",1,…]]     (no text column)
    …                                                    one snapshot row line per table row
    [3,4,"b3:…",[events…],[]]                            the journal rows kept: commit lines
    …                                                    without writes (their records are
                                                         the snapshot's)

then later commits append ordinary lines (jsonl_lines.py). A snapshot row
line holds one row of the store's tables exactly as the memory adapter
keeps it (:class:`~.memory.MemoryStorage`: the same tables a writable open
rebuilds): the table, its key and other columns by position
(:data:`FIELDS`), and its text column (:data:`TEXT_COLUMN`: a record's or
revision's JSON text) spliced in as JSON (``"R"``) - or, for a text that
would not come back byte for byte from its parse, as a JSON string
(``"Q"``). Rows, not writes: a document's
record (its ``created_seq``, ``retired_seq``) and an entry's ``seq`` are
columns no write carries alone.

Every snapshot row comes before every commit line (open refuses one after);
a commit line without writes is an ordinary schema-7 line, so only the row
lines are new grammar: an older pidurable refuses schema 8 ("upgrade
pidurable") rather than misreading it.

The journal rows kept follow the SQLite rule (sqlite_retention.py): with
``journal_retention`` N, the newest N and every row from the first commit
the oldest live work may come from (:func:`keep_from`); ``"all"`` keeps
every row. ``pidurable replay --check`` on a store whose first row is not
commit 1 reports a partial journal, as for SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from . import codec
from .base import DamagedRecord, JournalRow

#: The tag of a snapshot row line whose text column is spliced in as JSON,
#: and of one whose text column is a JSON string.
RAW, QUOTED = "R", "Q"
#: Each table's columns (a memory table's row dict), and the one holding JSON
#: text (None: none). A row with other columns is not compacted (StorageError).
COLUMNS: dict[str, tuple[str, ...]] = {
    "conversations": ("id", "owner_task_id", "parent_id", "fork_at", "record"),
    "entries": ("id", "conversation_id", "seq", "record"),
    "submissions": ("id", "conversation_id", "request_id", "status", "record"),
    "tasks": ("id", "conversation_id", "kind", "status", "owner", "record"),
    "document_records": ("id", "scope", "owner", "kind", "version", "history", "fork", "created_seq", "retired_seq"),
    "document_revisions": ("seq", "content"),
}
TEXT_COLUMN: dict[str, str | None] = {
    "conversations": "record", "entries": "record", "submissions": "record", "tasks": "record",
    "document_records": None, "document_revisions": "content",
}
#: A table's key, by the names of its parts (``document_id``: a revision's
#: key only, not a column of its row).
KEYS: dict[str, tuple[str, ...]] = {t: ("document_id", "seq") if t == "document_revisions" else ("id",) for t in COLUMNS}
#: What a snapshot row line holds of a row, by position: its key's parts,
#: then its other columns but the text one (``["R","entries",[5,1,3],{…}]``:
#: id 5, conversation 1, seq 3, the record).
FIELDS: dict[str, tuple[str, ...]] = {
    t: KEYS[t] + tuple(c for c in cols if c not in KEYS[t] and c != TEXT_COLUMN[t]) for t, cols in COLUMNS.items()
}

Tables = dict[str, dict[tuple[Any, ...], dict[str, Any]]]
#: A snapshot row as read: table, key, columns.
SnapRow = tuple[str, tuple[Any, ...], dict[str, Any]]


def is_row_line(obj: Any) -> bool:
    """Whether a parsed line of ``main.jsonl`` is a snapshot row (a commit
    line is an array starting with its seq, or an object)."""
    return isinstance(obj, list) and bool(obj) and isinstance(obj[0], str)


def row_lines(tables: Tables) -> list[bytes]:
    """Every row of ``tables`` as a snapshot row line, table by table, by key.
    Raises ``ValueError`` for a row whose columns are not its table's (the
    store is left as it was: nothing is written before every line is made)."""
    out: list[bytes] = []
    for table, columns in COLUMNS.items():
        text, keys = TEXT_COLUMN[table], KEYS[table]
        for key, row in sorted(tables[table].items()):
            if set(row) != set(columns):
                raise ValueError(f"a row of {table} {key} has columns {sorted(row)}, not {sorted(columns)}")
            values = [*key, *(row[c] for c in FIELDS[table][len(keys) :])]
            head = f"{codec.dumps(table)},{codec.dumps(values)}"
            if text is None:
                out.append(f'["{RAW}",{head}]\n'.encode("utf-8"))
            elif _round_trips(row[text]):
                out.append(f'["{RAW}",{head},{row[text]}]\n'.encode("utf-8"))
            else:
                out.append(f'["{QUOTED}",{head},{codec.dumps(row[text])}]\n'.encode("utf-8"))
    return out


def _round_trips(text: Any) -> bool:
    """Whether JSON ``text`` comes back byte for byte from its parse (the
    codec writes every record so; an odd one is stored quoted)."""
    if not isinstance(text, str):
        return False
    try:
        return codec.dumps(json.loads(text)) == text
    except ValueError:
        return False


def read_row(where: str, obj: list[Any]) -> SnapRow:
    """A parsed snapshot row line (``where``: the file and line, for errors)."""
    tag = obj[0]
    table = obj[1] if len(obj) > 1 else None
    if tag not in (RAW, QUOTED) or table not in COLUMNS:
        raise DamagedRecord(f"{where}: not a snapshot row (tag {tag!r}, table {table!r})")
    text = TEXT_COLUMN[table]
    if len(obj) != (3 if text is None else 4):
        raise DamagedRecord(f"{where}: a {table} snapshot row of {len(obj)} fields")
    values = obj[2]
    if not (isinstance(values, list) and len(values) == len(FIELDS[table])):
        raise DamagedRecord(f"{where}: damaged {table} snapshot row (its columns)")
    named = dict(zip(FIELDS[table], values))
    key = tuple(named[k] for k in KEYS[table])
    if not all(type(k) is int for k in key):
        raise DamagedRecord(f"{where}: damaged {table} snapshot row (its key {list(key)!r})")
    if text is not None:
        value = obj[3]
        if tag == QUOTED and not isinstance(value, str):
            raise DamagedRecord(f"{where}: damaged {table} snapshot row (its {text} is not a string)")
        try:
            named[text] = value if tag == QUOTED else codec.dumps(value)
        except ValueError as e:
            raise DamagedRecord(f"{where}: damaged {table} snapshot row ({e})") from e
    return table, key, {c: named[c] for c in COLUMNS[table]}


def load_rows(tables: Tables, by_document: dict[int, dict[int, str]], rows: Sequence[SnapRow]) -> None:
    """Put snapshot ``rows`` into a memory store's tables (and its index of
    revisions by document), before any commit line is applied."""
    for table, key, row in rows:
        tables[table][key] = row
        if table == "document_revisions":
            by_document.setdefault(key[0], {})[key[1]] = row["content"]


def journal_line(row: JournalRow) -> bytes:
    """A kept journal row as a commit line without writes (its records are
    in the snapshot)."""
    return f"[{row.seq},{row.format},{codec.dumps(row.writes)},{row.events},[]]\n".encode("utf-8")


@attrs.frozen(kw_only=True)
class Compacted:
    """What ``JsonlStorage.compact`` did."""

    rows: int  #: snapshot rows written (the store's table rows)
    dropped: int  #: journal rows dropped by retention
    kept: tuple[int, int] | None  #: the first and last seq the journal holds now (None: no commit)
    sidecars: int  #: sidecar files deleted


def compacted(header: bytes, tables: Tables, journal: Sequence[JournalRow], retention: int | str) -> tuple[bytes, list[JournalRow], int]:
    """A compacted ``main.jsonl`` (``header``, the rows of ``tables``, the
    rows of ``journal`` that ``retention`` keeps), those journal rows, and
    how many snapshot rows it holds. ValueError: a row that is not its
    table's (nothing is written)."""
    start = keep_from(tables, journal, retention)
    kept = [r for r in journal if r.seq >= start]
    rows = row_lines(tables)
    return b"".join([header, *rows, *(journal_line(r) for r in kept)]), kept, len(rows)


def keep_from(tables: Tables, journal: Sequence[JournalRow], retention: int | str) -> int:
    """The first journal seq that ``retention`` keeps (sqlite_retention.py's
    rule, on the memory tables): ``"all"`` keeps every row; N the newest N
    and every row from the commit of the newest entry older than the oldest
    live task or unsettled submission (ids grow with commits, so no older
    commit wrote that work; none: every row)."""
    if not journal:
        return 1
    if retention == "all":
        return journal[0].seq
    start = journal[-1].seq - int(retention) + 1  # retention >= 1: the newest row stays
    live = [k[0] for k, r in tables["tasks"].items() if r["status"] != "terminal"]
    live += [k[0] for k, r in tables["submissions"].items() if r["status"] in ("queued", "placed")]
    if live:
        oldest = min(live)
        older = [k[0] for k in tables["entries"] if k[0] < oldest]
        start = min(start, int(tables["entries"][(max(older),)]["seq"]) if older else 1)
    return max(start, journal[0].seq)
