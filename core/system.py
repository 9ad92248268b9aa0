"""System sections: what the model is told before the conversation, recorded.

Theory of operation
-------------------
An agent's *system prompt* is an ordered list of sections: the rendered
sections of its selected extensions (extension order; a later section with
the same key replaces an earlier one in place), then its ``instructions`` as
the reserved section ``instructions`` - each wrapped ``<key>\\n...\\n</key>``
(reference §3.15.2). Rendering extension sections is host code, so a
generation whose agent selects sectioned extensions first asks the shell
(``RenderSystem`` -> ``SystemRendered``); instructions the core renders itself.

What the model was shown is recorded, so a later reader - and a request
re-sent after a crash - sees exactly what the model saw:

- ``pi.context`` keeps the *shown* state: the ordered sections, the offered
  tool names, and the newest system entry;
- every change is a positional ``system`` entry (text ``""``) whose ``data``
  is the patch: ``sections`` (changed values; ``None`` removes a key), the
  full ``order`` when the order changed or a baseline is written, and
  ``tools_added`` / ``tools_removed``. After a head marker (compaction,
  reset) with no system entry after it, the first prepare writes a complete
  baseline, so the active range is self-contained.

The request's system prompt and its offered tools come from the shown state
(``CallModel.system`` / ``CallModel.tools``), never from the registry as it is
when the request is re-sent.

Recorded for every agent that has sections or instructions or is offered
tools (reference §3.15.2: "No section and no tools -> no ``pi.system``
entry"), so the transcript shows what the model was offered; an agent with
none of them gets no system entry. Once a conversation has a system entry it
stays tracked (a removal is recorded too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .draft import Tx
from .model import AgentConfig, Entry, EntryId, EntryKind, ExtensionInfo, TaskId
from .state import ContextDoc, ConvState, SystemSection

#: The reserved section key of the agent's instructions.
INSTRUCTIONS = "instructions"


def tag(key: str, text: str) -> str:
    return f"<{key}>\n{text}\n</{key}>"


def selected(extensions: Sequence[ExtensionInfo], agent: AgentConfig) -> list[ExtensionInfo]:
    """The agent's extensions: every installed one (install order), or
    exactly the named ones, in the agent's order (unknown names skipped)."""
    if agent.extensions is None:
        return list(extensions)
    by_name = {e.name: e for e in extensions}
    return [by_name[n] for n in agent.extensions if n in by_name]


def offered_tools(extensions: Sequence[ExtensionInfo], catalog: Mapping[str, object], agent: AgentConfig) -> tuple[str, ...]:
    """The tool names a request of this agent offers: the selected
    extensions' tools (a later same-name tool replaces an earlier one in
    place; with no extension catalog, every installed tool), then the
    agent's ``tools`` filter (exactly those, in its order)."""
    names: list[str] = []
    if not extensions:
        names = list(catalog)
    for ext in selected(extensions, agent):
        for t in ext.tools:
            if t not in names:
                names.append(t)
    names = [n for n in names if n in catalog]
    if agent.tools is not None:
        return tuple(n for n in agent.tools if n in names)
    return tuple(names)


def hooked(extensions: Sequence[ExtensionInfo], agent: AgentConfig, hook: str) -> tuple[str, ...]:
    """The selected extensions that have a ``hook`` (running it is host
    code: the step asks the shell first only when one does)."""
    return tuple(e.name for e in selected(extensions, agent) if hook in e.hooks)


def sectioned(extensions: Sequence[ExtensionInfo], agent: AgentConfig) -> tuple[str, ...]:
    """The selected extensions that have sections (their rendering is host code)."""
    return tuple(e.name for e in selected(extensions, agent) if e.sections)


def records(extensions: Sequence[ExtensionInfo], agent: AgentConfig, catalog: Mapping[str, object]) -> bool:
    """Whether this agent's system prompt is recorded at all: it has
    instructions or sectioned extensions, or it is offered tools."""
    return (
        bool(agent.instructions)
        or bool(sectioned(extensions, agent))
        or bool(offered_tools(extensions, catalog, agent))
    )


def desired(rendered: Sequence[SystemSection], failed: Sequence[str], shown: ContextDoc, agent: AgentConfig) -> tuple[SystemSection, ...]:
    """The sections the next request should carry: the rendered ones (a
    section whose renderer raised keeps its shown text), then the
    instructions."""
    before = {s.key: s.text for s in shown.sections}
    out: list[SystemSection] = []
    for s in rendered:
        out.append(s)
    for key in failed:
        if key in before and all(s.key != key for s in out):
            out.append(SystemSection(key=key, text=before[key]))
    out = [s for s in out if s.key != INSTRUCTIONS]
    if agent.instructions:
        out.append(SystemSection(key=INSTRUCTIONS, text=tag(INSTRUCTIONS, agent.instructions)))
    return tuple(out)


