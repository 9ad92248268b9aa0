"""The durability invariants, written once and reused by every test layer.

Each function takes what can be observed after a run (the storage, the
per-life effect logs, the world's tool-body run counts) and raises
``AssertionError`` with a readable story when a rule is broken. Names match
the invariants in specs/ and the TLA+ model.

- ``SubmissionsSettleOnce``: every submission ends settled, and the journal
  shows exactly one settling write for it.
- ``TerminalNeverRuns``: a task terminal in storage when a process life began
  gets no effect (model call, tool preparation, tool run) in that life.
- ``UnsafeToolRunsAtMostOnce``: an unsafe tool body runs at most once for a
  tool task across all process lives.
- ``ReconciledEffectHappensOnce``: an external effect a tool with
  ``reconcile`` makes (a charge, a booking; counted by the fake services per
  tool task across lives) happens at most once per call, and exactly once
  for a call whose result is not an error and was settled by a ``done``
  verdict, by a ``not_done`` re-execution, or without interruption.
- ``OneResultPerCall``: every tool call in the transcript has exactly one
  tool result, after it.
- ``NothingLiveAfterSettlement``: once all submissions settled, no task is
  live, no conversation has a run or queued input.
- ``SameOutcomeAsUninterrupted``: the final transcript equals the
  uninterrupted run's, except tool results the rules allow to be
  "interrupted".
- ``QueuedInputPlacedAtMostOnce``: a submission is written ``placed`` at most
  once (a queued input is never placed twice), and none is lost (see
  ``SubmissionsSettleOnce``).
- ``WithdrawnInputNeverPlaced``: a queued input withdrawn by an abort never
  gets a user entry.
- ``OneChildPerOwner``: a task owns at most one child conversation made by the
  sub-agent tool, and each child submission is unique.
- ``MemoNeverChanges``: once a task's memo holds a value, every later version
  of that task (while live) holds the same value.
- ``DeferredNeverRequestedAgain``: once a deferred handle is committed (the
  generation is at ``poll``), no later process life sends that request again:
  it polls the same handle.
- ``ReplayIsDeterministic``: re-running the journal's events through ``step``
  from an empty state reproduces every stored commit byte for byte.
- ``ResumesFromSnapshot``: the state a commit's events were stepped on,
  kept as a snapshot (shell/storage/snapshot.py) and decoded, is that state,
  and stepping the rest of its process life's rows from it reproduces every
  commit byte for byte (checked at up to three commits a life: the first
  whose state has phases out in the shell or a failed migration - what an
  open from the tables loses -, the one with the most live tasks, the middle one).

Checked on the journal (every commit, so also after a crash):

- ``OutcomeIffTerminal``: a stored task has an outcome exactly when it is
  terminal or completing (completing holds its outcome while owned work drains).
- ``AdmissionIsAtomic``: the commit that first stores a submission also stores
  what admission promises with it: a placed input its user entry and its run,
  a queued one its inbox item, a write its entry (a compaction summary whose
  cut is older than the range start is admitted ``unanswered/stale``, with no
  entry).
- ``RequestIdIsUnique``: a ``request_id`` names at most one submission per
  conversation.
- ``QueuedInputNeverLost``: an item leaves ``pi.inbox`` only in a commit that
  places, appends or settles its submission.
- ``RoundIsAtomic``: an assistant entry with tool calls is stored in the same
  commit as its tool tasks and the generation waiting on them.
- ``RunHasOneOwner``: after every commit, a conversation's ``pi.live.run``
  names one live generation task of that conversation.
- ``RecoveryKeepsCheckpoints``: the open that turns a ``running`` task back
  into ``pending`` keeps its checkpoint unchanged.
- ``OwnerEndsAfterOwned``: a task is stored terminal only once every task it
  owns is terminal (settlement is bottom-up).
- ``StoreMatchesJournal``: the records in the store are exactly the last
  version of each record the journal wrote.
- ``DocumentMatchesRevisions``: every document the store holds - a host's
  (``define_doc``) and the built-ins (``pi.agent``, ``pi.live``...,
  core/builtins.py) - is its journaled revisions replayed (base, then the
  deltas' ops): its current value, and for a ``rewindable`` one (``pi.agent``)
  its value as of every commit that wrote it (``document_at``); a built-in
  reads back (``storage.document``) as the typed value whose JSON that is.
- ``ToolDocumentWithResult``: a document revision written in the commit of
  a tool's result (``ToolFinished``) is in the same commit as that task's
  result entry and is one the tool staged; a result that is not an error
  comes with every change the tool staged. Host updates, phase commits and
  forks are the only other writers.
- ``ForkSeesParentUpToItsPoint``: a fork's transcript is its parent's
  transcript up to and including its fork point (an entry the parent sees),
  then its own entries, all after the fork point; the commit that creates a
  fork stores no entry (nothing is copied).

Checked on the effects each process life ran:

- ``IntentBeforeRequest``: a ``CallModel``/``PollModel`` starts only after the
  task's ``request``/``poll`` checkpoint (same attempt) is committed.
- ``IntentBeforeEffect``: a ``RunTool`` starts only after the task's
  ``execute`` checkpoint is committed.
- ``OneInvocationPerTask``: within one life a tool task is prepared once and
  run once, and a model request (task, attempt) is sent once.

Checked on the transcript:

- ``ContextPairsCallsWithResults``: in the context a model would see, every
  tool call is followed by exactly one result for it, in call order.
- ``StoredTextIsValidUtf8``: every stored entry encodes as strict JSON in
  valid UTF-8 (nothing from outside poisoned the store).
- ``BoundedToolOutput``: a truncated tool result holds at most its kept bytes
  plus its diagnostics, and a live slot's running output at most 4 KiB.

Checked on the commits many workers landed on one PostgreSQL store (scale-out,
``LeaseCommit`` records in commit order; tla/Leases.tla under the same names):

- ``CommitsAreFenced``: within a conversation tree, no commit of an older lease
  epoch lands after one of a newer epoch (a fenced-out worker never commits).
- ``OneWriterPerEpoch``: every commit of one epoch of a tree is by one worker.
- ``TreeIdsIncrease``: the ids a tree's commits allocate are unique and
  increase in commit order, across takeovers (an id block per claim).
- ``UnsafeBodyRunsAtMostOnceAcrossWorkers``: an unsafe tool body runs at most
  once per tool task, counted over every worker process and life.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from pidurable.core.builtins import BUILTINS, builtin_address, legacy_write
from pidurable.core.builtins import base_revision as builtin_base
from pidurable.core.builtins import to_json as builtin_json
from pidurable.core.chord import apply as apply_ops
from pidurable.core.context import context_messages
from pidurable.core.effects import CallModel, Commit, PollModel, PrepareTool, RunTool
from pidurable.core.model import Conversation, Entry, EntryKind, TaskStatus
from pidurable.core.state import INBOX_DOC, LIVE_DOC, ConvState, DocScope
from pidurable.shell import journal
from pidurable.core.model import Task
from pidurable.shell.storage.base import as_stored
from pidurable.shell.storage import codec, snapshot
from pidurable.shell.storage.base import DOC_TYPES

INTERRUPTED_SUFFIX = "was interrupted and may have partially run\n</harness>"
#: ... and the same result with a reconcile's ``unknown`` note after it.
UNRECONCILED = "was interrupted and may have partially run\n[warn] Reconcile could not tell whether it ran: "


def submissions_settle_once(storage: Any) -> None:
    subs = storage.submissions()
    for s in subs:
        assert s.settled, f"SubmissionsSettleOnce: submission {s.id} ended {s.status} ({s.reason})"
    settles: Counter[int] = Counter()
    for _, _, writes in journal_history(storage):
        for w in writes:
            if w["type"] == "submission" and w["submission"]["status"] in ("done", "unanswered"):
                settles[w["submission"]["id"]] += 1
    for s in subs:
        assert settles[s.id] == 1, f"SubmissionsSettleOnce: submission {s.id} settled {settles[s.id]} times"


def terminal_never_runs(lives: Sequence[tuple[frozenset[int], Sequence[Any]]]) -> None:
    """``lives``: for each process life, (ids terminal at its start, effects it ran)."""
    for n, (terminal, effects) in enumerate(lives):
        for e in effects:
            if isinstance(e, (CallModel, PrepareTool, RunTool)):
                assert e.task_id not in terminal, (
                    f"TerminalNeverRuns: life {n} ran {type(e).__name__} for task {e.task_id}, "
                    "which was already terminal"
                )


def unsafe_tool_runs_at_most_once(runs: Mapping[tuple[str, int], int], unsafe: Iterable[str]) -> None:
    """``runs``: (tool name, task id) -> body runs across all lives."""
    unsafe = set(unsafe)
    for (name, task_id), n in runs.items():
        if name in unsafe:
            assert n <= 1, f"UnsafeToolRunsAtMostOnce: unsafe tool {name} (task {task_id}) ran {n} times"


def reconciled_effect_happens_once(entries: Sequence[Entry], effects: Mapping[tuple[str, int], int]) -> None:
    """``effects``: (tool name, task id) -> times its external effect happened
    (the tools whose effects are counted are the names in it)."""
    for (name, task_id), n in effects.items():
        assert n <= 1, f"ReconciledEffectHappensOnce: tool {name} (task {task_id}) made its effect {n} times"
    counted = {name for name, _ in effects}
    for e in entries:
        if e.kind != EntryKind.TOOL_RESULT or e.tool_name not in counted or e.is_error:
            continue
        verdict = (e.data or {}).get("reconciled")
        n = effects.get((str(e.tool_name), int(e.by_task_id or 0)), 0)
        assert verdict in (None, "done", "not_done"), f"ReconciledEffectHappensOnce: result {e.id} says {verdict!r}"
        assert n == 1, (
            f"ReconciledEffectHappensOnce: {e.tool_name} (task {e.by_task_id}) settled {verdict or 'normally'} "
            f"with its effect made {n} times"
        )


def one_result_per_call(entries: Sequence[Entry]) -> None:
    calls: dict[str, int] = {}
    results: Counter[str] = Counter()
    for e in entries:
        if e.kind == EntryKind.ASSISTANT:
            for c in e.tool_calls:
                assert c.id not in calls, f"OneResultPerCall: call id {c.id} appears twice"
                calls[c.id] = e.id
        elif e.kind == EntryKind.TOOL_RESULT:
            assert e.tool_call_id in calls, f"OneResultPerCall: result {e.id} answers unknown call {e.tool_call_id}"
            assert calls[e.tool_call_id] < e.id, f"OneResultPerCall: result {e.id} precedes its call"
            results[e.tool_call_id] += 1
    for cid in calls:
        assert results[cid] == 1, f"OneResultPerCall: call {cid} has {results[cid]} results"


def nothing_live_after_settlement(storage: Any) -> None:
    live = storage.tasks(live_only=True)
    assert not live, "NothingLiveAfterSettlement: live tasks remain: " + ", ".join(
        f"{t.id} {t.kind} {t.status} {t.checkpoint.get('phase')}" for t in live
    )
    for c in storage.conversations():
        lv = storage.document(c.id, LIVE_DOC)
        assert lv is None or lv.run is None, f"NothingLiveAfterSettlement: conversation {c.id} still has a run"
        inbox = storage.document(c.id, INBOX_DOC)
        assert not inbox, f"NothingLiveAfterSettlement: conversation {c.id} still has queued input"


def _normal(entries: Sequence[Entry]) -> list[tuple[Any, ...]]:
    """The transcript with each round's tool results in call order (parallel
    tools may finish in any order)."""
    out: list[tuple[Any, ...]] = []
    pending: list[tuple[Any, ...]] = []
    for e in entries:
        if e.kind == EntryKind.TOOL_RESULT:
            pending.append(("tool_result", e.tool_call_id, e.tool_name, e.text, e.is_error))
            continue
        out.extend(sorted(pending))
        pending = []
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in e.tool_calls)
        out.append((str(e.kind), e.text, calls, e.stop_reason))
    out.extend(sorted(pending))
    return out


def same_outcome_as_uninterrupted(
    actual: Sequence[Entry], expected: Sequence[Entry], may_interrupt: Iterable[str] = ()
) -> None:
    """Equal transcripts, except that a result of a tool in ``may_interrupt``
    (unsafe tools) may be the "interrupted" error instead of its result.

    An interrupted tool may or may not have changed the world, so once one is
    seen, later tool results are compared by call (id and tool) only: what they
    read may legitimately differ. Model turns must stay identical."""
    may = set(may_interrupt)
    # A crash mid-stream leaves the committed partial as an ``aborted``
    # assistant entry (the rules say so); it must be a prefix of the answer
    # the re-sent request then produced.
    kept = []
    for i, e in enumerate(actual):
        if e.kind == EntryKind.ASSISTANT and e.stop_reason == "aborted":
            after = next((x for x in actual[i + 1 :] if x.kind == EntryKind.ASSISTANT and x.stop_reason != "aborted"), None)
            assert after is not None and after.text.startswith(e.text), (
                f"SameOutcomeAsUninterrupted: partial {e.text!r} is not a prefix of the answer"
            )
            continue
        kept.append(e)
    actual = kept
    a, b = _normal(actual), _normal(expected)
    assert len(a) == len(b), f"SameOutcomeAsUninterrupted: {len(a)} entries, expected {len(b)}:\n{a}\n{b}"
    diverged = False
    for x, y in zip(a, b):
        if x == y:
            continue
        if x[0] == "tool_result" and y[0] == "tool_result" and x[1:3] == y[1:3]:
            if x[2] in may and x[4] and (x[3].endswith(INTERRUPTED_SUFFIX) or UNRECONCILED in x[3]):
                diverged = True
                continue
            if diverged:
                continue
        raise AssertionError(f"SameOutcomeAsUninterrupted: {x} != {y}")


def _submission_history(storage: Any) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for _, _, writes in journal_history(storage):
        for w in writes:
            if w["type"] == "submission":
                out.setdefault(w["submission"]["id"], []).append(w["submission"])
    return out


def queued_input_placed_at_most_once(storage: Any) -> None:
    for sid, versions in _submission_history(storage).items():
        placed = sum(1 for v in versions if v["status"] == "placed")
        assert placed <= 1, f"QueuedInputPlacedAtMostOnce: submission {sid} placed {placed} times"


def withdrawn_input_never_placed(storage: Any) -> None:
    for sid, versions in _submission_history(storage).items():
        statuses = [v["status"] for v in versions]
        if statuses and statuses[0] == "queued" and versions[-1].get("reason") == "aborted":
            if "placed" not in statuses:
                assert versions[-1]["entry_id"] is None, f"WithdrawnInputNeverPlaced: submission {sid} has an entry"


def one_child_per_owner(storage: Any) -> None:
    owners: Counter[int] = Counter(c.owner_task_id for c in storage.conversations() if c.owner_task_id is not None)
    for owner, n in owners.items():
        assert n == 1, f"OneChildPerOwner: task {owner} owns {n} conversations"
    seen: set[tuple[int, str]] = set()
    for s in storage.submissions():
        if s.request_id is not None:
            key = (s.conversation_id, s.request_id)
            assert key not in seen, f"OneChildPerOwner: request {s.request_id} submitted twice"
            seen.add(key)


def memo_never_changes(storage: Any) -> None:
    memos: dict[int, dict[str, Any]] = {}
    for _, _, writes in journal_history(storage):
        for w in writes:
            if w["type"] != "task":
                continue
            t = w["task"]
            current = t.get("memos") or {}
            earlier = memos.setdefault(t["id"], {})
            for name, value in current.items():
                if name in earlier:
                    assert earlier[name] == value, (
                        f"MemoNeverChanges: task {t['id']} memo {name!r} went {earlier[name]!r} -> {value!r}"
                    )
                earlier[name] = value


def deferred_never_requested_again(storage: Any, lives: Sequence[tuple[int, Sequence[Any]]]) -> None:
    """``lives``: (commits in the store when the life began, its effects)."""
    polled_at: dict[int, int] = {}
    for n, (_, _, writes) in enumerate(journal_history(storage), start=1):
        for w in writes:
            if w["type"] == "task" and w["task"]["checkpoint"].get("phase") == "poll":
                polled_at.setdefault(w["task"]["id"], n)
    for start, effects in lives:
        for e in effects:
            if isinstance(e, CallModel) and e.task_id in polled_at and polled_at[e.task_id] <= start:
                raise AssertionError(
                    f"DeferredNeverRequestedAgain: task {e.task_id} sent a new request after its handle was stored"
                )


def replay_is_deterministic(storage: Any, may_diverge: Mapping[int, str] | None = None) -> int:
    """Feed the journal's events to ``step`` (a fresh state at every
    ``Opened``, as a new process has); every stored commit must come out
    again with the same bytes (format 1) or the same digest (format 2).
    ``may_diverge``: commits of a store written by earlier code where the
    core has since deliberately changed what it decides (commit -> why; the
    first divergence of each process life is reported). Returns commits checked."""
    rows = storage.journal()
    result = journal.check(rows, "store", _replayed(rows, _journal_key(rows)))
    unexpected = [d for d in result.divergences if d.seq not in (may_diverge or {})]
    assert not unexpected, "ReplayIsDeterministic: " + "; ".join(f"commit {d.seq}: {d.message}" for d in unexpected)
    # a divergence acknowledged above skips the rest of its process life
    replayed = result.commits + len(result.divergences) + result.skipped
    assert replayed == result.total, f"ReplayIsDeterministic: {result.total - replayed} commits not replayed"
    return result.commits


def _lives(transitions: Sequence[journal.Transition]) -> list[range]:
    """The indexes of each process life's transitions (a life starts at an ``Opened``)."""
    starts = [i for i, t in enumerate(transitions) if t.opens] or [0]
    return [range(a, b) for a, b in zip(starts, starts[1:] + [len(transitions)])]


