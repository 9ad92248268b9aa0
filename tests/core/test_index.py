"""The task index's draft (core/index.py): kept in step case by case, never
mutating the index it started from."""

from __future__ import annotations

import random

from pidurable.core.index import IndexDraft, build
from pidurable.core.model import Outcome, OutcomeStatus, Task, TaskId, TaskStatus

_STATUSES = (TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.COMPLETING)


def _random_task(rng: random.Random, tid: int, live: list[int]) -> Task:
    status = rng.choice(_STATUSES)
    return Task(
        id=TaskId(tid),
        conversation_id=rng.choice((1, 2, 3)),
        kind="k",
        owner=TaskId(rng.choice(live)) if live and rng.random() < 0.6 else None,
        abort_requested=rng.random() < 0.2,
        status=status,
        on=tuple(TaskId(t) for t in rng.sample(live, min(len(live), rng.randint(0, 3)))) if status is TaskStatus.WAITING else (),
        outcome=Outcome(status=OutcomeStatus.FAILED) if status is TaskStatus.COMPLETING else None,
    )


def test_added_dropped_moved_match_a_fresh_build_and_leave_the_base_as_it_was() -> None:
    """Random adds, ends and moves (owner, conversation, status, ``on``,
    abort marks): after each batch the draft equals ``build`` of the live
    tasks, and the index the draft started from is unchanged (each mapping
    is copied on its first change, found by identity)."""
    rng = random.Random(7)
    owners = {1: None, 2: TaskId(1), 3: None}
    tasks: dict[int, Task] = {}
    next_id = 1
    for _ in range(60):
        base = build(tasks.values(), owners)
        before = base.as_dict()
        draft = IndexDraft(base)
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.4 or not tasks:
                task = _random_task(rng, next_id, list(tasks))
                next_id += 1
                draft.added(task)
                tasks[task.id] = task
            elif roll < 0.7:
                old = tasks.pop(rng.choice(list(tasks)))
                draft.dropped(old)
            else:
                old = tasks[rng.choice(list(tasks))]
                new = _random_task(rng, old.id, [t for t in tasks if t != old.id])
                draft.moved(old, new)
                tasks[new.id] = new
        assert draft.freeze().as_dict() == build(tasks.values(), owners).as_dict()
        assert base.as_dict() == before


def test_a_draft_with_no_change_gives_back_its_base() -> None:
    base = build([Task(id=TaskId(5), conversation_id=1, kind="k")], {1: None})
    assert IndexDraft(base).freeze() is base
