"""Effects: what the core asks the shell to do, and the writes of a commit.

Theory of operation
-------------------
``step`` returns effects in the order they must run. The ordering rule: a
``Commit`` is durable before any effect after it starts, and the core always
emits the intent before the act (``[Commit(T running/execute), RunTool(T)]``).
The core emits at most one ``Commit`` per step, always first: the writes of every
decision taken in that step (the event's handler and the scheduling pass that
follows it) form one atomic transaction.

A ``Write`` replaces a whole record (tasks, submissions, documents) or appends
one (conversations, entries are immutable and written once).

``WRITE_TYPES`` / ``EFFECT_TYPES`` are derived from the unions (the shell's
codec registers one wire tag per member); the builder that handlers write
into is :class:`~pidurable.core.draft.Tx`, in ``draft.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, ClassVar, TypeAlias, get_args

import attrs

from .model import (
    AgentConfig,
    Conversation,
    ConversationId,
    Diagnostic,
    Entry,
    EntryId,
    InvocationMode,
    Json,
    ModelRef,
    Submission,
    Task,
    TaskId,
)
from .state import ContextDoc, DocHistory, DocScope, ForkPolicy, InboxItem, Live, State, UsageDoc


# --- writes (the content of one Commit) -----------------------------------


@attrs.frozen(kw_only=True)
class PutConversation:
    TAG: ClassVar[str] = "conversation"
    conversation: Conversation


@attrs.frozen(kw_only=True)
class PutEntry:
    TAG: ClassVar[str] = "entry"
    entry: Entry


@attrs.frozen(kw_only=True)
class PutSubmission:
    TAG: ClassVar[str] = "submission"
    submission: Submission


@attrs.frozen(kw_only=True)
class PutTask:
    TAG: ClassVar[str] = "task"
    task: Task


# The built-in documents' whole-value writes of journal formats 1-3. The core
# no longer emits them (the built-ins are documents: ``PutDocument``,
# builtins.py); they stay so that older journals and JSONL lines decode, and
# storage turns each into a base revision of the built-in (base.py).


@attrs.frozen(kw_only=True)
class PutAgent:
    TAG: ClassVar[str] = "pi.agent"
    conversation_id: ConversationId
    agent: AgentConfig


@attrs.frozen(kw_only=True)
class PutLive:
    TAG: ClassVar[str] = "pi.live"
    conversation_id: ConversationId
    live: Live


@attrs.frozen(kw_only=True)
class PutInbox:
    TAG: ClassVar[str] = "pi.inbox"
    conversation_id: ConversationId
    items: tuple[InboxItem, ...]


@attrs.frozen(kw_only=True)
class PutUsage:
    TAG: ClassVar[str] = "pi.usage"
    conversation_id: ConversationId
    usage: UsageDoc


@attrs.frozen(kw_only=True)
class PutContext:
    TAG: ClassVar[str] = "pi.context"
    conversation_id: ConversationId
    context: ContextDoc


class RevisionAction(enum.StrEnum):
    """What one stored revision of a host-defined document is."""

    #: The whole value (a new document, a new version, every N deltas).
    BASE = "base"
    #: The ops of one commit, applied to the value before it.
    DELTA = "delta"
    #: The document ends (its task ended); current-only revisions are dropped.
    RETIRE = "retire"


@attrs.frozen(kw_only=True)
class DocumentRevision:
    """One revision of a host-defined document, with its address and the
    definition's settings (so storage can index and reclaim it)."""

    scope: DocScope
    owner: int
    kind: str
    version: int
    history: DocHistory
    fork: ForkPolicy
    action: RevisionAction
    #: The whole value (``base``).
    value: Json = None
    #: The ops (``delta``).
    ops: tuple[Json, ...] = ()


@attrs.frozen(kw_only=True)
class PutDocument:
    TAG: ClassVar[str] = "document"
    document_id: int
    revision: DocumentRevision


Write: TypeAlias = (
    PutConversation
    | PutEntry
    | PutSubmission
    | PutTask
    | PutAgent
    | PutLive
    | PutInbox
    | PutUsage
    | PutContext
    | PutDocument
)
WRITE_TYPES: tuple[type, ...] = get_args(Write)


#: What record each kind of write replaces: the key's name, and how to read
#: the record's id from the write (later writes of the same key win).
WRITE_KEYS: Mapping[type, tuple[str, Callable[[Any], int]]] = {
    PutConversation: ("conversation", attrgetter("conversation.id")),
    PutEntry: ("entry", attrgetter("entry.id")),
    PutSubmission: ("submission", attrgetter("submission.id")),
    PutTask: ("task", attrgetter("task.id")),
    PutAgent: ("pi.agent", attrgetter("conversation_id")),
    PutLive: ("pi.live", attrgetter("conversation_id")),
    PutInbox: ("pi.inbox", attrgetter("conversation_id")),
    PutUsage: ("pi.usage", attrgetter("conversation_id")),
    PutContext: ("pi.context", attrgetter("conversation_id")),
    PutDocument: ("document", attrgetter("document_id")),
}
assert set(WRITE_KEYS) == set(WRITE_TYPES), "every write type needs its key"


