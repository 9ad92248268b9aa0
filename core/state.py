"""The live state the core decides on, and its documents.

Theory of operation
-------------------
``State`` holds only what decisions need: every conversation's small documents
(``pi.agent``, ``pi.live``, ``pi.inbox``), the live (non-terminal) tasks, the
unsettled submissions, the tool catalog and the id/sequence counters. It never
holds transcript bodies or terminal records, so its size does not grow with
history: a step costs the same after 10 rounds or after 10,000.

Mappings are ordinary dicts treated as immutable: an update builds a new dict
(``{**old, key: value}``). Their size is the number of *live* things, which is
usually small, so copying them is cheap. Where many conversations are live
at once, the live tasks and the task index's mappings are persistent maps
(``immutables.Map``) from ``index.LARGE`` entries on: an update is
O(log n), not a copy of every live task (issue 11 item 1).

Documents
- ``pi.agent``: :class:`~pidurable.core.model.AgentConfig`.
- ``pi.live``: :class:`Live` - present ``run`` exactly while the conversation is
  busy; ``tools`` are the current round's slots.
- ``pi.inbox``: :class:`InboxItem`s waiting for a boundary, in id order.
- ``pi.context``: :class:`ContextDoc` - the current range start (the newest
  head marker's ``head``).
- (``pi.usage``: :class:`UsageDoc`.) The built-ins are stored as documents
  (builtins.py): ``ConvState.stored`` is what decides their next revision.
- host-defined documents (``define_doc``): :class:`DocumentState` in
  ``documents``, by address (scope, owner id, kind); their values are small
  JSON, changed by Chord ops (documents.py, chord.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from .model import (
    ExtensionInfo,
    AgentConfig,
    Conversation,
    ConversationId,
    EntryId,
    Json,
    Settings,
    Submission,
    SubmissionId,
    Task,
    TaskId,
    TaskInfo,
    ToolInfo,
    Usage,
)
from .index import TaskIndex, empty_index

AGENT_DOC = "pi.agent"
LIVE_DOC = "pi.live"
INBOX_DOC = "pi.inbox"
USAGE_DOC = "pi.usage"
CONTEXT_DOC = "pi.context"


@attrs.frozen(kw_only=True)
class RunInfo:
    """The run a busy conversation is working on."""

    #: The generation task currently responsible (handed G1 -> G2 -> ...).
    task_id: TaskId
    #: Placed input submissions this run settles.
    inputs: tuple[SubmissionId, ...]


class SlotStatus(enum.StrEnum):
    """Where one call of the current round is (moves: lifecycle.SLOT_TRANSITIONS)."""

    #: Its intent is not stored yet (task at ``call``, or no task yet).
    PENDING = "pending"
    #: Its ``execute`` intent is stored; the body runs (or will re-run).
    RUNNING = "running"
    #: Settled: its result entry exists (or its task ended without one).
    DONE = "done"


@attrs.frozen(kw_only=True)
class ToolSlot:
    """One call of the current tool round, in call order."""

    call_id: str
    name: str
    task_id: TaskId | None = None
    status: SlotStatus = SlotStatus.PENDING
    entry_id: EntryId | None = None
    #: The bounded tail of the running body's output (``ToolProgressed``),
    #: for watchers; dropped when the call settles or runs again.
    output: str | None = None
    #: What the settled call's result asks of the run (``ToolFinished.control``:
    #: terminate / handoff / add_tools), read when the round finishes
    #: (controls.py); only a call that completed has one.
    control: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class Live:
    run: RunInfo | None = None
    tools: tuple[ToolSlot, ...] | None = None
    attempt: int | None = None
    #: The streamed partial answer so far (throttled commits); becomes an
    #: ``aborted`` assistant entry if the request does not complete.
    partial: str | None = None
    #: A retryable error is being waited out: when, and what it was.
    retry_at: int | None = None
    retry_error: str | None = None
    #: A deferred response is being polled: the next poll time.
    poll_at: int | None = None


@attrs.frozen(kw_only=True)
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            calls=self.calls + other.calls,
        )

    @classmethod
    def one_call(cls, usage: Usage | None) -> UsageTotals:
        """The totals of one call that reported ``usage`` (or nothing)."""
        if usage is None:
            return cls(calls=1)
        return cls(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, calls=1)


@attrs.frozen(kw_only=True)
class UsageDoc:
    """``pi.usage``: tokens per ``provider:model`` and calls per tool."""

    models: Mapping[str, UsageTotals] = attrs.field(factory=dict)
    tools: Mapping[str, UsageTotals] = attrs.field(factory=dict)


class InboxMode(enum.StrEnum):
    """What a queued item is, and so which boundary places it."""

    #: An input placed at a final boundary (after the run answers).
    FOLLOW_UP = "follow_up"
    #: An input placed at the next boundary (after the current tool round).
    STEER = "steer"
    #: A passive write, placed at every boundary before user items.
    WRITE = "write"


@attrs.frozen(kw_only=True)
class InboxItem:
    submission_id: SubmissionId
    mode: InboxMode
    content: str
    #: For writes: the entry kind and data to append.
    kind: str | None = None
    data: dict[str, Json] | None = None


@attrs.frozen(kw_only=True)
class SystemSection:
    """One rendered system-prompt section (its text already tagged)."""

    key: str
    text: str


@attrs.frozen(kw_only=True)
class ContextDoc:
    """``pi.context``: where the model context starts (compaction.py) and
    what system prompt and tools the model was last shown (system.py)."""

    #: The current range start: the ``head`` of the newest head marker
    #: placed (None: the transcript start). A write whose numeric head is
    #: older is ``stale``.
    head: EntryId | None = None
    #: The shown system sections, in order.
    sections: tuple[SystemSection, ...] = ()
    #: The shown (offered) tool names, in order.
    tools: tuple[str, ...] = ()
    #: The newest system entry (None: none yet).
    system_entry: EntryId | None = None


@attrs.frozen(kw_only=True)
class ConvState:
    conversation: Conversation
    agent: AgentConfig = AgentConfig()
    live: Live = Live()
    inbox: tuple[InboxItem, ...] = ()
    usage: UsageDoc = UsageDoc()
    context: ContextDoc = ContextDoc()
    #: The built-ins stored (builtins.py): kind -> deltas after its newest
    #: base. A kind not here is not stored (its value is the initial one).
    stored: Mapping[str, int] = attrs.field(factory=dict)

    @property
    def id(self) -> ConversationId:
        return self.conversation.id

    @property
    def busy(self) -> bool:
        return self.live.run is not None


class DocScope(enum.StrEnum):
    """What a host-defined document belongs to (and lives as long as)."""

    #: A conversation (lives as long as the store).
    CONVERSATION = "conversation"
    #: A task: retired in the commit that makes the task terminal.
    TASK = "task"


class DocHistory(enum.StrEnum):
    """Which revisions storage keeps."""

    #: Only the newest base and the deltas after it (older ones reclaimed).
    LATEST = "latest"
    #: Every revision: the value at any commit can be read back.
    REWINDABLE = "rewindable"


class ForkPolicy(enum.StrEnum):
    """What a fork of the conversation gets of the document."""

    #: The parent's value as of the fork point (needs ``rewindable``).
    AS_OF = "as_of"
    #: The parent's current value.
    CURRENT = "current"
    #: Nothing: the definition's initial value on first use.
    INITIAL = "initial"


#: A document's address: (scope, owner id, kind).
DocKey = tuple[DocScope, int, str]


@attrs.frozen(kw_only=True)
class DocumentState:
    """A live host-defined document: its current value and what decides its
    next revision (documents.py)."""

    #: The incarnation id (from the global id counter).
    id: int
    scope: DocScope
    owner: int
    kind: str
    #: The definition version the stored value has.
    version: int
    history: DocHistory = DocHistory.REWINDABLE
    fork: ForkPolicy = ForkPolicy.AS_OF
    value: Json = None
    #: Deltas stored since the newest base.
    deltas: int = 0

    @property
    def key(self) -> DocKey:
        return (self.scope, self.owner, self.kind)


@attrs.frozen(kw_only=True)
class DocumentChange:
    """One document change as the shell resolved it (the update function
    ran on the committed value, the result was validated, the difference
    taken): ``ops`` from the current value (or ``["r", value]`` for a new
    document or a new version)."""

    scope: DocScope
    owner: int
    kind: str
    version: int
    history: DocHistory = DocHistory.REWINDABLE
    fork: ForkPolicy = ForkPolicy.AS_OF
    ops: tuple[Json, ...] = ()

    @property
    def key(self) -> DocKey:
        return (self.scope, self.owner, self.kind)


def _plain(value: object) -> object:
    """What a State's ``tasks`` compare as: a mapping as a dict (a Map and
    a dict of the same tasks are equal), anything else as it is."""
    return dict(value) if isinstance(value, Mapping) else value


@attrs.frozen(kw_only=True)
class State:
    #: The next id to hand out (global namespace: conversations, entries,
    #: tasks, submissions). Id 1 is reserved for the root conversation.
    next_id: int = 2
    #: The sequence number the next Commit will carry.
    next_seq: int = 1
    conversations: Mapping[ConversationId, ConvState] = attrs.field(factory=dict)
    #: Live (non-terminal) tasks only. Many of them (``index.LARGE`` and
    #: more) are a persistent map (``immutables.Map``, a HAMT), so a step
    #: that puts a task builds the new map in O(log n) instead of copying
    #: every live task (issue 11 item 1: 1,000 conversations at once copied
    #: ~4,000 tasks at every step); a few are a dict (copied on the draft's
    #: first put: cheaper while small). Compared as a dict.
    tasks: Mapping[TaskId, Task] = attrs.field(factory=dict, eq=_plain)
    #: Unsettled submissions only.
    submissions: Mapping[SubmissionId, Submission] = attrs.field(factory=dict)
    catalog: Mapping[str, ToolInfo] = attrs.field(factory=dict)
    #: Installed custom task definitions by kind.
    task_catalog: Mapping[str, TaskInfo] = attrs.field(factory=dict)
    #: The installed extensions, in install order (system.py).
    extensions: tuple[ExtensionInfo, ...] = ()
    #: Custom tasks whose phase (or abort handler, or migration) is out in the
    #: shell right now; their status may change (runtime.commit) before the
    #: invocation ends, so status alone cannot say "in flight".
    invocations: frozenset[TaskId] = frozenset()
    #: task id -> installed version whose migration of it failed (blocked
    #: until a different definition is installed).
    failed_migrations: Mapping[TaskId, int] = attrs.field(factory=dict)
    #: False until the host resumes scheduling (Harness.open(resume=False)).
    scheduling: bool = False
    settings: Settings = Settings()
    #: True once an Opened event was applied.
    opened: bool = False
    #: Live host-defined documents by address (documents.py).
    documents: Mapping[DocKey, DocumentState] = attrs.field(factory=dict)
    #: How many settled conversations stay held once they settle (holding.py:
    #: beyond it the least recently changed is evicted; storage keeps it and
    #: ``ConversationsLoaded`` brings it back). None: every conversation is
    #: held (what an ``Opened`` journaled before on-demand loading says).
    keep_settled: int | None = None
    #: The held conversations that are settled, least recently changed first.
    settled: tuple[ConversationId, ...] = ()
    #: Derived indexes over ``tasks``/``conversations`` (index.py): kept in
    #: step by the draft, rebuilt by ``Opened``; no part of equality.
    task_index: TaskIndex = attrs.field(factory=empty_index, eq=False, repr=False)

    @property
    def index(self) -> TaskIndex:
        return self.task_index
