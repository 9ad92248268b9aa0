"""Replay: re-run a store's journal through the pure core.

Every commit journals the events that caused it (same transaction). Feeding
them to ``step`` from an empty state must reproduce every stored commit byte
for byte; ``replay`` does that and reports each transition, which makes a
recorded run debuggable step by step (``pidurable replay --db FILE``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import attrs

from pidurable.core import State, step
from pidurable.core.effects import Commit

from .storage import codec
from .storage.base import JournalRow, writes_json


class JournalReads(Protocol):
    """What replay reads: the journal, oldest commit first."""

    def journal(self) -> Sequence[JournalRow]: ...


@attrs.frozen(kw_only=True)
class Transition:
    seq: int
    events: tuple[str, ...]  # event tags fed since the previous commit
    writes: tuple[str, ...]  # one short line per write
    acts: tuple[str, ...]  # effects after the commit
    matches: bool
    stored: str = ""
    replayed: str = ""


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
    return f"{kind} of conversation {w.get('conversation_id')}"


def replay(storage: JournalReads) -> Iterator[Transition]:
    """Yield one Transition per stored commit, in order."""
    state = State()
    for row in storage.journal():
        events = [codec.event_from_data(d) for d in json.loads(row.events)]
        tags: list[str] = []
        acts: list[str] = []
        produced: Commit | None = None
        for ev in events:
            tags.append(type(ev).TAG)
            result = step(state, ev)
            state = result.state
            for effect in result.effects:
                if isinstance(effect, Commit):
                    produced = effect
                else:
                    acts.append(type(effect).TAG)
        replayed = writes_json(produced.writes, produced.seq) if produced is not None else ""
        matches = produced is not None and produced.seq == row.seq and replayed == row.writes
        yield Transition(
            seq=row.seq,
            events=tuple(tags),
            writes=tuple(_describe_write(w) for w in json.loads(row.writes)),
            acts=tuple(acts),
            matches=matches,
            stored=row.writes if not matches else "",
            replayed=replayed if not matches else "",
        )
