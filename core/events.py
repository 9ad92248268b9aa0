"""Events: the facts fed to ``step``.

Theory of operation
-------------------
An event is a past-tense fact: something the host asked for (``InputSubmitted``)
or something an effect produced (``ToolFinished``). Every event carries ``now``
(milliseconds) so the core never reads a clock, and every event is journaled by
the shell in the same transaction as the commit it causes, so a recorded run can
be re-played through ``step`` and must give the same commits byte for byte.

Host events that expect an answer carry a ``ticket``; the core answers with a
``Respond`` effect naming that ticket, after the commit that made the answer true.

``Event`` is a closed union; each class has a stable wire ``TAG`` (never the
class name) used by the shell's codec.
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias, get_args

import attrs

from .model import (
    AgentConfig,
    Diagnostic,
    ExtensionInfo,
    ConversationId,
    EntryId,
    Json,
    Outcome,
    Settings,
    Submission,
    SubmissionId,
    Task,
    TaskId,
    TaskInfo,
    ToolCall,
    ToolInfo,
    Usage,
)
from .fork_events import ForkRequested
from .reconcile_events import ToolReconciled
from .loading_events import ConversationsLoaded
from .state import ConvState, DocumentChange, DocumentState, SystemSection


@attrs.frozen(kw_only=True)
class Opened:
    """A process opened the store: everything live, as loaded."""

    TAG: ClassVar[str] = "opened"
    now: int
    next_id: int
    next_seq: int
    conversations: tuple[ConvState, ...] = ()
    tasks: tuple[Task, ...] = ()
    submissions: tuple[Submission, ...] = ()
    catalog: tuple[ToolInfo, ...] = ()
    resume: bool = True
    settings: Settings = Settings()
    task_catalog: tuple[TaskInfo, ...] = ()
    extensions: tuple[ExtensionInfo, ...] = ()
    #: The live host-defined documents (values rebuilt from their revisions).
    documents: tuple[DocumentState, ...] = ()
    #: ``State.keep_settled`` (holding.py); None, as journaled before it: hold all.
    keep_settled: int | None = None


@attrs.frozen(kw_only=True)
class SettingsChanged:
    """The host changed its settings (queue modes...)."""

    TAG: ClassVar[str] = "settings_changed"
    now: int
    settings: Settings


@attrs.frozen(kw_only=True)
class Resumed:
    """The host enabled scheduling (``harness.resume()``)."""

    TAG: ClassVar[str] = "resumed"
    now: int


@attrs.frozen(kw_only=True)
class RegistryChanged:
    """The installed tools changed; scheduling reconsiders blocked work."""

    TAG: ClassVar[str] = "registry_changed"
    now: int
    catalog: tuple[ToolInfo, ...]
    task_catalog: tuple[TaskInfo, ...] = ()
    extensions: tuple[ExtensionInfo, ...] = ()


@attrs.frozen(kw_only=True)
class RootRequested:
    """``harness.root(agent=...)``: create conversation 1 if it is absent."""

    TAG: ClassVar[str] = "root_requested"
    now: int
    ticket: int
    agent: AgentConfig | None = None


@attrs.frozen(kw_only=True)
class AgentConfigurationRequested:
    """``conv.configure(...)``: replace the conversation's ``pi.agent``."""

    TAG: ClassVar[str] = "agent_configuration_requested"
    now: int
    ticket: int
    conversation_id: ConversationId
    agent: AgentConfig


@attrs.frozen(kw_only=True)
class DocumentUpdateRequested:
    """``conv.update_document(doc, fn)``: ``change`` is ``fn`` applied to
    the committed value by the shell right before this step (validated,
    as ops); one commit, answered with the document's id."""

    TAG: ClassVar[str] = "document_update_requested"
    now: int
    ticket: int
    change: DocumentChange


@attrs.frozen(kw_only=True)
class InputSubmitted:
    """``conv.submit(Input(...))``.

    ``existing`` is the submission the shell found in storage under the same
    ``(conversation, request_id)``, if any; the core also checks its own
    unsettled submissions.
    """

    TAG: ClassVar[str] = "input_submitted"
    now: int
    ticket: int
    conversation_id: ConversationId
    content: str
    request_id: str | None = None
    when_busy: str = "follow_up"
    existing: Submission | None = None


