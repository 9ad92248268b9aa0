"""Every invariant checker in tests/invariants.py can fail: each is fed a
small store or effect log that breaks exactly its rule (and a good one that
keeps it). A checker that cannot fail would prove nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

import invariants
from pidurable.core.effects import CallModel, Commit, PrepareTool, RunTool
from pidurable.core.model import ConversationId, EntryId, ModelRef, TaskId
from pidurable.shell.storage.base import JournalRow


def task(tid: int, status: str = "pending", phase: str = "prepare", *, kind: str = "pi.generation",
         owner: int | None = None, outcome: Any = None, on: tuple[int, ...] = (), **cp: Any) -> dict[str, Any]:
    return {
        "id": tid, "conversation_id": 1, "kind": kind, "version": 1, "input": cp.pop("input", {}),
        "owner": owner, "background": False, "abort_requested": False, "status": status,
        "checkpoint": {"phase": phase, **cp}, "on": list(on), "policy": "allSettled", "outcome": outcome,
        "memos": None, "started_at": None, "ended_at": None,
    }


def sub(sid: int, status: str, *, type_: str = "input", entry_id: int | None = None) -> dict[str, Any]:
    return {"id": sid, "conversation_id": 1, "type": type_, "status": status, "request_id": None,
            "entry_id": entry_id, "answer_entry_id": None, "reason": None, "detail": None}


def entry(eid: int, kind: str = "user", calls: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": eid, "conversation_id": 1, "kind": kind, "text": "", "tool_calls": [
        {"id": c, "name": "t", "arguments": {}} for c in calls], "tool_call_id": None, "tool_name": None,
        "is_error": False, "stop_reason": "tool_use" if calls else None, "usage": None, "by_task_id": None,
        "at": 0, "data": None}


def live(run: tuple[int, list[int]] | None) -> dict[str, Any]:
    return {"type": "pi.live", "conversation_id": 1, "live": {
        "run": None if run is None else {"task_id": run[0], "inputs": run[1]}, "tools": None, "attempt": None,
        "partial": None, "retry_at": None, "retry_error": None, "poll_at": None}}


def inbox(*sids: int) -> dict[str, Any]:
    return {"type": "pi.inbox", "conversation_id": 1, "items": [
        {"submission_id": s, "mode": "follow_up", "content": "x", "kind": None, "data": None} for s in sids]}


class Journal:
    """Just enough of a storage for the journal checkers."""

    def __init__(self, *commits: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self.rows = [
            JournalRow(seq=i, events=json.dumps(events), writes=json.dumps(writes), format=1)  # every field, as format 1
            for i, (events, writes) in enumerate(commits, start=1)
        ]

    def journal(self) -> list[JournalRow]:
        return self.rows


def w(tag: str, record: dict[str, Any]) -> dict[str, Any]:
    return {"type": tag, tag: record}


EV = [{"type": "resumed", "now": 0}]


def test_outcome_iff_terminal_fails_on_a_terminal_task_without_outcome() -> None:
    invariants.outcome_iff_terminal(Journal((EV, [w("task", task(5, "terminal", outcome={"status": "completed"}))])))
    with pytest.raises(AssertionError, match="OutcomeIffTerminal"):
        invariants.outcome_iff_terminal(Journal((EV, [w("task", task(5, "terminal"))])))


def test_admission_is_atomic_fails_on_a_placed_input_without_its_entry_or_run() -> None:
    good = [w("submission", sub(3, "placed", entry_id=2)), w("entry", entry(2)), live((4, [3]))]
    invariants.admission_is_atomic(Journal((EV, good)))
    with pytest.raises(AssertionError, match="without its user entry"):
        invariants.admission_is_atomic(Journal((EV, [w("submission", sub(3, "placed", entry_id=2)), live((4, [3]))])))
    with pytest.raises(AssertionError, match="without its inbox item"):
        invariants.admission_is_atomic(Journal((EV, [w("submission", sub(3, "queued")), inbox()])))


def test_queued_input_never_lost_fails_when_an_item_vanishes() -> None:
    first = (EV, [w("submission", sub(3, "queued")), inbox(3)])
    invariants.queued_input_never_lost(Journal(first, (EV, [w("submission", sub(3, "placed", entry_id=9)), inbox()])))
    with pytest.raises(AssertionError, match="QueuedInputNeverLost"):
        invariants.queued_input_never_lost(Journal(first, (EV, [inbox()])))


def test_round_is_atomic_fails_on_an_assistant_entry_without_its_tool_tasks() -> None:
    gen = task(4, "waiting", "tools", on=(6,), assistant=5)
    tool = task(6, kind="pi.tool", phase="call", input={"assistant": 5, "call_id": "c", "name": "t"})
    invariants.round_is_atomic(Journal((EV, [w("entry", entry(5, "assistant", ("c",))), w("task", gen), w("task", tool)])))
    with pytest.raises(AssertionError, match="RoundIsAtomic"):
        invariants.round_is_atomic(Journal((EV, [w("entry", entry(5, "assistant", ("c",))), w("task", gen)])))


def test_run_has_one_owner_fails_when_the_run_outlives_its_generation() -> None:
    start = (EV, [w("task", task(4)), live((4, [3]))])
    done = w("task", task(4, "terminal", outcome={"status": "completed"}))
    invariants.run_has_one_owner(Journal(start, (EV, [done, live(None)])))
    with pytest.raises(AssertionError, match="RunHasOneOwner"):
        invariants.run_has_one_owner(Journal(start, (EV, [done])))


def test_recovery_keeps_checkpoints_fails_when_the_open_rewrites_one() -> None:
    running = (EV, [w("task", task(4, "running", "request", attempt=1))])
    opened = [{"type": "opened", "now": 1}]
    invariants.recovery_keeps_checkpoints(Journal(running, (opened, [w("task", task(4, "pending", "request", attempt=1))])))
    with pytest.raises(AssertionError, match="RecoveryKeepsCheckpoints"):
        invariants.recovery_keeps_checkpoints(Journal(running, (opened, [w("task", task(4, "pending", "prepare"))])))


def test_owner_ends_after_owned_fails_on_top_down_settlement() -> None:
    start = (EV, [w("task", task(4)), w("task", task(6, kind="pi.tool", owner=4))])
    end_child = w("task", task(6, "terminal", kind="pi.tool", owner=4, outcome={"status": "aborted"}))
    end_owner = w("task", task(4, "terminal", outcome={"status": "aborted"}))
    invariants.owner_ends_after_owned(Journal(start, (EV, [end_child, end_owner])))
    with pytest.raises(AssertionError, match="OwnerEndsAfterOwned"):
        invariants.owner_ends_after_owned(Journal(start, (EV, [end_owner])))


def test_life_checkers_fail_on_acts_before_their_intent() -> None:
    storage = Journal((EV, [w("task", task(4, "running", "request", attempt=1, model={}, cutoff=1))]),
                      (EV, [w("task", task(6, "running", "execute", kind="pi.tool", arguments={"a": 1}, replay="safe"))]))
    call = CallModel(task_id=TaskId(4), conversation_id=ConversationId(1), attempt=1, model=ModelRef("p", "m"),
                     cutoff=EntryId(1))
    run = RunTool(task_id=TaskId(6), conversation_id=ConversationId(1), call_id="c", name="t", arguments={"a": 1})
    c1, c2 = Commit(seq=1, writes=()), Commit(seq=2, writes=())
    invariants.intent_before_request(storage, [(0, [c1, call])])
    invariants.intent_before_effect(storage, [(0, [c1, c2, run])])
    invariants.intent_before_effect(storage, [(2, [run])])  # a recovered intent from an earlier life
    with pytest.raises(AssertionError, match="IntentBeforeRequest"):
        invariants.intent_before_request(storage, [(0, [call, c1])])
    with pytest.raises(AssertionError, match="IntentBeforeEffect"):
        invariants.intent_before_effect(storage, [(0, [c1, run, c2])])
    prep = PrepareTool(task_id=TaskId(6), conversation_id=ConversationId(1), assistant_entry_id=EntryId(5),
                       call_id="c", name="t")
    invariants.one_invocation_per_task([[prep, run], [run]])
    with pytest.raises(AssertionError, match="OneInvocationPerTask"):
        invariants.one_invocation_per_task([[run, c1, run]])


def _finished_store() -> Any:
    """A real store after one tool round (memory backend)."""
    import trio

    from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, Registry, define_tool
    from pidurable.shell.providers import ScriptedModels, reply, tool_call

    storage = MemoryStorage()

    async def main() -> None:
        async def t(call: Any, args: dict[str, Any]) -> str:
            return "ok"

        registry = Registry()
        registry.install(define_tool("t", "t", {"type": "object"}, t, replay="safe"))
        models = ScriptedModels([reply(tool_calls=[tool_call("t")]), reply(text="done")])
        async with Harness.open(storage, models=models, registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            await (await conv.submit(Input("go", request_id="r1"))).wait()

    trio.run(main)
    return storage


class Tampered:
    """A store whose reads differ from what it journaled."""

    def __init__(self, inner: Any, **reads: Any) -> None:
        self.inner, self.reads = inner, reads

    def __getattr__(self, name: str) -> Any:
        if name in self.reads:
            return self.reads[name]
        return getattr(self.inner, name)


def test_store_level_checkers_pass_on_a_real_store_and_fail_on_a_tampered_one() -> None:
    import attrs

    storage = _finished_store()
    invariants.journal_invariants(storage)
    invariants.request_id_is_unique(storage)
    invariants.context_pairs_calls_with_results(storage)
    invariants.stored_text_is_valid_utf8(storage)

    tasks = storage.tasks()
    changed = [attrs.evolve(tasks[0], checkpoint={"phase": "forged"})] + tasks[1:]
    with pytest.raises(AssertionError, match="StoreMatchesJournal"):
        invariants.store_matches_journal(Tampered(storage, tasks=lambda *a, **k: changed))

    subs = storage.submissions()
    with pytest.raises(AssertionError, match="RequestIdIsUnique"):
        invariants.request_id_is_unique(Tampered(storage, submissions=lambda *a: subs + [attrs.evolve(subs[0], id=99)]))

    entries = storage.entries(1)
    original = invariants.context_messages
    try:  # a context derivation that lost a tool result must be caught
        invariants.context_messages = lambda es, cutoff=None: [m for m in original(es) if m.role != "tool"]  # type: ignore[assignment]
        with pytest.raises(AssertionError, match="ContextPairsCallsWithResults"):
            invariants.context_pairs_calls_with_results(storage)
    finally:
        invariants.context_messages = original  # type: ignore[assignment]

    poisoned = [attrs.evolve(entries[0], text="bad \ud800")] + entries[1:]
    with pytest.raises(AssertionError, match="StoredTextIsValidUtf8"):
        invariants.stored_text_is_valid_utf8(Tampered(storage, entries=lambda cid, *a, **k: poisoned))



def rev(action: str, *, value: Any = None, ops: Any = (), owner: int = 1, history: str = "rewindable") -> dict[str, Any]:
    return {"type": "document", "document_id": 7, "revision": {
        "scope": "conversation", "owner": owner, "kind": "todo", "version": 1, "history": history, "fork": "as_of",
        "action": action, "value": value, "ops": list(ops)}}


class Documents(Journal):
    """A journal plus the document reads of a store holding ``values``
    (seq -> the value ``document_at`` reads; the newest is current)."""

    def __init__(self, values: dict[int, Any], *commits: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        super().__init__(*commits)
        self.values = values

    def document_state(self, scope: Any, owner: int, kind: str) -> Any:
        import types

        return types.SimpleNamespace(id=7, value=self.values[max(self.values)])

    def document_at(self, cid: int, kind: str, seq: int) -> Any:
        import types

        return types.SimpleNamespace(id=7, value=self.values[max(s for s in self.values if s <= seq)])


def test_document_matches_revisions_fails_when_the_store_disagrees_with_the_replay() -> None:
    commits = ((EV, [rev("base", value={"items": []})]), (EV, [rev("delta", ops=[["p", ["items"], 0, 0, ["a"]]])]))
    invariants.document_matches_revisions(Documents({1: {"items": []}, 2: {"items": ["a"]}}, *commits))
    with pytest.raises(AssertionError, match="DocumentMatchesRevisions.*holds"):
        invariants.document_matches_revisions(Documents({1: {"items": []}, 2: {"items": ["b"]}}, *commits))
    with pytest.raises(AssertionError, match="DocumentMatchesRevisions.*as of commit 1"):
        invariants.document_matches_revisions(Documents({1: {"items": ["x"]}, 2: {"items": ["a"]}}, *commits))


def test_tool_document_with_result_fails_on_an_update_without_its_result() -> None:
    change = {"scope": "conversation", "owner": 1, "kind": "todo", "version": 1, "history": "rewindable",
              "fork": "as_of", "ops": [["r", {"items": []}]]}
    finished = [{"type": "tool_finished", "now": 0, "task_id": 6, "documents": [change], "text": "ok"}]
    result = dict(entry(9, "tool_result"), by_task_id=6)
    invariants.tool_document_with_result(Journal((finished, [w("entry", result), rev("base", value={"items": []})])))
    with pytest.raises(AssertionError, match="without the tool's result entry"):
        invariants.tool_document_with_result(Journal((finished, [rev("base", value={"items": []})])))
    with pytest.raises(AssertionError, match="drops staged changes"):
        invariants.tool_document_with_result(Journal((finished, [w("entry", result)])))
    with pytest.raises(AssertionError, match="for a resumed event"):
        invariants.tool_document_with_result(Journal((EV, [rev("base", value={"items": []})])))


# --- scale-out (tla/Leases.tla) ------------------------------------------------

LC = invariants.LeaseCommit


def test_lease_checkers_hold_for_a_clean_takeover() -> None:
    """Worker a holds epoch 1, dies; b claims epoch 2 with a fresh id block."""
    landed = [LC(1, 1, "a", 1, (10, 11)), LC(1, 1, "a", 2, (12,)), LC(1, 2, "b", 3, (20,)), LC(5, 1, "b", 4, (30,))]
    invariants.lease_invariants(landed, {6: 1, 7: 0})


def test_commits_are_fenced_fails_on_a_stale_epoch_after_a_newer_one() -> None:
    with pytest.raises(AssertionError, match="epoch 1 .*landed after commit 2 of epoch 2"):
        invariants.commits_are_fenced([LC(1, 1, "a", 1), LC(1, 2, "b", 2), LC(1, 1, "a", 3)])
    invariants.commits_are_fenced([LC(1, 2, "b", 2), LC(3, 1, "a", 3)])  # other trees are independent


def test_one_writer_per_epoch_fails_on_two_workers_in_one_epoch() -> None:
    with pytest.raises(AssertionError, match="epoch 1 has commits by a and by b"):
        invariants.one_writer_per_epoch([LC(1, 1, "a", 1), LC(1, 1, "b", 2)])


def test_tree_ids_increase_fails_on_an_id_below_an_earlier_commit() -> None:
    with pytest.raises(AssertionError, match="allocated id 15, not above id 20"):
        invariants.tree_ids_increase([LC(1, 2, "b", 1, (20,)), LC(1, 3, "a", 2, (15,))])
    with pytest.raises(AssertionError, match="allocated id 20, not above id 20"):
        invariants.tree_ids_increase([LC(1, 1, "a", 1, (20,)), LC(1, 1, "a", 2, (20,))])


def test_unsafe_body_runs_at_most_once_across_workers_fails_on_a_second_run() -> None:
    with pytest.raises(AssertionError, match=r"\{6: 2\}"):
        invariants.unsafe_body_runs_at_most_once_across_workers({6: 2, 7: 1})


# --- the checkers' caches (tests/invariants.py) answer what a cold read does ---------------


def test_prefixes_find_the_longest_stored_prefix_and_empty_when_full() -> None:
    p = invariants._Prefixes(most=3)
    assert p.longest(("a", "b")) == (0, None)
    p.put(("a", "b"), "ab")
    assert p.longest(("a", "b", "c")) == (2, "ab")
    assert p.longest(("a",)) == (0, None)  # a node on the path holds no result of its own
    assert p.longest(("a", "x")) == (0, None)
    p.put(("a",), "a")
    assert p.longest(("a", "x")) == (1, "a") and p.longest(("a", "b", "c")) == (2, "ab")
    p.put(("a",), "a again")  # replaced, not counted twice
    assert p.held == 2 and p.longest(("a",)) == (1, "a again")
    p.put(("z",), "z")
    p.put(("y",), "y")  # the 4th result: emptied first
    assert p.held == 1 and p.longest(("a", "b")) == (0, None) and p.longest(("y",)) == (1, "y")


class Prefix:
    """The first ``n`` rows of a store's journal, as a storage."""

    def __init__(self, inner: Any, n: int) -> None:
        self.rows = inner.journal()[:n]

    def journal(self) -> list[JournalRow]:
        return self.rows


