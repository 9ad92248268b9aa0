"""Replay: re-run a store's journal through the pure core, and check it.

What the journal records
------------------------
Every commit journals, in its own transaction, the events the reducer
stepped since the previous commit, exactly as stepped (enriched, cleaned;
``loop.py``), then the commit's writes as the codec encoded them. The core
emits at most one ``Commit`` per draft: a journal row is ``[e1 .. en]``
where only ``en`` committed, or a group the loop stepped in one draft
(``step_many``: results of work in flight ready together, one commit), or
both. Replay steps a row's events in one draft - for a row of the first
kind that is the fold of ``step`` over them (tests/core/test_step_many.py),
so rows written before groups replay alike. Ids and sequence numbers come
from counters in the state, so they are recomputed, never read back.

A process life starts with ``Opened`` (what it loaded: live records,
counters, the installed catalog, settings), stepped on a fresh ``State``.
Events a process stepped after its last commit are in no row (they died with
it), and the next life starts from ``Opened`` again. So replay resets the
state to ``State()`` at every ``Opened`` - exactly what the process did -
and a replay is exact: same events on the same state give the same commit,
byte for byte, or the current core decides differently.

``check`` compares every commit the current core produces with the recorded
one: its seq, and its writes' bytes. The first divergence of a process life
is reported (which commit, which event, what the recorded and the produced
writes are, and a short diff); the rest of that life is skipped (its state
already differs) and checking resumes at the next ``Opened``, so one
behaviour change is reported once per life it touches.

What cannot be replayed exactly, and is reported so rather than guessed at:
a row whose format version this code does not read (refused up front, see
:func:`check_format`), an event that no longer decodes (an event type or a
field the current code removed), and a journal that starts inside a process
life (an excerpt, or rows dropped): the state its first events were stepped
on is not recorded, so nothing is compared until the next ``Opened``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import attrs

from pidurable.core import State, step, step_many
from pidurable.core.builtins import legacy_writes
from pidurable.core.effects import Commit
from pidurable.core.events import Event, Opened

from .journal_diff import short_json, writes_diff
from .storage import codec
from .storage.base import JournalRow, StorageError

writes_json = codec.writes_json

#: The journal formats this code replays (``codec.FORMAT_VERSION`` is the one
#: it writes). Format 1: events and writes as the one converter's JSON.
#: Format 2 (issue 11, a lean journal): the events, and a digest of the
#: writes - replay recomputes them and compares digests.
#: Format 3 (issue 11, a lean store): as 2, encoded leaving out fields at
#: their default (``codec.stored``); each row is compared in its own format's
#: encoding (``codec.ENCODERS``).
#: Format 4 (issue 10): as 3, with the built-in documents written as document
#: revisions; an older row is compared with the whole-value writes it had
#: (``builtins.legacy_writes``).
READABLE_FORMATS = frozenset({1, 2, 3, 4})
#: The first format whose built-ins are document revisions.
BUILTINS_AS_DOCUMENTS = 4
assert codec.FORMAT_VERSION in READABLE_FORMATS


class JournalReads(Protocol):
    """What replay reads: the journal, oldest commit first."""

    def journal(self) -> Sequence[JournalRow]: ...


class UnreadableJournal(StorageError):
    """A journal row's format version is one this code does not read."""


def check_format(rows: Iterable[JournalRow], source: str) -> None:
    """Refuse a journal holding a row of a format this code does not read,
    naming the row and the version (before anything is replayed)."""
    for row in rows:
        fmt = row.format
        if fmt in READABLE_FORMATS:
            continue
        known = ", ".join(str(f) for f in sorted(READABLE_FORMATS))
        if isinstance(fmt, int) and fmt > max(READABLE_FORMATS):
            raise UnreadableJournal(
                f"{source}: journal row {row.seq} has format version {fmt}; this pidurable replays "
                f"journal format {known} only (it was written by a newer pidurable: upgrade to replay it)"
            )
        raise UnreadableJournal(
            f"{source}: journal row {row.seq} has format version {fmt!r}, which no pidurable wrote "
            f"(this one replays journal format {known}); the journal is damaged"
        )


