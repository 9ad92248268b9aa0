"""What differs between a recorded commit and the one the current core made,
in a few readable lines (``pidurable replay --check``).

Writes are paired by the record they replace (``"task 12"``, ``"pi.live of
conversation 1"``), not by position, so one write inserted or removed shows
as one line instead of shifting every later write. A write present on both
sides is compared field by field: each differing leaf is one line
``path: recorded -> produced``. If every write is equal but their order is
not, that is said (order is part of the bytes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .storage import codec

#: Longest rendering of one value in a diff line.
VALUE_LIMIT = 120


def write_key(w: Any) -> str:
    """The record a journaled write replaces, as words: ``task 12``,
    ``entry 14``, ``pi.live of conversation 1``, ``document 16``."""
    if not isinstance(w, dict):
        return f"? {short_json(w, 40)}"
    kind = str(w.get("type", "?"))
    record = w.get(kind) if isinstance(w.get(kind), dict) else None
    if record is not None and "id" in record:
        return f"{kind} {record['id']}"
    if "conversation_id" in w:
        return f"{kind} of conversation {w['conversation_id']}"
    if "document_id" in w:
        return f"{kind} {w['document_id']}"
    return kind


def short_json(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``value`` as compact JSON on one line, cut to ``limit`` characters."""
    try:
        text = codec.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def leaf_diff(recorded: Any, produced: Any, path: str = "", limit: int = 8) -> list[str]:
    """The leaves where two JSON values differ: ``path: a -> b`` lines (at
    most ``limit``; a last line says how many more)."""
    out: list[str] = []
    _walk(recorded, produced, path, out)
    if len(out) > limit:
        return out[:limit] + [f"... and {len(out) - limit} more differences"]
    return out


def _walk(a: Any, b: Any, path: str, out: list[str]) -> None:
    if type(a) is type(b) and isinstance(a, dict):
        for key in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                out.append(f"{sub}: {short_json(a[key])} -> (absent)")
            elif key not in a:
                out.append(f"{sub}: (absent) -> {short_json(b[key])}")
            else:
                _walk(a[key], b[key], sub, out)
        if not out and list(a) != list(b):
            out.append(f"{path or '.'}: same fields in another order: {list(a)} -> {list(b)}")
        return
    if type(a) is type(b) and isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
        return
    if a != b or type(a) is not type(b):
        out.append(f"{path or '.'}: {short_json(a)} -> {short_json(b)}")


def writes_diff(recorded_text: str, produced_text: str) -> list[str]:
    """Lines saying how a commit's produced writes differ from the recorded
    ones (both the journal's JSON text)."""
    try:
        recorded = json.loads(recorded_text)
        produced = json.loads(produced_text)
    except ValueError as e:
        return [f"the recorded writes are not JSON ({e})", f"recorded: {recorded_text[:300]}"]
    if not isinstance(recorded, list) or not isinstance(produced, list):
        return [f"recorded: {recorded_text[:300]}", f"produced: {produced_text[:300]}"]
    return _paired(recorded, produced)


def _paired(recorded: Sequence[Any], produced: Sequence[Any]) -> list[str]:
    rec = {write_key(w): w for w in recorded}
    pro = {write_key(w): w for w in produced}
    out: list[str] = []
    for key, w in rec.items():
        if key not in pro:
            out.append(f"missing: {key} (recorded, not produced): {short_json(w)}")
        elif pro[key] != w:
            out.append(f"changed: {key}")
            out.extend("    " + line for line in leaf_diff(w, pro[key]))
        elif codec.dumps(pro[key]) != codec.dumps(w):
            out.append(f"changed: {key} (same values, fields in another order)")
    for key, w in pro.items():
        if key not in rec:
            out.append(f"extra: {key} (produced, not recorded): {short_json(w)}")
    if not out and len(rec) == len(recorded) and len(pro) == len(produced) and list(rec) != list(pro):
        out.append("same writes in another order:")
        out.append(f"    recorded: {', '.join(rec)}")
        out.append(f"    produced: {', '.join(pro)}")
    if not out:  # a record written twice in one commit, or a byte-level difference
        out.append(f"recorded: {short_json(list(recorded), 300)}")
        out.append(f"produced: {short_json(list(produced), 300)}")
    return out
