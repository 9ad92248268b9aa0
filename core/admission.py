"""Admission: accepting host input, creating conversations, agent changes.

Theory of operation
-------------------
``InputSubmitted`` is admitted in ONE commit, or refused with nothing written:

1. Bad input (unknown conversation, empty content, unknown ``when_busy``) is
   refused with a readable error; nothing is stored.
2. Request-id dedup comes first: the same ``request_id`` in the same
   conversation returns the existing submission (the shell looked it up in
   storage; the core also checks its own unsettled ones) and writes nothing.
3. Busy (``pi.live.run`` present) and ``when_busy == "reject"`` -> refused
   with ``busy`` (the shell raises ``ConversationBusy``); nothing is stored.
4. Busy, or idle with items already queued -> the submission is ``queued`` and
   an inbox item holds its content. Idle with a queue also runs a final
   boundary at once (the queue goes first; order is kept).
5. Idle with an empty inbox -> user entry + ``placed`` submission + a new
   generation task + ``live.run``, all in the same commit.

Invariants: ``AdmissionIsAtomic`` (all of 4/5 or nothing), ``RequestIdIsUnique``
(per conversation), ``RejectStoresNothing``.
"""

from __future__ import annotations

from typing import Any

from .bounds import is_int_in, shown
from .draft import Tx
from .effects import Refusal
from .events import (
    AgentConfigurationRequested,
    InputSubmitted,
    RootRequested,
    SettingsChanged,
    SubmissionAbortRequested,
    WriteSubmitted,
)
from .runs import start_run
from .inbox import append_user, boundary, enqueue, place_write
from .lifecycle import SubmissionMove, next_submission_status, submission_to
from .model import (
    SubmissionAbortResult,
    QUEUE_MODES,
    ROOT_CONVERSATION_ID,
    AgentConfig,
    CompactionSettings,
    Conversation,
    ExecutionMode,
    Reason,
    RetryPolicy,
    Settings,
    Submission,
    SubmissionId,
    SubmissionStatus,
    SubmissionType,
)
from .state import ConvState, InboxItem, InboxMode

#: ``InputSubmitted.when_busy`` values: a queue mode, or refuse while busy.
WHEN_BUSY: tuple[str, ...] = (InboxMode.FOLLOW_UP, InboxMode.STEER, "reject")


def on_input_submitted(tx: Tx, ev: InputSubmitted) -> None:
    conv = tx.conversations.get(ev.conversation_id)
    if conv is None:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    if not isinstance(ev.content, str) or not ev.content.strip():
        tx.refuse(ev.ticket, Refusal.INVALID, "Input content must be a non-empty string")
        return
    if ev.when_busy not in WHEN_BUSY:
        tx.refuse(
            ev.ticket, Refusal.INVALID, f"when_busy must be one of {', '.join(WHEN_BUSY)}, not {ev.when_busy!r}",
        )
        return

    if _deduplicated(tx, ev.ticket, conv.id, ev.request_id, ev.existing, SubmissionType.INPUT):
        return

    if conv.busy and ev.when_busy == "reject":
        tx.refuse(ev.ticket, Refusal.BUSY, f"Conversation {conv.id} is busy")
        return

    sid = SubmissionId(tx.alloc_id())
    if conv.busy or conv.inbox:
        mode = InboxMode.STEER if ev.when_busy == InboxMode.STEER else InboxMode.FOLLOW_UP
        _queue(tx, conv, SubmissionType.INPUT, ev.request_id, InboxItem(submission_id=sid, mode=mode, content=ev.content))
    else:
        entry_id = append_user(tx, conv.id, ev.content)
        sub = Submission(
            id=sid,
            conversation_id=conv.id,
            type=SubmissionType.INPUT,
            status=next_submission_status(None, SubmissionMove.ADMIT_IDLE),
            request_id=ev.request_id,
            entry_id=entry_id,
        )
        tx.put_submission(sub)
        start_run(tx, conv.id, (sid,))
    tx.respond(ev.ticket, sid)


def on_root_requested(tx: Tx, ev: RootRequested) -> None:
    """Create the root conversation (id 1) on first request; later requests
    write nothing (their ``agent`` is ignored, as in the reference)."""
    if ROOT_CONVERSATION_ID not in tx.conversations:
        tx.put_conversation(
            ConvState(
                conversation=Conversation(id=ROOT_CONVERSATION_ID),
                agent=ev.agent if ev.agent is not None else AgentConfig(),
            )
        )
    tx.respond(ev.ticket, ROOT_CONVERSATION_ID)


def on_agent_configured(tx: Tx, ev: AgentConfigurationRequested) -> None:
    if ev.conversation_id not in tx.conversations:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    if ev.agent.tool_execution not in (ExecutionMode.PARALLEL, ExecutionMode.SEQUENTIAL):
        tx.refuse(
            ev.ticket, Refusal.INVALID, f"tool_execution must be 'parallel' or 'sequential', not {ev.agent.tool_execution!r}",
        )
        return
    tx.set_agent(ev.conversation_id, ev.agent)
    tx.respond(ev.ticket, ev.conversation_id)


def _queue(tx: Tx, conv: ConvState, kind: SubmissionType, request_id: str | None, item: InboxItem) -> None:
    """Admit on a busy conversation (or behind queued items): a ``queued``
    submission and its inbox item; on an idle one a final boundary then places
    the queue in order (and may start a run)."""
    tx.put_submission(
        Submission(
            id=item.submission_id,
            conversation_id=conv.id,
            type=kind,
            status=next_submission_status(None, SubmissionMove.ADMIT_BUSY),
            request_id=request_id,
        )
    )
    enqueue(tx, conv.id, item)
    if not conv.busy:
        placed = boundary(tx, conv.id, final=True)
        if placed:
            start_run(tx, conv.id, placed)


