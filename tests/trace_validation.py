"""Trace validation (issue 12 item 5): a shell journal, step by step, is a
behaviour of tla/Durable.tla.

Each journal row is one commit: the events stepped since the previous one
and the writes they led to (recomputed by the core for a lean journal, the
built-ins' revisions followed by their whole values: ``invariants.journal_history``). ``refines`` keeps the *abstract state* of
the model - the ``Store`` of Durable.tla: per submission its status and its
settling/placing writes, per task its kind, status, phase, abort mark,
outcome and result entries, the inbox, the run - as the journal's writes
build it, and for every commit checks

1. that each change it makes is a move of an action of the model, named
   after it (``Submit``, ``Abort``, ``SettleAborted``, ``RequestModel``,
   ``ModelAnswers``, ``ModelFails``, ``ModelCallsTools``, ``HandOver``,
   ``StartTool``, ``ResumeTool``, ``ToolFinishes``, ``Recover``), and one the
   commit's event allows (a commit of several ready results stepped
   together, ``loop.GROUPED``: any move one of them allows): an ``opened``
   commit is ``Recover`` (+ the scheduling it leads to), a
   ``model_responded`` one ``ModelAnswers`` or
   ``ModelCallsTools`` (+ ...), and so on. In the core one step may also
   reserve further tasks (``RequestModel``, ``StartTool``, ``HandOver``,
   ``SettleAborted``): those scheduling actions are allowed after any event;
2. that the abstract state after it satisfies the model's state
   invariants (``SubmissionsSettleOnce`` as "at most one", ``OneResultPerCall``,
   ``OutcomeIffTerminal``, ``AdmissionIsAtomic``, ``QueuedInputNeverLost``,
   ``QueuedInputPlacedAtMostOnce``, ``WithdrawnInputNeverPlaced``,
   ``OwnerEndsAfterOwned``, ``RunHasOneOwner``, ``RoundIsAtomic``) and the
   action properties (``TerminalNeverRunsStep``, ``RecoveryKeepsCheckpoints``).

What the model leaves out (compaction and custom tasks, sub-agent and fork
conversations, retries and deferred polls, hooks: ``completing``) is not
mapped: tasks of other kinds or conversations, and phases the model has not,
are counted as *outside the model* and their moves are not checked here (the
journal invariants of tests/invariants.py still are). A move the model
does not allow raises ``AssertionError`` naming the commit, the event and
the change. Why Python and not a ``TraceDurable.tla``: tla/README.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from pidurable.shell.loop import GROUPED
from pidurable.shell.storage import codec

import invariants

GEN, TOOL = "pi.generation", "pi.tool"
MODELLED_PHASES = {GEN: {"prepare", "request", "tools"}, TOOL: {"call", "execute"}}

#: event tag -> the model actions its own step may take (besides scheduling).
EVENT_ACTIONS: dict[str, frozenset[str]] = {
    "opened": frozenset({"Recover"}),
    "input_submitted": frozenset({"Submit"}),
    "conversation_abort_requested": frozenset({"Abort"}),
    "task_abort_requested": frozenset({"Abort"}),
    "submission_abort_requested": frozenset({"Abort"}),
    "model_responded": frozenset({"ModelAnswers", "ModelCallsTools"}),
    "model_failed": frozenset({"ModelFails"}),
    "tool_prepared": frozenset({"StartTool"}),
    "tool_rejected": frozenset({"ToolFinishes"}),
    "tool_finished": frozenset({"ToolFinishes"}),
    "tool_failed": frozenset({"ToolFinishes"}),
    "invocation_failed": frozenset({"ToolFinishes", "ModelFails"}),
}
#: The events the loop steps together (``loop.GROUPED``), by tag: a journal
#: row of several of them is one commit of several results, each of which
#: makes its own moves.
GROUPED_TAGS = frozenset(codec._tag(cl) for cl in GROUPED)
#: What the core's scheduling pass may do in the same step as any event.
SCHEDULING = frozenset({"RequestModel", "ResendRequest", "StartTool", "ResumeTool", "HandOver", "SettleAborted"})

#: (kind, phase before, status before, phase after, status after) -> actions
#: that make the move (``None``: the task is new; ``*``: any). A generation
#: ends from any phase of the model when aborted (SettleAborted).
TASK_MOVES: dict[tuple[str, str | None, str | None, str, str], frozenset[str]] = {}


def _move(kind: str, before: tuple[str | None, str | None], after: tuple[str, str], *actions: str) -> None:
    TASK_MOVES[(kind, *before, *after)] = frozenset(actions)


_move(GEN, (None, None), ("prepare", "pending"), "Submit", "ModelAnswers", "HandOver")
_move(GEN, (None, None), ("request", "running"), "Submit", "ModelAnswers", "HandOver", "RequestModel")
_move(GEN, ("prepare", "pending"), ("request", "running"), "RequestModel")
_move(GEN, ("request", "pending"), ("request", "running"), "ResendRequest")
_move(GEN, ("request", "running"), ("request", "pending"), "Recover", "Abort")
_move(GEN, ("request", "running"), ("tools", "waiting"), "ModelCallsTools")
# ResendRequest commits nothing: the re-sent request's task stays pending in the store
_move(GEN, ("request", "pending"), ("tools", "waiting"), "ModelCallsTools")
for _p, _s in (("request", "running"), ("request", "pending"), ("prepare", "pending"), ("tools", "waiting")):
    _move(GEN, (_p, _s), (_p, "terminal"), "ModelAnswers", "ModelFails", "HandOver", "SettleAborted")
_move(GEN, ("request", "running"), ("tools", "terminal"), "SettleAborted")
_move(TOOL, (None, None), ("call", "pending"), "ModelCallsTools")
_move(TOOL, (None, None), ("call", "running"), "ModelCallsTools", "StartTool")
_move(TOOL, (None, None), ("execute", "running"), "ModelCallsTools", "StartTool")
_move(TOOL, ("call", "pending"), ("call", "running"), "StartTool")
_move(TOOL, ("call", "running"), ("call", "pending"), "Recover", "Abort")
_move(TOOL, ("call", "pending"), ("execute", "running"), "StartTool")
_move(TOOL, ("call", "running"), ("execute", "running"), "StartTool")
_move(TOOL, ("execute", "running"), ("execute", "pending"), "Recover", "Abort")
_move(TOOL, ("execute", "pending"), ("execute", "running"), "ResumeTool")
for _p, _s in (("call", "pending"), ("call", "running"), ("execute", "running"), ("execute", "pending")):
    _move(TOOL, (_p, _s), (_p, "terminal"), "ToolFinishes", "ResumeTool", "SettleAborted")

#: submission status before -> after: the actions that move it.
SUB_MOVES: dict[tuple[str | None, str], frozenset[str]] = {
    (None, "queued"): frozenset({"Submit"}),
    (None, "placed"): frozenset({"Submit"}),
    ("queued", "placed"): frozenset({"Submit", "ModelAnswers", "HandOver"}),
    ("queued", "unanswered"): frozenset({"Abort"}),
    ("placed", "done"): frozenset({"ModelAnswers"}),
    ("placed", "unanswered"): frozenset({"ModelFails", "SettleAborted", "Abort"}),
}


@attrs.define
class Abstract:
    """Durable.tla's ``Store``, as the journal's writes build it."""

    tasks: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    subs: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    settles: Counter[int] = attrs.field(factory=Counter)
    placings: Counter[int] = attrs.field(factory=Counter)
    entered: set[int] = attrs.field(factory=set)  #: submissions with a user entry
    results: Counter[int] = attrs.field(factory=Counter)  #: tool task -> result entries
    calls: dict[str, int] = attrs.field(factory=dict)  #: call id -> assistant entry
    inbox: dict[int, set[int]] = attrs.field(factory=dict)
    run: dict[int, dict[str, Any] | None] = attrs.field(factory=dict)


@attrs.frozen
class Report:
    commits: int
    actions: Counter[str]
    outside: int  #: task moves outside the model (other kinds, conversations, phases)
    #: commits of several ready results (a group, ``loop.GROUPED``) checked against the model
    grouped: int = 0


#: (kind, phase, status) the model has (any phase may be terminal).
MODELLED_STATES = {
    (GEN, "prepare", "pending"), (GEN, "request", "pending"), (GEN, "request", "running"), (GEN, "tools", "waiting"),
    (TOOL, "call", "pending"), (TOOL, "call", "running"), (TOOL, "execute", "pending"), (TOOL, "execute", "running"),
}


def _modelled(t: dict[str, Any], root: int) -> bool:
    phase = (t.get("checkpoint") or {}).get("phase")
    if t["kind"] not in MODELLED_PHASES or t["conversation_id"] != root or phase not in MODELLED_PHASES[t["kind"]]:
        return False
    status = t.get("status", "pending")
    return status == "terminal" or (t["kind"], phase, status) in MODELLED_STATES


def refines(storage: Any, root: int = 1) -> Report:
    """Check that the journal of ``storage`` is a behaviour of the model."""
    a = Abstract()
    actions: Counter[str] = Counter()
    outside = grouped = 0
    # every field, and each built-in revision followed by the built-in's whole
    # value (the pi.live / pi.inbox writes the model reads; core/builtins.py)
    for seq, evs, ws in invariants.journal_history(storage):
        # a row's events: the one that made the commit, after any that made
        # none - or, since group commit (docs/contract.md "The loop"), several
        # ready results stepped together, each making its own moves: the
        # commit may make any move one of its events allows
        tags = [e["type"] for e in evs] or ["?"]
        tag = tags[-1]
        opened = "opened" in tags
        if len(tags) > 1 and GROUPED_TAGS.issuperset(tags):
            modelled = [t for t in tags if t in EVENT_ACTIONS]
            grouped += bool(modelled)
        else:  # the events before the last made no commit of their own
            modelled = [tag] if tag in EVENT_ACTIONS else []
        if not modelled:  # an event the model has not (hooks, compaction, ...)
            outside += 1
            _apply(a, ws)
            actions["(outside the model)"] += 1
            invariants_hold(a, f"TraceDurable: commit {seq} ({tag})", root)
            continue
        allowed = SCHEDULING.union(*(EVENT_ACTIONS[t] for t in modelled), EVENT_ACTIONS["opened"] if opened else ())
        story = f"TraceDurable: commit {seq} ({' '.join(e['type'] for e in evs)})"
        taken: set[str] = set()
        for w in ws:
            if w["type"] == "task":
                t = w["task"]
                before = a.tasks.get(t["id"])
                sequential = before is None and t["kind"] == TOOL and "model_responded" not in tags
                if sequential or not _modelled(t, root) or (before is not None and not _modelled(before, root)):
                    outside += 1
                    a.tasks[t["id"]] = t
                    continue
                key = (t["kind"], None if before is None else before["checkpoint"].get("phase"),
                       None if before is None else before.get("status", "pending"), t["checkpoint"]["phase"], t.get("status", "pending"))
                if before is not None and key[1:3] == key[3:] and before.get("abort_requested") != t.get("abort_requested"):
                    moves = frozenset({"Abort"})  # the abort mark
                elif before is not None and key[1:3] == key[3:]:
                    if before.get("status", "pending") == "terminal":
                        assert before == t, f"{story}: TerminalNeverRunsStep: terminal task {t['id']} rewritten"
                    moves = allowed  # a rewrite in place (a pinned request, a slot): no move
                else:
                    moves = TASK_MOVES.get(key, frozenset())
                    if before is not None and before.get("status", "pending") == "terminal":
                        raise AssertionError(f"{story}: TerminalNeverRunsStep: terminal task {t['id']} moves {key}")
                ok = moves & allowed
                assert ok, f"{story}: task {t['id']} {key[0]} {key[1:3]} -> {key[3:]} is no move of {sorted(allowed)}"
                if opened and before is not None and before.get("status", "pending") == "running" and t.get("status", "pending") != "running":
                    assert t["checkpoint"] == before["checkpoint"], f"{story}: RecoveryKeepsCheckpoints: task {t['id']}"
                taken |= ok
                a.tasks[t["id"]] = t
            elif w["type"] == "submission":
                s = w["submission"]
                before_s = a.subs.get(s["id"])
                old = None if before_s is None else before_s["status"]
                if s["type"] == "input" and old != s["status"]:
                    assert old not in ("done", "unanswered"), f"{story}: SubmissionsSettleOnce: {s['id']} {old} -> {s['status']}"
                    moves = SUB_MOVES.get((old, s["status"]), frozenset())
                    ok = moves & (allowed | {"Abort"} if any("abort" in t for t in tags) else allowed)
                    assert ok, f"{story}: submission {s['id']} {old} -> {s['status']} is no move of {sorted(allowed)}"
                    taken |= ok
                    if s["status"] == "placed":
                        a.placings[s["id"]] += 1
                    if s["status"] in ("done", "unanswered"):
                        a.settles[s["id"]] += 1
                a.subs[s["id"]] = s
            elif w["type"] == "entry":
                e = w["entry"]
                if e["kind"] == "user":
                    a.entered.update(sid for sid, s in a.subs.items() if s.get("entry_id") == e["id"])
                for c in e.get("tool_calls") or ():
                    a.calls[c["id"]] = e["id"]
                if e["kind"] == "tool_result":
                    a.results[e.get("by_task_id")] += 1
            elif w["type"] == "pi.inbox":
                a.inbox[w["conversation_id"]] = {i["submission_id"] for i in w["items"]}
            elif w["type"] == "pi.live":
                a.run[w["conversation_id"]] = w["live"].get("run")
        # user entries may be written before their submission in a commit
        a.entered |= {sid for sid, s in a.subs.items() if s.get("entry_id") is not None and s["status"] != "queued"}
        actions.update(taken or {"(no modelled change)"})
        invariants_hold(a, story, root)
    return Report(commits=len(storage.journal()), actions=actions, outside=outside, grouped=grouped)


def _apply(a: Abstract, ws: list[dict[str, Any]]) -> None:
    """Record a commit's writes without checking its moves."""
    for w in ws:
        if w["type"] == "task":
            a.tasks[w["task"]["id"]] = w["task"]
        elif w["type"] == "submission":
            s = w["submission"]
            old = a.subs.get(s["id"], {}).get("status")
            if s["type"] == "input" and old != s["status"]:
                a.placings[s["id"]] += s["status"] == "placed"
                a.settles[s["id"]] += s["status"] in ("done", "unanswered")
            a.subs[s["id"]] = s
        elif w["type"] == "entry" and w["entry"]["kind"] == "tool_result":
            a.results[w["entry"].get("by_task_id")] += 1
        elif w["type"] == "pi.inbox":
            a.inbox[w["conversation_id"]] = {i["submission_id"] for i in w["items"]}
        elif w["type"] == "pi.live":
            a.run[w["conversation_id"]] = w["live"].get("run")
    a.entered |= {sid for sid, s in a.subs.items() if s.get("entry_id") is not None and s["status"] != "queued"}


