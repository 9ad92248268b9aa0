"""``step(state, event) -> Step``: the one entry point of the core. It routes.

Every event goes to exactly one handler (``HANDLERS``); then the scheduling
pass runs; then the draft becomes a frozen ``Step`` whose effects are
``[Commit(writes)?, acts..., replies...]``. Same state + same event gives the
same Step, always: nothing here reads a clock, draws a random number or does
I/O. The handler that ran is named in ``Step.rules`` (``<module>.<function>``;
for an event routed by task kind, the handler it was routed to).

``step_many(state, events)`` steps several events in ONE draft (a group
commit: each event's handler and passes in turn, one ``Commit`` for all of
them); it is the fold of ``step`` over them (tests/core/test_step_many.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import admission, cancellation, compaction_task, custom, documents, fork, generation, holding, scheduling, settlement, tools
from .draft import Tx
from .effects import Effect, Step
from .events import (
    SystemRendered,
    EVENT_TYPES,
    AgentConfigurationRequested,
    DocumentUpdateRequested,
    ConversationAbortRequested,
    ConversationCreationRequested,
    Event,
    InputSubmitted,
    MemoRequested,
    MigrationFinished,
    PhaseReturned,
    TaskCommitRequested,
    TaskCreationRequested,
    SettingsChanged,
    SubmissionAbortRequested,
    WriteSubmitted,
    ModelDeferred,
    ModelFailed,
    ModelResponded,
    ModelStreamed,
    TimerFired,
    Opened,
    RegistryChanged,
    Resumed,
    RootRequested,
    TaskAbortRequested,
    ToolFailed,
    ToolFinished,
    ToolAbortHooked,
    AfterToolsRan,
    ToolPrepared,
    ToolProgressed,
    ToolRejected,
    ToolProcessStarted,
    InvocationFailed,
    CompactionRequested,
    CutSelected,
    ContextMeasured,
)
from .fork_events import ForkRequested
from .reconcile_events import ToolReconciled
from .loading_events import ConversationsLoaded
from .model import COMPACTION, CoreInvariantError
from .state import State

HANDLERS: Mapping[type, Callable[[Tx, Any], None]] = {
    Opened: scheduling.on_opened,
    Resumed: scheduling.on_resumed,
    RegistryChanged: scheduling.on_registry_changed,
    RootRequested: admission.on_root_requested,
    AgentConfigurationRequested: admission.on_agent_configured,
    DocumentUpdateRequested: documents.on_document_update_requested,
    ForkRequested: fork.on_fork_requested,
    InputSubmitted: admission.on_input_submitted,
    WriteSubmitted: admission.on_write_submitted,
    SubmissionAbortRequested: admission.on_submission_abort_requested,
    SettingsChanged: admission.on_settings_changed,
    ConversationAbortRequested: cancellation.on_conversation_abort_requested,
    TaskAbortRequested: cancellation.on_task_abort_requested,
    ConversationCreationRequested: cancellation.on_conversation_created,
    TaskCreationRequested: custom.on_task_created,
    TaskCommitRequested: custom.on_task_committed,
    PhaseReturned: custom.on_phase_returned,
    MemoRequested: custom.on_memo_requested,
    MigrationFinished: custom.on_migration_finished,
    ModelResponded: lambda tx, ev: _model_reply(tx, ev, generation.on_model_responded),
    ModelFailed: lambda tx, ev: _model_reply(tx, ev, generation.on_model_failed),
    ModelStreamed: generation.on_model_streamed,
    SystemRendered: generation.on_system_rendered,
    ContextMeasured: generation.on_context_measured,
    ModelDeferred: generation.on_model_deferred,
    TimerFired: lambda tx, ev: _by_kind(tx, ev, compaction_task.on_timer_fired, generation.on_timer_fired),
    ToolPrepared: tools.on_tool_prepared,
    ToolRejected: tools.on_tool_rejected,
    ToolFinished: tools.on_tool_finished,
    ToolProgressed: tools.on_tool_progressed,
    ToolFailed: tools.on_tool_failed,
    ToolProcessStarted: tools.on_tool_process_started,
    ToolAbortHooked: tools.on_tool_abort_hooked,
    ToolReconciled: tools.on_tool_reconciled,
    AfterToolsRan: generation.on_after_tools_ran,
    InvocationFailed: settlement.on_invocation_failed,
    CompactionRequested: compaction_task.on_compaction_requested,
    CutSelected: compaction_task.on_cut_selected,
    ConversationsLoaded: holding.on_conversations_loaded,
}
assert set(HANDLERS) == set(EVENT_TYPES), "every event type needs exactly one handler"


def rule_name(handler: Callable[..., None]) -> str:
    """``admission.on_input_submitted``: how ``Step.rules`` names a handler."""
    return f"{handler.__module__.rsplit('.', 1)[-1]}.{handler.__name__}"


#: ``rule_name`` of each handler routed to so far (named once, not per step).
_RULE_NAMES: dict[Callable[..., None], str] = {}


def _route(tx: Tx, handler: Callable[[Tx, Any], None], ev: Any) -> None:
    name = _RULE_NAMES.get(handler)
    if name is None:
        name = _RULE_NAMES[handler] = rule_name(handler)
    tx.rules.append(name)
    handler(tx, ev)


#: Events whose handler routes them on (the routed-to handler is the rule).
_ROUTED = frozenset({ModelResponded, ModelFailed, TimerFired})


def _by_kind(tx: Tx, ev: TimerFired, to_compaction: Callable[[Tx, Any], None], to_generation: Callable[[Tx, Any], None]) -> None:
    """A timer goes to the kind of task that slept."""
    task = tx.tasks.get(ev.task_id)
    _route(tx, to_compaction if task is not None and task.kind == COMPACTION else to_generation, ev)


def _model_reply(tx: Tx, ev: ModelResponded | ModelFailed, to_generation: Callable[[Tx, Any], None]) -> None:
    """A model reply goes to the kind of task that asked: a summarizer's to
    the compaction task, anything else to the generation."""
    task = tx.tasks.get(ev.task_id)
    if task is not None and task.kind == COMPACTION:
        _route(tx, compaction_task.on_summary, ev)
    else:
        _route(tx, to_generation, ev)


def step(state: State, event: Event) -> Step:
    kind = type(event)
    handler = HANDLERS.get(kind)
    if handler is None:
        raise CoreInvariantError(f"no handler for event {kind.__name__}")
    if not state.opened and not isinstance(event, Opened):
        raise CoreInvariantError(f"{kind.__name__} before Opened")
    tx = Tx(state, event.now)
    _apply(tx, kind, handler, event)
    return tx.finish()


def _apply(tx: Tx, kind: type, handler: Callable[[Tx, Any], None], event: Event) -> None:
    """One event in the draft: its rule, its handler, the scheduling pass
    and the end-of-step pass (``step``, and each event of ``step_many``)."""
    if kind not in _ROUTED:  # _route, inline (a call less on most steps)
        name = _RULE_NAMES.get(handler)
        if name is None:
            name = _RULE_NAMES[handler] = rule_name(handler)
        tx.rules.append(name)
    handler(tx, event)
    scheduling.run_pass(tx)
    if kind is not ConversationsLoaded:  # what it loaded waits for the event that asked (holding.py)
        holding.settle(tx)


def step_many(state: State, events: Sequence[Event]) -> Step:
    """``events`` stepped in ONE draft (a group commit): the state that
    stepping each in turn gives, with every write of theirs in one ``Commit``
    (a record written twice: its last version, in the place of its first; a
    built-in document's revisions: one), then each event's acts and replies
    in event order - what the shell runs after a batch's commits anyway.
    Each event still has its handler, its scheduling pass and its
    end-of-step pass, with its own ``now``. ``Opened`` may come only first
    (it starts a process life). One event: exactly ``step``."""
    if len(events) == 1:
        return step(state, events[0])
    if not events:
        raise CoreInvariantError("step_many needs at least one event")
    tx = Tx(state, events[0].now)
    out: list[Effect] = []
    for i, event in enumerate(events):
        kind = type(event)
        handler = HANDLERS.get(kind)
        if handler is None:
            raise CoreInvariantError(f"no handler for event {kind.__name__}")
        if kind is Opened:
            if i:
                raise CoreInvariantError("Opened can only be the first event a draft steps")
        elif not tx._base.opened:
            raise CoreInvariantError(f"{kind.__name__} before Opened")
        tx.now = event.now
        _apply(tx, kind, handler, event)
        out += tx.take_effects()
    tx.give_effects(out)
    return tx.finish()
