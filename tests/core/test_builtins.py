"""The built-in documents through the document machinery (core/builtins.py):
what revision each change stores, their ids, and the older journals' view."""

from __future__ import annotations

import enum

import attrs
import pytest

from pidurable.core import step
from pidurable.core import builtins, chord, typed_json
from pidurable.core.builtins import (
    BUILTINS,
    builtin_address,
    builtin_id,
    legacy_writes,
    to_json,
    typed_ops,
)
from pidurable.core.documents import BASE_EVERY, ROWS, DocInput, DocStatus
from pidurable.core.draft import Tx
from pidurable.core.effects import (
    Step,
    Commit,
    PutAgent,
    PutConversation,
    PutDocument,
    PutInbox,
    PutLive,
    RevisionAction,
)
from pidurable.core.events import RootRequested
from pidurable.core.model import AgentConfig, ConversationId, ModelRef, SubmissionId, TaskId
from pidurable.core.state import (
    AGENT_DOC,
    INBOX_DOC,
    LIVE_DOC,
    USAGE_DOC,
    DocHistory,
    ForkPolicy,
    InboxItem,
    InboxMode,
    Live,
    RunInfo,
    SlotStatus,
    State,
    ToolSlot,
    UsageDoc,
    UsageTotals,
)

from .helpers import ROOT, opened_state, put_live, submit

C = ConversationId(ROOT)


def _revision(tx: Tx, kind: str, cid: int = ROOT) -> PutDocument:
    (commit,) = [e for e in tx.finish().effects if isinstance(e, Commit)]
    (w,) = [w for w in commit.writes if isinstance(w, PutDocument) and w.document_id == builtin_id(cid, kind)]
    return w


def _commit(state: State, change: object) -> tuple[State, PutDocument]:
    """One step's draft that makes ``change(tx)``; the state after and the revision."""
    tx = Tx(state, now=0)
    change(tx)  # type: ignore[operator]
    result = tx.finish()
    (commit,) = [e for e in result.effects if isinstance(e, Commit)]
    (w,) = [w for w in commit.writes if isinstance(w, PutDocument)]
    return result.state, w


def test_the_kinds_keep_the_references_policies() -> None:
    """pi.agent is rewindable and forks as_of; the others keep their latest
    value and start empty in a fork (reference section 2.6)."""
    assert (BUILTINS[AGENT_DOC].history, BUILTINS[AGENT_DOC].fork) == (DocHistory.REWINDABLE, ForkPolicy.AS_OF)
    for kind in (LIVE_DOC, INBOX_DOC, USAGE_DOC, "pi.context"):
        assert (BUILTINS[kind].history, BUILTINS[kind].fork) == (DocHistory.LATEST, ForkPolicy.INITIAL)


def test_ids_are_derived_from_the_conversation_and_never_collide() -> None:
    seen = set()
    for cid in (1, 2, 7, 10**9):
        for kind in BUILTINS:
            did = builtin_id(cid, kind)
            assert did < 0 and builtin_address(did) == (cid, kind)
            seen.add(did)
    assert len(seen) == 4 * len(BUILTINS)
    assert builtin_address(5) is None and builtin_address(-8 * 3 - 7) is None


def test_the_quiet_row_stores_a_base() -> None:
    row = ROWS[(DocStatus.LIVE, DocInput.QUIET)]
    assert row.action is RevisionAction.BASE and row.next is DocStatus.LIVE


def test_a_new_conversation_stores_its_agent_and_only_what_is_not_initial() -> None:
    """The root's creation: its record, then a base of pi.agent (created with
    its conversation, even at its initial value); pi.live and pi.inbox at
    their initial values store nothing (absent reads as initial)."""
    st = step(opened_state(conversations=()), RootRequested(now=0, ticket=1))
    (commit,) = [e for e in st.effects if isinstance(e, Commit)]
    assert [type(w) for w in commit.writes] == [PutConversation, PutDocument]
    w = commit.writes[1]
    assert isinstance(w, PutDocument) and w.document_id == builtin_id(1, AGENT_DOC)
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {}
    assert st.state.conversations[C].stored == {AGENT_DOC: 0}


