"""core/answers.py: call ids made unique per assistant entry."""

from __future__ import annotations

import attrs
from hypothesis import given, strategies as st

from pidurable.core.answers import unique_call_ids
from pidurable.core.model import EntryId, ToolCall


def _reference(entry_id: EntryId, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The rule, one call at a time: an empty or repeated id is replaced by ``call_<entry>_<index>``."""
    seen: set[str] = set()
    out = []
    for i, call in enumerate(calls):
        if not call.id or call.id in seen:
            call = attrs.evolve(call, id=f"call_{entry_id}_{i}")
        seen.add(call.id)
        out.append(call)
    return tuple(out)


@given(st.lists(st.sampled_from(["", "a", "b", "c", "call_7_1"]), max_size=5))
def test_call_ids_are_made_unique_as_the_rule_says(ids: list[str]) -> None:
    """The quick path (every id given and distinct: the calls as they are)
    and the replacing one give the rule's calls, and keep a call not renamed."""
    calls = tuple(ToolCall(id=i, name="t") for i in ids)
    got = unique_call_ids(EntryId(7), calls)
    want = _reference(EntryId(7), calls)
    assert type(got) is tuple and got == want
    assert all(g is c for g, c, w in zip(got, calls, want) if w is c)
