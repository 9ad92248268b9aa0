"""Compaction thresholds at a generation's prepare (reference §3.13 prepare
step 4, §3.13.2).

Theory of operation
-------------------
The core holds no transcript bodies, so it cannot size a request itself: for
an agent whose model's context window is known (``AgentConfig.context_window``,
journaled with the agent), with ``compaction.enabled`` and no compaction yet in
this generation, prepare first asks the shell (``MeasureContext``), which
answers ``ContextMeasured{tokens}`` - the usage-anchored estimate of the
committed context plus the system prompt the model was last shown. The
decision is then the core's, made from that event, so it replays:

- ``tokens > blocking`` where ``blocking = window - reserve_tokens``: a
  blocking compaction owned by the generation (reason ``threshold``); the
  generation waits at prepare with the SAME attempt (no request was sent)
  and ``threshold`` recorded, so the retry budget is not extended; resumed,
  it prepares and sends whatever the outcome (it never compacts twice);
- else, if ``background_tokens > 0`` and ``tokens > blocking -
  background_tokens`` and the conversation has no live compaction: a
  conversation-owned ``background`` compaction (reason ``threshold``) is
  created and the request goes on at once; its summary is admitted as the
  write ``compaction:<task id>`` (placed at a boundary, or ``stale``).

Agents without a window never see ``MeasureContext``: no extra round trip.
The rows live in generation.py's table; this module holds their handlers and
the classification. Must not touch: the compaction task's phases.
"""

from __future__ import annotations

from . import compaction_task, system
from .checkpoints import PrepareCheckpoint
from .draft import Tx
from .effects import MeasureContext
from .lifecycle import TaskMove
from .model import COMPACTION, ConversationId, EntryId, TaskStatus
from .phases import Turn
from .events import ContextMeasured


def measures(tx: Tx, cid: ConversationId, cp: PrepareCheckpoint) -> bool:
    """Whether prepare measures the context first (a known window,
    compaction enabled, nothing compacted yet in this generation)."""
    window = tx.conversations[cid].agent.context_window
    return bool(window) and tx.settings.compaction.enabled and cp.compacted is None


def blocking_limit(tx: Tx, cid: ConversationId) -> int:
    """``window - reserve_tokens`` (only called when the window is known)."""
    window = tx.conversations[cid].agent.context_window
    assert window is not None
    return window - tx.settings.compaction.reserve_tokens


def over_blocking(tx: Tx, cid: ConversationId, tokens: int) -> bool:
    return tokens > blocking_limit(tx, cid)


def measure(turn: Turn, _: None) -> None:
    """Row ``(prepare, measure)``: reserve in memory and ask the shell for
    the size of the context as it stands (the newest entry is the cutoff)."""
    tx, task = turn.tx, turn.task
    turn.store(TaskMove.RESERVE, durable=False, started_at=task.started_at or tx.now)
    shown = system.request_view(tx, tx.conversations[task.conversation_id])[1]
    cutoff = EntryId(tx.next_id - 1)
    tx.act(MeasureContext(task_id=task.id, conversation_id=task.conversation_id, cutoff=cutoff, system=shown))


def block(turn: Turn, _: ContextMeasured) -> None:
    """Row ``(prepare, over_threshold)``: a blocking compaction of our own;
    wait on it at prepare, attempt unchanged (no request was sent)."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, PrepareCheckpoint)
    child = compaction_task.create(tx, task.conversation_id, reason=compaction_task.THRESHOLD, owner=task.id)
    waiting = PrepareCheckpoint(attempt=cp.attempt, compacted=child.id, threshold=True)
    turn.store(TaskMove.WAIT, waiting, on=(child.id,))


def background(tx: Tx, cid: ConversationId, tokens: int) -> None:
    """Above the background threshold (and none live): a conversation-owned
    background compaction; the request is not held for it."""
    settings = tx.settings.compaction
    if settings.background_tokens <= 0 or tokens <= blocking_limit(tx, cid) - settings.background_tokens:
        return
    if any(t.kind == COMPACTION and t.conversation_id == cid and t.status is not TaskStatus.TERMINAL for t in tx.tasks.values()):
        return
    compaction_task.create(tx, cid, reason=compaction_task.THRESHOLD)