def test_a_usage_counter_increment_journals_a_small_delta() -> None:
    """O(delta): after the base, one more call of a model is a delta of the
    numbers that changed, not the whole usage document."""
    usage = UsageDoc(models={f"p/m{i}": UsageTotals(input_tokens=100, output_tokens=10, calls=1) for i in range(20)})
    state, w = _commit(opened_state(), lambda tx: tx.set_usage(C, usage))
    assert w.revision.action is RevisionAction.BASE and len(w.revision.value["models"]) == 20
    more = attrs.evolve(usage, models={**usage.models, "p/m3": UsageTotals(input_tokens=150, output_tokens=12, calls=2)})
    state, w = _commit(state, lambda tx: tx.set_usage(C, more))
    assert w.revision.action is RevisionAction.DELTA and w.revision.value is None
    assert w.revision.ops == (
        ["s", ["models", "p/m3", "input_tokens"], 150],
        ["s", ["models", "p/m3", "output_tokens"], 12],
        ["s", ["models", "p/m3", "calls"], 2],
    )
    assert state.conversations[C].stored[USAGE_DOC] == 1


def test_a_base_every_BASE_EVERY_deltas() -> None:
    state = opened_state()
    actions = []
    for i in range(1, 2 * BASE_EVERY + 2):
        state, w = _commit(state, lambda tx, i=i: tx.set_usage(C, UsageDoc(tools={"t": UsageTotals(calls=i)})))
        actions.append(w.revision.action)
    assert actions[0] is RevisionAction.BASE
    assert [i for i, a in enumerate(actions) if a is RevisionAction.BASE] == [0, BASE_EVERY, 2 * BASE_EVERY]


def test_a_quiet_kind_stores_a_base_when_back_at_its_initial_value() -> None:
    """pi.live: a run is a delta of it; idle again, a base of ``{}`` (smaller
    than a delta, and it lets storage reclaim every revision before it)."""
    state, w = _commit(opened_state(), lambda tx: tx.set_live(C, Live(attempt=1)))
    assert w.revision.action is RevisionAction.BASE
    busy = Live(run=RunInfo(task_id=TaskId(9), inputs=(SubmissionId(8),)), attempt=1)
    state, w = _commit(state, lambda tx: tx.set_live(C, busy))
    assert w.revision.action is RevisionAction.DELTA and w.revision.ops == (
        ["s", ["run"], {"task_id": 9, "inputs": [8]}],
    )
    state, w = _commit(state, lambda tx: tx.set_live(C, Live()))
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {}
    assert state.conversations[C].stored[LIVE_DOC] == 0


def test_two_changes_in_one_step_are_one_revision() -> None:
    state, _ = _commit(opened_state(), lambda tx: tx.set_live(C, Live(attempt=1)))

    def twice(tx: Tx) -> None:
        tx.set_live(C, Live(attempt=2))
        tx.set_live(C, Live(attempt=2, partial="he"))

    state, w = _commit(state, twice)
    assert w.revision.action is RevisionAction.DELTA
    assert w.revision.ops == (["s", ["attempt"], 2], ["s", ["partial"], "he"])
    assert state.conversations[C].stored[LIVE_DOC] == 1


def test_a_change_placed_within_one_slot_is_that_slots_diff() -> None:
    """A slot move names the one slot it changed (``within``): the revision is
    that slot's diff at ``tools[i]``, the same ops as the whole document's;
    a change placed where it is not is caught by CHECK_WITHIN (on in tests)."""
    run = RunInfo(task_id=TaskId(9), inputs=())
    slots = (ToolSlot(call_id="a", name="t", task_id=TaskId(4)), ToolSlot(call_id="b", name="t", task_id=TaskId(5)))
    state, _ = _commit(opened_state(), lambda tx: tx.set_live(C, Live(run=run, attempt=1)))
    state, _ = _commit(state, lambda tx: tx.set_live(C, Live(run=run, tools=slots)))
    settled = attrs.evolve(slots[1], status=SlotStatus.DONE, entry_id=12)
    after = Live(run=run, tools=(slots[0], settled))
    whole_state, whole = _commit(state, lambda tx: tx.set_live(C, after))
    placed_state, placed = _commit(state, lambda tx: tx.set_live(C, after, ("tools", 1)))
    assert placed == whole and placed_state == whole_state
    assert placed.revision.ops == (["s", ["tools", 1, "status"], "done"], ["s", ["tools", 1, "entry_id"], 12])
    assert builtins.CHECK_WITHIN
    with pytest.raises(AssertionError, match="is not"):
        _commit(state, lambda tx: tx.set_live(C, after, ("tools", 0)))
    with pytest.raises(AssertionError, match="is not"):
        _commit(state, lambda tx: tx.set_live(C, attrs.evolve(after, attempt=3), ("tools", 1)))