def write_key(w: Write) -> tuple[str, int]:
    """The record a write replaces: later writes of the same key win."""
    name, read = WRITE_KEYS[type(w)]
    return (name, read(w))


# --- effects ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Commit:
    """One atomic storage transaction; durable before the next effect starts."""

    TAG: ClassVar[str] = "commit"
    seq: int
    writes: tuple[Write, ...]


@attrs.frozen(kw_only=True)
class RenderSystem:
    """Render the sections of these extensions (the agent's selection, in
    order) for a generation at ``prepare``. Answers ``SystemRendered``."""

    TAG: ClassVar[str] = "render_system"
    task_id: TaskId
    conversation_id: ConversationId
    extensions: tuple[str, ...]


@attrs.frozen(kw_only=True)
class CallModel:
    """Send the conversation's context up to ``cutoff`` to ``model``.

    Answers with ``ModelResponded`` or ``ModelFailed`` (same task and attempt).
    """

    TAG: ClassVar[str] = "call_model"
    task_id: TaskId
    conversation_id: ConversationId
    attempt: int
    model: ModelRef
    cutoff: EntryId
    #: The agent's tool filter: None offers every installed tool, else
    #: exactly these names, in this order.
    tools: tuple[str, ...] | None = None
    #: The rendered system prompt (the agent's instructions section), if any.
    system: str | None = None
    #: The agent's extension selection (None: every extension): whose hooks run.
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class PrepareTool:
    """Resolve ``name`` in the registry, validate the call's arguments (read
    from the assistant entry), run before-tool hooks. Answers ``ToolPrepared``
    or ``ToolRejected``."""

    TAG: ClassVar[str] = "prepare_tool"
    task_id: TaskId
    conversation_id: ConversationId
    assistant_entry_id: EntryId
    call_id: str
    name: str
    #: The agent's tool filter: a name outside it does not resolve
    #: ("Tool X is not available"); None = every installed tool.
    tools: tuple[str, ...] | None = None
    #: The agent's extension selection (None: every extension): whose hooks run.
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class RunTool:
    """Run the tool body with the final (durably recorded) arguments.

    Answers ``ToolFinished`` or ``ToolFailed``.
    """

    TAG: ClassVar[str] = "run_tool"
    task_id: TaskId
    conversation_id: ConversationId
    call_id: str
    name: str
    arguments: dict[str, Json]
    #: The conversation's working directory (the agent's ``cwd``).
    cwd: str | None = None
    #: The agent's extension selection (None: every extension): whose hooks run.
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class RunReconcile:
    """Ask the tool's ``reconcile`` whether an interrupted call's effect
    happened, with the stored arguments and the same call context (same
    ``idempotency_key``) as its execution. Answers ``ToolReconciled``."""

    TAG: ClassVar[str] = "run_reconcile"
    task_id: TaskId
    conversation_id: ConversationId
    call_id: str
    name: str
    arguments: dict[str, Json]
    cwd: str | None = None


@attrs.frozen(kw_only=True)
class RunPhase:
    """Run host code of a custom task: ``phases[phase]`` (mode ``run``) or its
    abort handler (mode ``abort``), with the checkpoint it runs from.
    Answers ``PhaseReturned`` once the handler returns or raises; meanwhile
    the handler reports durable progress through ``TaskCommitRequested`` events."""

    TAG: ClassVar[str] = "run_phase"
    task_id: TaskId
    kind: str
    mode: InvocationMode
    checkpoint: dict[str, Json]


@attrs.frozen(kw_only=True)
class MigrateTask:
    """Run the definition's ``migrate`` on a task stored at an older version.
    Answers ``MigrationFinished``."""

    TAG: ClassVar[str] = "migrate_task"
    task_id: TaskId
    kind: str
    from_version: int
    input: dict[str, Json]
    checkpoint: dict[str, Json]


@attrs.frozen(kw_only=True)
class Sleep:
    """Wake the task at ``until`` (ms, harness clock): answers ``TimerFired``.
    The deadline itself is in the task's checkpoint, so after a restart only
    the remaining time is waited."""

    TAG: ClassVar[str] = "sleep"
    task_id: TaskId
    until: int


