"""Tool rounds: the part of a generation task between its answer with tool
calls and the hand-over to the next generation.

Theory of operation
-------------------
These are the handlers of generation.py's rows that lead into and out of the
``tools`` phase:

- ``start_round`` (row ``tool_calls``): one ``pi.tool`` task per call, owned by
  the generation (sequential: only the first; the rest stay ``pending`` in
  the checkpoint), the round's slots in ``pi.live.tools``, the generation
  ``waiting tools`` on them - all in the commit that holds the assistant
  entry (``RoundIsAtomic``). A call the shell already prepared is born at
  ``execute`` and runs at once.
- ``next_call`` (row ``(tools, next_call)``): every task so far is terminal and
  a sequential call is left: its task is created and the generation waits on
  it.
- ``after_tools`` (row ``(tools, after_tools)``): every call is settled and
  ``after_tools`` hooks are selected: ``RunAfterTools``; their answer
  (``AfterToolsRan``, row ``(tools, after_tools_ran)``) finishes the round.
- ``round_done`` (row ``(tools, round_done)``): every call is settled: the
  round's controls apply (controls.py: added tools; terminate/handoff end the
  run answered by the tool-calling entry); otherwise the post-tools boundary
  places steering input, the generation ends ``completed`` and a successor
  takes the run (runs.py; generation.py's ``_hand_over`` may have it born
  at ``request``) - one commit.

Must not touch: tool tasks' own phases (tools.py's table).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .live import LiveMove, live_to
from . import controls, system, tools
from .checkpoints import CALL_CHECKPOINT, ToolPhase, ToolsCheckpoint, to_dict
from .draft import Tx
from .effects import RunAfterTools
from .events import AfterToolsRan, PreparedCall
from .inbox import HEAD_SELF, append_write, boundary, has_reset
from .lifecycle import SlotMove, TaskMove, next_slot_status
from .model import (
    TOOL,
    Entry,
    EntryId,
    EntryKind,
    ExecutionMode,
    Json,
    Outcome,
    OutcomeStatus,
    Reason,
    Replay,
    SubmissionId,
    SubmissionStatus,
    Task,
    TaskId,
    ToolCall,
)
from .phases import Turn
from .runs import end_run, hand_over, start_run
from .settlement import finish_task
from .state import ToolSlot
from .record_makers import new_Outcome, new_ToolSlot, new_ToolsCheckpoint  # (X(...) without the type call's dict: issue 11 item 2)

# Members read once: each round reads them per call (a member read through
# its enum class goes through EnumType's __getattr__ hook: ~1,000 machine
# instructions, where a global is ~20).
_SEQUENTIAL, _EXECUTE, _WAIT, _ROUND = ExecutionMode.SEQUENTIAL, ToolPhase.EXECUTE, TaskMove.WAIT, LiveMove.ROUND
_OPEN, _START, _COMPLETED = SlotMove.OPEN, SlotMove.START, OutcomeStatus.COMPLETED
_PREPARED_REPLAYS = (Replay.SAFE, Replay.UNSAFE)  # a call prepared with a valid promise


def _is_sequential(tx: Tx, task: Task, calls: tuple[ToolCall, ...]) -> bool:
    """The round runs one call at a time if the agent says so, or if any of
    its tools does."""
    if tx.conversations[task.conversation_id].agent.tool_execution == _SEQUENTIAL:
        return True
    for call in calls:
        info = tx.catalog.get(call.name)
        if info is not None and info.execution_mode == _SEQUENTIAL:
            return True
    return False


def create_tool_task(
    tx: Tx, gen: Task, assistant: EntryId, call: ToolCall, prepared: PreparedCall | None = None
) -> Task:
    """A tool task for ``call``, owned by the generation. Normally born at
    ``call``; a call the shell already prepared (``prepared``) is reserved at
    birth and takes the ``(call, prepared)`` row at once: its ``execute``
    intent is stored by this very commit and it runs (one event and one
    commit fewer per call)."""
    task_id = TaskId(tx.alloc_id())
    task_input: dict[str, Json] = {"assistant": assistant, "call_id": call.id, "name": call.name}
    if prepared is not None and prepared.replay in _PREPARED_REPLAYS:
        return tools.start_prepared(tx, task_id, gen, task_input, prepared)
    tool = Task(
        id=task_id,
        conversation_id=gen.conversation_id,
        kind=TOOL,
        owner=gen.id,
        input=task_input,
        checkpoint=to_dict(CALL_CHECKPOINT),
    )
    tx.put_task(tool)
    return tool


def start_round(turn: Turn, entry: Entry, prepared: tuple[PreparedCall | None, ...] = ()) -> None:
    """Row ``tool_calls``: the round's tasks, slots and the wait."""
    tx, task = turn.tx, turn.task
    sequential = _is_sequential(tx, task, entry.tool_calls)
    slots: list[ToolSlot] = []
    created: list[TaskId] = []
    pending: list[str] = []
    for i, call in enumerate(entry.tool_calls):
        if sequential and created:
            slots.append(new_ToolSlot(call_id=call.id, name=call.name, status=next_slot_status(None, _OPEN)))
            pending.append(call.id)
            continue
        tool = create_tool_task(tx, task, entry.id, call, prepared[i] if i < len(prepared) else None)
        created.append(tool.id)
        # A call born at execute has its intent stored already.
        move = _START if tool.checkpoint.get("phase") == _EXECUTE else _OPEN  # (Task.phase, without its call)
        slots.append(new_ToolSlot(call_id=call.id, name=call.name, task_id=tool.id, status=next_slot_status(None, move)))
    round_ = new_ToolsCheckpoint(assistant=entry.id, tools=tuple(created), pending=tuple(pending))
    turn.store(_WAIT, round_, on=tuple(created))
    live = tx.conversations[task.conversation_id].live
    tx.set_live(task.conversation_id, live_to(live, _ROUND, tools=tuple(slots), attempt=None))


