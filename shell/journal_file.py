"""A journal as a JSONL file: what ``pidurable replay --export`` writes and
``pidurable replay --check FILE.jsonl`` reads (golden journals, issue 12).

One JSON object per line, one line per commit, oldest first::

    {"seq": 7, "format": 1, "events": "<JSON array text>", "writes": "<JSON array text>"}

(``replay --export`` of a lean journal writes each row's writes as the JSON
their digest is of, recomputed by replay, with format 1: reviewable text.)

``events`` and ``writes`` are the journal's own texts, byte for byte as the
store holds them (strings, so nothing is re-encoded on the way). A reader
also takes them as JSON arrays (easier to write by hand); writes given so are
compared after the codec's compact encoding. ``format`` may be left out (1).
Blank lines are skipped; anything else that is not such an object is an error
naming the file and the line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from .storage import codec
from .storage.base import JournalRow, NotAStore, StorageError, StoreMissing


class NotAJournal(NotAStore):
    """The file is not a JSONL journal (a line is not a journal row): a bad
    argument, like a file that is not a store."""


def row_line(row: JournalRow) -> str:
    """One journal row as its JSONL line (no newline)."""
    return json.dumps(
        {"seq": row.seq, "format": row.format, "events": row.events, "writes": row.writes},
        ensure_ascii=False,
        separators=(",", ":"),
    )


def write_journal(rows: Iterable[JournalRow], out: IO[str]) -> int:
    """Write ``rows`` as JSONL to ``out``; how many were written."""
    n = 0
    for row in rows:
        out.write(row_line(row) + "\n")
        n += 1
    return n


def _text(value: Any, field: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return codec.dumps(value)
    raise NotAJournal(f"{where}: {field!r} must be a JSON array or its text, not {type(value).__name__}")


def parse_line(line: str, where: str) -> JournalRow:
    """One JSONL line as a journal row (``where`` names it in errors)."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise NotAJournal(f"{where}: not JSON ({e})") from None
    if not isinstance(data, dict) or not {"seq", "events", "writes"} <= set(data):
        raise NotAJournal(f"{where}: not a journal row (an object with seq, events and writes)")
    seq, fmt = data["seq"], data.get("format", 1)
    if type(seq) is not int or type(fmt) is not int:
        raise NotAJournal(f"{where}: seq and format must be integers")
    return JournalRow(
        seq=seq,
        format=fmt,
        events=_text(data["events"], "events", where),
        writes=_text(data["writes"], "writes", where),
    )


def read_journal(path: str | os.PathLike[str]) -> list[JournalRow]:
    """The rows of a JSONL journal file (their seqs checked to increase)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StoreMissing(f"Journal {file} does not exist") from None
    except IsADirectoryError:
        raise NotAJournal(f"{file} is a directory, not a journal file") from None
    except UnicodeDecodeError as e:
        raise NotAJournal(f"{file} is not a JSONL journal (not UTF-8 text: {e.reason} at byte {e.start})") from None
    except OSError as e:
        raise StorageError(f"Cannot read journal {file}: {e.strerror or e}") from e
    rows: list[JournalRow] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = parse_line(line, f"{file} line {n}")
        if rows and row.seq <= rows[-1].seq:
            raise NotAJournal(f"{file} line {n}: seq {row.seq} does not follow {rows[-1].seq}")
        rows.append(row)
    if not rows:
        raise NotAJournal(f"{file} holds no journal rows")
    return rows