@attrs.frozen(kw_only=True)
class PollModel:
    """Fetch a deferred response by its saved ``handle`` (never a new request).
    Answers like ``CallModel`` (responded, failed, or still deferred)."""

    TAG: ClassVar[str] = "poll_model"
    task_id: TaskId
    conversation_id: ConversationId
    attempt: int
    model: ModelRef
    handle: Json
    #: The pinned cutoff of the original request (the poll request carries
    #: the same context, for providers that need it).
    cutoff: EntryId | None = None
    tools: tuple[str, ...] | None = None
    system: str | None = None
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class SelectCut:
    """Choose what a compaction summarizes (core/compaction.py ``select_cut``
    over the committed context): answers ``CutSelected``."""

    TAG: ClassVar[str] = "select_cut"
    task_id: TaskId
    conversation_id: ConversationId
    keep_recent_tokens: int
    #: Why the compaction runs, its manual instructions and the agent's
    #: extension selection: what ``before_compact`` hooks are told.
    reason: str = "manual"
    instructions: str | None = None
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class RunAfterTools:
    """Run the ``after_tools`` hooks of a generation whose tool round is
    settled (before the commit that finishes the round): they see the round's
    result entries and may return a control. Answers ``AfterToolsRan``."""

    TAG: ClassVar[str] = "run_after_tools"
    task_id: TaskId
    conversation_id: ConversationId
    assistant_entry_id: EntryId
    #: The round's result entries, in call order.
    result_entry_ids: tuple[EntryId, ...]
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class RunAbortHooks:
    """Run the ``on_abort`` hooks of an aborted tool call over the result the
    abort handler built (a replacement chain). Answers ``ToolAbortHooked``."""

    TAG: ClassVar[str] = "run_abort_hooks"
    task_id: TaskId
    conversation_id: ConversationId
    call_id: str
    name: str
    arguments: dict[str, Json] = attrs.field(factory=dict)
    #: The aborted result as the abort handler built it: its content (the
    #: slot's partial output) and its diagnostics (``aborted`` last).
    text: str
    diagnostics: tuple[Diagnostic, ...] = ()
    extensions: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class MeasureContext:
    """Estimate the size of a generation's next request (core/compaction.py
    ``estimate_context_tokens`` over the context through ``cutoff``, plus
    ``system``): answers ``ContextMeasured``. Sent only for an agent whose
    model's window is known."""

    TAG: ClassVar[str] = "measure_context"
    task_id: TaskId
    conversation_id: ConversationId
    cutoff: EntryId
    #: The system prompt the model was last shown (None: none recorded).
    system: str | None = None


@attrs.frozen(kw_only=True)
class Summarize:
    """Send the pinned summarization request (no tools; the summarizer's
    system prompt; the entries before ``first_kept`` of the context through
    ``tail``, serialized): answers ``ModelResponded``/``ModelFailed``."""

    TAG: ClassVar[str] = "summarize"
    task_id: TaskId
    conversation_id: ConversationId
    attempt: int
    model: ModelRef
    max_tokens: int
    tail: EntryId
    first_kept: EntryId
    instructions: str | None = None


@attrs.frozen(kw_only=True)
class CancelDeferred:
    """Best effort: tell the provider a deferred response is no longer
    wanted (an aborted generation at ``poll``). Answers nothing."""

    TAG: ClassVar[str] = "cancel_deferred"
    task_id: TaskId
    model: ModelRef
    handle: Json


@attrs.frozen(kw_only=True)
class Cancel:
    """Cancel the in-flight invocation of a task (its Trio cancel scope)."""

    TAG: ClassVar[str] = "cancel"
    task_id: TaskId


class Refusal(enum.StrEnum):
    """Why the core refused a host request (the host sees an exception)."""

    #: Bad input (``InvalidInput``).
    INVALID = "invalid"
    #: ``when_busy="reject"`` on a busy conversation (``ConversationBusy``).
    BUSY = "busy"
    #: The request names something that does not exist (``NotFound``).
    NOT_FOUND = "not_found"


@attrs.frozen(kw_only=True)
class Accepted:
    """The request was taken: ``value`` is the id the call returns; ``data``
    a JSON value some calls return (a memo's value, an abort's result word)."""

    TAG: ClassVar[str] = "accepted"
    value: int | None = None
    data: Json = None


@attrs.frozen(kw_only=True)
class Refused:
    """The request was refused; nothing was written."""

    TAG: ClassVar[str] = "refused"
    kind: Refusal
    message: str


Reply: TypeAlias = Accepted | Refused


@attrs.frozen(kw_only=True)
class Respond:
    """Answer the host call that carried ``ticket`` (after the commit that
    made its effect durable, if any)."""

    TAG: ClassVar[str] = "respond"
    ticket: int
    reply: Reply


Effect: TypeAlias = (
    Commit
    | CallModel
    | PollModel
    | RenderSystem
    | SelectCut
    | RunAfterTools
    | RunAbortHooks
    | MeasureContext
    | Summarize
    | CancelDeferred
    | PrepareTool
    | RunTool
    | RunReconcile
    | RunPhase
    | MigrateTask
    | Sleep
    | Cancel
    | Respond
)
EFFECT_TYPES: tuple[type, ...] = get_args(Effect)


# --- the result of a step ---------------------------------------------------


@attrs.frozen(kw_only=True)
class Step:
    """What ``step`` returns: the next state and the effects, in order."""

    state: State
    effects: tuple[Effect, ...] = ()
    #: The rules that fired, in order, for readers (``replay --explain``):
    #: the event's handler (``admission.on_input_submitted``) and each phase
    #: row run (``pi.tool:execute,reserve_interrupted #11``, the task after
    #: ``#``). Pure data: never persisted, no part of any commit.
    rules: tuple[str, ...] = ()
