"""A model request's messages as a view of the context cache (MessageView):
it reads as the tuple of its messages, and a prefix never changes when the
cache's closed-messages list grows after the request was built."""

from __future__ import annotations

import pytest

from pidurable.core.context import Message
from pidurable.shell.context_cache import MessageView


def msgs(*texts: str) -> tuple[Message, ...]:
    return tuple(Message(role="user", text=t) for t in texts)


def test_a_view_reads_as_the_tuple_of_its_messages() -> None:
    head, closed, shown = msgs("sys"), list(msgs("a", "b", "c")), msgs("d")
    view = MessageView(head, closed, 2, shown)
    expected = msgs("sys", "a", "b", "d")
    assert len(view) == 4
    assert tuple(view) == expected
    assert view == expected and expected == view and not (view != expected)
    assert view != msgs("sys", "a", "b", "c")  # c is past the prefix
    assert [view[i] for i in range(-4, 4)] == [*expected, *expected]
    assert view[1:3] == expected[1:3] and isinstance(view[1:3], tuple)
    assert view + msgs("e") == expected + msgs("e")
    assert msgs("x") + view == msgs("x") + expected
    assert hash(view) == hash(expected)
    assert repr(view) == repr(expected)
    for bad in (4, -5):
        with pytest.raises(IndexError):
            view[bad]


def test_a_view_does_not_change_when_the_cache_grows() -> None:
    closed = list(msgs("a", "b"))
    view = MessageView((), closed, len(closed), msgs("open"))
    before = tuple(view)
    closed.extend(msgs("open", "c", "d"))  # the open segment closed, more came
    assert tuple(view) == before and len(view) == 3 and view[-1] == Message(role="user", text="open")


def test_a_view_is_not_equal_to_other_kinds_of_sequence() -> None:
    view = MessageView((), list(msgs("a")), 1, ())
    assert view != list(msgs("a"))  # as a tuple is not equal to a list
    assert view == MessageView(msgs("a"), [], 0, ())
