"""enrich.LOOKUPS: the table of events whose step can need a stored record."""

from __future__ import annotations

import attrs

from pidurable.core.events import EVENT_TYPES
from pidurable.core.records import TWINS
from pidurable.shell.enrich import LOOKUPS

#: The fields enrich.py fills from storage (the module doc lists them).
FILLED = {"existing", "known", "point"}


def test_every_event_with_a_field_enrichment_fills_has_a_row() -> None:
    """The table names exactly the event types with a field enrichment fills (one without a row is never looked up)."""
    with_filled = {t for t in EVENT_TYPES if {f.name for f in attrs.fields(t)} & FILLED}
    assert set(LOOKUPS) == with_filled


def test_no_event_type_has_a_subclass() -> None:
    """No event class has a subclass whose instances are ever seen, so
    needs_lookup may find its row by exact type (the one a spelt-out
    ``__init__`` fills, ``records.mutable_twin``, never leaves it:
    tests/core/test_records_init.py)."""
    for t in EVENT_TYPES:
        assert [s for s in t.__subclasses__() if s is not TWINS.get(t)] == [], t
