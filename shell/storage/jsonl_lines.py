"""How a commit is written in ``main.jsonl`` (schema 7 and 8, issue 11 item 3: a
lean JSONL store), and read back in every schema.

Schema 7 lines are JSON arrays, fields by position::

    [7,4,"b3:…",[events…],[writes…]]        seq, format, digest, events, writes
    [8,4,"b3:…",[events…],[writes…],true]   … and "more": the batch goes on

and the writes are, in the commit's order (a write's place in the list is
its ordinal, which a marker no longer repeats):

==============================  =================================================
``["e",id,conv,{…}]``           an entry: id, conversation id, its row's record
                                (rows.py: the entry without those two)
``["t",id,conv,kind,owner,{…}]`` a terminal task: its row's columns (status is
                                terminal) and record - the row's lean text,
                                without the execution state a terminal task
                                never reads again (``rows.TERMINAL_DROPS``:
                                its checkpoint repeats the tool's arguments
                                the assistant entry holds)
``["T",id]`` / ``["D",id]``     a marker: this write's record is in
                                ``task-<id>.jsonl`` / ``doc-<id>.jsonl``
                                (jsonl_sidecars.py) at (seq, this place)
``{"type":…}``                  any other write (a conversation, a
                                submission, a retirement) in its journal form
==============================  =================================================

What a line holds is what the store's tables are rebuilt from (an entry's
or a terminal task's row, not its journal text) and the journal row every
adapter keeps: the events and the digest of the writes' journal text
(computed when the commit is written, from the whole writes), so
``journal()`` and ``pidurable replay --check`` read a schema-7 line as any
other. Per step this is 551 bytes instead of schema 6's 874 (R=1000,
docs/performance.md).

Schema 8 writes these lines as they are; a compacted store's
``main.jsonl`` starts with snapshot rows (``["R",table,…]``,
jsonl_snapshot.py), and its kept journal rows are lines of this grammar
with no writes.

Schema 6 and before: a line is an object, ``{"seq":…,"format":…,
"digest":…,"events":[…],"writes":[…],"more":true}``, its writes in journal
form or (schema 6) markers ``{"type":"task.sidecar","id":5,"ordinal":2}``.
An upgraded store keeps its old lines as they are, so both are read.
"""

from __future__ import annotations

from typing import Any

from pidurable.core.effects import PutEntry, PutTask

from . import codec
from .base import Row
from .rows import ROW_COLUMNS

#: The first schema whose lines are arrays with compact writes.
COMPACT_LAYOUT = 7
ENTRY = "e"
TERMINAL_TASK = "t"
#: A compact marker's tag -> its marker type (jsonl_sidecars.PREFIXES: which file).
MARKERS: dict[str, str] = {"T": "task.sidecar", "D": "document.sidecar"}
_ENTRY_KEY = codec.WRITE_WIRE[PutEntry].record
_TASK_KEY = codec.WRITE_WIRE[PutTask].record
#: What a compact entry or terminal task carries besides its row's record:
#: the columns that record leaves out (rows.py). A row that left out more
#: would need them here too - and a new schema.
assert ROW_COLUMNS == {"tasks": ("id", "conversation_id", "kind", "status", "owner"), "entries": ("id", "conversation_id")}


def write_text(row: Row, piece: str) -> str:
    """A write that stays in main, as a schema-7 line holds it: an entry or a
    terminal task as its row, anything else as its journal text ``piece``."""
    c = row.columns
    if row.table == "entries":
        return f'["e",{c["id"]},{c["conversation_id"]},{c["record"]}]'
    if row.table == "tasks" and c["status"] == "terminal":
        return f'["t",{c["id"]},{c["conversation_id"]},{codec.dumps(c["kind"])},{codec.dumps(c["owner"])},{c["record"]}]'
    return piece


def marker_text(marker: str, ident: int) -> str:
    """The marker of a write whose record is in the sidecar of ``marker``
    type and ``ident`` (``task.sidecar``, 5: ``task-5.jsonl``)."""
    return f'["{_TAGS[marker]}",{ident}]'


_TAGS = {marker: tag for tag, marker in MARKERS.items()}


def line(seq: int, fmt: int, digest: str, events: str, writes: str, *, more: bool) -> bytes:
    """A commit's schema-7 line (``events``, ``writes``: JSON arrays' text)."""
    tail = ",true]\n" if more else "]\n"
    return f"[{seq},{fmt},{codec.dumps(digest)},{events},{writes}{tail}".encode("utf-8")


def fields(obj: Any, layout: int) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``(seq, format, digest, events, writes, more)`` of a line as parsed
    (an array of schema 7, an object of any schema), unchecked; ValueError
    if it is neither."""
    if isinstance(obj, dict):
        return (obj.get("seq"), obj.get("format"), obj.get("digest"), obj.get("events"), obj.get("writes"),
                obj.get("more", False))
    if isinstance(obj, list) and layout >= COMPACT_LAYOUT and len(obj) in (5, 6):
        more = obj[5] if len(obj) == 6 else False
        if len(obj) == 6 and more is not True:
            raise ValueError("its sixth field is not true")
        return obj[0], obj[1], obj[2], obj[3], obj[4], more
    if isinstance(obj, list) and layout < COMPACT_LAYOUT:
        raise ValueError(f"an array line in a store of schema {layout} (before schema {COMPACT_LAYOUT})")
    raise ValueError("not a commit (an object, or an array of 5 or 6 fields)")


def compact_marker(data: list[Any]) -> tuple[str, int] | None:
    """``(marker type, id)`` of a compact marker, None for another compact write."""
    if data and data[0] in MARKERS:
        if len(data) != 2 or type(data[1]) is not int:
            raise ValueError(f"damaged {data[0]!r} marker")
        return MARKERS[data[0]], data[1]
    return None


def journal_data(data: list[Any]) -> dict[str, Any]:
    """A compact entry or terminal task as the journal form's data (what
    ``codec.write_from_data`` decodes): its record with the row's columns
    put back (as ``base.decode_row`` does: the columns win)."""
    tag = data[0] if data else None
    if tag == ENTRY and len(data) == 4 and isinstance(data[3], dict):
        return {"type": PutEntry.TAG, _ENTRY_KEY: {**data[3], "id": data[1], "conversation_id": data[2]}}
    if tag == TERMINAL_TASK and len(data) == 6 and isinstance(data[5], dict):
        record = {**data[5], "id": data[1], "conversation_id": data[2], "kind": data[3], "status": "terminal", "owner": data[4]}
        return {"type": PutTask.TAG, _TASK_KEY: record}
    raise ValueError(f"not a compact write ({repr(data)[:60]})")
