"""Reset and head markers in the core (issue 9 item 5): a reset write gets its
own id as head, moves ``pi.context.head``, a stale summary is settled without
an entry, and a reset queued behind a tool round ends the run ``unanswered/reset``."""

from __future__ import annotations

import itertools
from typing import Any

from pidurable.core.effects import PutContext
from pidurable.core.events import WriteSubmitted
from pidurable.core.model import ConversationId, EntryKind, Reason, SubmissionStatus

from .helpers import (
    ROOT,
    Driver,
    Store,
    calls,
    finished,
    generation,
    opened_state,
    prepared,
    put_entries,
    put_subs,
    submit,
    tools,
    writes_of,
)

_tickets = itertools.count(5000)


def write(content: str, **kw: Any) -> WriteSubmitted:
    return WriteSubmitted(now=15, ticket=next(_tickets), conversation_id=ConversationId(ROOT), content=content, **kw)


def reset(handoff: str = "") -> WriteSubmitted:
    return write(handoff, kind=EntryKind.RESET, data={"head": "self"})


def test_idle_reset_is_its_own_head() -> None:
    """An idle reset is appended at once with ``data.head`` = its own id, and ``pi.context.head`` moves there."""
    d = Driver(opened_state())
    st = d(reset("carry on"))
    entry = put_entries(st)[0]
    assert entry.kind == EntryKind.RESET and entry.text == "carry on"
    assert entry.data == {"head": entry.id}
    assert writes_of(st, PutContext)[0].context.head == entry.id
    assert d.state.conversations[ROOT].context.head == entry.id


def test_a_summary_older_than_the_range_start_is_stale() -> None:
    """A compaction write whose head is older than the current range start settles ``unanswered/stale`` with no entry."""
    d = Driver(opened_state())
    d(reset())
    head = d.state.conversations[ROOT].context.head
    assert head is not None
    st = d(write("old summary", kind=EntryKind.COMPACTION, data={"head": head - 1}))
    assert put_entries(st) == []
    (sub,) = put_subs(st).values()
    assert sub.status == SubmissionStatus.UNANSWERED and sub.reason == Reason.STALE
    st = d(write("new summary", kind=EntryKind.COMPACTION, data={"head": head}))
    assert put_entries(st)[0].data == {"head": head}


def test_reset_queued_behind_a_tool_round_ends_the_run() -> None:
    """At a post-tools boundary a queued reset is placed, the run's inputs settle ``unanswered/reset``, and a queued follow-up starts a new run after it."""
    store = Store(opened_state())
    d = Driver(opened_state(), store)
    first = d.value(submit("work"))
    gen = generation(d.state)
    d(calls(gen.id, "read"))
    (tool,) = tools(d.state)
    d(prepared(tool.id))
    rid = d.value(reset("fresh start"))
    follow = d.value(submit("next"))
    st = d(finished(tool.id))
    subs = put_subs(st)
    assert subs[first].status == SubmissionStatus.UNANSWERED and subs[first].reason == Reason.RESET
    assert subs[rid].status == SubmissionStatus.DONE
    assert subs[follow].status == SubmissionStatus.PLACED
    kinds = [e.kind for e in put_entries(st)]
    assert kinds[-2:] == [EntryKind.RESET, EntryKind.USER]
    run = d.state.conversations[ROOT].live.run
    assert run is not None and run.inputs == (follow,)