@attrs.frozen(kw_only=True)
class WriteSubmitted:
    """``conv.submit(Write(...))``: a passive write. Appends an entry without
    starting a run; while the conversation is busy it is queued and placed at
    the next boundary, before user items."""

    TAG: ClassVar[str] = "write_submitted"
    now: int
    ticket: int
    conversation_id: ConversationId
    content: str
    kind: str = "user"
    data: dict[str, Json] | None = None
    request_id: str | None = None
    existing: Submission | None = None


@attrs.frozen(kw_only=True)
class SubmissionAbortRequested:
    """``harness.abort_submission(id)``. ``known`` is the stored record the
    shell found (settled submissions are not in the core's state)."""

    TAG: ClassVar[str] = "submission_abort_requested"
    now: int
    ticket: int
    submission_id: SubmissionId
    conversation_id: ConversationId | None = None
    known: Submission | None = None


@attrs.frozen(kw_only=True)
class ConversationAbortRequested:
    """``conv.abort(background=...)``: mark the conversation's task tree and
    withdraw its queued inputs (writes stay)."""

    TAG: ClassVar[str] = "conversation_abort_requested"
    now: int
    ticket: int
    conversation_id: ConversationId
    background: bool = False


@attrs.frozen(kw_only=True)
class TaskAbortRequested:
    """``harness.abort_task(id)``. ``known`` is the stored record the shell
    found (terminal tasks are not in the core's state)."""

    TAG: ClassVar[str] = "task_abort_requested"
    now: int
    ticket: int
    task_id: TaskId
    known: Task | None = None


@attrs.frozen(kw_only=True)
class ConversationCreationRequested:
    """``harness.create_conversation(owner_task_id=..., agent=...)``."""

    TAG: ClassVar[str] = "conversation_creation_requested"
    now: int
    ticket: int
    owner_task_id: TaskId | None = None
    agent: AgentConfig | None = None


@attrs.frozen(kw_only=True)
class TaskCreationRequested:
    """A custom task was created by the host (``harness.create_task``) or by a
    running task (``runtime.create_task``: then ``owner`` is that task).
    ``checkpoint`` is the definition's ``initial(input)``, computed by the shell."""

    TAG: ClassVar[str] = "task_creation_requested"
    now: int
    ticket: int
    kind: str
    conversation_id: ConversationId
    input: dict[str, Json]
    checkpoint: dict[str, Json]
    version: int = 1
    owner: TaskId | None = None
    background: bool = False


@attrs.frozen(kw_only=True)
class TaskCommitRequested:
    """``runtime.commit(...)`` from a running phase: the task's next state.

    ``status``: ``running`` (new checkpoint), ``waiting`` (checkpoint, ``on``,
    ``policy``), or ``terminal`` (``outcome``)."""

    TAG: ClassVar[str] = "task_commit_requested"
    now: int
    ticket: int
    task_id: TaskId
    status: str
    checkpoint: dict[str, Json] | None = None
    on: tuple[TaskId, ...] = ()
    policy: str = "allSettled"
    outcome: Outcome | None = None
    mode: str = "run"
    #: Document changes the phase staged (``runtime.update_document``),
    #: committed with this state.
    documents: tuple[DocumentChange, ...] = ()


@attrs.frozen(kw_only=True)
class PhaseReturned:
    """A custom task's phase (or abort handler) returned, or raised
    (``error``), or was cancelled. ``ran`` is the checkpoint it ran from."""

    TAG: ClassVar[str] = "phase_returned"
    now: int
    task_id: TaskId
    mode: str
    ran: dict[str, Json]
    error: str | None = None
    cancelled: bool = False


@attrs.frozen(kw_only=True)
class MemoRequested:
    """``memo(name)`` / ``memo(name, candidate)``: read, or first writer wins."""

    TAG: ClassVar[str] = "memo_requested"
    now: int
    ticket: int
    task_id: TaskId
    name: str
    candidate: Json = None
    write: bool = False


@attrs.frozen(kw_only=True)
class MigrationFinished:
    """``MigrateTask`` finished: the migrated input and checkpoint, or an error."""

    TAG: ClassVar[str] = "migration_finished"
    now: int
    task_id: TaskId
    version: int
    input: dict[str, Json] | None = None
    checkpoint: dict[str, Json] | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class PreparedCall:
    """A tool call the shell already resolved and validated (no before-tool
    hook installed): its final arguments and the tool's replay promise."""

    arguments: dict[str, Json]
    replay: str