@pytest.mark.parametrize(
    "value",
    [
        AgentConfig(),
        AgentConfig(model=ModelRef("p", "m"), tools=("a", "b"), tool_execution="sequential"),  # type: ignore[arg-type]
        Live(run=RunInfo(task_id=TaskId(3), inputs=()), partial="x"),
        UsageDoc(models={"p/m": UsageTotals(calls=2)}),
        (),
    ],
)
def test_to_json_leaves_defaults_out(value: object) -> None:
    out = to_json(value)
    if isinstance(value, tuple):
        assert out == []
    else:
        assert all(getattr(value, k) != f.default for k, f in attrs.fields_dict(type(value)).items() if k in out)


def test_an_older_journals_view_has_the_whole_values_where_it_wrote_them() -> None:
    """legacy_writes: a new conversation is followed by its agent, live state
    and inbox (journal formats 1-3 wrote them at creation), and each built-in
    revision reads as the built-in's whole value after the step."""
    st = step(opened_state(conversations=()), RootRequested(now=0, ticket=1))
    (commit,) = [e for e in st.effects if isinstance(e, Commit)]
    old = legacy_writes(commit.writes, st.state)
    assert [type(w) for w in old] == [PutConversation, PutAgent, PutLive, PutInbox]
    state = opened_state(resume=False)
    st = step(state, submit("hi"))
    (commit,) = [e for e in st.effects if isinstance(e, Commit)]
    old = legacy_writes(commit.writes, st.state)
    lives = [w for w in old if isinstance(w, PutLive)]
    assert len(lives) == 1 and lives[0].live == st.state.conversations[C].live == put_live(st)
    assert not any(isinstance(w, PutDocument) for w in old)


def _slot(i: int, **kw: object) -> ToolSlot:
    return ToolSlot(call_id=f"c{i}", name="t", task_id=TaskId(10 + i), **kw)  # type: ignore[arg-type]


_RUN = RunInfo(task_id=TaskId(5), inputs=(SubmissionId(3),))
_SLOTS = (_slot(0, status=SlotStatus.RUNNING), _slot(1), _slot(2, status=SlotStatus.RUNNING, output="ab"))
_CHANGES = [
    (Live(), Live(run=_RUN, attempt=1)),
    (Live(run=_RUN, tools=_SLOTS), Live(run=_RUN, tools=(_SLOTS[0], _slot(1, status=SlotStatus.DONE, entry_id=40), _SLOTS[2]))),
    (Live(run=_RUN, tools=_SLOTS), Live(run=_RUN, tools=_SLOTS[:2])),
    (Live(run=_RUN, tools=_SLOTS), Live(run=_RUN, tools=(*_SLOTS[:2], attrs.evolve(_SLOTS[2], output="abcd")))),
    (Live(run=_RUN, partial="hel"), Live(run=_RUN, partial="hello")),
    (Live(run=_RUN, tools=_SLOTS, partial="x"), Live()),
    (Live(run=_RUN, retry_at=5, retry_error="boom"), Live(run=_RUN, attempt=2)),
    (UsageDoc(models={"p:m": UsageTotals(calls=1)}), UsageDoc(models={"p:m": UsageTotals(calls=2), "p:n": UsageTotals(calls=1)})),
    (AgentConfig(model=ModelRef("p", "a"), tools=("x",)), AgentConfig(model=ModelRef("p", "b"), instructions="i")),
    ((), (InboxItem(submission_id=SubmissionId(4), mode=InboxMode.STEER, content="x"),)),
    (Live(run=_RUN, tools=_SLOTS), Live(run=_RUN, tools=tuple(attrs.evolve(s, status=SlotStatus.DONE) for s in _SLOTS))),
    (Live(tools=_SLOTS, partial="ab"), Live(run=_RUN, tools=_SLOTS, attempt=3)),
    # dicts are walked member by member: a member gone, one equal but not the same object, one new
    (
        UsageDoc(models={"p:a": UsageTotals(calls=1), "p:b": UsageTotals(calls=1)}),
        UsageDoc(models={"p:b": UsageTotals(calls=1), "p:c": UsageTotals(calls=3)}),
    ),
    (UsageDoc(tools={"t": UsageTotals()}), UsageDoc(tools={"t": UsageTotals(calls=2)})),
    (UsageDoc(tools={"t": UsageTotals(calls=2)}), UsageDoc()),
    (
        (InboxItem(submission_id=SubmissionId(4), mode=InboxMode.WRITE, content="x", data={"a": 1, "b": [1, 2], "c": {"d": "x"}}),),
        (InboxItem(submission_id=SubmissionId(4), mode=InboxMode.WRITE, content="x", data={"b": [1, 2, 3], "c": {"d": "xy"}, "e": None}),),
    ),
    (
        (InboxItem(submission_id=SubmissionId(4), mode=InboxMode.WRITE, content="x", data={"a": 1}),),
        (InboxItem(submission_id=SubmissionId(4), mode=InboxMode.WRITE, content="x", data={"a": 1.0, "b": True}),),
    ),
]