def _cold(storage: Any) -> list[Any]:
    """``journal_history`` with every cache of the checkers emptied first."""
    invariants._HISTORY.clear()
    invariants._REPLAYED.clear()
    invariants._full_row.cache_clear()
    invariants._BUILTIN_VALUES = invariants._Prefixes(invariants._BUILTIN_VALUES.most)
    return invariants.journal_history(storage)


def test_journal_history_of_a_journal_read_after_its_prefixes_is_what_a_cold_read_gives() -> None:
    store = _finished_store()
    rows = store.journal()
    assert len(rows) > 3
    cold = [_cold(Prefix(store, n)) for n in range(1, len(rows) + 1)]
    _cold(Prefix(store, 1))
    warm = [invariants.journal_history(Prefix(store, n)) for n in range(1, len(rows) + 1)]
    assert warm == cold
    assert any(w.get("derived") for _, _, ws in cold[-1] for w in ws)  # built-in values were added


def test_a_wrong_delta_after_a_cached_prefix_still_shows() -> None:
    """The built-in values carried on from a cached prefix are the replayed
    ones: two journals sharing that prefix, whose last ``pi.live`` deltas
    differ, each get their own value."""

    def live_rev(action: str, **fields: Any) -> dict[str, Any]:
        return {"type": "document", "document_id": -10, "revision": {
            "scope": "conversation", "owner": 1, "kind": "pi.live", "version": 1, "history": "latest",
            "fork": "initial", "action": action, "value": None, "ops": [], **fields}}

    base = live_rev("base", value={"run": {"task_id": 4, "inputs": [2]}, "attempt": 1})
    first = Journal(([], [base]))
    ops = ([["s", ["retry_error"], "x"], ["s", ["attempt"], 2]], [["s", ["attempt"], 3]])
    longer = [Journal(([], [base]), ([], [live_rev("delta", ops=o)])) for o in ops]
    invariants.journal_history(first)
    lives = [
        [(w["live"]["attempt"], w["live"]["retry_error"]) for _, _, ws in invariants.journal_history(j)
         for w in ws if w.get("derived")]
        for j in longer
    ]
    assert lives == [[(1, None), (2, "x")], [(1, None), (3, None)]]


