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
    #: Has an outcome but still owns live work (cancellation, issue 3).
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
    """

    model: ModelRef | None = None
    cwd: str | None = None
    instructions: str | None = None
    tools: tuple[str, ...] | None = None
    tool_execution: str = "parallel"


@attrs.frozen(kw_only=True)
class Settings:
    """Host settings the core reads at its decisions. Never stored: a process
    passes them at open (and may change them), and each change is an event,
    so replay sees the same values.

    ``follow_up_mode`` / ``steering_mode``: ``one_at_a_time`` (default) places
    one queued item of that kind per boundary; ``all`` places every one.
    """

    follow_up_mode: str = "one_at_a_time"
    steering_mode: str = "one_at_a_time"
    retry: "RetryPolicy" = attrs.field(factory=lambda: RetryPolicy())
    #: Streamed partial answers are committed at most this often (ms).
    partial_interval_ms: int = 100


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


QUEUE_MODES = ("one_at_a_time", "all")


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
    #: For assistant entries: stop, tool_use, length, error, aborted.
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
    type: str  # "input" | "write"
    status: SubmissionStatus
    request_id: str | None = None
    #: The user entry once placed (inputs) or the appended entry (writes).
    entry_id: EntryId | None = None
    #: The answering assistant entry (inputs that are done).
    answer_entry_id: EntryId | None = None
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

    ``checkpoint`` is a JSON object with a ``phase``; ``on`` lists the tasks a
    waiting task waits for (policy ``allSettled``: any outcome releases it).
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
    policy: str = "allSettled"
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
    replay: str = "unsafe"  # "safe" | "unsafe"
    execution_mode: str = "parallel"  # "parallel" | "sequential"


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
