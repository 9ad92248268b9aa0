"""Records of the durable model: conversations, entries, submissions, tasks.

Theory of operation
-------------------
Everything the store holds is one of these frozen attrs records. They carry no
wire code (the shell's codec turns them into JSON) and no behaviour beyond
tiny derived properties. Ids come from one global counter held in
:class:`~pidurable.core.state.State` (``next_id``); the root conversation has
the reserved id 1. Time is an integer of milliseconds that arrives inside
events; a record never reads a clock.

JSON-like payloads (checkpoints, tool arguments, task inputs, outcome results)
are plain ``dict``s by convention treated as immutable: the core always builds a
new dict instead of changing one in place.

Invariants
- A record is immutable; a change is a new record written by a ``Commit``.
- ``Task.status == TERMINAL`` if and only if ``Task.outcome is not None``.
- A terminal task is never changed again.
"""

from __future__ import annotations

import enum
from typing import Any, NewType

import attrs

ConversationId = NewType("ConversationId", int)
EntryId = NewType("EntryId", int)
TaskId = NewType("TaskId", int)
SubmissionId = NewType("SubmissionId", int)

#: The reserved id of the store's root conversation.
ROOT_CONVERSATION_ID = ConversationId(1)

Json = Any  # a strict-JSON value: dict/list/str/int/float/bool/None


class TaskStatus(enum.StrEnum):
    #: Ready to be reserved by the scheduler at its checkpoint.
    PENDING = "pending"
    #: An invocation (effect in the shell) is working on it.
    RUNNING = "running"
    #: Parked until every task in ``on`` is terminal.
    WAITING = "waiting"
    #: Has an outcome but still owns live work (see cancellation.py).
    COMPLETING = "completing"
    #: Finished for ever; ``outcome`` is the durable receipt.
    TERMINAL = "terminal"


class OutcomeStatus(enum.StrEnum):
    #: The task did what it was for.
    COMPLETED = "completed"
    #: The task ended with an error it reported itself.
    FAILED = "failed"
    #: The task was cancelled.
    ABORTED = "aborted"
    #: Aborted while its definition was missing; no task code ran.
    ORPHANED = "orphaned"
    #: Its contract was broken (a bug in task code or in the harness).
    FAULTED = "faulted"


class SubmissionStatus(enum.StrEnum):
    #: Accepted while the conversation was busy; waits in ``pi.inbox``.
    QUEUED = "queued"
    #: Its user entry is in the transcript and a run is answering it.
    PLACED = "placed"
    #: Answered (inputs) or appended (writes).
    DONE = "done"
    #: Settled without an answer; ``reason`` says why.
    UNANSWERED = "unanswered"


SETTLED_SUBMISSION = frozenset({SubmissionStatus.DONE, SubmissionStatus.UNANSWERED})


