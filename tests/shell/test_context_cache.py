"""The incremental context cache (shell/context_cache.py) agrees with the
pure derivation (core/context.py) after every committed entry.

The cache keeps the closed segments' messages and the open segment's
entries, appends entries as they commit, and builds a request's messages in
one list; whatever the sequence of entries (answers with and without calls,
hidden error/aborted answers, results, stray results, system records, head
markers, host-defined kinds), a request must see exactly
``head + context_messages(entries, cutoff)`` and the number of model turns
so far, for the newest cutoff and for an older one (the fallback).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidurable.core.context import Message, context_messages
from pidurable.core.model import ConversationId, Entry, EntryId, EntryKind, ToolCall
from pidurable.shell.context_cache import ContextCache, counts_as_turn

CID = ConversationId(1)
SYSTEM = (Message(role="system", text="be brief"),)

#: One step of a transcript: what kind of entry comes next (ids and call ids are filled in by ``build``).
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.sampled_from(["hi", ""])),
        st.tuples(st.just("assistant"), st.integers(0, 3), st.sampled_from(["stop", "tool_use", "error", "aborted"])),
        st.tuples(st.just("result"), st.sampled_from([True, True, True, False])),
        st.tuples(st.just("system"), st.sampled_from(["", "prompt changed"])),
        st.tuples(st.just("marker"), st.sampled_from([EntryKind.COMPACTION, EntryKind.RESET]), st.integers(0, 5)),
        st.tuples(st.just("host"), st.just("note")),
        st.tuples(st.just("request"), st.sampled_from([True, True, True, False])),
    ),
    min_size=4,
    max_size=60,
)


def build(steps: list[tuple[object, ...]]) -> list[Entry | bool]:
    """Entries in commit order, with a request (True: at the newest entry,
    False: at an older cutoff) wherever a ``request`` step stands."""
    out: list[Entry | bool] = []
    next_id = 1
    open_calls: list[ToolCall] = []
    call_number = 0
    for step in steps:
        kind = step[0]
        if kind == "request":
            out.append(bool(step[1]))
            continue
        eid = EntryId(next_id)
        next_id += 1
        if kind == "user":
            entry = Entry(id=eid, conversation_id=CID, kind=EntryKind.USER, text=str(step[1]))
        elif kind == "assistant":
            calls = []
            for _ in range(int(step[1])):  # type: ignore[call-overload]
                call_number += 1
                calls.append(ToolCall(id=f"c{call_number}", name="t", arguments={"n": call_number}))
            open_calls = calls
            entry = Entry(
                id=eid, conversation_id=CID, kind=EntryKind.ASSISTANT, text=f"a{eid}", tool_calls=tuple(calls),
                stop_reason=str(step[2]),
            )
        elif kind == "result":
            # the oldest call still open, or (False / none open) a result no call asked for
            call = open_calls.pop(0) if open_calls and step[1] else None
            entry = Entry(
                id=eid, conversation_id=CID, kind=EntryKind.TOOL_RESULT, text=f"r{eid}",
                tool_call_id=call.id if call is not None else "stray", tool_name="t",
            )
        elif kind == "system":
            entry = Entry(id=eid, conversation_id=CID, kind=EntryKind.SYSTEM, text=str(step[1]))
        elif kind == "marker":
            head = max(1, int(eid) - int(step[2]))  # type: ignore[call-overload]
            if step[1] == EntryKind.RESET:
                head = int(eid)
            entry = Entry(id=eid, conversation_id=CID, kind=str(step[1]), text="summary", data={"head": head})
        else:
            entry = Entry(id=eid, conversation_id=CID, kind="host.note", text="not a message")
        out.append(entry)
    return out


@settings(max_examples=300, deadline=None)
@given(STEPS, st.integers(0, 3))
def test_requests_see_exactly_the_derived_context(steps: list[tuple[object, ...]], loaded_after: int) -> None:
    """After every commit, a request through the newest entry (or an older
    cutoff) sees ``head + context_messages`` and the turns so far; the cache
    is first filled from storage after ``loaded_after`` entries, then follows
    the commits."""
    committed: list[Entry] = []
    cache = ContextCache(lambda cid: list(committed))
    requested = False
    for item in build(steps):
        if isinstance(item, bool):
            if not committed:
                continue
            newest = committed[-1].id
            cutoff = newest if item else committed[len(committed) // 2].id
            expected = SYSTEM + tuple(context_messages(committed, cutoff))
            turns = sum(1 for e in committed if e.id <= cutoff and counts_as_turn(e))
            assert cache.request(CID, cutoff, SYSTEM) == (expected, turns)
            assert cache.view(CID, cutoff) == (list(expected[1:]), turns)
            requested = True
            continue
        committed.append(item)
        cache.on_entry(item)
        if not requested and len(committed) == loaded_after:
            cache.view(CID, item.id)  # the conversation's cache is built from storage here
            requested = True
    if committed:
        newest = committed[-1].id
        expected = tuple(context_messages(committed, newest))
        assert cache.request(CID, newest) == (expected, sum(1 for e in committed if counts_as_turn(e)))


def test_a_request_copies_nothing_it_shares() -> None:
    """Two requests are separate tuples (the cache's own lists are never handed out)."""
    committed = [
        Entry(id=EntryId(1), conversation_id=CID, kind=EntryKind.USER, text="hi"),
        Entry(id=EntryId(2), conversation_id=CID, kind=EntryKind.ASSISTANT, text="a", stop_reason="stop"),
        Entry(id=EntryId(3), conversation_id=CID, kind=EntryKind.USER, text="again"),
        Entry(id=EntryId(4), conversation_id=CID, kind=EntryKind.ASSISTANT, text="b", stop_reason="stop"),
    ]
    cache = ContextCache(lambda cid: list(committed))
    first, _ = cache.request(CID, 4, SYSTEM)
    listed, _ = cache.view(CID, 4)
    listed.append(Message(role="user", text="mutated by a caller"))
    second, turns = cache.request(CID, 4, SYSTEM)
    assert first == second == SYSTEM + tuple(context_messages(committed, 4))
    assert turns == 2


def _assistant(i: int, calls: list[str]) -> Entry:
    return Entry(
        id=EntryId(i), conversation_id=CID, kind=EntryKind.ASSISTANT, text=f"a{i}",
        tool_calls=tuple(ToolCall(id=c, name="t") for c in calls), stop_reason="tool_use" if calls else "stop",
    )


def _result(i: int, call: str) -> Entry:
    return Entry(id=EntryId(i), conversation_id=CID, kind=EntryKind.TOOL_RESULT, text=f"r{i}", tool_call_id=call, tool_name="t")


USER = Entry(id=EntryId(1), conversation_id=CID, kind=EntryKind.USER, text="go")


@pytest.mark.parametrize(
    "sequence",
    [
        # a request while a call is still open (its result synthesized), then the result, then the next answer:
        # the next request must show the real result, not extend the first request's tuple
        [USER, _assistant(2, ["x", "y"]), _result(3, "x"), "request", _result(4, "y"), _assistant(5, []), "request"],
        # two rounds between requests: the next request holds both (the first one's open segment and the one after it)
        [USER, _assistant(2, ["x"]), _result(3, "x"), "request", _assistant(4, ["y"]), _result(5, "y"), _assistant(6, ["z"]),
         _result(7, "z"), "request"],
        # one request per round, as a run makes them
        [USER, _assistant(2, ["x"]), _result(3, "x"), "request", _assistant(4, ["y"]), _result(5, "y"), "request",
         _assistant(6, []), "request", "request"],
    ],
    ids=["late-result", "two-rounds", "every-round"],
)
def test_a_request_extends_the_previous_one_only_when_it_may(sequence: list[Entry | str]) -> None:
    """``request`` extends the previous request's tuple only when the
    segment that request showed open closed as it was shown; every request
    equals the full derivation."""
    committed: list[Entry] = []
    cache = ContextCache(lambda cid: list(committed))
    for item in sequence:
        if isinstance(item, str):
            newest = committed[-1].id
            expected = SYSTEM + tuple(context_messages(committed, newest))
            assert cache.request(CID, newest, SYSTEM)[0] == expected
        else:
            committed.append(item)
            cache.on_entry(item)