@attrs.frozen(kw_only=True)
class ModelResponded:
    """A model request (``CallModel``) ended with a complete message.

    ``prepared`` holds, per tool call (by position), the shell's verdict when
    it could prepare the call right away, or None (the call then goes through
    the ``call`` phase: PrepareTool, hooks, validation errors)."""

    TAG: ClassVar[str] = "model_responded"
    now: int
    task_id: TaskId
    attempt: int
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "stop"
    usage: Usage | None = None
    prepared: tuple[PreparedCall | None, ...] = ()
    #: An ``on_yield`` hook asked the run to go on after this answer (no
    #: tool calls): the text of the user message that continues it.
    continuation: str | None = None


@attrs.frozen(kw_only=True)
class ModelFailed:
    """A model request failed. ``reason``: ``model_error``, ``no_model`` or
    ``context_overflow``; ``retryable`` for transient errors (429, 5xx,
    overloaded, timeouts, resets), with the provider's Retry-After if any."""

    TAG: ClassVar[str] = "model_failed"
    now: int
    task_id: TaskId
    attempt: int
    message: str
    reason: str = "model_error"
    retryable: bool = False
    retry_after_ms: int | None = None


@attrs.frozen(kw_only=True)
class ModelStreamed:
    """A throttled partial of the answer being streamed: the partial so far
    is the previous one's first ``offset`` characters followed by ``text``
    (``offset`` 0: ``text`` is the whole partial), so each event carries only
    what was appended."""

    TAG: ClassVar[str] = "model_streamed"
    now: int
    task_id: TaskId
    attempt: int
    text: str
    offset: int = 0


@attrs.frozen(kw_only=True)
class ModelDeferred:
    """The provider accepted the request but answers later: poll ``handle``
    after ``poll_after_ms``."""

    TAG: ClassVar[str] = "model_deferred"
    now: int
    task_id: TaskId
    attempt: int
    handle: Json
    poll_after_ms: int = 5000


@attrs.frozen(kw_only=True)
class TimerFired:
    """A ``Sleep`` reached its deadline."""

    TAG: ClassVar[str] = "timer_fired"
    now: int
    task_id: TaskId
    until: int


@attrs.frozen(kw_only=True)
class ToolPrepared:
    """``PrepareTool`` resolved the tool and validated the final arguments."""

    TAG: ClassVar[str] = "tool_prepared"
    now: int
    task_id: TaskId
    arguments: dict[str, Json]
    replay: str


@attrs.frozen(kw_only=True)
class ToolRejected:
    """``PrepareTool`` refused the call (unknown tool, invalid arguments,
    blocked by a hook): the model gets ``message`` as an error result."""

    TAG: ClassVar[str] = "tool_rejected"
    now: int
    task_id: TaskId
    code: str
    message: str


@attrs.frozen(kw_only=True)
class ToolFinished:
    """The tool body returned a result (which may itself be an error)."""

    TAG: ClassVar[str] = "tool_finished"
    now: int
    task_id: TaskId
    #: Document changes the body staged (``call.update_document``),
    #: committed with the result entry or not at all.
    documents: tuple[DocumentChange, ...] = ()
    text: str
    is_error: bool = False
    #: Tokens the tool spent (e.g. a sub-model), if it reported any.
    usage: Usage | None = None
    #: The shell bounded ``text`` (tool output limits): what was cut and
    #: where the full output went (``total_bytes, total_lines, kept_bytes,
    #: kept_lines, retain[, full_output]``); stored in the entry's ``data``.
    truncated: dict[str, Json] | None = None
    #: The result's controls for the run (reference §3.10): ``terminate``
    #: (true), ``handoff`` (text), ``add_tools`` (names); kept in the task's
    #: outcome and read when the round finishes.
    control: dict[str, Json] | None = None
    #: What the tool reported next to its text (``ToolResult.diagnostics``),
    #: checked at the edge; the core adds the harness's (diagnostics.py).
    diagnostics: tuple[Diagnostic, ...] = ()


@attrs.frozen(kw_only=True)
class ToolAbortHooked:
    """The ``on_abort`` hooks of an aborted call ran (``RunAbortHooks``):
    ``text`` is the result they replaced it with (None: unchanged), bounded
    by the tool's limits (``truncated``: what was cut)."""

    TAG: ClassVar[str] = "tool_abort_hooked"
    now: int
    task_id: TaskId
    text: str | None = None
    truncated: dict[str, Json] | None = None
    #: The replacement's diagnostics (a replacement is a whole result).
    diagnostics: tuple[Diagnostic, ...] = ()