class EntryKind(enum.StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL_RESULT = "tool_result"
    SYSTEM = "system"
    COMPACTION = "compaction"
    RESET = "reset"


# Kinds of built-in tasks.
GENERATION = "pi.generation"
TOOL = "pi.tool"
COMPACTION = "pi.compaction"


class SubmissionType(enum.StrEnum):
    #: A user input that a run answers.
    INPUT = "input"
    #: A passive write: an entry appended without starting a run.
    WRITE = "write"


class InvocationMode(enum.StrEnum):
    """What host code of a custom task an invocation runs (``RunPhase.mode``)."""

    #: The phase named by its checkpoint.
    RUN = "run"
    #: Its abort handler.
    ABORT = "abort"


class Replay(enum.StrEnum):
    """A tool's promise about being run again after an interruption."""

    #: Running it twice with the same arguments is harmless.
    SAFE = "safe"
    #: It may have changed the world: never re-run, settle as interrupted.
    UNSAFE = "unsafe"


class ExecutionMode(enum.StrEnum):
    """How the calls of one tool round run."""

    #: Every call of the round gets its task at once.
    PARALLEL = "parallel"
    #: One call at a time, in order (the next one's task is created when
    #: the previous settles).
    SEQUENTIAL = "sequential"


class WaitPolicy(enum.StrEnum):
    """When a waiting task is released (the wire values are the reference's)."""

    #: Once every task in ``on`` is terminal, whatever its outcome.
    ALL_SETTLED = "allSettled"
    #: Like ALL_SETTLED, and a failure abort-marks the other live members.
    FAIL_FAST = "failFast"


class QueueMode(enum.StrEnum):
    """How many queued items of one kind a boundary places."""

    #: The first one (default).
    ONE_AT_A_TIME = "one_at_a_time"
    #: Every one.
    ALL = "all"


class SubmissionAbortResult(enum.StrEnum):
    """What ``abort_submission`` found (the host receives the member)."""

    #: It was queued: now ``unanswered/aborted``.
    ABORTED = "aborted"
    #: It was already placed: a run answers it (abort the conversation).
    ALREADY_PLACED = "already_placed"
    #: It had settled already; nothing changed.
    SETTLED = "settled"
    #: No such submission (in that conversation).
    NOT_FOUND = "not_found"


class TaskAbortResult(enum.StrEnum):
    """What ``abort_task`` did."""

    #: The live task now carries an abort mark.
    MARKED = "marked"
    #: It was terminal already; nothing changed.
    TERMINAL = "terminal"


class Reason(enum.StrEnum):
    """Why a submission settled ``unanswered`` or a task was blocked or
    orphaned (``Submission.reason``; the model's failure reasons arrive from
    the shell in ``ModelFailed.reason`` and are kept as given)."""

    #: Withdrawn from the queue, or its run was aborted.
    ABORTED = "aborted"
    #: No model is configured for the conversation.
    NO_MODEL = "no_model"
    #: The provider failed (after the retries, when retryable).
    MODEL_ERROR = "model_error"
    #: The request does not fit the model's context window.
    CONTEXT_OVERFLOW = "context_overflow"
    #: A write whose head marker is older than the conversation's current
    #: range start (a compaction overtaken by a newer one or a reset).
    STALE = "stale"
    #: A reset placed at a post-tools boundary ended the run.
    RESET = "reset"
    #: The task responsible for the run broke its contract.
    FAULTED = "faulted"
    #: Blocked/orphaned: no definition of the task's kind is installed.
    MISSING_TASK = "missing_task"
    #: Blocked/orphaned: the installed definition is older than the task.
    TASK_TOO_OLD = "task_too_old"
    #: Blocked/orphaned: the task's migration to the installed version failed.
    MIGRATION_FAILED = "migration_failed"


class StopReason(enum.StrEnum):
    """Stop reasons of assistant entries that the core decides (providers
    report others, e.g. ``stop``/``length``, kept as given)."""

    #: The answer asked for tools.
    TOOL_USE = "tool_use"
    #: The request failed; the entry holds the error message.
    ERROR = "error"
    #: A partial answer that never completed.
    ABORTED = "aborted"


class ResultCode(enum.StrEnum):
    """``data.code`` of an error tool result (why the call has no normal result)."""

    #: The tool is not installed or not offered to this agent.
    TOOL_UNAVAILABLE = "tool_unavailable"
    #: The arguments do not match the tool's schema.
    INVALID_ARGUMENTS = "invalid_arguments"
    #: A before-tool hook refused the call.
    BLOCKED = "blocked"
    #: The call itself is malformed.
    INVALID_CALL = "invalid_call"
    #: The call was aborted before it settled.
    ABORTED = "aborted"
    #: The tool body raised.
    TOOL_ERROR = "tool_error"
    #: The call may have partially run before the process ended; it may not
    #: run again.
    INTERRUPTED = "interrupted"
    #: A result (or the running output an aborted call kept) was cut to the
    #: tool's output limits (a ``warn``).
    TRUNCATED = "truncated"
    #: Where the full output of a cut result was spilled (an ``info``).
    FULL_OUTPUT = "full_output"
    #: A command exited with a non-zero code (``bash``; the reference's code).
    EXIT_CODE = "exit_code"
    #: An interrupted call's ``reconcile`` could not tell whether it ran (a
    #: ``warn`` with its note, after the ``interrupted`` error).
    RECONCILE_UNKNOWN = "reconcile_unknown"


class Severity(enum.StrEnum):
    """How bad a :class:`Diagnostic` is. Only ``error`` diagnostics come with
    error results; a ``warn`` never makes a result an error."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"


@attrs.frozen
class Diagnostic:
    """One problem reported with a tool result (reference §3.6,
    "Diagnostics rendering"): by the tool (its ``ToolResult.diagnostics``)
    or by the harness (``code`` one of :class:`ResultCode`). The model reads
    each as a line ``[severity] message`` in the result's ``<harness>``
    block; the entry's ``data["diagnostics"]`` keeps them structured."""

    severity: Severity
    message: str
    code: str | None = None


@attrs.frozen
class ModelRef:
    """Which model a conversation talks to: ``provider:model_id``."""

    provider: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model_id}"


