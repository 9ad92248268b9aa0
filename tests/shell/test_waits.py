"""Host waits (shell/waits.py): a record waiter follows its record's
committed versions and is woken only when a commit writes that record or
the harness closes - not by every commit and invocation leaving (a run's
``submission.wait()`` used to wake, re-check and sleep again several times
per durable step)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pidurable.core.effects import PutSubmission
from pidurable.core.model import ConversationId, Submission, SubmissionId, SubmissionStatus, SubmissionType
from pidurable.shell.errors import HarnessClosed
from pidurable.shell.waits import Waits


def submission(sid: int, status: SubmissionStatus) -> Submission:
    return Submission(id=SubmissionId(sid), conversation_id=ConversationId(1), type=SubmissionType.INPUT, status=status)


async def test_a_record_waiter_wakes_only_for_its_record() -> None:
    """Commits of other records and plain wakes leave the waiter asleep (its
    check is not re-run); the commit that settles its record returns it."""
    waits = Waits()
    checked: list[SubmissionStatus] = []
    result: list[Submission] = []

    def done(rec: Submission) -> bool:
        checked.append(rec.status)
        return rec.settled

    async def wait() -> None:
        result.append(await waits.record(Submission, 5, lambda: submission(5, SubmissionStatus.QUEUED), done))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        asleep = list(checked)  # the stored version, checked before it sleeps
        assert set(asleep) == {SubmissionStatus.QUEUED}
        for _ in range(3):
            waits.committed([PutSubmission(submission=submission(6, SubmissionStatus.DONE))])
            waits.wake()  # what the loop does after every flush and invocation leaving
            await trio.testing.wait_all_tasks_blocked()
        assert checked == asleep and not result
        waits.committed([PutSubmission(submission=submission(5, SubmissionStatus.PLACED))])
        await trio.testing.wait_all_tasks_blocked()
        assert checked == [*asleep, SubmissionStatus.PLACED] and not result
        waits.committed([PutSubmission(submission=submission(5, SubmissionStatus.DONE))])
    assert [r.status for r in result] == [SubmissionStatus.DONE]
    assert waits.watched == {}


async def test_the_close_wakes_a_record_waiter() -> None:
    waits = Waits()

    async def wait() -> None:
        with pytest.raises(HarnessClosed):
            await waits.record(Submission, 5, lambda: submission(5, SubmissionStatus.QUEUED), lambda rec: rec.settled)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        waits.close()
    assert waits.watched == {}


async def test_a_cancelled_record_wait_leaves_nothing_behind(autojump_clock: trio.testing.MockClock) -> None:
    """A waiter that gives up (a host's timeout) leaves no watched record
    and no wake-up event behind: many such waits do not grow the Waits."""
    waits = Waits()
    for sid in range(1, 4):
        with trio.move_on_after(1):
            await waits.record(Submission, sid, lambda: submission(sid, SubmissionStatus.QUEUED), lambda rec: rec.settled)
    assert waits.watched == {} and waits._written == {} and waits._watchers == {}