class Kind(enum.StrEnum):
    """How a replayed commit differs from the recorded one."""

    #: The writes differ (the same events led to other decisions).
    WRITES = "writes"
    #: The commit carries another sequence number.
    SEQ = "seq"
    #: The row's events produced no commit.
    NO_COMMIT = "no_commit"
    #: The current core committed where the journal has no commit.
    EXTRA_COMMIT = "extra_commit"
    #: ``step`` raised on a recorded event.
    RAISED = "raised"
    #: A recorded event does not decode with the current code.
    UNDECODABLE = "undecodable"
    #: The journal starts inside a process life (an excerpt, or rows
    #: dropped): the state its first events were stepped on is unknown.
    NO_OPEN = "no_open"


@attrs.frozen(kw_only=True)
class Divergence:
    """The first place where the current core leaves the recorded path."""

    seq: int  #: the recorded commit
    kind: Kind
    message: str  #: one line
    #: The event that made the difference (index in its row, tag, short JSON).
    event_index: int | None = None
    event_tag: str = ""
    event_text: str = ""
    #: ``changed: task 12`` / ``    outcome.error.message: "a" -> "b"`` lines.
    diff: tuple[str, ...] = ()
    recorded: str = ""  #: the recorded writes (JSON text; format 2: their digest)
    produced: str = ""  #: the produced writes (JSON text), if any
    #: The commit whose ``Opened`` started this process life.
    life_start: int = 0


@attrs.frozen(kw_only=True)
class Transition:
    """One recorded commit, replayed."""

    seq: int
    events: tuple[str, ...]  #: tags of the events fed since the previous commit
    writes: tuple[str, ...]  #: one short line per recorded write (``()`` from ``replay(describe=False)``)
    acts: tuple[str, ...]  #: tags of the effects after the commit
    divergence: Divergence | None = None
    #: Not replayed: an earlier commit of the same process life diverged.
    skipped: bool = False
    #: The row starts a process life (its first event is ``Opened``).
    opens: bool = False
    #: The writes (JSON text) the current core produced for it, when it
    #: reproduced the recorded commit (what a format-2 row does not store).
    produced: str = ""
    #: Per event of the row, the rules that fired (``Step.rules``), when replayed.
    rules: tuple[tuple[str, ...], ...] = ()
    #: The state the row's events were stepped on (``replay --explain``
    #: compares records with it), when replayed.
    before: State | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def matches(self) -> bool:
        return self.divergence is None and not self.skipped


def _describe_write(w: dict[str, Any]) -> str:
    kind = w["type"]
    if kind == "task":
        t = w["task"]
        phase = t["checkpoint"].get("phase")
        out = (t.get("outcome") or {}).get("status")
        return f"task {t['id']} {t['kind']} {t['status']}" + (f" {phase}" if phase else "") + (f" ({out})" if out else "")
    if kind == "entry":
        e = w["entry"]
        text = e["text"].replace("\n", " ")
        return f"entry {e['id']} {e['kind']}: {text[:50]}" + ("..." if len(text) > 50 else "")
    if kind == "submission":
        s = w["submission"]
        return f"submission {s['id']} {s['type']} {s['status']}" + (f" ({s['reason']})" if s.get("reason") else "")
    if kind == "conversation":
        return f"conversation {w['conversation']['id']}"
    if kind == "document":
        return f"document {w.get('document_id')} {(w.get('revision') or {}).get('action', '')}".rstrip()
    return f"{kind} of conversation {w.get('conversation_id')}"


def describe_writes(text: str) -> tuple[str, ...]:
    """One short line per write of a commit's writes JSON (a digest says so)."""
    if codec.is_digest(text):
        return ("(writes kept as a digest; replay recomputes them)",)
    try:
        # every field written (format 3 leaves defaults out): decode, then
        # encode as format 1 does
        full = json.loads(codec.writes_json([codec.write_from_data(d) for d in json.loads(text)], 1))
        return tuple(_describe_write(w) for w in full)
    except Exception:  # noqa: BLE001 - a description only: anything unreadable is shown as such
        return (f"(unreadable writes: {text[:80]})",)