class _Mode(enum.StrEnum):
    """Values that are edits of each other (chord: append, front trim)."""

    RUN = "run"
    RUNNING = "running"
    NING = "ning"
    OFF = "off"


@attrs.frozen(kw_only=True)
class _Rec:
    """A record with a status, a float and a record at their defaults."""

    mode: _Mode = _Mode.OFF
    ratio: float = 0.5
    run: RunInfo | None = None
    tags: tuple[str, ...] = ()


_CHANGES += [
    # a status to another: the edit chord finds for their values (found once per pair)
    (_Rec(mode=_Mode.RUN), _Rec(mode=_Mode.RUNNING)),
    (_Rec(mode=_Mode.RUN), _Rec(mode=_Mode.RUNNING)),
    (_Rec(mode=_Mode.RUNNING), _Rec(mode=_Mode.RUN)),
    (_Rec(mode=_Mode.RUNNING), _Rec(mode=_Mode.NING)),
    (_Rec(mode=_Mode.RUNNING), _Rec()),
    (_Rec(), _Rec(mode=_Mode.RUNNING)),
    (_Rec(mode=_Mode.RUNNING, tags=("a",)), _Rec(mode=_Mode.RUN, tags=("a",))),
    # equal to its default but not the same object: left out, like the default
    (_Rec(ratio=0.25), _Rec(ratio=float("0.5"))),
    (_Rec(ratio=float("0.5"), tags=("a",)), _Rec(ratio=0.25, run=_RUN)),
    (_Rec(run=_RUN), _Rec(run=RunInfo(task_id=TaskId(5), inputs=()), tags=("a", "b"))),
    (_Rec(run=_RUN, ratio=1.0), _Rec(mode=_Mode.RUN)),
]


def test_a_field_equal_to_its_default_is_left_out() -> None:
    """to_json leaves out a field that is its default or equal to it (not the
    same object), and keeps a record, a status and a tuple that are not."""
    assert to_json(_Rec(ratio=float("0.5"))) == {}
    assert to_json(_Rec(mode=_Mode.RUN, run=_RUN, tags=("x",))) == {
        "mode": "run",
        "run": {"task_id": 5, "inputs": [3]},
        "tags": ["x"],
    }


@pytest.mark.parametrize(("old", "new"), _CHANGES)
def test_typed_ops_turn_the_old_json_into_the_new(old: object, new: object) -> None:
    """typed_ops (found on the typed values, reusing what a change kept)
    applied to the old value's JSON give the new value's JSON, with as few
    ops as the JSON diff."""
    ops = typed_ops(old, new)
    assert chord.apply(to_json(old), ops) == to_json(new)
    assert tuple(ops) == chord.diff(to_json(old), to_json(new))  # the same ops, found without converting it all
    assert typed_ops(new, new) == []