@attrs.frozen(kw_only=True)
class AgentConfig:
    """A conversation's agent settings, stored in the ``pi.agent`` document.

    ``tools`` is None for "every installed tool", or the exact names offered.
    ``tool_execution`` chooses parallel (default) or sequential tool batches.
    ``extensions`` is None for "every installed extension" (install order),
    or exactly the named ones, in that order: their tools, sections and hooks.
    ``context_window`` is the tokens ``model`` accepts, or None (unknown): the
    shell fills it from the model's adapter when the agent is configured (so
    it is journaled with the agent); with a window, threshold compaction runs.
    """

    model: ModelRef | None = None
    cwd: str | None = None
    instructions: str | None = None
    tools: tuple[str, ...] | None = None
    tool_execution: ExecutionMode = ExecutionMode.PARALLEL
    extensions: tuple[str, ...] | None = None
    context_window: int | None = None


@attrs.frozen(kw_only=True)
class Settings:
    """Host settings the core reads at its decisions. Never stored: a process
    passes them at open (and may change them), and each change is an event,
    so replay sees the same values.

    ``follow_up_mode`` / ``steering_mode``: ``one_at_a_time`` (default) places
    one queued item of that kind per boundary; ``all`` places every one.
    """

    follow_up_mode: QueueMode = QueueMode.ONE_AT_A_TIME
    steering_mode: QueueMode = QueueMode.ONE_AT_A_TIME
    retry: "RetryPolicy" = attrs.field(factory=lambda: RetryPolicy())
    #: Streamed partial answers are committed at most this often (ms).
    partial_interval_ms: int = 100
    compaction: "CompactionSettings" = attrs.field(factory=lambda: CompactionSettings())