def patch(shown: ContextDoc, sections: tuple[SystemSection, ...], tools: tuple[str, ...]) -> dict[str, object] | None:
    """The ``data`` of the system entry that turns ``shown`` into the desired
    state, or None when nothing changed (and no baseline is due)."""
    baseline = shown.system_entry is None or (shown.head is not None and shown.system_entry < shown.head)
    before = {s.key: s.text for s in shown.sections}
    order = [s.key for s in sections]
    data: dict[str, object] = {}
    if baseline:
        data["sections"] = {s.key: s.text for s in sections}
        data["order"] = order
        data["tools_added"] = list(tools)
        data["tools_removed"] = []
        return data if (sections or tools or shown.sections or shown.tools) else None
    changed: dict[str, object] = {s.key: s.text for s in sections if before.get(s.key) != s.text}
    for key in before:
        if key not in order:
            changed[key] = None
    if changed:
        data["sections"] = changed
    if order != [s.key for s in shown.sections if s.key in order]:
        data["order"] = order
    added = [t for t in tools if t not in shown.tools]
    removed = [t for t in shown.tools if t not in tools]
    if added or removed:
        data["tools_added"] = added
        data["tools_removed"] = removed
    return data or None


def system_text(sections: Sequence[SystemSection]) -> str | None:
    """The system prompt the sections make (None: no system message)."""
    return "\n\n".join(s.text for s in sections) or None


def record(
    tx: Tx, conv: ConvState, task_id: TaskId, sections: tuple[SystemSection, ...], tools: tuple[str, ...], data: dict[str, object]
) -> ContextDoc:
    """Append the system entry of the change (``data``: its ``patch``) and
    store the new shown state in ``pi.context``; returns the shown state."""
    shown = conv.context
    entry = Entry(
        id=EntryId(tx.alloc_id()),
        conversation_id=conv.id,
        kind=EntryKind.SYSTEM,
        text="",
        by_task_id=task_id,
        at=tx.now,
        data=data,
    )
    tx.put_entry(entry)
    now = attrs.evolve(shown, sections=sections, tools=tools, system_entry=entry.id)
    tx.set_context(conv.id, now)
    return now


def tracks(tx: Tx, conv: ConvState) -> bool:
    """Whether this conversation's system prompt is recorded: the agent has
    sections, instructions or tools now, or had (a removal must be recorded
    too). The cheap test first: a tracked conversation stays tracked."""
    return conv.context.system_entry is not None or records(tx.extensions, conv.agent, tx.catalog)


def prepare(
    tx: Tx, conv: ConvState, task_id: TaskId, rendered: Sequence[SystemSection], failed: Sequence[str]
) -> None:
    """At a generation's prepare: record the change of what the model will
    be shown (nothing when the conversation's system prompt is not tracked)."""
    change = _change(tx, conv, rendered, failed)
    if change is not None:
        record(tx, conv, task_id, *change)


def unchanged(tx: Tx, conv: ConvState) -> bool:
    """Whether a prepare without rendered sections records nothing."""
    context, agent, extensions, catalog = conv.context, conv.agent, tx.extensions, tx.catalog
    q = _UNCHANGED
    if q[0] is context and q[1] is agent and q[2] is extensions and q[3] is catalog:
        return True
    if _change(tx, conv, (), ()) is not None:
        return False
    q[:] = context, agent, extensions, catalog
    return True


#: The newest ``(context, agent, extensions, catalog)`` that ``unchanged``
#: found to record nothing, held (their ids are not reused while here). All
#: four are immutable (frozen records, tuples, a catalog mapping a step
#: replaces, never changes), and ``_change`` reads nothing else: the same
#: four record nothing again - a round's hand-over asks on every round, and
#: they seldom change (issue 11 item 2).
_UNCHANGED: list[object] = [None, None, None, None]


def _change(
    tx: Tx, conv: ConvState, rendered: Sequence[SystemSection], failed: Sequence[str]
) -> tuple[tuple[SystemSection, ...], tuple[str, ...], dict[str, object]] | None:
    """What a prepare records: the sections and tools to show and the patch
    that shows them; None when there is nothing to record."""
    if not tracks(tx, conv):
        return None
    sections = desired(rendered, failed, conv.context, conv.agent)
    tools = offered_tools(tx.extensions, tx.catalog, conv.agent)
    data = patch(conv.context, sections, tools)
    return None if data is None else (sections, tools, data)


def request_view(tx: Tx, conv: ConvState) -> tuple[tuple[str, ...] | None, str | None]:
    """The offered tool names (None: every installed tool) and the system
    prompt of this conversation's next request: the recorded state when it
    is tracked, so a re-sent request offers what the model was shown."""
    if tracks(tx, conv):
        shown = tx.conversations[conv.id].context
        return shown.tools, system_text(shown.sections)
    return tools_view(tx, conv), None


def tools_view(tx: Tx, conv: ConvState) -> tuple[str, ...] | None:
    """The tool names a call of this conversation may resolve to (None:
    every installed tool)."""
    if tracks(tx, conv):
        return tx.conversations[conv.id].context.tools
    if conv.agent.extensions is not None:
        return offered_tools(tx.extensions, tx.catalog, conv.agent)
    return conv.agent.tools