@pytest.mark.parametrize(
    "slot",
    [
        ToolSlot(call_id="c", name="t"),
        ToolSlot(call_id="c", name="t", task_id=TaskId(4), status=SlotStatus.RUNNING, output="so far"),
        ToolSlot(call_id="c", name="t", task_id=TaskId(4), status=SlotStatus.DONE, entry_id=9, control={"k": [1, {"x": None}]}),  # type: ignore[arg-type]
        ToolSlot(call_id="c", name="t", status=SlotStatus.PENDING, output=""),
    ],
)
def test_a_slot_spelt_out_is_the_generic_records_json(slot: ToolSlot) -> None:
    """to_json's spelt-out slot (_slot_json) makes what the generic record
    case makes: every field not at its default, in declared order."""
    want = {
        f.name: to_json(getattr(slot, f.name))
        for f in attrs.fields(ToolSlot)
        if f.default is attrs.NOTHING or getattr(slot, f.name) != f.default
    }
    got = typed_json._slot_json(slot)
    assert got == want and list(got) == list(want)


def test_changes_joined_in_one_step_are_one_write_in_the_first_ones_place() -> None:
    """A staged revision is built once, at the step's end (Tx.finish): later
    changes of the same document join it - deltas add their ops, a base takes
    the newest value - and its write keeps the place of the first change."""
    state, _ = _commit(opened_state(), lambda tx: tx.set_live(C, Live(attempt=1)))
    usage = UsageDoc(models={"p/m": UsageTotals(calls=1)})

    def three(tx: Tx) -> None:
        tx.set_live(C, Live(attempt=2))
        tx.set_usage(C, usage)
        tx.set_live(C, Live(attempt=2, partial="he"))
        tx.set_live(C, Live(attempt=2, partial="hey"))

    result = step_tx(state, three)
    (commit,) = [e for e in result.effects if isinstance(e, Commit)]
    assert [w.document_id for w in commit.writes if isinstance(w, PutDocument)] == [
        builtin_id(C, LIVE_DOC), builtin_id(C, USAGE_DOC)]
    live = commit.writes[0]
    assert isinstance(live, PutDocument) and live.revision.action is RevisionAction.DELTA
    assert live.revision.ops == (["s", ["attempt"], 2], ["s", ["partial"], "he"], ["a", ["partial"], "y"])
    assert result.state.conversations[C].stored[LIVE_DOC] == 1

    def back(tx: Tx) -> None:  # a delta, then back at the initial value: one base of it
        tx.set_live(C, Live(attempt=3))
        tx.set_live(C, Live())

    state, w = _commit(result.state, back)
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {} and w.revision.ops == ()
    assert state.conversations[C].stored[LIVE_DOC] == 0

    def base_then_change(tx: Tx) -> None:  # a base first: the newest value is the base
        tx.set_live(C, Live(attempt=4))
        tx.set_live(C, Live(attempt=5))

    state, w = _commit(opened_state(), base_then_change)
    assert w.revision.action is RevisionAction.BASE and w.revision.value == {"attempt": 5}
    assert state.conversations[C].stored[LIVE_DOC] == 0


def step_tx(state: State, change: object) -> Step:
    tx = Tx(state, now=0)
    change(tx)  # type: ignore[operator]
    return tx.finish()


@pytest.mark.parametrize("reported", [None, (7, 3)])
@pytest.mark.parametrize("prior", [None, UsageTotals(input_tokens=100, output_tokens=10, calls=4)])
def test_count_usage_adds_one_call_to_its_models_totals(reported: tuple[int, int] | None, prior: UsageTotals | None) -> None:
    """answers.count_usage (spelt out, set without comparing: a call counted
    always changes pi.usage) makes ``prior + UsageTotals.one_call(usage)``."""
    from pidurable.core.answers import count_usage
    from pidurable.core.model import Usage

    usage = None if reported is None else Usage(input_tokens=reported[0], output_tokens=reported[1])
    models = {"q:n": UsageTotals(calls=1)} if prior is None else {"q:n": UsageTotals(calls=1), "p:m": prior}
    doc = UsageDoc(models=models, tools={"t": UsageTotals(calls=2)})
    state, _ = _commit(opened_state(), lambda tx: tx.set_usage(C, doc))
    state, w = _commit(state, lambda tx: count_usage(tx, C, ModelRef("p", "m"), usage))
    want = (UsageTotals() if prior is None else prior) + UsageTotals.one_call(usage)
    assert state.conversations[C].usage == attrs.evolve(doc, models={**models, "p:m": want})
    assert list(state.conversations[C].usage.models) == [*models] + ([] if prior is not None else ["p:m"])
    assert w.revision.action is RevisionAction.DELTA