@attrs.frozen(kw_only=True)
class CompactionSettings:
    """When the context is summarized (reference §3.13): above ``window -
    reserve_tokens`` before a request (blocking), above ``window -
    reserve_tokens - background_tokens`` after an answer (background), and on
    a provider's context-overflow error. ``keep_recent_tokens`` of the newest
    entries are kept verbatim."""

    enabled: bool = True
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000
    background_tokens: int = 32768


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Durable retry of retryable model errors: attempt ``n`` waits
    ``base_delay_ms * 2**(n-1)``, capped at ``max_delay_ms`` (a provider's
    Retry-After, when given, is used instead, under the same cap)."""

    enabled: bool = True
    max_retries: int = 3
    base_delay_ms: int = 2000
    max_delay_ms: int = 60000

    def delay_ms(self, attempt: int, retry_after_ms: int | None = None) -> int:
        if retry_after_ms is not None and retry_after_ms >= 0:
            return min(int(retry_after_ms), self.max_delay_ms)
        delay: int = self.base_delay_ms * 2 ** max(attempt - 1, 0)
        return min(delay, self.max_delay_ms)


#: The queue modes' wire values (kept for callers that list them).
QUEUE_MODES: tuple[str, ...] = tuple(QueueMode)


@attrs.frozen(kw_only=True)
class ToolCall:
    """One call the model asked for, as it appears in an assistant entry."""

    id: str
    name: str
    arguments: dict[str, Json] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@attrs.frozen(kw_only=True)
class Conversation:
    id: ConversationId
    #: The task that owns this conversation (sub-agents), or None.
    owner_task_id: TaskId | None = None
    #: A fork's parent conversation (fork.py), or None. A fork sees the
    #: parent's visible entries up to ``fork_at`` (read through the parent,
    #: never copied), then its own.
    parent_id: ConversationId | None = None
    #: The parent's entry the fork was made at.
    fork_at: EntryId | None = None


@attrs.frozen(kw_only=True)
class Entry:
    """One immutable transcript record."""

    id: EntryId
    conversation_id: ConversationId
    #: An :class:`EntryKind` value, or a host-defined kind (passive writes).
    kind: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For tool results: the call this answers and the tool's name.
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    #: For assistant entries: a :class:`StopReason`, or the provider's own
    #: (stop, length, ...).
    stop_reason: str | None = None
    usage: Usage | None = None
    #: The task whose commit appended the entry (None for admitted input).
    by_task_id: TaskId | None = None
    #: Milliseconds, from the event that caused the entry.
    at: int = 0
    data: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class Submission:
    """One accepted input (or passive write) and its settlement."""

    id: SubmissionId
    conversation_id: ConversationId
    type: SubmissionType
    status: SubmissionStatus
    request_id: str | None = None
    #: The user entry once placed (inputs) or the appended entry (writes).
    entry_id: EntryId | None = None
    #: The answering assistant entry (inputs that are done).
    answer_entry_id: EntryId | None = None
    #: Why it settled unanswered: a :class:`Reason` value (or the shell's
    #: model failure reason).
    reason: str | None = None
    detail: str | None = None

    @property
    def settled(self) -> bool:
        return self.status in SETTLED_SUBMISSION


@attrs.frozen(kw_only=True)
class Outcome:
    status: OutcomeStatus
    result: dict[str, Json] | None = None
    error: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class Task:
    """A unit of work with a durable execution state.

    ``checkpoint`` is a JSON object with a ``phase`` (the built-in kinds read
    it through typed records, see checkpoints.py); ``on`` lists the tasks a
    waiting task waits for (``policy``: see :class:`WaitPolicy`).
    """

    id: TaskId
    conversation_id: ConversationId
    kind: str
    version: int = 1
    input: dict[str, Json] = attrs.field(factory=dict)
    owner: TaskId | None = None
    background: bool = False
    abort_requested: bool = False
    status: TaskStatus = TaskStatus.PENDING
    checkpoint: dict[str, Json] = attrs.field(factory=dict)
    on: tuple[TaskId, ...] = ()
    policy: WaitPolicy = WaitPolicy.ALL_SETTLED
    outcome: Outcome | None = None
    memos: dict[str, Json] | None = None
    started_at: int | None = None
    ended_at: int | None = None

    @property
    def phase(self) -> str | None:
        p = self.checkpoint.get("phase")
        return p if isinstance(p, str) else None

    @property
    def live(self) -> bool:
        return self.status is not TaskStatus.TERMINAL


@attrs.frozen(kw_only=True)
class ToolInfo:
    """What the core knows of an installed tool: its replay promise and mode."""

    name: str
    # The shell's registry passes its (validated) strings; the converters
    # make them members, so the catalog compares and serializes one way.
    replay: Replay = attrs.field(default=Replay.UNSAFE, converter=Replay)
    execution_mode: ExecutionMode = attrs.field(default=ExecutionMode.PARALLEL, converter=ExecutionMode)
    #: It has a ``reconcile`` function: an interrupted unsafe call asks it
    #: whether the effect happened (reconcile.py) instead of settling blind.
    reconcile: bool = False


@attrs.frozen(kw_only=True)
class ExtensionInfo:
    """What the core knows of an installed extension: its tools and section
    keys, in order (which tools an agent's extension selection offers, and
    whether its system prompt needs host rendering)."""

    name: str
    tools: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    #: The names of its hooks (whether a step must ask the shell to run
    #: ``after_tools`` / ``on_abort`` hooks before it commits).
    hooks: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class TaskInfo:
    """What the core knows of an installed custom task definition."""

    kind: str
    version: int = 1
    phases: tuple[str, ...] = ()
    has_abort: bool = False
    has_migrate: bool = False


class CoreInvariantError(Exception):
    """Raised by the core when its own invariants are broken: always a bug."""