def next_call(turn: Turn, _: None) -> None:
    """Row ``(tools, next_call)``: the next call of a sequential batch."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ToolsCheckpoint)
    live = tx.conversations[task.conversation_id].live
    slots = live.tools or ()
    call_id = cp.pending[0]
    slot = next(s for s in slots if s.call_id == call_id)
    tool = create_tool_task(tx, task, cp.assistant, ToolCall(id=call_id, name=slot.name))
    tx.set_live(
        task.conversation_id,
        live_to(
            live,
            LiveMove.SLOT,
            tools=tuple(attrs.evolve(s, task_id=tool.id) if s.call_id == call_id else s for s in slots),
        ),
    )
    rest = ToolsCheckpoint(assistant=cp.assistant, tools=(*cp.tools, tool.id), pending=cp.pending[1:])
    turn.store(TaskMove.WAIT, rest, on=(tool.id,))


def after_tools(turn: Turn, _: None) -> None:
    """Row ``(tools, after_tools)``: every call is settled and the agent's
    extensions have ``after_tools`` hooks: they run before the commit that
    finishes the round (reserved in memory only: a crash runs them again)."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ToolsCheckpoint)
    cid = task.conversation_id
    turn.store(TaskMove.RESERVE, durable=False, started_at=task.started_at or tx.now)
    slots = tx.conversations[cid].live.tools or ()
    tx.act(
        RunAfterTools(
            task_id=task.id,
            conversation_id=cid,
            assistant_entry_id=cp.assistant,
            result_entry_ids=tuple(s.entry_id for s in slots if s.entry_id is not None),
            extensions=system.hooked(tx.extensions, tx.conversations[cid].agent, "after_tools"),
        )
    )


#: What hands a finished round's run to the successor (runs.hand_over, or
#: generation.py's, which may prepare the successor at birth).
HandOver = Callable[[Tx, Task, tuple[SubmissionId, ...]], object]


def round_done(turn: Turn, ev: AfterToolsRan | None, successor: HandOver = hand_over) -> None:
    """Row ``(tools, round_done)`` (or ``after_tools_ran``): the round's
    controls (controls.py) first - tools added to the agent; a terminate or
    handoff ends the run answered by the tool-calling entry (a handoff
    writes its reset marker first), then the final boundary may start the
    next run. Otherwise the post-tools boundary places steering input, the
    generation ends ``completed {entry_id: assistant}`` and hands the run
    over - one commit. A queued reset makes the boundary final and ends the
    run instead: its inputs settle ``unanswered/reset`` and the placed
    follow-ups start a new run in the new context (reference §3.10)."""
    tx, task, cp = turn.tx, turn.task, turn.checkpoint
    assert isinstance(cp, ToolsCheckpoint)
    cid = task.conversation_id
    slots = tx.conversations[cid].live.tools or ()
    decision = controls.of_round(slots, ev.control if ev else None)
    controls.apply_added(tx, cid, decision.added)
    done = new_Outcome(status=_COMPLETED, result={"entry_id": cp.assistant})
    if decision.ends_run:
        if decision.handoff is not None:
            append_write(tx, cid, EntryKind.RESET, decision.handoff, {"head": HEAD_SELF})
        end_run(tx, task, status=SubmissionStatus.DONE, answer=cp.assistant)
        finish_task(tx, task, done)
        placed = boundary(tx, cid, final=True)
        if placed:
            start_run(tx, cid, placed)
        return
    reset = has_reset(tx, cid)
    steered = boundary(tx, cid, final=reset)
    finish_task(tx, task, done)
    if not reset:
        successor(tx, task, steered)
        return
    end_run(tx, task, status=SubmissionStatus.UNANSWERED, reason=Reason.RESET)
    if steered:
        start_run(tx, cid, steered)