def invariants_hold(a: Abstract, story: str, root: int) -> None:
    """Durable.tla's state invariants on the abstract state."""
    for sid, n in a.settles.items():
        assert n <= 1, f"{story}: SubmissionsSettleOnce: {sid} settled {n} times"
    for sid, s in a.subs.items():
        if s["type"] != "input":
            continue
        assert a.placings[sid] <= 1, f"{story}: QueuedInputPlacedAtMostOnce: {sid}"
        if s["status"] == "queued":
            assert sid in a.inbox.get(s["conversation_id"], set()), f"{story}: AdmissionIsAtomic/QueuedInputNeverLost: {sid}"
        if s["status"] == "placed":
            run = a.run.get(s["conversation_id"])
            assert s.get("entry_id") is not None and run is not None and sid in run["inputs"], f"{story}: AdmissionIsAtomic: {sid}"
        if s["status"] == "unanswered" and a.placings[sid] == 0:
            assert s.get("entry_id") is None, f"{story}: WithdrawnInputNeverPlaced: {sid}"
    for cid, items in a.inbox.items():
        for sid in items:
            assert a.subs.get(sid, {}).get("status") == "queued", f"{story}: QueuedInputNeverLost: item {sid} not queued"
    for cid, run in a.run.items():
        if run is None:
            continue
        g = a.tasks.get(run["task_id"])
        assert g is not None and g["kind"] == GEN and g.get("status", "pending") != "terminal", f"{story}: RunHasOneOwner: {cid}"
        if cid == root:
            others = [t["id"] for t in a.tasks.values() if t["kind"] == GEN and t["conversation_id"] == cid
                      and t.get("status", "pending") != "terminal" and t["id"] != g["id"] and not t.get("background")]
            assert not others, f"{story}: RunHasOneOwner: live generations {others} besides {g['id']}"
    for t in a.tasks.values():
        assert (t.get("outcome") is not None) == (t.get("status", "pending") in ("terminal", "completing")), f"{story}: OutcomeIffTerminal: {t['id']}"
        if t.get("status", "pending") == "terminal":
            live = [o["id"] for o in a.tasks.values() if o.get("owner") == t["id"] and o.get("status", "pending") != "terminal"]
            assert not live, f"{story}: OwnerEndsAfterOwned: {t['id']} owns live {live}"
        if t["kind"] == TOOL and t["conversation_id"] == root:
            cid = t["input"].get("call_id")
            n = a.results[t["id"]]
            assert n == (1 if t.get("status", "pending") == "terminal" else 0) or (n == 1 and t.get("status", "pending") == "completing"), (
                f"{story}: OneResultPerCall: call {cid} of task {t['id']} ({t['status']}) has {n} results")
            g = a.tasks.get(t.get("owner"))
            assert g is not None and g["kind"] == GEN, f"{story}: RoundIsAtomic: tool {t['id']} has no generation"
            if g.get("status", "pending") != "terminal" and g["checkpoint"].get("phase") == "tools":
                assert t["id"] in (g.get("on") or ()) or t.get("status", "pending") == "terminal", f"{story}: RoundIsAtomic: {g['id']} not on {t['id']}"


def check_many(storages: Sequence[Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    for s in storages:
        total.update(refines(s).actions)
    return total
