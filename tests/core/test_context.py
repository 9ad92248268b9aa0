"""Model context: which transcript entries a request sees, and in what order."""

from __future__ import annotations

from typing import Any

from pidurable.core.context import MISSING_RESULT, Message, context_messages
from pidurable.core.model import ConversationId, Entry, EntryId, EntryKind, ToolCall

CID = ConversationId(1)


def e(i: int, kind: EntryKind, text: str = "", **kw: Any) -> Entry:
    return Entry(id=EntryId(i), conversation_id=CID, kind=kind, text=text, **kw)


def user(i: int, text: str) -> Entry:
    return e(i, EntryKind.USER, text)


def assistant(i: int, text: str = "", *call_ids: str, stop: str = "stop") -> Entry:
    tool_calls = tuple(ToolCall(id=c, name=f"tool_{c}") for c in call_ids)
    return e(i, EntryKind.ASSISTANT, text, tool_calls=tool_calls, stop_reason="tool_use" if call_ids else stop)


def result(i: int, call_id: str, text: str = "", *, is_error: bool = False) -> Entry:
    return e(i, EntryKind.TOOL_RESULT, text or f"result {call_id}", tool_call_id=call_id,
             tool_name=f"tool_{call_id}", is_error=is_error)


def roles(msgs: list[Message]) -> list[str]:
    return [m.role for m in msgs]


def shape(msgs: list[Message]) -> list[tuple[str, str]]:
    """(role, text or tool_call_id) pairs: enough to see order and content."""
    return [(m.role, m.tool_call_id if m.role == "tool" else m.text) for m in msgs]  # type: ignore[misc]


def test_plain_conversation_maps_entries_to_messages() -> None:
    """User and assistant entries become user and assistant messages, in order."""
    msgs = context_messages([user(1, "hi"), assistant(2, "hello"), user(3, "bye")])
    assert shape(msgs) == [("user", "hi"), ("assistant", "hello"), ("user", "bye")]


def test_cutoff_hides_later_entries() -> None:
    """Only entries with ``id <= cutoff`` are seen: a re-sent request sees exactly what the first send saw."""
    entries = [user(1, "a"), assistant(2, "b"), user(3, "c"), assistant(5, "d")]
    assert shape(context_messages(entries, cutoff=3)) == [("user", "a"), ("assistant", "b"), ("user", "c")]
    assert shape(context_messages(entries, cutoff=4)) == shape(context_messages(entries, cutoff=3))
    assert len(context_messages(entries, cutoff=5)) == 4
    assert context_messages(entries, cutoff=0) == []
    assert len(context_messages(entries)) == 4  # no cutoff: everything


def test_cutoff_inside_a_round_synthesizes_results_not_yet_visible() -> None:
    """A cutoff that falls between a tool call and its result makes the result missing (synthesized), never leaked."""
    entries = [user(1, "go"), assistant(2, "", "c1"), result(3, "c1", "late")]
    msgs = context_messages(entries, cutoff=2)
    assert msgs[-1].text == MISSING_RESULT and msgs[-1].is_error


def test_error_and_aborted_assistant_messages_are_hidden() -> None:
    """Assistant entries that ended in ``error`` or ``aborted`` stay in the transcript but are not sent."""
    entries = [
        user(1, "q"),
        assistant(2, "provider exploded", stop="error"),
        user(3, "again"),
        assistant(4, "partial", stop="aborted"),
        user(5, "and again"),
        assistant(6, "fine", stop="length"),
    ]
    assert shape(context_messages(entries)) == [
        ("user", "q"), ("user", "again"), ("user", "and again"), ("assistant", "fine"),
    ]


def test_tool_results_follow_their_assistant_in_call_order() -> None:
    """Results that completed out of order, with other entries between, are moved right after their assistant in call order."""
    entries = [
        user(1, "go"),
        assistant(2, "", "c1", "c2", "c3"),
        result(3, "c3"),
        user(4, "steer"),
        result(5, "c1"),
        result(6, "c2"),
        assistant(7, "done"),
    ]
    msgs = context_messages(entries)
    assert shape(msgs) == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "c1"),
        ("tool", "c2"),
        ("tool", "c3"),
        ("user", "steer"),
        ("assistant", "done"),
    ]
    assert msgs[2].text == "result c1" and msgs[2].tool_name == "tool_c1"


def test_missing_result_is_synthesized_as_an_error() -> None:
    """A call without a result gets a synthesized error result naming the call, in its place in call order."""
    entries = [user(1, "go"), assistant(2, "", "c1", "c2"), result(3, "c2"), assistant(4, "next")]
    msgs = context_messages(entries)
    assert shape(msgs) == [("user", "go"), ("assistant", ""), ("tool", "c1"), ("tool", "c2"), ("assistant", "next")]
    synthesized = msgs[2]
    assert synthesized == Message(role="tool", text=MISSING_RESULT, tool_call_id="c1", tool_name="tool_c1", is_error=True)
    assert not msgs[3].is_error


def test_result_of_the_next_round_does_not_answer_an_earlier_call() -> None:
    """A result after a later assistant does not fill an earlier assistant's missing call."""
    entries = [assistant(1, "", "c1"), assistant(2, "", "c2"), result(3, "c1"), result(4, "c2")]
    msgs = context_messages(entries)
    assert shape(msgs) == [("assistant", ""), ("tool", "c1"), ("assistant", ""), ("tool", "c2")]
    assert msgs[1].text == MISSING_RESULT  # c1's real result came after the next assistant: orphaned
    assert msgs[3].text == "result c2"


def test_orphan_results_are_dropped() -> None:
    """A tool result without a preceding call (or for a call of a hidden assistant) is dropped."""
    entries = [
        result(1, "zz"),
        user(2, "hi"),
        e(3, EntryKind.ASSISTANT, "", tool_calls=(ToolCall(id="c1", name="x"),), stop_reason="error"),
        result(4, "c1"),
        assistant(5, "ok"),
        result(6, "c9"),
    ]
    msgs = context_messages(entries)
    assert "tool" not in roles(msgs)
    assert shape(msgs) == [("user", "hi"), ("assistant", "ok")]


def test_a_result_for_a_call_the_assistant_did_not_make_is_dropped() -> None:
    """Inside a round, a result whose call id is not among the assistant's calls is dropped."""
    entries = [assistant(1, "", "c1"), result(2, "c1"), result(3, "other")]
    assert shape(context_messages(entries)) == [("assistant", ""), ("tool", "c1")]


def test_system_and_empty_user_entries() -> None:
    """System entries become system messages; user-like entries with no text (e.g. a bare reset) are skipped."""
    entries = [
        e(1, EntryKind.SYSTEM, "be brief"),
        e(2, EntryKind.RESET, ""),
        e(3, EntryKind.COMPACTION, "summary so far"),
        user(4, "hi"),
    ]
    assert shape(context_messages(entries)) == [("system", "be brief"), ("user", "summary so far"), ("user", "hi")]
