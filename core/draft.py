"""The draft of one step: ``Tx``, the builder every handler writes into.

Theory of operation
-------------------
``step`` makes one ``Tx`` from the input state and the event's ``now``, hands it
to the event's handler and to the scheduling pass, and turns it into a frozen
:class:`~pidurable.core.effects.Step` with :meth:`Tx.finish`. Handlers record
decisions here: each ``put_*``/``set_*`` both updates the draft state and
records the write (later writes of the same record replace earlier ones but
keep their place, so a commit lists records in the order they were first
touched); acts and replies are queued. ``finish`` emits ``[Commit(all writes),
acts..., replies...]``: every intent is durable before any act starts, and a
host hears an answer only once it is durable.

Invariants: a ``Tx`` never escapes ``step``; the input state is never mutated
(its mappings are copied on the first write); the draft's fields are exactly
the fields of :class:`~pidurable.core.state.State` except the two that only
``finish`` and ``on_opened`` set (``next_seq``, ``opened``).

Must not touch: decisions. This module knows records and writes, not rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from immutables import Map

from .record_makers import made_State, new_Commit, new_PutEntry, new_PutTask, new_Step  # (X(...) without the type call's dict: issue 11 item 2)
from .builtins import BUILTINS, created, revise, staged_write
from .records import spelt_out
from .documents import retire_task_documents
from .effects import (
    Accepted,
    Effect,
    PutDocument,
    PutConversation,
    PutEntry,
    PutSubmission,
    PutTask,
    Refusal,
    Refused,
    Respond,
    Step,
    WRITE_KEYS,
    Write,
)
from .model import (
    ExtensionInfo,
    AgentConfig,
    ConversationId,
    Entry,
    Settings,
    Submission,
    SubmissionId,
    Task,
    TaskId,
    TaskInfo,
    TaskStatus,
    ToolInfo,
)
from . import index as index_module
from .index import IndexDraft, TaskIndex
from .state import (
    AGENT_DOC,
    CONTEXT_DOC,
    INBOX_DOC,
    LIVE_DOC,
    USAGE_DOC,
    ContextDoc,
    ConvState,
    DocKey,
    DocumentState,
    InboxItem,
    Live,
    State,
    UsageDoc,
)

_TERMINAL = TaskStatus.TERMINAL  # read once: put_task runs several times a step
_TASK_WRITE = WRITE_KEYS[PutTask][0]  # the key put_task writes under (and the task's id)
_ENTRY_WRITE = WRITE_KEYS[PutEntry][0]  # the same for put_entry (and the entry's id)
_DOC_WRITE = WRITE_KEYS[PutDocument][0]  # the same for a built-in's revision (and its document id)

#: Live's fields, as set_live compares them spelt out (checked here).
_LIVE_FIELDS = ("run", "tools", "attempt", "partial", "retry_at", "retry_error", "poll_at")
spelt_out(Live, _LIVE_FIELDS)
if not all(f.eq and getattr(f, "eq_key", None) is None for f in attrs.fields(Live)):
    raise AssertionError("Live compares a field specially: set_live's spelt-out comparison would not be ==")

#: State fields the draft does not carry: ``next_seq`` is advanced by
#: ``finish`` (one per Commit), ``opened`` only by ``on_opened``.
_NOT_DRAFTED = frozenset({"next_seq", "opened"})
#: The state fields the draft carries, derived from State itself.
DRAFT_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(State) if f.name not in _NOT_DRAFTED)
#: State's fields, in the order ``_freeze`` gives them (checked here: a field
#: added to State must be added there too).
spelt_out(State, (
    "next_id", "next_seq", "conversations", "tasks", "submissions", "catalog", "task_catalog", "extensions",
    "invocations", "failed_migrations", "scheduling", "settings", "opened", "documents", "keep_settled",
    "settled", "task_index",
))


class Tx:
    """The working draft of one step (local to one ``step`` call)."""

    # The drafted State fields, as plain attributes (typed here for mypy;
    # a test checks these names are exactly DRAFT_FIELDS).
    next_id: int
    conversations: Mapping[ConversationId, ConvState]
    tasks: Mapping[TaskId, Task]
    submissions: Mapping[SubmissionId, Submission]
    catalog: Mapping[str, ToolInfo]
    task_catalog: Mapping[str, TaskInfo]
    extensions: tuple[ExtensionInfo, ...]
    invocations: frozenset[TaskId]
    failed_migrations: Mapping[TaskId, int]
    scheduling: bool
    settings: Settings
    documents: Mapping[DocKey, DocumentState]
    keep_settled: int | None
    settled: tuple[ConversationId, ...]
    task_index: TaskIndex
    #: The task the scheduling pass is running as the last of its ready
    #: tasks (scheduling.run_pass sets it around that one dispatch; None
    #: otherwise): generation.py's hand-over reads it.
    alone: TaskId | None = None

    def __init__(self, state: State, now: int) -> None:
        self.now = now
        # (a built-in's revision holds its place here as its staged list,
        # built into its write by finish: see stage)
        self._writes: dict[tuple[str, int], Write | list[Any]] = {}
        #: The built-ins' revisions this step stages, by document id (builtins.revise).
        self.staged: dict[int, list[Any]] = {}
        self._acts: list[Effect] = []
        self._replies: list[Effect] = []
        #: The rules that fired (see ``Step.rules``): set by ``step`` and
        #: ``Machine.run``; read by nothing in the core.
        self.rules: list[str] = []
        self._load(state)  # (the state setter's work, without a property call)

    # The draft keeps the state's parts as plain fields, copied on first
    # write (the input State's mappings are never mutated), and builds a new
    # State once, in finish(): a step costs O(live), not O(puts x live).
    @property
    def state(self) -> State:
        return self._freeze(self._base.next_seq)

    @state.setter
    def state(self, state: State) -> None:
        self._load(state)

    def _load(self, state: State) -> None:
        self._base = state
        # Each drafted field read by name (tests/core/test_draft.py checks
        # every field lands where it belongs): a read of a State slot is a
        # specialised instruction, where one attrgetter of all fifteen is
        # fifteen generic lookups, and a loop of setattr costs a step ten
        # times as much. Not __dict__.update: touching __dict__ would turn
        # off CPython's fast attribute access for every later tx.<field>.
        self.next_id = state.next_id
        self.conversations = state.conversations
        self.tasks = state.tasks
        self.submissions = state.submissions
        self.catalog = state.catalog
        self.task_catalog = state.task_catalog
        self.extensions = state.extensions
        self.invocations = state.invocations
        self.failed_migrations = state.failed_migrations
        self.scheduling = state.scheduling
        self.settings = state.settings
        self.documents = state.documents
        self.keep_settled = state.keep_settled
        self.settled = state.settled
        self.task_index = state.task_index
        self._own: set[str] = set()
        #: The step's working index (index.py), kept by put_task and
        #: put_conversation: a plain attribute, not made on first use - the
        #: scheduling pass and most puts read it (a property call each time).
        self.index = IndexDraft(self.task_index)
        #: Tasks this step changed, or whose readiness a change may have
        #: changed (waiters of a task that ended, its owner): what the
        #: scheduling pass looks at (scheduling.py), unless ``rescan``.
        self.touched: set[TaskId] = set()
        #: Look at every live task in the next pass (open, registry change).
        self.rescan = False
        #: Conversations this step changed, or whose work may have ended: the
        #: ones the end-of-step pass may find settled (holding.py).
        self.changed: set[ConversationId] = set()

    def _freeze(self, next_seq: int) -> State:
        """The draft as a State whose ``next_seq`` is ``next_seq``."""
        self.task_index = self.index.freeze()  # (its own base when nothing changed)
        # Every field by position, in State's order (DRAFT_FIELDS and the two
        # the draft does not carry; a dict of the drafted fields and its
        # unpacking cost a step as much again; 17 named would be a dict too:
        # records.py; tests/core/test_draft.py checks every field lands where
        # it belongs).
        return made_State(
            self.next_id,
            next_seq,
            self.conversations,
            self.tasks,
            self.submissions,
            self.catalog,
            self.task_catalog,
            self.extensions,
            self.invocations,
            self.failed_migrations,
            self.scheduling,
            self.settings,
            self._base.opened,
            self.documents,
            self.keep_settled,
            self.settled,
            self.task_index,
        )

    def touch(self, task_id: TaskId) -> None:
        """The scheduling pass should look at ``task_id`` again."""
        self.touched.add(task_id)

    def _owned(self, name: str) -> dict[Any, Any]:
        """The draft's own (mutable) copy of the mapping field ``name``."""
        if name not in self._own:
            setattr(self, name, dict(getattr(self, name)))
            self._own.add(name)
        return getattr(self, name)  # type: ignore[no-any-return]

    # ids -------------------------------------------------------------------
    def alloc_id(self) -> int:
        i = self.next_id
        self.next_id = i + 1
        return i

    # records ---------------------------------------------------------------
    def write(self, w: Write) -> None:
        name, read = WRITE_KEYS[type(w)]  # write_key, without a call: most steps write several
        self._writes[(name, read(w))] = w

    def put_task(self, task: Task, *, durable: bool = True) -> None:
        """Replace a task in the draft; ``durable=False`` changes only memory
        (a reservation whose intent is already stored)."""
        # small: the draft's own dict (copied on the first put of the step);
        # large: a new persistent map per put, O(log n) (state.py, index.LARGE)
        tasks: Any = self.tasks  # (a Map or a dict: both read alike, each written its way)
        persistent = type(tasks) is Map
        if persistent:
            if len(tasks) < index_module.LARGE // 2:  # shrunk: a dict again
                tasks = self.tasks = dict(tasks.items())
                self._own.add("tasks")
                persistent = False
        elif "tasks" not in self._own:
            if len(tasks) < index_module.LARGE:
                tasks = self.tasks = dict(tasks)
                self._own.add("tasks")
            else:
                tasks = Map(tasks)
                persistent = True
        tid = task.id
        old = tasks.get(tid)
        touched = self.touched
        touched.add(tid)
        # three cases, each telling the index only its own (index.py)
        if task.status is _TERMINAL:
            if old is not None:
                # whoever waited on it, owned it or owns its conversation may now run
                ix = self.index
                waiters = ix.waiters.get(tid)
                if waiters:
                    touched.update(waiters)
                owner = task.owner
                if owner is None:
                    conv = self.conversations.get(task.conversation_id)
                    owner = conv.conversation.owner_task_id if conv is not None else None
                if owner is not None:
                    touched.add(owner)
                changed = self.changed
                changed.add(task.conversation_id)
                owned = ix.owned_conversations.get(tid)
                if owned:
                    changed.update(owned)
                ix.dropped(old)
                if persistent:
                    self.tasks = tasks.delete(tid)
                else:
                    del tasks[tid]
            elif persistent:
                self.tasks = tasks
            if self.documents:
                retire_task_documents(self, tid)
        elif old is None:
            self.changed.add(task.conversation_id)  # it holds its conversation now (holding.py)
            self.index.added(task)
            if persistent:
                self.tasks = tasks.set(tid, task)
            else:
                tasks[tid] = task
        else:
            self.index.moved(old, task)
            if persistent:
                self.tasks = tasks.set(tid, task)
            else:
                tasks[tid] = task
        if durable:
            self._writes[(_TASK_WRITE, tid)] = new_PutTask(task=task)  # write(), without its lookups

    def put_submission(self, sub: Submission) -> None:
        subs = self._owned("submissions")
        if sub.settled:
            subs.pop(sub.id, None)
        else:
            subs[sub.id] = sub
        self.write(PutSubmission(submission=sub))

    def put_entry(self, entry: Entry) -> None:
        self._writes[(_ENTRY_WRITE, entry.id)] = new_PutEntry(entry=entry)  # write(), without its lookups

    def put_conversation(self, conv: ConvState) -> None:
        convs = self._owned("conversations")
        old = convs.get(conv.id)
        self.index.conversation(
            conv.id, old.conversation.owner_task_id if old is not None else None, conv.conversation.owner_task_id
        )
        convs[conv.id] = conv
        self.changed.add(conv.id)
        self.write(PutConversation(conversation=conv.conversation))
        convs[conv.id] = created(self, conv)  # its built-in documents (builtins.py)

    # built-in documents: a revision only when they change (builtins.py) ----
    def _set_builtin(self, cid: ConversationId, kind: str, value: Any, within: tuple[str | int, ...] = ()) -> None:
        conv = self.conversations[cid]
        if getattr(conv, BUILTINS[kind].field) == value:
            return
        self._revise(cid, conv, kind, value, within)

    def _revise(
        self, cid: ConversationId, conv: ConvState, kind: str, value: Any, within: tuple[str | int, ...], ops: list[Any] | None = None
    ) -> None:
        """Store the built-in ``kind`` of ``conv``, changed to ``value`` (``within``, ``ops``: builtins.revise)."""
        conv = revise(self, conv, kind, value, within, ops)
        convs: dict[ConversationId, ConvState]
        if "conversations" in self._own:  # (_owned, inline: most steps revise a document or two)
            convs = self.conversations  # type: ignore[assignment]
        else:
            convs = self.conversations = dict(self.conversations)
            self._own.add("conversations")
        convs[cid] = conv
        self.changed.add(cid)

    def stage(self, document_id: int, staged: list[Any]) -> None:
        """Stage a built-in's revision (builtins.revise fills ``staged`` in
        place as later changes of the step join it): it takes its place in
        the commit now, and is built once, in ``finish``."""
        self.staged[document_id] = staged
        self._writes[(_DOC_WRITE, document_id)] = staged

    def set_live(self, cid: ConversationId, live: Live, within: tuple[str | int, ...] = (), *, changed: bool = False) -> None:
        """``within``: the path of the one part that changed, if known
        (builtins.revise); ``changed``: known to differ from the
        conversation's (a slot's status moved): not compared."""
        conv = self.conversations[cid]
        old = conv.live
        # ``old == live`` spelt out (_LIVE_FIELDS), the run a change kept (the
        # same object) taken as equal without RunInfo.__eq__, a Python call on
        # every set_live where attrs's __eq__ compares it: the same answer
        # (a RunInfo of ids equals itself)
        if not changed and (
            (old.run is live.run or old.run == live.run)
            and old.tools == live.tools
            and old.attempt == live.attempt
            and old.partial == live.partial
            and old.retry_at == live.retry_at
            and old.retry_error == live.retry_error
            and old.poll_at == live.poll_at
        ):
            return
        self._revise(cid, conv, LIVE_DOC, live, within)

    def set_inbox(self, cid: ConversationId, items: tuple[InboxItem, ...]) -> None:
        self._set_builtin(cid, INBOX_DOC, items)

    def set_usage(self, cid: ConversationId, usage: UsageDoc, *, changed: bool = False, ops: list[Any] | None = None) -> None:
        """``changed``: known to differ from the conversation's (a call
        counted): not compared; ``ops``: its delta's, if found (builtins.revise)."""
        if changed:
            self._revise(cid, self.conversations[cid], USAGE_DOC, usage, (), ops)
        else:
            self._set_builtin(cid, USAGE_DOC, usage)

    def set_context(self, cid: ConversationId, context: ContextDoc) -> None:
        self._set_builtin(cid, CONTEXT_DOC, context)

    def set_agent(self, cid: ConversationId, agent: AgentConfig) -> None:
        self._set_builtin(cid, AGENT_DOC, agent)

    def put_document(self, key: DocKey, doc: DocumentState | None, write: PutDocument | None) -> None:
        """Replace (``None``: retire) a host-defined document; ``write`` is
        its revision for this commit (documents.py decides it)."""
        docs = self._owned("documents")
        if doc is None:
            docs.pop(key, None)
        else:
            docs[key] = doc
        if write is not None:
            self.write(write)

    def document_write(self, document_id: int) -> PutDocument | None:
        """The revision of ``document_id`` this step already stages, if any."""
        w = self._writes.get(("document", document_id))
        return w if isinstance(w, PutDocument) else None

    # effects ---------------------------------------------------------------
    def act(self, effect: Effect) -> None:
        self._acts.append(effect)

    def respond(self, ticket: int, value: int | None = None, *, data: Any = None) -> None:
        """Accept the host request ``ticket`` (answered after the commit)."""
        self._replies.append(Respond(ticket=ticket, reply=Accepted(value=value, data=data)))

    def refuse(self, ticket: int, kind: Refusal, message: str) -> None:
        """Refuse the host request ``ticket``; the handler writes nothing."""
        self._replies.append(Respond(ticket=ticket, reply=Refused(kind=kind, message=message)))

    def take_effects(self) -> list[Effect]:
        """The acts and replies queued so far, in that order, and none queued
        any more (``step_many``: each event's, in event order)."""
        taken = self._acts + self._replies
        self._acts, self._replies = [], []
        return taken

    def give_effects(self, effects: list[Effect]) -> None:
        """Queue ``effects`` (``take_effects``'s) as the acts ``finish`` emits."""
        self._acts = effects

    def finish(self) -> Step:
        """The frozen result: ``[Commit(writes)?, acts..., replies...]``."""
        seq = self._base.next_seq
        writes = self._writes
        for did, staged in self.staged.items():  # each staged revision built once, in its place
            writes[(_DOC_WRITE, did)] = staged_write(did, staged)
        if writes:  # the State is built once, with the sequence number the Commit takes
            done: tuple[Write, ...] = tuple(writes.values())  # type: ignore[arg-type]  # (every staged list replaced above; no cast(): a Python call)
            effects: tuple[Effect, ...] = (new_Commit(seq=seq, writes=done), *self._acts, *self._replies)
            seq += 1
        else:
            effects = (*self._acts, *self._replies)
        return new_Step(state=self._freeze(seq), effects=effects, rules=tuple(self.rules))
