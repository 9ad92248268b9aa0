"""Controls: what a tool round asks of its run when it finishes.

Theory of operation
-------------------
A tool's result may carry a control (``ToolFinished.control``, kept in the
tool task's ``completed`` outcome as ``result.control`` and in its round
slot, which outlives the terminal task in the reducer's state), and the
``after_tools`` hooks may return one (``AfterToolsRan.control``). When the
round is settled, ``decide`` folds them into one :class:`Decision`
(reference §3.7 "Finish the round"):

- ``terminate``: every call of the round has a task and every such task
  completed with ``terminate`` (so a call answered without a task, or a
  failed one, prevents it) - or a hook asked for it;
- ``handoff``: the last handoff in *call* order (not completion order); a
  hook's wins over the results'. A hook's ``reset`` is a handoff without
  text. A handoff ends the run like ``terminate`` and writes a reset marker
  with its text (``pi.reset``, head ``self``) before the final boundary;
- ``added``: every ``add_tools`` name, in call order, once.

``apply_added`` extends the agent's ``tools`` list (an agent offered every
tool - ``tools`` None - already has them: nothing changes).

Must not touch: the round's own bookkeeping (rounds.py does that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .draft import Tx
from .model import ConversationId
from .state import ToolSlot

Control = Mapping[str, Any]


@attrs.frozen(kw_only=True)
class Decision:
    """The folded controls of one round."""

    terminate: bool = False
    handoff: str | None = None
    added: tuple[str, ...] = ()

    @property
    def ends_run(self) -> bool:
        return self.terminate or self.handoff is not None


def round_controls(slots: Iterable[ToolSlot]) -> list[Control | None]:
    """Per call (call order), the control its completed result asked for
    (``{}`` for none); None for a call without a task or whose task did not
    complete (it prevents ``terminate``)."""
    out: list[Control | None] = []
    for slot in slots:
        if slot.task_id is None or slot.entry_id is None:
            out.append(None)
        else:
            out.append(slot.control if slot.control is not None else {})
    return out


def decide(results: list[Control | None], hook: Control | None) -> Decision:
    """Fold the results' controls (call order; None: no completed task)
    and a hook's into one decision."""
    terminate = bool(results) and all(c is not None and c.get("terminate") is True for c in results)
    handoff: str | None = None
    added: list[str] = []
    for control in [*results, hook]:
        if not control:
            continue
        if isinstance(control.get("handoff"), str):
            handoff = str(control["handoff"])
        for name in control.get("add_tools") or ():
            if isinstance(name, str) and name not in added:
                added.append(name)
    if hook and hook.get("terminate") is True:
        terminate = True
    if not terminate and handoff is None and not added:
        return _NO_CONTROL  # most rounds (frozen: one instance serves them all, issue 11 item 2)
    return Decision(terminate=terminate, handoff=handoff, added=tuple(added))


#: The decision of a round whose results and hook asked for nothing.
_NO_CONTROL = Decision()


def of_round(slots: Iterable[ToolSlot], hook: Control | None) -> Decision:
    """``decide(round_controls(slots), hook)``; a round in which no result
    and no hook asked for anything (most rounds) is told without building
    the list (issue 11 item 2)."""
    if hook is None:
        for slot in slots:
            if slot.control is not None:
                break
        else:
            return _NO_CONTROL
    return decide(round_controls(slots), hook)


def apply_added(tx: Tx, cid: ConversationId, added: tuple[str, ...]) -> None:
    """Append the added tool names the agent's ``tools`` list lacks."""
    agent = tx.conversations[cid].agent
    if not added or agent.tools is None:
        return
    missing = tuple(n for n in added if n not in agent.tools)
    if missing:
        tx.set_agent(cid, attrs.evolve(agent, tools=agent.tools + missing))
