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

from .effects import Tx
from .events import AgentConfigured, InputSubmitted, RootRequested
from .handover import start_run
from .inbox import append_user, boundary, enqueue
from .lifecycle import next_submission_status
from .model import (
    ROOT_CONVERSATION_ID,
    AgentConfig,
    Conversation,
    Submission,
    SubmissionId,
)
from .state import ConvState

WHEN_BUSY = ("follow_up", "steer", "reject")


def on_input_submitted(tx: Tx, ev: InputSubmitted) -> None:
    conv = tx.conversations.get(ev.conversation_id)
    if conv is None:
        tx.respond(ev.ticket, error_kind="not_found", error=f"Conversation {ev.conversation_id} does not exist")
        return
    if not isinstance(ev.content, str) or not ev.content.strip():
        tx.respond(ev.ticket, error_kind="invalid", error="Input content must be a non-empty string")
        return
    if ev.when_busy not in WHEN_BUSY:
        tx.respond(
            ev.ticket,
            error_kind="invalid",
            error=f"when_busy must be one of {', '.join(WHEN_BUSY)}, not {ev.when_busy!r}",
        )
        return

    existing = ev.existing
    if existing is None and ev.request_id is not None:
        existing = next(
            (
                s
                for s in tx.submissions.values()
                if s.conversation_id == conv.id and s.request_id == ev.request_id
            ),
            None,
        )
    if existing is not None:
        if existing.type != "input":
            tx.respond(
                ev.ticket,
                error_kind="invalid",
                error=f"Request {ev.request_id} already identifies a submission of type {existing.type}",
            )
        else:
            tx.respond(ev.ticket, existing.id)
        return

    if conv.busy and ev.when_busy == "reject":
        tx.respond(ev.ticket, error_kind="busy", error=f"Conversation {conv.id} is busy")
        return

    sid = SubmissionId(tx.alloc_id())
    if conv.busy or conv.inbox:
        sub = Submission(
            id=sid,
            conversation_id=conv.id,
            type="input",
            status=next_submission_status(None, "admit_busy"),
            request_id=ev.request_id,
        )
        tx.put_submission(sub)
        enqueue(tx, conv.id, sid, "steer" if ev.when_busy == "steer" else "follow_up", ev.content)
        if not conv.busy:
            placed = boundary(tx, conv.id, final=True)
            if placed:
                start_run(tx, conv.id, placed)
    else:
        entry_id = append_user(tx, conv.id, ev.content)
        sub = Submission(
            id=sid,
            conversation_id=conv.id,
            type="input",
            status=next_submission_status(None, "admit_idle"),
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


def on_agent_configured(tx: Tx, ev: AgentConfigured) -> None:
    if ev.conversation_id not in tx.conversations:
        tx.respond(ev.ticket, error_kind="not_found", error=f"Conversation {ev.conversation_id} does not exist")
        return
    if ev.agent.tool_execution not in ("parallel", "sequential"):
        tx.respond(
            ev.ticket,
            error_kind="invalid",
            error=f"tool_execution must be 'parallel' or 'sequential', not {ev.agent.tool_execution!r}",
        )
        return
    tx.set_agent(ev.conversation_id, ev.agent)
    tx.respond(ev.ticket, ev.conversation_id)