def _snapshot_points(transitions: Sequence[journal.Transition], life: range) -> list[int]:
    """Where ``resumes_from_snapshot`` cuts a life (not at its ``Opened``: its state is the empty one)."""
    inner = [i for i in life if i != life.start]
    if not inner:
        return []
    states = {i: transitions[i].before for i in inner}
    out = [next((i for i in inner if states[i].invocations or states[i].failed_migrations), inner[0])]
    out.append(max(inner, key=lambda i: len(states[i].tasks)))
    out.append(inner[len(inner) // 2])
    return sorted(set(out))


def _every_commit(transitions: Sequence[journal.Transition], life: range) -> list[int]:
    return [i for i in life if i != life.start]


def resumes_from_snapshot(storage: Any, encode: Any = None, decode: Any = None) -> int:
    """``ResumesFromSnapshot`` (see the module docstring); ``encode`` and
    ``decode``: the snapshot codec (``storage/snapshot.py``'s by default).
    Returns the snapshot points checked."""
    rows = storage.journal()
    if encode is None and decode is None:  # (the same journal from another backend: checked once)
        return _remember(_RESUMED, 64, _journal_key(rows), lambda: resumes_from_rows(rows))  # type: ignore[no-any-return]
    return resumes_from_rows(rows, encode, decode)


#: Journals ``resumes_from_snapshot`` checked with the store's codec -> points checked.
_RESUMED: dict[Any, int] = {}


def resumes_from_rows(rows: Sequence[Any], encode: Any = None, decode: Any = None, *, every_commit: bool = False) -> int:
    """``ResumesFromSnapshot`` on journal rows, at ``_snapshot_points`` or at
    every commit but a life's ``Opened``. Lives that do not replay from their
    ``Opened`` are left to ``replay_is_deterministic``. Returns the points checked."""
    encode = snapshot.encode_state if encode is None else encode
    decode = snapshot.decode_state if decode is None else decode
    transitions = _replayed(rows, _journal_key(rows))
    points = _every_commit if every_commit else _snapshot_points
    checked = 0
    for life in _lives(transitions):
        if any(transitions[i].divergence is not None or transitions[i].skipped for i in life):
            continue
        for i in points(transitions, life):
            before = transitions[i].before
            back = decode(encode(before))
            tail = list(journal.replay(rows[i : life.stop], describe=False, state=back))
            bad = [f"commit {t.seq}: {t.divergence.message}" for t in tail if t.divergence is not None]
            assert not bad, f"ResumesFromSnapshot: from the snapshot before commit {rows[i].seq}: " + "; ".join(bad)
            assert back == before, f"ResumesFromSnapshot: the state before commit {rows[i].seq} does not decode to itself"
            assert back.task_index.as_dict() == before.task_index.as_dict(), (
                f"ResumesFromSnapshot: the index rebuilt from the snapshot before commit {rows[i].seq} is not the live one"
            )
            assert type(back.tasks) is type(before.tasks), (
                f"ResumesFromSnapshot: the live tasks before commit {rows[i].seq} come back as a "
                f"{type(back.tasks).__name__}, not a {type(before.tasks).__name__}"
            )
            checked += 1
    return checked


# --- checked on the journal --------------------------------------------------------


Commit_ = tuple[int, list[dict[str, Any]], list[dict[str, Any]]]


def _remember(cache: dict[Any, Any], most: int, key: Any, make: Any) -> Any:
    """``cache[key]``, made by ``make()`` the first time; the cache is
    emptied when it holds ``most`` entries. What a cache holds is shared, so
    never changed in place (no checker does; ``chord.apply`` copies)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= most:
            cache.clear()
        found = cache[key] = make()
    return found


#: ``journal_history`` and ``journal.replay`` of a journal, by its rows
#: (``_journal_key``): every checker reads the first, and
#: ``replay_is_deterministic`` and a lean journal's writes need the second.
_HISTORY: dict[Any, list[Commit_]] = {}
_REPLAYED: dict[Any, list[journal.Transition]] = {}


def _journal_key(rows: Sequence[Any]) -> tuple[tuple[int, int, str, str], ...]:
    return tuple((r.format, r.seq, r.events, r.writes) for r in rows)


def _replayed(rows: Sequence[Any], key: Any) -> list[journal.Transition]:
    """``replay(rows)``'s transitions, replayed once per journal."""
    return _remember(_REPLAYED, 16, key, lambda: list(journal.replay(rows, describe=False)))  # type: ignore[no-any-return]


def _full(text: str, decode: Any, encode: Any) -> list[dict[str, Any]]:
    """Journal JSON in the every-field shape (format 1) the checkers read,
    whatever encoding the store used (format 3 leaves defaults out)."""
    return json.loads(encode([decode(d) for d in json.loads(text)], 1))  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=100_000)
def _full_row(events: str, writes: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``_full`` of a row's events and writes, decoded once per row text: a
    journal that grows by a row (each node of the twin, each life of a crash
    scenario) decodes only its new rows. Shared, so never changed in place."""
    return _full(events, codec.event_from_data, codec.events_json), _full(writes, codec.write_from_data, codec.writes_json)


def journal_history(storage: Any) -> list[Commit_]:
    """``(seq, events, writes)`` of every journaled commit, oldest first. A
    lean (format 2) journal keeps only a digest of each commit's writes: they
    are recomputed by replaying its events through the core (and checked
    against the digest) - cached per journal, as every checker reads them."""
    rows = storage.journal()
    key = _journal_key(rows)

    def make() -> list[Commit_]:
        # (a journal keeping every commit's writes needs no replay for them)
        digests = any(codec.is_digest(r.writes) for r in rows)
        texts = journal.journal_writes(rows, "store", _replayed(rows, key) if digests else None)
        decoded = [
            (seq, *_full_row(ev, wr))
            if row.format >= 3  # a digest (recomputed), or the lean JSON of a synthetic row (the twin)
            else (seq, json.loads(ev), json.loads(wr))
            for row, (seq, ev, wr) in zip(rows, texts, strict=True)
        ]
        return _with_builtin_values(decoded, [(row.format, *t) for row, t in zip(rows, texts, strict=True)])

    return _remember(_HISTORY, 64, key, make)  # type: ignore[no-any-return]


#: The whole-value write of each built-in in journal formats 1-3, and its value's field.
_LEGACY_BUILTINS = {"pi.agent": "agent", "pi.live": "live", "pi.inbox": "items", "pi.usage": "usage", "pi.context": "context"}


class _Prefixes:
    """Results by a sequence of keys, found for the longest stored prefix of
    a sequence in one walk: a trie (key -> [the trie of the keys after it,
    the result stored for the sequence ending there, or None]), emptied when
    it holds ``most`` results. Shared results are never changed in place."""

    def __init__(self, most: int) -> None:
        self.most, self.held, self.root = most, 0, {}  # type: ignore[var-annotated]

    def longest(self, keys: Sequence[Any]) -> tuple[int, Any]:
        """How many of ``keys`` the longest stored prefix has, and its result."""
        done, found, level = 0, None, self.root
        for n, k in enumerate(keys, start=1):
            node = level.get(k)
            if node is None:
                break
            level = node[0]
            if node[1] is not None:
                done, found = n, node[1]
        return done, found

    def put(self, keys: Sequence[Any], result: Any) -> None:
        if not keys:
            return
        if self.held >= self.most:
            self.root.clear()
            self.held = 0
        level = self.root
        for k in keys[:-1]:
            level = level.setdefault(k, [{}, None])[0]
        node = level.setdefault(keys[-1], [{}, None])
        self.held += node[1] is None
        node[1] = result


#: ``_with_builtin_values`` of the journals seen, by their commits: the
#: commits with the values added, and each built-in's value after the last
#: one. A journal longer than one seen (the twin's next node, a crash
#: scenario's next life) goes on from the longest seen prefix.
_BUILTIN_VALUES = _Prefixes(20_000)


def _with_builtin_values(history: list[Commit_], texts: Sequence[Any]) -> list[Commit_]:
    """Each built-in document revision (core/builtins.py: a negative
    ``document_id``) followed by the built-in's whole value after it, as the
    write journal formats 1-3 had (``{"type": "pi.live", "conversation_id",
    "live": ...}``, every field): what the checkers below read. Values are
    replayed from the revisions themselves, so a wrong delta shows.
    ``texts``: what identifies each commit (its format, seq, events and
    writes JSON), what the values of a prefix are cached by (``_BUILTIN_VALUES``)."""
    done, known = _BUILTIN_VALUES.longest(texts)
    values: dict[int, Any] = {}
    out: list[Commit_] = []
    if known is not None:
        out, values = list(known[0]), dict(known[1])
    for seq, events, writes in history[done:]:
        more: list[dict[str, Any]] = []
        for w in writes:
            more.append(w)
            address = builtin_address(w["document_id"]) if w["type"] == "document" else None
            if address is None:
                continue
            r = w["revision"]
            did = w["document_id"]
            values[did] = r["value"] if r["action"] == "base" else apply_ops(values.get(did), r["ops"])
            cid, kind = address
            conv = ConvState(
                conversation=Conversation(id=cid),
                **{BUILTINS[kind].field: codec.converter.structure(values[did], DOC_TYPES[kind])},
            )
            more.append({**json.loads(codec.writes_json([legacy_write(kind, conv)], 1))[0], "derived": True})
        out.append((seq, events, more))
    _BUILTIN_VALUES.put(texts, (out, values))
    return out


def _records(writes: Iterable[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    return [w[tag] for w in writes if w["type"] == tag]


def outcome_iff_terminal(storage: Any) -> None:
    for seq, _, writes in journal_history(storage):
        for t in _records(writes, "task"):
            holds = t["status"] in ("terminal", "completing")
            assert holds == (t["outcome"] is not None), (
                f"OutcomeIffTerminal: commit {seq} stores task {t['id']} {t['status']} with outcome {t['outcome']}"
            )


def admission_is_atomic(storage: Any) -> None:
    seen: set[int] = set()
    for seq, _, writes in journal_history(storage):
        entries = {e["id"] for e in _records(writes, "entry")}
        inboxes = {w["conversation_id"]: w["items"] for w in writes if w["type"] == "pi.inbox"}
        lives = {w["conversation_id"]: w["live"] for w in writes if w["type"] == "pi.live"}
        for s in _records(writes, "submission"):
            if s["id"] in seen:
                continue
            seen.add(s["id"])
            story = f"AdmissionIsAtomic: submission {s['id']} ({s['type']}) first stored {s['status']} in commit {seq}"
            if s["status"] == "queued":
                items = inboxes.get(s["conversation_id"], [])
                assert any(i["submission_id"] == s["id"] for i in items), story + " without its inbox item"
            elif s["status"] == "placed":
                assert s["entry_id"] in entries, story + " without its user entry"
                run = (lives.get(s["conversation_id"]) or {}).get("run")
                assert run is not None and s["id"] in run["inputs"], story + " without its run"
            elif s["status"] == "unanswered":  # a summary whose cut is older than the range start
                assert s["type"] == "write" and s["reason"] == "stale" and s["entry_id"] is None, story
            else:
                assert s["type"] == "write" and s["status"] == "done", story
                assert s["entry_id"] in entries, story + " without its entry"


def request_id_is_unique(storage: Any) -> None:
    counts = Counter((s.conversation_id, s.request_id) for s in storage.submissions() if s.request_id is not None)
    for key, n in counts.items():
        assert n == 1, f"RequestIdIsUnique: request {key[1]!r} names {n} submissions in conversation {key[0]}"


def queued_input_never_lost(storage: Any) -> None:
    inbox: dict[int, set[int]] = {}
    for seq, _, writes in journal_history(storage):
        moved = {s["id"] for s in _records(writes, "submission") if s["status"] != "queued"}
        for w in writes:
            if w["type"] != "pi.inbox":
                continue
            now = {i["submission_id"] for i in w["items"]}
            left = inbox.get(w["conversation_id"], set()) - now
            assert left <= moved, (
                f"QueuedInputNeverLost: commit {seq} drops {sorted(left - moved)} from the inbox of conversation "
                f"{w['conversation_id']} without placing or settling them"
            )
            inbox[w["conversation_id"]] = now


def round_is_atomic(storage: Any) -> None:
    for seq, _, writes in journal_history(storage):
        tasks = _records(writes, "task")
        for e in _records(writes, "entry"):
            if e["kind"] != "assistant" or not e["tool_calls"] or e["stop_reason"] in ("error", "aborted"):
                continue
            tools = [t for t in tasks if t["kind"] == "pi.tool" and t["input"].get("assistant") == e["id"]]
            waiting = [
                t
                for t in tasks
                if t["kind"] == "pi.generation" and t["checkpoint"].get("assistant") == e["id"] and t["on"]
            ]
            assert tools and waiting, (
                f"RoundIsAtomic: commit {seq} stores assistant entry {e['id']} with calls but "
                f"{'no tool task' if not tools else 'no generation waiting on them'}"
            )


def run_has_one_owner(storage: Any) -> None:
    tasks: dict[int, dict[str, Any]] = {}
    runs: dict[int, dict[str, Any]] = {}
    for seq, _, writes in journal_history(storage):
        for t in _records(writes, "task"):
            tasks[t["id"]] = t
        for w in writes:
            if w["type"] == "pi.live":
                run = w["live"]["run"]
                if run is None:
                    runs.pop(w["conversation_id"], None)
                else:
                    runs[w["conversation_id"]] = run
        for cid, run in runs.items():
            owner = tasks.get(run["task_id"])
            assert owner is not None and owner["kind"] == "pi.generation" and owner["conversation_id"] == cid, (
                f"RunHasOneOwner: after commit {seq} the run of conversation {cid} names task {run['task_id']}, "
                "not a generation of that conversation"
            )
            assert owner["status"] != "terminal", (
                f"RunHasOneOwner: after commit {seq} the run of conversation {cid} is owned by terminal task "
                f"{owner['id']}"
            )


def recovery_keeps_checkpoints(storage: Any) -> None:
    tasks: dict[int, dict[str, Any]] = {}
    for seq, events, writes in journal_history(storage):
        opened = any(ev["type"] == "opened" for ev in events)
        for t in _records(writes, "task"):
            before = tasks.get(t["id"])
            if opened and before is not None and before["status"] == "running" and t["status"] != "running":
                assert t["checkpoint"] == before["checkpoint"], (
                    f"RecoveryKeepsCheckpoints: the open in commit {seq} changed task {t['id']}'s checkpoint "
                    f"{before['checkpoint']} -> {t['checkpoint']}"
                )
            tasks[t["id"]] = t


def owner_ends_after_owned(storage: Any) -> None:
    tasks: dict[int, dict[str, Any]] = {}
    for seq, _, writes in journal_history(storage):
        written = _records(writes, "task")
        for t in written:
            tasks[t["id"]] = t
        for t in written:
            if t["status"] != "terminal":
                continue
            live = [o["id"] for o in tasks.values() if o["owner"] == t["id"] and o["status"] != "terminal"]
            assert not live, f"OwnerEndsAfterOwned: commit {seq} ends task {t['id']} while it owns live {live}"


def _full_record(record: Any) -> str:
    """A stored record in the every-field shape the journal checkers read."""
    return json.dumps(json.loads(codec.dumps(codec.converter.unstructure(record))), sort_keys=True)


def store_matches_journal(storage: Any) -> None:
    last: dict[tuple[str, int], str] = {}
    for _, _, writes in journal_history(storage):
        for w in writes:
            tag = w["type"]
            if tag in ("task", "submission", "entry", "conversation"):
                last[(tag, w[tag]["id"])] = json.dumps(w[tag], sort_keys=True)
    stored: dict[tuple[str, int], str] = {}
    for t in storage.tasks():
        stored[("task", t.id)] = _full_record(t)
    for s in storage.submissions():
        stored[("submission", s.id)] = _full_record(s)
    for c in storage.conversations():
        stored[("conversation", c.id)] = _full_record(c)
        for e in storage.entries(c.id):
            stored[("entry", e.id)] = _full_record(e)
    missing = sorted(set(last) - set(stored))
    extra = sorted(set(stored) - set(last))
    assert not missing and not extra, f"StoreMatchesJournal: journal-only {missing[:5]}, store-only {extra[:5]}"
    for key, text in last.items():
        if key[0] == "task" and stored[key] != text:
            # a store keeps a terminal task lean (schema 4: base.as_stored); a row written before stays whole
            text = _full_record(as_stored(codec.converter.structure(json.loads(text), Task)))
        assert stored[key] == text, f"StoreMatchesJournal: {key[0]} {key[1]} differs from its last journal write"


def document_matches_revisions(storage: Any) -> None:
    """Replay every document's journaled revisions and compare with what the
    store rebuilds from the revisions it kept (reclamation included)."""
    docs: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    legacy: set[tuple[int, int]] = set()  # (document, seq) of bases that were whole-value writes
    for seq, _, writes in journal_history(storage):
        for w in writes:
            if w["type"] == "document":
                docs.setdefault(w["document_id"], []).append((seq, w["revision"]))
            elif w["type"] in _LEGACY_BUILTINS and not w.get("derived"):
                # journal formats 1-3 wrote a built-in whole: a base of it (as the
                # schema migration and a JSONL store read it, storage/base.py)
                did, revision = builtin_base(w["conversation_id"], w["type"], getattr(codec.write_from_data(w), _LEGACY_BUILTINS[w["type"]]))
                docs.setdefault(did, []).append((seq, json.loads(codec.dumps(codec.converter.unstructure(revision)))))
                legacy.add((did, seq))
    newest: dict[tuple[str, int, str], int] = {}
    for did, revisions in docs.items():
        r = revisions[-1][1]
        address = (r["scope"], r["owner"], r["kind"])
        newest[address] = max(did, newest.get(address, did))  # a built-in's id is negative (core/builtins.py)
    for did, revisions in docs.items():
        value: Any = None
        at: dict[int, Any] = {}
        for seq, r in revisions:
            story = f"DocumentMatchesRevisions: document {did} ({r['kind']}) revision of commit {seq}"
            if r["action"] == "base":
                value = r["value"]
            elif r["action"] == "delta":
                assert seq != revisions[0][0], story + " is a delta with no base before it"
                value = apply_ops(value, r["ops"])
            at[seq] = value
        last = revisions[-1][1]
        address = (last["scope"], last["owner"], last["kind"])
        if newest[address] != did:
            continue  # an older incarnation at the address (a retired task document)
        stored = storage.document_state(DocScope(last["scope"]), last["owner"], last["kind"])
        if last["action"] == "retire":
            assert stored is None, f"DocumentMatchesRevisions: retired document {did} still reads {stored}"
            continue
        assert stored is not None and stored.id == did, (
            f"DocumentMatchesRevisions: document {did} ({last['kind']} of {last['scope']} {last['owner']}) "
            f"reads back as {stored}"
        )
        assert stored.value == value, (
            f"DocumentMatchesRevisions: document {did} ({last['kind']}) holds {stored.value!r}, "
            f"its revisions replay to {value!r}"
        )
        if did < 0:  # a built-in: its typed value is that JSON (core/builtins.py)
            typed = storage.document(last["owner"], last["kind"])
            assert builtin_json(typed) == value, (
                f"DocumentMatchesRevisions: built-in {last['kind']} of conversation {last['owner']} reads {typed!r}, "
                f"its revisions replay to {value!r}"
            )
        if last["history"] == "rewindable" and last["scope"] == "conversation":
            for seq, expected in at.items():
                past = storage.document_at(last["owner"], last["kind"], seq)
                if past is None and (did, seq) in legacy:
                    continue  # written before the store was migrated: only the newest was kept
                assert past is not None and past.value == expected, (
                    f"DocumentMatchesRevisions: document {did} ({last['kind']}) as of commit {seq} reads "
                    f"{None if past is None else past.value!r}, its revisions replay to {expected!r}"
                )


#: Events whose commits may write document revisions besides a tool's result.
_DOCUMENT_WRITERS = ("document_update_requested", "task_commit_requested", "fork_requested")


def tool_document_with_result(storage: Any) -> None:
    for seq, events, writes in journal_history(storage):
        revisions = [
            w for w in writes if w["type"] == "document" and w["revision"]["action"] != "retire" and w["document_id"] >= 0
        ]  # the built-ins (negative ids) are written by every kind of commit
        cause = events[-1] if events else {"type": "?"}  # earlier events of a commit wrote nothing
        if cause["type"] != "tool_finished":
            assert not revisions or cause["type"] in _DOCUMENT_WRITERS, (
                f"ToolDocumentWithResult: commit {seq} writes document revisions for a {cause['type']} event"
            )
            continue
        results = [e for e in _records(writes, "entry") if e["kind"] == "tool_result" and e["by_task_id"] == cause["task_id"]]
        staged = {(c["scope"], c["owner"], c["kind"]) for c in cause.get("documents") or () if c["ops"]}
        written = {(w["revision"]["scope"], w["revision"]["owner"], w["revision"]["kind"]) for w in revisions}
        story = f"ToolDocumentWithResult: commit {seq} (the result of tool task {cause['task_id']})"
        assert not written or results, story + " writes documents without the tool's result entry"
        assert written <= staged, story + f" writes documents the tool did not stage: {sorted(written - staged)}"
        if results and not results[0]["is_error"]:
            assert written == staged, story + f" drops staged changes {sorted(staged - written)}"


def fork_sees_parent_up_to_its_point(storage: Any) -> None:
    for c in storage.conversations():
        if c.parent_id is None:
            continue
        story = f"ForkSeesParentUpToItsPoint: fork {c.id} of {c.parent_id} at {c.fork_at}"
        parent = storage.entries(c.parent_id, upto=c.fork_at)
        assert parent and parent[-1].id == c.fork_at, story + ": the fork point is not an entry its parent sees"
        mine = storage.entries(c.id)
        own = [e for e in mine if e.conversation_id == c.id]
        assert all(e.id > c.fork_at for e in own), story + ": an own entry precedes the fork point"
        assert [e.id for e in mine] == [e.id for e in parent] + [e.id for e in own], (
            story + f": reads {[e.id for e in mine]}, not the parent's up to its point and then its own"
        )
    for seq, _, writes in journal_history(storage):
        forks = [c for c in _records(writes, "conversation") if c.get("parent_id") is not None]
        assert not forks or not _records(writes, "entry"), (
            f"ForkSeesParentUpToItsPoint: commit {seq} creates fork {forks[0]['id']} and stores entries"
        )


# --- checked on the effects of each life ----------------------------------------------


def _phases(storage: Any) -> dict[int, list[tuple[int, dict[str, Any]]]]:
    """task id -> [(seq, checkpoint)] of every stored version."""
    out: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for seq, _, writes in journal_history(storage):
        for t in _records(writes, "task"):
            out.setdefault(t["id"], []).append((seq, t["checkpoint"]))
    return out


def _committed_before(effects: Sequence[Any], start: int) -> list[tuple[Any, int]]:
    """Each act of a life with the newest commit seq durable before it."""
    out = []
    last = start
    for e in effects:
        if isinstance(e, Commit):
            last = max(last, e.seq)
        else:
            out.append((e, last))
    return out


def _intent(history: Sequence[tuple[int, dict[str, Any]]], upto: int) -> dict[str, Any] | None:
    found = None
    for seq, cp in history:
        if seq <= upto:
            found = cp
    return found


def intent_before_request(storage: Any, lives: Sequence[tuple[int, Sequence[Any]]]) -> None:
    """``lives``: (commits in the store when the life began, its effects)."""
    phases = _phases(storage)
    for n, (start, effects) in enumerate(lives):
        for e, upto in _committed_before(effects, start):
            if not isinstance(e, (CallModel, PollModel)):
                continue
            want = "request" if isinstance(e, CallModel) else "poll"
            cp = _intent(phases.get(e.task_id, []), upto)
            assert cp is not None and cp.get("phase") == want and cp.get("attempt") == e.attempt, (
                f"IntentBeforeRequest: life {n} sent {type(e).__name__} for task {e.task_id} attempt {e.attempt} "
                f"when the stored checkpoint was {cp}"
            )


def intent_before_effect(storage: Any, lives: Sequence[tuple[int, Sequence[Any]]]) -> None:
    phases = _phases(storage)
    for n, (start, effects) in enumerate(lives):
        for e, upto in _committed_before(effects, start):
            if isinstance(e, RunTool):
                cp = _intent(phases.get(e.task_id, []), upto)
                assert cp is not None and cp.get("phase") == "execute" and cp.get("arguments") == e.arguments, (
                    f"IntentBeforeEffect: life {n} ran tool task {e.task_id} when the stored checkpoint was {cp}"
                )


def one_invocation_per_task(lives: Sequence[Sequence[Any]]) -> None:
    for n, effects in enumerate(lives):
        seen: Counter[tuple[Any, ...]] = Counter()
        for e in effects:
            if isinstance(e, (RunTool, PrepareTool)):
                seen[(type(e).__name__, e.task_id)] += 1
            elif isinstance(e, CallModel):
                seen[("CallModel", e.task_id, e.attempt)] += 1
        twice = [key for key, k in seen.items() if k > 1]
        assert not twice, f"OneInvocationPerTask: life {n} started {twice} more than once"


# --- checked on the transcript -----------------------------------------------------------


def context_pairs_calls_with_results(storage: Any) -> None:
    for c in storage.conversations():
        messages = context_messages(storage.entries(c.id))
        for i, m in enumerate(messages):
            if m.role != "assistant" or not m.tool_calls:
                continue
            follow = messages[i + 1 : i + 1 + len(m.tool_calls)]
            assert [r.role for r in follow] == ["tool"] * len(m.tool_calls) and [
                r.tool_call_id for r in follow
            ] == [call.id for call in m.tool_calls], (
                f"ContextPairsCallsWithResults: conversation {c.id} message {i} calls "
                f"{[call.id for call in m.tool_calls]} but is followed by {[(r.role, r.tool_call_id) for r in follow]}"
            )


def stored_text_is_valid_utf8(storage: Any) -> None:
    for c in storage.conversations():
        for e in storage.entries(c.id):
            try:
                codec.to_json(e).encode("utf-8")
            except (UnicodeEncodeError, ValueError) as err:
                raise AssertionError(f"StoredTextIsValidUtf8: entry {e.id} cannot be stored: {err}") from None


def bounded_tool_output(storage: Any) -> None:
    for c in storage.conversations():
        for e in storage.entries(c.id):
            cut = (e.data or {}).get("truncated") if e.kind == "tool_result" else None
            if cut is None:
                continue
            size = len(e.text.encode("utf-8"))
            assert cut["kept_bytes"] <= cut["total_bytes"] and size <= cut["kept_bytes"] + 1024, (
                f"BoundedToolOutput: result {e.id} holds {size} bytes, kept {cut['kept_bytes']}"
            )
        for slot in storage.document(c.id, "pi.live").tools or ():
            size = len((slot.output or "").encode("utf-8"))
            assert size <= 4096, f"BoundedToolOutput: the slot of call {slot.call_id} shows {size} bytes"


def journal_invariants(storage: Any) -> None:
    """The journal-level invariants: they hold after every commit, so also
    on a store a crash left behind."""
    outcome_iff_terminal(storage)
    admission_is_atomic(storage)
    request_id_is_unique(storage)
    queued_input_never_lost(storage)
    round_is_atomic(storage)
    run_has_one_owner(storage)
    recovery_keeps_checkpoints(storage)
    owner_ends_after_owned(storage)
    store_matches_journal(storage)
    document_matches_revisions(storage)
    tool_document_with_result(storage)
    fork_sees_parent_up_to_its_point(storage)


def life_invariants(storage: Any, lives: Sequence[tuple[int, Sequence[Any]]]) -> None:
    """The invariants over the effects each process life ran."""
    intent_before_request(storage, lives)
    intent_before_effect(storage, lives)
    one_invocation_per_task([effects for _, effects in lives])


def terminal_ids(storage: Any) -> frozenset[int]:
    return frozenset(t.id for t in storage.tasks() if t.status == TaskStatus.TERMINAL)


# --- scale-out: the commits many workers landed (tla/Leases.tla) ---------------


@attrs.frozen
class LeaseCommit:
    """One commit as the database holds it: the tree (its root conversation),
    the lease epoch and worker that landed it, its seq, the ids it allocated."""

    root: int
    epoch: int
    worker: str
    seq: int
    ids: tuple[int, ...] = ()


def _by_tree(landed: Iterable[LeaseCommit]) -> dict[int, list[LeaseCommit]]:
    trees: dict[int, list[LeaseCommit]] = {}
    for c in sorted(landed, key=lambda c: c.seq):
        trees.setdefault(c.root, []).append(c)
    return trees


def commits_are_fenced(landed: Iterable[LeaseCommit]) -> None:
    for root, commits in _by_tree(landed).items():
        for a, b in zip(commits, commits[1:]):
            assert a.epoch <= b.epoch, (
                f"tree {root}: commit {b.seq} of epoch {b.epoch} (worker {b.worker}) landed after commit "
                f"{a.seq} of epoch {a.epoch} (worker {a.worker}): a fenced-out worker committed"
            )


def one_writer_per_epoch(landed: Iterable[LeaseCommit]) -> None:
    for root, commits in _by_tree(landed).items():
        writers: dict[int, str] = {}
        for c in commits:
            first = writers.setdefault(c.epoch, c.worker)
            assert first == c.worker, (
                f"tree {root}: epoch {c.epoch} has commits by {first} and by {c.worker} (commit {c.seq})"
            )


def tree_ids_increase(landed: Iterable[LeaseCommit]) -> None:
    for root, commits in _by_tree(landed).items():
        last, last_seq = None, None
        for c in commits:
            for i in c.ids:
                assert last is None or i > last, (
                    f"tree {root}: commit {c.seq} (epoch {c.epoch}, worker {c.worker}) allocated id {i}, "
                    f"not above id {last} of commit {last_seq}"
                )
                last, last_seq = i, c.seq


def unsafe_body_runs_at_most_once_across_workers(runs: Mapping[int, int]) -> None:
    """``runs``: tool task id -> how many times its unsafe body started, over
    every worker process and life."""
    twice = {t: n for t, n in runs.items() if n > 1}
    assert not twice, f"unsafe tool bodies ran more than once across workers: {twice}"


def lease_invariants(landed: Sequence[LeaseCommit], unsafe_runs: Mapping[int, int]) -> None:
    """The scale-out invariants over what the workers landed."""
    commits_are_fenced(landed)
    one_writer_per_epoch(landed)
    tree_ids_increase(landed)
    unsafe_body_runs_at_most_once_across_workers(unsafe_runs)
