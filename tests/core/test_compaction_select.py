"""Range selection and token estimates (core/compaction.py, reference
§3.13.1): pure, so checked by example and by property."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pidurable.core.compaction import (
    active_range,
    estimate_context_tokens,
    estimate_entry_tokens,
    select_cut,
    serialize_messages,
    summary_text,
)
from pidurable.core.context import context_messages
from pidurable.core.model import ConversationId, Entry, EntryId, EntryKind, ToolCall, Usage

CID = ConversationId(1)


def user(i: int, text: str = "hi") -> Entry:
    return Entry(id=EntryId(i), conversation_id=CID, kind=EntryKind.USER, text=text)


def assistant(i: int, text: str = "ok", calls: tuple[str, ...] = (), usage: Usage | None = None) -> Entry:
    return Entry(
        id=EntryId(i),
        conversation_id=CID,
        kind=EntryKind.ASSISTANT,
        text=text,
        tool_calls=tuple(ToolCall(id=c, name="read", arguments={"path": "a"}) for c in calls),
        stop_reason="tool_use" if calls else "stop",
        usage=usage,
    )


def result(i: int, call: str, text: str = "r") -> Entry:
    return Entry(id=EntryId(i), conversation_id=CID, kind=EntryKind.TOOL_RESULT, text=text, tool_call_id=call, tool_name="read")


def test_the_reference_worked_example() -> None:
    """user(1), assistant-with-read(2), a 30k-token result(3), assistant(4),
    user(5), assistant(6), keep 20k: the cut is 4, the summary covers 1-3."""
    entries = [user(1), assistant(2, calls=("c",)), result(3, "c", "x" * 120_000), assistant(4), user(5), assistant(6)]
    assert estimate_entry_tokens(entries[2]) == 30_000
    assert select_cut(entries, 20_000) == 4


def test_nothing_to_compact_when_the_budget_is_never_reached() -> None:
    entries = [user(1), assistant(2)]
    assert select_cut(entries, 1_000_000) is None
    assert select_cut([], 10) is None


def test_markers_start_the_active_range() -> None:
    """A compaction marker keeps its head onwards (and is shown first); a
    reset keeps only what follows it."""
    summary = Entry(id=EntryId(7), conversation_id=CID, kind=EntryKind.COMPACTION, text=summary_text("S"), data={"head": 4})
    entries = [user(1), assistant(2), user(3), assistant(4), user(5), assistant(6), summary, user(8)]
    marker, kept = active_range(entries)
    assert marker == summary and [e.id for e in kept] == [4, 5, 6, 8]
    reset = Entry(id=EntryId(9), conversation_id=CID, kind=EntryKind.RESET, text="", data={"head": 9})
    marker, kept = active_range([*entries, reset, user(10)])
    assert marker == reset and [e.id for e in kept] == [10]
    marker, kept = active_range([*entries, reset, user(10)], cutoff=8)
    assert marker == summary


def test_usage_anchors_the_estimate() -> None:
    """A provider-reported usage counts everything up to its answer."""
    entries = [user(1, "x" * 400), assistant(2, usage=Usage(input_tokens=1000, output_tokens=10)), user(3, "y" * 40)]
    assert estimate_context_tokens(entries) == 1010 + 10
    assert estimate_context_tokens(entries[:1], system="s" * 8) == 100 + 2


def test_serialization_for_the_summarizer() -> None:
    msgs = context_messages([user(1, "fix it"), assistant(2, "", calls=("c",)), result(3, "c", "z" * 3000)])
    text = serialize_messages(msgs)
    assert text.startswith("[User]: fix it\n\n[Assistant tool calls]: read(path=\"a\")\n\n[Tool result]: ")
    assert len(text) < 2200


@st.composite
def transcripts(draw: st.DrawFn) -> list[Entry]:
    """Rounds of: a user message, then assistant turns with 0-3 calls whose
    results follow (sizes vary widely)."""
    out: list[Entry] = []
    n = 1
    for _ in range(draw(st.integers(1, 6))):
        out.append(user(n, "u" * draw(st.integers(0, 400))))
        n += 1
        for _ in range(draw(st.integers(1, 3))):
            calls = tuple(f"c{n}_{k}" for k in range(draw(st.integers(0, 3))))
            out.append(assistant(n, "a" * draw(st.integers(0, 200)), calls))
            n += 1
            for c in calls:
                out.append(result(n, c, "r" * draw(st.integers(0, 2000))))
                n += 1
    return out


@given(transcripts(), st.integers(1, 3000))
def test_a_cut_never_splits_a_call_from_its_result(entries: list[Entry], keep: int) -> None:
    """Whatever the cut, every kept result's call is kept too, something is
    summarized, and the kept part holds at least the budget unless the cut
    fell back to the newest candidate."""
    cut = select_cut(entries, keep)
    if cut is None:
        return
    kept = [e for e in entries if e.id >= cut]
    dropped = [e for e in entries if e.id < cut]
    kept_calls = {c.id for e in kept for c in e.tool_calls}
    for e in kept:
        if e.kind == EntryKind.TOOL_RESULT:
            assert e.tool_call_id in kept_calls, (cut, e.id)
    dropped_calls = {c.id for e in dropped for c in e.tool_calls}
    assert not any(e.tool_call_id in dropped_calls for e in kept)
    assert dropped, "a cut at the first entry compacts nothing"
    messages = context_messages(kept)
    assert not messages or messages[0].role in ("user", "assistant")


# --- issue 9: any sequence of rounds, compactions and resets --------------------------

from pidurable.core.compaction import _candidates, marker_head  # noqa: E402
from pidurable.core.context import context_entries  # noqa: E402


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Entry], int]:
    """A transcript grown by rounds, with compactions (select_cut over the
    active range, a marker keeping from the cut) and resets interleaved, and
    the keep budget the compactions used."""
    keep = draw(st.integers(1, 600))
    entries: list[Entry] = []
    n = 1

    def add(e: Entry) -> None:
        entries.append(e)

    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(("round", "round", "round", "compact", "reset")))
        if op == "round":
            add(user(n, "u" * draw(st.integers(0, 300))))
            n += 1
            for _ in range(draw(st.integers(1, 2))):
                calls = tuple(f"c{n}_{k}" for k in range(draw(st.integers(0, 2))))
                add(assistant(n, "a" * draw(st.integers(0, 150)), calls))
                n += 1
                for c in calls:
                    add(result(n, c, "r" * draw(st.integers(0, 1500))))
                    n += 1
        elif op == "compact":
            _, kept = active_range(entries)
            cut = select_cut(kept, keep)
            if cut is not None:
                add(Entry(id=EntryId(n), conversation_id=CID, kind=EntryKind.COMPACTION, text=summary_text(f"s{n}"), data={"head": cut}))
                n += 1
        else:
            add(Entry(id=EntryId(n), conversation_id=CID, kind=EntryKind.RESET, text="", data={"head": n}))
            n += 1
    return entries, keep


@given(histories())
def test_any_sequence_of_compactions_and_resets_keeps_the_context_sound(history: tuple[list[Entry], int]) -> None:
    """The context never splits a tool call from its result, never shows an
    entry twice, and a compaction never summarizes anything within the newest
    ``keep`` tokens of the range it compacted."""
    entries, keep = history
    shown = context_entries(entries)
    ids = [e.id for e in shown]
    assert len(ids) == len(set(ids)), "an entry shown twice"
    messages = context_messages(entries)
    calls = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls}
    results = [m.tool_call_id for m in messages if m.role == "tool"]
    assert sorted(results) == sorted(calls), "a call without its result, or a result without its call"
    kept_ids = {e.id for e in shown}
    for e in entries:
        if e.kind == EntryKind.TOOL_RESULT and e.id in kept_ids:
            owner = next(a for a in entries if any(c.id == e.tool_call_id for c in a.tool_calls))
            assert owner.id in kept_ids, f"result {e.id} kept without its call {owner.id}"
    marker, kept = active_range(entries)
    if marker is not None and marker.kind == EntryKind.COMPACTION:
        # the range the compaction summarized, as it stood when it ran
        _, summarized = active_range([e for e in entries if e.id < marker.id])
        cut = marker_head(marker)
        # the newest ``keep`` tokens are kept from their first possible range
        # start on: no candidate inside that window is summarized (a window
        # edge inside a tool round moves the cut forward, never splitting it)
        flags = _candidates(summarized)
        suffix = 0
        for i in range(len(summarized) - 1, -1, -1):
            suffix += estimate_entry_tokens(summarized[i])
            if suffix >= keep:
                break
            if flags[i]:
                assert summarized[i].id >= cut, f"entry {summarized[i].id} within the newest {keep} tokens was summarized (cut {cut})"
