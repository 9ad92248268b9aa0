"""An update to a large document costs O(delta) (issue 10 item 1): the
journal row and the stored revision of a one-item change are small, however
big the document is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidurable.shell import Harness, MemoryStorage, Registry, define_doc, open_sqlite_storage
from invariants import journal_history

BIG = define_doc("big", {"type": "object", "properties": {"items": {"type": "array"}}}, {"items": []})


def _row_sizes(storage: Any) -> list[tuple[int, list[str]]]:
    """(bytes of the journal row's writes, the document actions in it) per commit."""
    out = []
    rows = storage.journal()
    for row, (_, _, writes) in zip(rows, journal_history(storage), strict=True):
        actions = [w["revision"]["action"] for w in writes if w["type"] == "document" and w["document_id"] >= 0]
        if actions:
            out.append((len(row.writes.encode()) + len(row.events.encode()), actions))
    return out


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_appending_to_a_1000_item_list_journals_the_delta_only(backend: str, tmp_path: Path) -> None:
    """A 1,000-item list stored once as a base; appending one item (and
    changing one item in the middle) journals and stores a few hundred bytes,
    not the 1,000 items again."""
    storage = MemoryStorage() if backend == "memory" else open_sqlite_storage(tmp_path / "big.sqlite")
    registry = Registry()
    registry.install(BIG)
    items = [{"n": i, "text": f"item number {i:04d}", "done": False} for i in range(1000)]
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        await conv.update_document(BIG, {"items": items})
        await conv.update_document(BIG, lambda d: {"items": [*d["items"], {"n": 1000, "text": "one more", "done": False}]})

        def tick(d: Any) -> Any:
            d["items"][500]["done"] = True
            return d

        await conv.update_document(BIG, tick)
        value = await conv.document(BIG)
    assert len(value["items"]) == 1001 and value["items"][500]["done"] is True
    if backend == "sqlite":
        storage = open_sqlite_storage(tmp_path / "big.sqlite")  # the harness closed it
    (base_size, base), (append_size, append), (tick_size, ticked) = _row_sizes(storage)
    assert (base, append, ticked) == (["base"], ["delta"], ["delta"])
    assert base_size > 40_000  # the whole value travels once (in the event; a lean journal keeps a digest of the writes)
    assert append_size < 1_000 and tick_size < 1_000, (append_size, tick_size)
    assert append_size * 50 < base_size
    if backend == "sqlite":
        stored = storage.db.execute(  # the host's document (the built-ins' ids are negative)
            "SELECT action, length(content) FROM document_revisions WHERE document_id >= 0 ORDER BY seq"
        ).fetchall()
        assert [a for a, _ in stored] == ["base", "delta", "delta"]
        assert all(size < 500 for a, size in stored if a == "delta"), stored
        storage.close()
