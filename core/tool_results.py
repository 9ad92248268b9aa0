"""How a tool task settles, and the helpers its rows share.

Theory of operation
-------------------
tools.py (the ``pi.tool`` table and its call/execute rows) and reconcile.py
(the rows of an interrupted call whose tool can find out what happened) end
a tool task the same way: :func:`settle` writes, in one commit, the result
entry (content and rendered diagnostics; ``data``: the harness code, the
shell's cut, the diagnostics and - for a call a ``reconcile`` verdict
decided - ``reconciled``), the task terminal, the slot done, and the tool's
usage. :func:`run_tool` is the one ``RunTool`` maker (for a task whose
``execute`` intent is, or is being, stored).

Must not touch: phases (the rows' handlers store them through their Turn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from . import diagnostics
from .checkpoints import ExecuteCheckpoint
from .diagnostics import aborted_message
from .draft import Tx
from .effects import RunTool
from .lifecycle import SlotMove, slot_to
from .live import LiveMove, live_to
from .model import Diagnostic, Entry, EntryId, EntryKind, Json, Outcome, OutcomeStatus, ResultCode, Task, Usage
from .reconcile_events import Verdict
from .answers import plus_one_call, plus_one_ops  # (and its UsageDoc fields guard, answers._USAGE_FIELDS)
from .record_makers import new_Entry, new_Outcome, new_RunTool, new_UsageDoc  # (X(...) without the type call's dict: issue 11 item 2)
from .settlement import finish_task
from .state import ToolSlot

# Members read once: each tool call reads them (a member read through its
# enum class goes through EnumType's __getattr__ hook: ~1,000 machine
# instructions, where a global is ~20).
_TOOL_RESULT, _SETTLE, _SLOT = EntryKind.TOOL_RESULT, SlotMove.SETTLE, LiveMove.SLOT
_TASK_ID = attrgetter("task_id")  # (a slot's task: read in C, no list comprehension's call)


def run_tool(tx: Tx, task: Task, cp: ExecuteCheckpoint) -> None:
    """``RunTool`` for a task whose ``execute`` intent is (being) stored."""
    agent = tx.conversations[task.conversation_id].agent
    tx.act(
        new_RunTool(
            task_id=task.id,
            conversation_id=task.conversation_id,
            call_id=str(task.input["call_id"]),
            name=str(task.input["name"]),
            arguments=dict(cp.arguments),
            cwd=agent.cwd,
            extensions=agent.extensions,
        )
    )


def settle(
    tx: Tx,
    task: Task,
    content: str,
    problems: Sequence[Diagnostic],
    *,
    is_error: bool,
    status: OutcomeStatus,
    error: str | None = None,
    code: str | None = None,
    usage: Usage | None = None,
    truncated: Mapping[str, Json] | None = None,
    control: Mapping[str, Json] | None = None,
    reconciled: Verdict | None = None,
) -> None:
    """One commit: the result entry (the content and the rendered
    diagnostics; its ``data``: the harness code, the shell's cut, the
    diagnostics - diagnostics.py - and the ``reconcile`` verdict that
    decided it, if any), the task terminal, the slot done with its
    running output dropped (and the tool's usage, when it reported some,
    added to ``pi.usage``). A completed result's ``control`` is kept in the
    outcome, for the round's end (rounds.py)."""
    data = diagnostics.result_data(problems, code, truncated)
    if reconciled is not None:
        data = {**(data or {}), "reconciled": str(reconciled.value)}
    entry = new_Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=task.conversation_id,
        kind=_TOOL_RESULT,
        text=diagnostics.render(content, problems),
        tool_call_id=str(task.input["call_id"]),
        tool_name=str(task.input["name"]),
        is_error=is_error,
        by_task_id=task.id,
        at=tx.now,
        data=data,
    )
    tx.put_entry(entry)
    finish_task(
        tx,
        task,
        new_Outcome(
            status=status,
            result={"entry_id": entry.id, "control": dict(control)} if control else {"entry_id": entry.id},
            error={"message": error} if error is not None else None,
        ),
    )
    move_slot(tx, task, _SETTLE, entry_id=entry.id, output=None, control=dict(control) if control else None)
    if usage is not None:
        name = str(task.input["name"])
        doc = tx.conversations[task.conversation_id].usage
        prior = doc.tools.get(name)
        tools = {**doc.tools, name: plus_one_call(prior, usage)}  # (a call counted always changes the doc: not compared)
        ops = plus_one_ops("tools", doc.tools, tools, name, prior)
        tx.set_usage(task.conversation_id, new_UsageDoc(models=doc.models, tools=tools), changed=True, ops=ops)


def move_slot(tx: Tx, task: Task, move: SlotMove, *, entry_id: EntryId | None = None, **changes: Json) -> None:
    """Move the slot of ``task`` in the current round (lifecycle.py's slot
    table); ``changes`` are further slot fields (``output``). The move
    changes that one slot of ``pi.live``: its revision is that slot's diff
    (``within``, builtins.revise), not the whole document's."""
    live = tx.conversations[task.conversation_id].live
    slots = live.tools
    if slots is None:
        return
    ids = list(map(_TASK_ID, slots))
    if ids.count(task.id) == 1:  # the one slot of the task, moved alone (issue 11 item 2)
        i = ids.index(task.id)
        old = slots[i]
        s = slot_to(old, move, entry_id=entry_id if entry_id is not None else old.entry_id, **changes)
        # a slot whose status moved is a pi.live that changed: not compared
        tx.set_live(
            task.conversation_id,
            live_to(live, _SLOT, tools=slots[:i] + (s,) + slots[i + 1 :]),
            ("tools", i),
            changed=s.status != old.status,
        )
        return
    tools = tuple(
        slot_to(s, move, entry_id=entry_id if entry_id is not None else s.entry_id, **changes)
        if s.task_id == task.id
        else s
        for s in slots
    )
    moved = [i for i, s in enumerate(tools) if s is not slots[i]]
    within: tuple[str | int, ...] = ("tools", moved[0]) if len(moved) == 1 else ()
    tx.set_live(task.conversation_id, live_to(live, _SLOT, tools=tools), within)


def slot(tx: Tx, task: Task) -> ToolSlot | None:
    """The slot of ``task`` in its conversation's current round, if any."""
    return next((s for s in tx.conversations[task.conversation_id].live.tools or () if s.task_id == task.id), None)


def partial(tx: Tx, task: Task) -> str:
    """The content of an interrupted, aborted or raising call's result: the
    durable partial output of its slot ("" without one)."""
    found = slot(tx, task)
    return (found.output if found is not None else None) or ""


def aborted(tx: Tx, task: Task) -> tuple[Diagnostic, ...]:
    """The abort handler's diagnostics: "Tool X was aborted"."""
    return (diagnostics.error(ResultCode.ABORTED, aborted_message(str(task.input["name"]))),)