def _deduplicated(
    tx: Tx, ticket: int, cid: int, request_id: str | None, existing: Submission | None, kind: SubmissionType
) -> bool:
    """Answer a repeated ``request_id`` with the existing submission (or an
    error when it names the other type). True when the call is answered."""
    if existing is None and request_id is not None:
        existing = next(
            (s for s in tx.submissions.values() if s.conversation_id == cid and s.request_id == request_id),
            None,
        )
    if existing is None:
        return False
    if existing.type != kind:
        tx.refuse(
            ticket, Refusal.INVALID, f"Request {request_id} already identifies a submission of type {existing.type}",
        )
    else:
        tx.respond(ticket, existing.id)
    return True


def on_write_submitted(tx: Tx, ev: WriteSubmitted) -> None:
    """A passive write: appended now when the conversation is idle with an
    empty inbox (``done`` at once), else queued for the next boundary."""
    conv = tx.conversations.get(ev.conversation_id)
    if conv is None:
        tx.refuse(ev.ticket, Refusal.NOT_FOUND, f"Conversation {ev.conversation_id} does not exist")
        return
    if not isinstance(ev.content, str) or not ev.kind:
        tx.refuse(ev.ticket, Refusal.INVALID, "A write needs a string content and a non-empty kind")
        return
    if _deduplicated(tx, ev.ticket, conv.id, ev.request_id, ev.existing, SubmissionType.WRITE):
        return
    sid = SubmissionId(tx.alloc_id())
    admit_write(tx, conv, sid, ev.request_id, ev.content, ev.kind, ev.data)
    tx.respond(ev.ticket, sid)


def admit_write(
    tx: Tx, conv: ConvState, sid: SubmissionId, request_id: str | None, content: str, kind: str, data: dict[str, Any] | None
) -> None:
    """Admit a write (the host's, or a compaction's summary): queued behind
    a busy conversation or a non-empty inbox; else placed at once (its entry
    and ``done``, or ``unanswered/stale``)."""
    if conv.busy or conv.inbox:
        item = InboxItem(submission_id=sid, mode=InboxMode.WRITE, content=content, kind=kind, data=data)
        _queue(tx, conv, SubmissionType.WRITE, request_id, item)
        return
    # Not stored yet: place_write gives it its first status.
    draft = Submission(
        id=sid, conversation_id=conv.id, type=SubmissionType.WRITE, status=SubmissionStatus.QUEUED, request_id=request_id
    )
    place_write(tx, draft, conv.id, kind, content, data, new=True)


def on_submission_abort_requested(tx: Tx, ev: SubmissionAbortRequested) -> None:
    """``abort_submission``: a queued one is withdrawn (``unanswered/aborted``,
    inbox item removed) and the answer is ``aborted``; a placed input answers
    ``already_placed``; a settled one ``settled``; unknown (or in another
    conversation) ``not_found``."""
    sub = tx.submissions.get(ev.submission_id) or ev.known
    if sub is None or (ev.conversation_id is not None and sub.conversation_id != ev.conversation_id):
        tx.respond(ev.ticket, data=SubmissionAbortResult.NOT_FOUND)
        return
    if sub.settled:
        tx.respond(ev.ticket, sub.id, data=SubmissionAbortResult.SETTLED)
        return
    if sub.status is SubmissionStatus.PLACED:
        tx.respond(ev.ticket, sub.id, data=SubmissionAbortResult.ALREADY_PLACED)
        return
    cid = sub.conversation_id
    tx.set_inbox(cid, tuple(i for i in tx.conversations[cid].inbox if i.submission_id != sub.id))
    tx.put_submission(submission_to(sub, SubmissionMove.WITHDRAW, reason=Reason.ABORTED))
    tx.respond(ev.ticket, sub.id, data=SubmissionAbortResult.ABORTED)


def on_settings_changed(tx: Tx, ev: SettingsChanged) -> None:
    tx.settings = ev.settings


#: What each part of ``Settings`` must be: (path, the class it must be, its bool
#: fields, its integer fields with their least value). ``check_settings`` reads it.
SETTINGS_SHAPE: tuple[tuple[str, type, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = (
    ("settings", Settings, (), (("partial_interval_ms", 0),)),
    ("settings.retry", RetryPolicy, ("enabled",), (("max_retries", 0), ("base_delay_ms", 0), ("max_delay_ms", 0))),
    (
        "settings.compaction", CompactionSettings, ("enabled",),
        (("reserve_tokens", 0), ("keep_recent_tokens", 1), ("background_tokens", 0)),
    ),
)


def check_settings(settings: object) -> str | None:
    """A readable problem with host settings, or None: the queue modes are
    known ones, each part is of its class (``SETTINGS_SHAPE``), its flags are
    bools and its integers are within ``[least, MAX_INT64]``."""
    for name in ("follow_up_mode", "steering_mode"):
        value = getattr(settings, name, None)
        if value not in QUEUE_MODES:
            return f"settings.{name} must be one of {', '.join(QUEUE_MODES)}, not {shown(value)}"
    for path, cls, flags, ints in SETTINGS_SHAPE:
        part = settings if path == "settings" else getattr(settings, path.rpartition(".")[2], None)
        if not isinstance(part, cls):
            return f"{path} must be a {cls.__name__}, not {type(part).__name__}"
        for name in flags:
            flag = getattr(part, name)
            if type(flag) is not bool:
                return f"{path}.{name} must be True or False, not {shown(flag)}"
        for name, least in ints:
            value = getattr(part, name)
            if not is_int_in(value, least):
                kind = "a positive" if least == 1 else "a non-negative"
                return f"{path}.{name} must be {kind} integer of at most 2**63 - 1, not {shown(value)}"
    return None