def test_resumes_from_snapshot_fails_on_a_lossy_snapshot() -> None:
    """A snapshot that loses part of the state is caught: by the replay from
    it when the lost part decides a commit, by comparison when it does not
    (a value no later commit reads, the derived index, the tasks' representation)."""
    import attrs

    from pidurable.core.index import empty_index
    from pidurable.shell.storage.snapshot import decode_state

    storage = _finished_store()
    assert invariants.resumes_from_snapshot(storage) > 0
    with pytest.raises(AssertionError, match="ResumesFromSnapshot: from the snapshot before commit 4: commit 4"):
        invariants.resumes_from_snapshot(storage, decode=lambda text: attrs.evolve(decode_state(text), tasks={}))
    with pytest.raises(AssertionError, match="ResumesFromSnapshot: the state before commit 2 does not decode to itself"):
        invariants.resumes_from_snapshot(storage, decode=lambda text: attrs.evolve(decode_state(text), keep_settled=7))
    with pytest.raises(AssertionError, match="ResumesFromSnapshot: the index rebuilt from the snapshot before commit 4"):
        invariants.resumes_from_snapshot(storage, decode=lambda text: attrs.evolve(decode_state(text), task_index=empty_index()))
    from immutables import Map

    with pytest.raises(AssertionError, match="ResumesFromSnapshot: the live tasks before commit 2 come back as a Map, not a dict"):
        invariants.resumes_from_snapshot(storage, decode=lambda text: attrs.evolve((s := decode_state(text)), tasks=Map(s.tasks)))