@attrs.frozen(kw_only=True)
class AfterToolsRan:
    """The ``after_tools`` hooks of a settled tool round ran
    (``RunAfterTools``); ``control`` is what they asked of the run
    (``terminate``, ``handoff``, ``reset``, ``add_tools``), or None."""

    TAG: ClassVar[str] = "after_tools_ran"
    now: int
    task_id: TaskId
    control: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class ToolProgressed:
    """A running tool body reported output (throttled by the shell):
    ``output`` is the bounded tail of its running output so far, shown in its
    ``pi.live`` slot so a watcher sees it."""

    TAG: ClassVar[str] = "tool_progressed"
    now: int
    task_id: TaskId
    output: str


@attrs.frozen(kw_only=True)
class ToolFailed:
    """The tool body raised: ``message`` is its error, bounded by the tool's
    output limits (``truncated``: what was cut, as ``ToolFinished``'s)."""

    TAG: ClassVar[str] = "tool_failed"
    now: int
    task_id: TaskId
    message: str
    truncated: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class ToolProcessStarted:
    """A running tool body started an OS process group (``process``: pid,
    pgid, host, start time) and asks that it be recorded in its ``execute``
    checkpoint before the command runs, so a later open can find and kill a
    process a dead harness left running. Answered with ``Respond``."""

    TAG: ClassVar[str] = "tool_process_started"
    now: int
    ticket: int
    task_id: TaskId
    process: dict[str, Json]


@attrs.frozen(kw_only=True)
class InvocationFailed:
    """Interpreting an effect of ``task_id`` failed in the shell itself (a
    bug or a value that cannot be handled): the task faults with ``message``
    and the run it was responsible for settles ``unanswered/faulted``. Other
    conversations are not affected."""

    TAG: ClassVar[str] = "invocation_failed"
    now: int
    task_id: TaskId
    message: str


@attrs.frozen(kw_only=True)
class CompactionRequested:
    """``conv.compact(instructions)``: a manual compaction task."""

    TAG: ClassVar[str] = "compaction_requested"
    now: int
    ticket: int
    conversation_id: ConversationId
    instructions: str | None = None


@attrs.frozen(kw_only=True)
class CutSelected:
    """``SelectCut`` answered: the first entry a summary keeps and the newest
    entry of the captured context, or None for both (nothing to compact)."""

    TAG: ClassVar[str] = "cut_selected"
    now: int
    task_id: TaskId
    first_kept: EntryId | None = None
    tail: EntryId | None = None
    #: A ``before_compact`` hook's summary, placed without a model call.
    summary: str | None = None


@attrs.frozen(kw_only=True)
class ContextMeasured:
    """``MeasureContext`` answered: the estimated tokens of the request the
    generation is about to send (§3.13.2)."""

    TAG: ClassVar[str] = "context_measured"
    now: int
    task_id: TaskId
    tokens: int


@attrs.frozen(kw_only=True)
class SystemRendered:
    """``RenderSystem`` rendered the agent's extension sections (in order,
    tagged); ``failed`` names sections whose renderer raised (they keep the
    text the model was shown)."""

    TAG: ClassVar[str] = "system_rendered"
    now: int
    task_id: TaskId
    sections: tuple[SystemSection, ...] = ()
    failed: tuple[str, ...] = ()


Event: TypeAlias = (
    Opened
    | Resumed
    | RegistryChanged
    | RootRequested
    | AgentConfigurationRequested
    | DocumentUpdateRequested
    | ForkRequested
    | InputSubmitted
    | WriteSubmitted
    | SubmissionAbortRequested
    | SettingsChanged
    | ConversationAbortRequested
    | TaskAbortRequested
    | ConversationCreationRequested
    | TaskCreationRequested
    | TaskCommitRequested
    | PhaseReturned
    | MemoRequested
    | MigrationFinished
    | ModelResponded
    | ModelFailed
    | ModelStreamed
    | ModelDeferred
    | TimerFired
    | ToolPrepared
    | ToolRejected
    | ToolFinished
    | ToolProgressed
    | ToolFailed
    | ToolProcessStarted
    | ToolAbortHooked
    | ToolReconciled
    | AfterToolsRan
    | InvocationFailed
    | CompactionRequested
    | CutSelected
    | ContextMeasured
    | SystemRendered
    | ConversationsLoaded
)

#: The members of ``Event`` (derived: the union is written once).
EVENT_TYPES: tuple[type, ...] = get_args(Event)
