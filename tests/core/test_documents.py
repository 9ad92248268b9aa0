"""core/documents.py: every row of the document table, and its refusals."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidurable.core import step
from pidurable.core.documents import BASE_EVERY, ROWS, DocInput, DocStatus, classify
from pidurable.core.effects import Accepted, PutDocument, Refused, RevisionAction
from pidurable.core.events import DocumentUpdateRequested
from pidurable.core.state import DocScope, DocumentChange, DocumentState, State

from .helpers import ROOT, opened_state, respond, writes_of


def change(*ops: Any, version: int = 1, owner: int = ROOT) -> DocumentChange:
    return DocumentChange(scope=DocScope.CONVERSATION, owner=owner, kind="todo", version=version, ops=tuple(ops))


def update(state: State, c: DocumentChange, ticket: int = 1) -> Any:
    return step(state, DocumentUpdateRequested(now=5, ticket=ticket, change=c))


def test_absent_change_stores_a_base_and_live_change_a_delta() -> None:
    """(absent, change) -> base; (live, change) -> delta with only the ops."""
    st0 = opened_state()
    first = update(st0, change(["r", {"items": []}]))
    (w,) = writes_of(first, PutDocument)
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {"items": []}
    second = update(first.state, change(["p", ["items"], 0, 0, ["milk"]]), ticket=2)
    (d,) = writes_of(second, PutDocument)
    assert d.revision.action is RevisionAction.DELTA and d.revision.value is None
    assert d.revision.ops == (["p", ["items"], 0, 0, ["milk"]],) and d.document_id == w.document_id
    assert second.state.documents[(DocScope.CONVERSATION, ROOT, "todo")].value == {"items": ["milk"]}


def test_checkpoint_new_version_and_nothing() -> None:
    """(live, checkpoint) and (live, new_version) store a base; (live, nothing) writes nothing."""
    state = update(opened_state(), change(["r", 0])).state
    for i in range(BASE_EVERY - 1):
        state = update(state, change(["r", i + 1]), ticket=i + 2).state
    checkpoint = update(state, change(["r", 99]), ticket=100)
    assert writes_of(checkpoint, PutDocument)[0].revision.action is RevisionAction.BASE
    migrated = update(checkpoint.state, change(["r", {"v": 2}], version=2), ticket=101)
    assert writes_of(migrated, PutDocument)[0].revision.action is RevisionAction.BASE
    nothing = update(migrated.state, change(version=2), ticket=102)
    assert writes_of(nothing, PutDocument) == [] and isinstance(respond(nothing).reply, Accepted)


def test_refusals_write_nothing() -> None:
    """An older version, ops on an absent document, a bad op, an unknown conversation: refused."""
    state = update(opened_state(), change(["r", {"a": 1}], version=2)).state
    for bad in (change(["r", 1], version=1), change(["d", ["missing"]], version=2), change(["x"], version=2), change(["r", 1], owner=999)):
        st1 = update(state, bad)
        assert writes_of(st1, PutDocument) == [] and isinstance(respond(st1).reply, Refused)
    assert isinstance(respond(update(opened_state(), change(["s", ["a"], 1]))).reply, Refused)


@given(st.sampled_from([None, 1, 2]), st.sampled_from([1, 2]), st.booleans(), st.integers(0, BASE_EVERY))
def test_classify_is_total_and_rows_are_consistent(stored: int | None, version: int, has_ops: bool, deltas: int) -> None:
    """Every (status, input) classify returns has a row, or is a refusal by design (older version, absent without ops)."""
    doc = None if stored is None else DocumentState(id=2, scope=DocScope.CONVERSATION, owner=1, kind="k", version=stored, deltas=deltas)
    status, move = classify(doc, change(*([["r", 1]] if has_ops else []), version=version))
    row = ROWS.get((status, move))
    if row is None:
        assert move is DocInput.OLDER_VERSION or (status is DocStatus.ABSENT and move is DocInput.NOTHING)
    else:
        assert (row.action is None) == (move is DocInput.NOTHING)
