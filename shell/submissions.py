"""Host submissions: ``Input`` and ``Write`` (what ``conv.submit`` takes) and
the ``SubmissionHandle`` it returns (``wait``, ``record``, ``abort``)."""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core.effects import Respond
from pidurable.core.events import SubmissionAbortRequested
from pidurable.core.model import ConversationId, Submission, SubmissionAbortResult, SubmissionId

from .errors import HarnessClosed, NotFound, accepted
from .loop import Loop


def _live(rt: Loop) -> None:
    """Every API call after close raises ``HarnessClosed``."""
    if rt.closed:
        raise HarnessClosed("Harness is closed; open a new one on the store")


@attrs.frozen
class Input:
    """A user input for ``conv.submit``. ``when_busy``: ``follow_up``
    (default: queued, placed after the current run answers), ``steer``
    (placed after the current tool round) or ``reject``."""

    content: str
    request_id: str | None = attrs.field(default=None, kw_only=True)
    when_busy: str = attrs.field(default="follow_up", kw_only=True)


@attrs.frozen
class Write:
    """A passive write for ``conv.submit``: appends an entry (a user message by
    default, or any ``kind`` with optional ``data``) without starting a run.
    While the conversation is busy it is queued and placed at the next
    boundary, before user items; it survives an abort. It settles ``done``
    once its entry is appended."""

    content: str
    request_id: str | None = attrs.field(default=None, kw_only=True)
    kind: str = attrs.field(default="user", kw_only=True)
    data: dict[str, Any] | None = attrs.field(default=None, kw_only=True)


def _unwrap(resp: Respond, conversation_id: int | None = None) -> int:
    """The id an accepted request returns (a refusal raises)."""
    value = accepted(resp, conversation_id).value
    assert value is not None
    return value


@attrs.frozen
class SubmissionHandle:
    id: SubmissionId
    _rt: Loop = attrs.field(repr=False, eq=False)

    async def record(self) -> Submission:
        _live(self._rt)
        rec = self._rt.storage.submission(self.id)
        if rec is None:
            raise NotFound(f"Submission {self.id} does not exist")
        return rec

    async def wait(self) -> Submission:
        """The settled record (``done`` or ``unanswered``), once durable."""
        _live(self._rt)

        return await self._rt.waits.record(
            Submission,
            self.id, lambda: self._rt.storage.submission(self.id), lambda rec: rec.settled
        )

    async def abort(self) -> SubmissionAbortResult:
        """Withdraw it if still queued: ``aborted``, ``already_placed`` or
        ``settled``."""
        result = await abort_submission(self._rt, self.id, None)
        if result is SubmissionAbortResult.NOT_FOUND:
            raise NotFound(f"Submission {self.id} does not exist")
        return result


async def abort_submission(rt: Loop, submission_id: int, conversation_id: int | None) -> SubmissionAbortResult:
    resp = await rt.request(
        lambda ticket, now: SubmissionAbortRequested(
            now=now,
            ticket=ticket,
            submission_id=SubmissionId(submission_id),
            conversation_id=None if conversation_id is None else ConversationId(conversation_id),
        )
    )
    return SubmissionAbortResult(accepted(resp).data)