def _no_description(text: str) -> tuple[str, ...]:
    return ()


def _event_text(data: Any) -> str:
    """An event as one short line of JSON; ``Opened`` without the records it
    carries (they can be megabytes)."""
    if isinstance(data, dict) and data.get("type") == "opened":
        data = {
            k: (f"{len(v)} records" if isinstance(v, list) else v)
            for k, v in data.items()
            if k in ("now", "next_id", "next_seq", "resume", "conversations", "tasks", "submissions", "type")
        }
    return short_json(data, 240)


class _Life:
    """The replay's state within one process life."""

    def __init__(self, start: int, state: State | None = None) -> None:
        self.state = State() if state is None else state
        self.start = start
        self.diverged = False
        #: Commits a step produced beyond the row it closed (never, with
        #: today's core: at most one commit per step).
        self.extra: list[Commit] = []


def replay(rows: Iterable[JournalRow], *, describe: bool = True, state: State | None = None) -> Iterator[Transition]:
    """Yield one :class:`Transition` per recorded commit, in order.
    ``describe=False``: each transition's ``writes`` is ``()`` (no line per
    write: a third of the replay's time, which ``check`` and
    ``journal_writes`` do not read). ``state``: the state the first row's
    events were stepped on (a snapshot, ``storage/snapshot.py``: rows that
    continue a process life from it); None: the rows start a life."""
    writes_of = describe_writes if describe else _no_description
    life = _Life(0) if state is None else _Life(state.next_seq, state)
    for row in rows:
        datas = _event_datas(row)
        events: list[Event] = []
        bad: Divergence | None = None
        for i, data in enumerate(datas):
            try:
                events.append(codec.event_from_data(data))
            except Exception as e:  # noqa: BLE001 - any decoding failure is reported as one
                bad = Divergence(
                    seq=row.seq,
                    kind=Kind.UNDECODABLE,
                    message=f"event {i} of commit {row.seq} does not decode with this code "
                    f"({type(e).__name__}: {_first_line(e)}); the journal cannot be replayed exactly",
                    event_index=i,
                    event_tag=str(data.get("type", "?")) if isinstance(data, dict) else "?",
                    event_text=_event_text(data),
                    recorded=row.writes,
                )
                break
        first = datas[0] if datas else None
        opens = isinstance(first, dict) and first.get("type") == Opened.TAG
        if opens:
            life = _Life(row.seq)
        elif life.start == 0 and not life.diverged:
            life.diverged = True
            yield Transition(
                seq=row.seq,
                events=tuple(str(d.get("type", "?")) if isinstance(d, dict) else "?" for d in datas),
                writes=writes_of(row.writes),
                acts=(),
                divergence=Divergence(
                    seq=row.seq,
                    kind=Kind.NO_OPEN,
                    message=f"the journal starts inside a process life (its first commit, {row.seq}, is not an "
                    "opened): the state its events were stepped on is not recorded, so commits up to the next "
                    "opened are not compared",
                    recorded=row.writes,
                ),
            )
            continue
        tags = tuple(type(e).TAG for e in events) if bad is None else tuple(
            str(d.get("type", "?")) if isinstance(d, dict) else "?" for d in datas
        )
        base = Transition(seq=row.seq, events=tags, writes=writes_of(row.writes), acts=(), opens=opens)
        if life.diverged:
            yield attrs.evolve(base, skipped=True)
            continue
        if bad is not None:
            life.diverged = True
            yield attrs.evolve(base, divergence=attrs.evolve(bad, life_start=life.start))
            continue
        before = life.state
        rules: list[tuple[str, ...]] = []
        acts, divergence, produced = _replay_row(life, row, events, datas, rules)
        if divergence is not None:
            life.diverged = True
            divergence = attrs.evolve(divergence, life_start=life.start)
            produced = ""
        elif codec.is_digest(row.writes):
            base = attrs.evolve(base, writes=writes_of(produced))
        yield attrs.evolve(base, acts=acts, divergence=divergence, produced=produced, rules=tuple(rules), before=before)


