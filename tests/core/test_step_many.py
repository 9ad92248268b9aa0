"""``step_many``: several events stepped in one draft (a group commit) are
the fold of ``step`` over them - the same state, the same stored records,
the same acts and replies in the same order - with one Commit.

Checked over the random valid histories of test_determinism.py, cut into
random batches, and on a fixed round of tool results.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from pidurable.core import State, Step, step, step_many
from pidurable.core.effects import Commit, PutConversation, PutDocument, PutEntry, PutSubmission, PutTask
from pidurable.core.events import Opened
from pidurable.core.model import CoreInvariantError

from .helpers import answer, calls, finished, opened_state, prepared, run_events, submit
from .test_determinism import random_history

#: The records a commit upserts, by key (documents aside: their revisions are compared by value).
_RECORDS = (PutTask, PutEntry, PutSubmission, PutConversation)


def _key(w: Any) -> tuple[str, int]:
    if isinstance(w, PutTask):
        return ("task", w.task.id)
    if isinstance(w, PutEntry):
        return ("entry", w.entry.id)
    if isinstance(w, PutSubmission):
        return ("submission", w.submission.id)
    return ("conversation", w.conversation.id)


def _stored(steps: list[Step]) -> tuple[dict[tuple[str, int], Any], set[int]]:
    """The last version of every record the commits of ``steps`` write, and the documents they revise."""
    records: dict[tuple[str, int], Any] = {}
    documents: set[int] = set()
    for s in steps:
        for c in s.effects:
            if isinstance(c, Commit):
                for w in c.writes:
                    if isinstance(w, PutDocument):
                        documents.add(w.document_id)
                    else:
                        assert isinstance(w, _RECORDS), w
                        records[_key(w)] = w
    return records, documents


def _acts(steps: list[Step]) -> list[Any]:
    return [e for s in steps for e in s.effects if not isinstance(e, Commit)]


def _same_state(batched: State, folded: State) -> None:
    """Equal but for ``next_seq`` (one commit where the fold made several)
    and each conversation's ``stored`` (its built-ins' deltas since their
    newest base: one revision where the fold made several)."""

    def unstored(state: State) -> State:
        return attrs.evolve(state, conversations={c: attrs.evolve(v, stored={}) for c, v in state.conversations.items()})

    same, folded = unstored(attrs.evolve(batched, next_seq=folded.next_seq)), unstored(folded)
    differ = [f.name for f in attrs.fields(State) if getattr(same, f.name) != getattr(folded, f.name)]
    assert not differ, (differ, [(getattr(same, n), getattr(folded, n)) for n in differ])
    assert batched.task_index.as_dict() == folded.task_index.as_dict()


def check_batches(lives: list[list[tuple[Any, Step]]], cuts: list[int]) -> int:
    """Step each life's events in batches (``cuts``: the batch sizes, reused
    in turn) and compare every batch with the fold of its events' Steps.
    Returns the number of batches of more than one event."""
    many = 0
    k = 0
    for life in lives:
        state = State()
        at = 0
        while at < len(life):
            size = cuts[k % len(cuts)]
            k += 1
            chunk = life[at : at + size]
            at += len(chunk)
            events = [ev for ev, _ in chunk]
            steps = [out for _, out in chunk]
            out = step_many(state, events)
            # one commit at most, first, and only if some event of the batch wrote
            commits = [i for i, e in enumerate(out.effects) if isinstance(e, Commit)]
            assert commits in ([], [0])
            assert bool(commits) == any(isinstance(e, Commit) for s in steps for e in s.effects)
            if commits:  # (Opened sets next_seq: the number after the commit's)
                assert out.state.next_seq == out.effects[0].seq + 1
            _same_state(out.state, steps[-1].state)
            assert _acts([out]) == _acts(steps)
            assert _stored([out]) == _stored(steps)
            assert list(out.rules) == [r for s in steps for r in s.rules]
            many += len(chunk) > 1
            state = out.state
    return many


def _lives(driver: Any) -> list[list[tuple[Any, Step]]]:
    lives: list[list[tuple[Any, Step]]] = []
    for (fresh, ev), out in zip(driver.journal, driver.outputs, strict=True):
        if fresh:
            lives.append([])
        lives[-1].append((ev, out))
    return lives


@given(st.data())
def test_a_batch_is_the_fold_of_its_events(data: st.DataObject) -> None:
    """Over a random valid history cut into random batches (1-6 events),
    each ``step_many`` gives the state the fold of ``step`` gives (but one
    ``next_seq``), the same last version of every record, the same built-in
    documents revised, the same acts and replies in order, and the rules of
    each event in order."""
    driver = random_history(data)
    cuts = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=8), label="batch sizes")
    many = check_batches(_lives(driver), cuts)
    event("some batch of several events" if many else "only single events")


def test_a_round_of_tool_results_is_one_commit() -> None:
    """Three tools prepared and finished: stepped one by one, six commits;
    in one draft, one commit holding every record's last version, and the
    same next request of the model."""
    state = opened_state()
    s1 = run_events(state, submit("hi", ticket=1))
    gen = min(s1[-1].state.tasks)
    s2 = run_events(s1[-1].state, calls(gen, "ls", "cat", "pwd"))
    tids = sorted(t for t in s2[-1].state.tasks if t != gen)
    events = [e for t in tids for e in (prepared(t), finished(t))]
    one_by_one = run_events(s2[-1].state, *events)
    together = step_many(s2[-1].state, events)
    assert sum(isinstance(e, Commit) for s in one_by_one for e in s.effects) == 6
    assert [type(e) for e in together.effects if isinstance(e, Commit)] == [Commit]
    _same_state(together.state, one_by_one[-1].state)
    assert _stored([together]) == _stored(one_by_one)
    assert _acts([together]) == _acts(one_by_one)
    # the generation's next model request comes out of the batch, as it does of the fold
    assert [type(e).__name__ for e in together.effects].count("CallModel") == 1
    # and the model's answer then steps alike on both
    gen2 = max(together.state.tasks)
    _same_state(step(together.state, answer(gen2)).state, step(one_by_one[-1].state, answer(gen2)).state)


def test_one_event_is_step() -> None:
    state = opened_state()
    ev = submit("hi", ticket=1)
    assert step_many(state, [ev]) == step(state, ev)


def test_opened_only_first_and_nothing_before_it() -> None:
    """A draft starts a process life only with its first event; no other event before ``Opened``."""
    state = opened_state()
    with pytest.raises(CoreInvariantError, match="before Opened"):
        step_many(State(), [submit("a", ticket=1), submit("b", ticket=2)])
    ev = Opened(now=1, next_id=state.next_id, next_seq=state.next_seq)
    with pytest.raises(CoreInvariantError, match="only be the first"):
        step_many(state, [submit("a", ticket=1), ev])
    with pytest.raises(CoreInvariantError, match="at least one"):
        step_many(state, [])
