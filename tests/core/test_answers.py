"""core/answers.py: call ids made unique per assistant entry."""

from __future__ import annotations

from hypothesis import given, strategies as st

from pidurable.core.answers import _renamed, unique_call_ids
from pidurable.core.model import EntryId, ToolCall


@given(st.lists(st.sampled_from(["", "a", "b", "c", "call_7_1"]), max_size=5))
def test_call_ids_are_made_unique_as_the_rule_says(ids: list[str]) -> None:
    """The quick path (every id given and distinct: the calls as they are)
    gives what the rule's loop gives (an empty or repeated id replaced by
    ``call_<entry>_<index>``), and keeps a call not renamed."""
    calls = tuple(ToolCall(id=i, name="t") for i in ids)
    got = unique_call_ids(EntryId(7), calls)
    want = _renamed(EntryId(7), calls)
    assert type(got) is tuple and got == want
    assert all(g is c for g, c, w in zip(got, calls, want) if w is c)


def test_the_rule_replaces_an_empty_or_a_repeated_id() -> None:
    calls = (ToolCall(id="a", name="t"), ToolCall(id="", name="t"), ToolCall(id="a", name="t"))
    assert [c.id for c in unique_call_ids(EntryId(7), calls)] == ["a", "call_7_1", "call_7_2"]