def _event_datas(row: JournalRow) -> list[Any]:
    try:
        datas = json.loads(row.events)
    except ValueError as e:
        raise StorageError(f"journal row {row.seq}: its events are not JSON ({e})") from e
    if not isinstance(datas, list):
        raise StorageError(f"journal row {row.seq}: its events are not a JSON array")
    return datas


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def _replay_row(
    life: _Life, row: JournalRow, events: list[Event], datas: list[Any], rules: list[tuple[str, ...]] | None = None
) -> tuple[tuple[str, ...], Divergence | None, str]:
    """Step ``row``'s events on ``life``; the acts that followed the commit,
    the divergence if the produced commit differs from the recorded one, and
    the produced writes' JSON. ``rules`` gets the rules each event fired."""
    acts: list[str] = []
    produced: list[Commit] = []

    def at(i: int | None, kind: Kind, message: str, **kw: Any) -> Divergence:
        return Divergence(
            seq=row.seq,
            kind=kind,
            message=message,
            event_index=i,
            event_tag="" if i is None else type(events[i]).TAG,
            event_text="" if i is None else _event_text(datas[i]),
            recorded=row.writes,
            **kw,
        )

    if not events:
        # an event that committed twice journals [] with its second commit
        if not life.extra:
            return (), Divergence(
                seq=row.seq, kind=Kind.NO_COMMIT, message=f"commit {row.seq} journals no event", recorded=row.writes
            ), ""
        produced, life.extra = life.extra, []
    elif life.extra:
        c = life.extra[0]
        return (), Divergence(
            seq=row.seq - 1,
            kind=Kind.EXTRA_COMMIT,
            message=f"after commit {row.seq - 1} this code makes another commit (seq {c.seq}) that the journal "
            "does not have",
            produced=writes_json(c.writes, row.format),
        ), ""
    last = len(events) - 1
    # the row's events in one draft, as the loop steps a group (step_many; one
    # event: step); the fold of step over them when only the last one wrote
    before = life.state
    try:
        result = step_many(before, events)
    except Exception as e:  # noqa: BLE001 - the core raising on a recorded event is a divergence
        i, e = _raising(before, events, e)
        return (), at(i, Kind.RAISED, f"step raised {type(e).__name__} on this event: {_first_line(e)}"), ""
    life.state = result.state
    if rules is not None:  # each event's own (explain), from stepping them one by one
        rules.extend(_rules_each(before, events, result))
    produced.extend(e for e in result.effects if isinstance(e, Commit))
    acts.extend(type(e).TAG for e in result.effects if not isinstance(e, Commit))
    final = last if events else None
    if not produced:
        return (), at(final, Kind.NO_COMMIT, f"this code makes no commit where the journal has commit {row.seq}"), ""
    commit, life.extra = produced[0], produced[1:]
    writes = commit.writes if row.format >= BUILTINS_AS_DOCUMENTS else legacy_writes(commit.writes, life.state)
    text = writes_json(writes, row.format)
    if commit.seq != row.seq:
        return tuple(acts), at(final, Kind.SEQ, f"this code numbers the commit {commit.seq}, the journal {row.seq}", produced=text), text
    if not codec.writes_match(row.writes, text):
        if codec.is_digest(row.writes):  # format 2 keeps a digest: no record-by-record diff
            message = f"commit {row.seq} differs: this code writes other records (the journal keeps a digest of them)"
            return tuple(acts), at(final, Kind.WRITES, message, produced=text), text
        diff = tuple(writes_diff(row.writes, text))
        return tuple(acts), at(
            final, Kind.WRITES, f"commit {row.seq} differs: this code writes other records", produced=text, diff=diff
        ), text
    return tuple(acts), None, text


def _raising(state: State, events: list[Event], error: Exception) -> tuple[int | None, Exception]:
    """Which of ``events``, stepped one by one from ``state``, raises (and
    what), else None and ``error`` (the draft of all of them raised)."""
    if len(events) == 1:
        return 0, error
    for i, ev in enumerate(events):
        try:
            state = step(state, ev).state
        except Exception as e:  # noqa: BLE001 - located
            return i, e
    return None, error


def _rules_each(state: State, events: list[Event], result: Any) -> list[tuple[str, ...]]:
    """The rules each of ``events`` fired (``result``: their draft's Step)."""
    if len(events) == 1:
        return [result.rules]
    each = []
    for ev in events:
        out = step(state, ev)
        each.append(out.rules)
        state = out.state
    return each


@attrs.frozen(kw_only=True)
class CheckResult:
    """What :func:`check` found."""

    commits: int  #: recorded commits replayed and identical
    events: int  #: events stepped in them
    lives: int  #: process lives (``Opened`` events) seen
    total: int  #: recorded commits
    #: The first divergence of each process life that has one, oldest first.
    divergences: tuple[Divergence, ...] = ()
    #: Commits skipped after a divergence in their life.
    skipped: int = 0

    @property
    def ok(self) -> bool:
        return not self.divergences


def check(
    rows: Sequence[JournalRow], source: str = "journal", transitions: Iterable[Transition] | None = None
) -> CheckResult:
    """Replay ``rows`` and compare every commit (see the module comment).
    ``transitions``: ``replay(rows)``'s, if the caller has them already."""
    check_format(rows, source)
    commits = events = lives = skipped = 0
    divergences: list[Divergence] = []
    for t in replay(rows, describe=False) if transitions is None else transitions:
        lives += t.opens
        if t.skipped:
            skipped += 1
        elif t.divergence is not None:
            divergences.append(t.divergence)
        else:
            commits += 1
            events += len(t.events)
    return CheckResult(
        commits=commits, events=events, lives=lives, total=len(rows), divergences=tuple(divergences), skipped=skipped
    )


def last_state(rows: Sequence[JournalRow]) -> tuple[State, Divergence | None] | None:
    """The state the store's last process life had at its last commit, as
    this code derives it: the rows from the last ``Opened`` on, replayed.
    None if the journal has no ``Opened`` (e.g. an empty store)."""
    start = None
    for n in range(len(rows) - 1, -1, -1):
        datas = _event_datas(rows[n])
        if datas and isinstance(datas[0], dict) and datas[0].get("type") == Opened.TAG:
            start = n
            break
    if start is None:
        return None
    check_format(rows[start:], "journal")
    life = _Life(rows[start].seq)
    for row in rows[start:]:
        datas = _event_datas(row)
        try:
            events = [codec.event_from_data(d) for d in datas]
        except Exception as e:  # noqa: BLE001 - reported, the state so far is kept
            return life.state, Divergence(seq=row.seq, kind=Kind.UNDECODABLE, message=_first_line(e))
        _, divergence, _ = _replay_row(life, row, events, datas)
        if divergence is not None:
            return life.state, divergence
    return life.state, None


class JournalMismatch(StorageError):
    """The journal does not replay to its recorded commits (see ``check``)."""


def journal_writes(
    rows: Sequence[JournalRow], source: str = "journal", transitions: Iterable[Transition] | None = None
) -> list[tuple[int, str, str]]:
    """``(seq, events JSON, writes JSON)`` of every recorded commit: a
    format-1 row's stored writes, a format-2 row's writes as the core
    recomputes them from the journal (checked against its digest). Raises
    :class:`JournalMismatch` at the first commit that does not replay.
    ``transitions``: ``replay(rows)``'s, if the caller has them already."""
    check_format(rows, source)
    if not any(codec.is_digest(r.writes) for r in rows):
        return [(r.seq, r.events, r.writes) for r in rows]  # every row keeps its writes: nothing to recompute
    out: list[tuple[int, str, str]] = []
    replayed = replay(rows, describe=False) if transitions is None else transitions
    for row, t in zip(rows, replayed, strict=True):
        if not codec.is_digest(row.writes):  # format 1 keeps its writes, whatever today's core would decide
            out.append((row.seq, row.events, row.writes))
            continue
        if t.divergence is not None or t.skipped:
            d = t.divergence
            raise JournalMismatch(f"{source}: commit {row.seq} does not replay: {d.message if d else 'skipped'}")
        out.append((row.seq, row.events, t.produced))
    return out
