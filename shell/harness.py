"""The public API: ``Harness``, ``Conversation``, ``SubmissionHandle``.

Handles are thin: every call either sends an event to the reducer and waits
for its answer (``submit``, ``root``, ``configure``) or reads committed state
(``transcript``, ``record``, ``task``...). Nothing a host sees was not durably
committed first. Which reads come from the reducer's ``State`` and which from
storage is decided in docs/concepts.md ("One read model"): liveness questions
(``idle``, ``inspect``, the waits) from ``State``, records and history from
storage.

Every read is ``async`` although today's stores answer without awaiting: the
API (API.md) names them awaited, and a store over the network (PostgreSQL)
will await I/O there; making them sync now would break every host when it
does. Calls that only send an event (``resume``, ``update_settings``) are
async for the same reason: their signature must not depend on the backend.

The facade reaches the loop (``loop.py``) and never the other way round: the
loop and the interpreters see this object only as the opaque value host code
is handed (``ToolCallContext.harness``, ``HookContext.harness``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio

from pidurable.core.context import Message, context_messages
from pidurable.core.inbox import HEAD_SELF
from pidurable.core.effects import Respond
from pidurable.core.ownership import conversation_is_idle
from pidurable.core.scheduling import TaskInspection, inspect_tasks
from pidurable.core.events import (
    CompactionRequested,
    AgentConfigurationRequested,
    ConversationAbortRequested,
    ConversationCreationRequested,
    TaskAbortRequested,
    InputSubmitted,
    Opened,
    RegistryChanged,
    Resumed,
    RootRequested,
    SettingsChanged,
    SubmissionAbortRequested,
    WriteSubmitted,
)
from pidurable.core.model import (
    AgentConfig,
    EntryKind,
    ConversationId,
    Entry,
    Settings,
    Submission,
    SubmissionAbortResult,
    SubmissionId,
    Task,
    TaskAbortResult,
    TaskId,
)
from pidurable.core.state import AGENT_DOC, CONTEXT_DOC, USAGE_DOC, UsageDoc, UsageTotals
from pidurable.core.system import system_text

from .env import kill_leftover_processes
from .host_input import (
    check_agent,
    check_keep_fits,
    check_choice,
    check_id,
    check_id_number,
    check_json_object,
    check_settings_object,
    with_window,
    check_text,
)
from .errors import ConversationBusy, HarnessClosed, InvalidInput, NotFound, accepted
from .interpreters import Interpreters
from .interpreters.hooks import HookReport, log_report
from .interpreters.ports import HostPort
from .loading import KEEP_SETTLED
from .loop import Hooks, Loop
from .observe import Observer
from .providers.base import Models
from .registry import Registry
from .storage.base import Storage
from .tasks import create_task
from .conversation import Conversation
from .watch import TaskGraphViews, watch_task_graph
from .submissions import Input, SubmissionHandle, Write, _live, _unwrap, abort_submission

__all__ = ["Conversation", "Input", "SubmissionHandle", "Write", "abort_submission"]

# Records returned to hosts are the core's frozen attrs records.
EntryRecord = Entry
TaskRecord = Task
SubmissionRecord = Submission




class Harness:
    """An open store plus the loop that drives it. Use ``Harness.open``."""

    def __init__(self, loop: Loop, registry: Registry) -> None:
        self._rt = loop
        #: what host code started from here reaches (``create_task``)
        self._host = HostPort(loop=loop, tasks=loop.storage, registry=registry, harness=self, documents=loop.documents)
        loop.documents.registry = registry

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        storage: Storage,
        *,
        models: Models | None,
        registry: Registry,
        env: object = None,
        settings: Settings | None = None,
        resume: bool = True,
        hooks: Hooks | None = None,
        clock: Callable[[], int] | None = None,
        on_report: Callable[[HookReport], None] | None = None,
        tracer: object = None,
    ) -> AsyncIterator["Harness"]:
        """Open the store, run recovery (running -> pending), and, if
        ``resume``, start scheduling. Leaving the block cancels in-flight
        invocations; their tasks stay as stored, for the next open.
        ``on_report(HookReport)`` receives every hook failure (default: the
        ``pidurable`` logger at WARNING). ``tracer``: an OpenTelemetry
        tracer for the run / model request / tool spans (default: the global
        provider's, when ``opentelemetry-api`` is installed; observe.py)."""
        if not all(callable(getattr(storage, name, None)) for name in ("load_live", "commit_many", "close")):
            raise InvalidInput(
                "storage must be a pidurable store (open_sqlite_storage, open_jsonl_storage, MemoryStorage, or one "
                f"of the Storage protocol), not {type(storage).__name__}"
            )
        try:  # the harness owns the storage from here: close it on every path
            if type(resume) is not bool:  # ("no" is truthy: refused, not taken for True)
                raise InvalidInput(f"resume must be True or False, not {type(resume).__name__}")
            if not isinstance(registry, Registry):
                raise InvalidInput("registry must be a pidurable.shell.Registry")
            if on_report is not None and not callable(on_report):
                raise InvalidInput("on_report must be a function HookReport -> None")
            observer = Observer(tracer) if tracer is not None else None
            settings = settings if settings is not None else Settings()
            check_settings_object(settings)
            loaded = storage.load_live()  # live work only: settled conversations are read on demand (loading.py)
            kill_leftover_processes(loaded.tasks)
        except BaseException:
            storage.close()
            raise
        rt = Loop(storage=storage, store_id=loaded.store_id, hooks=hooks, clock=clock)
        if observer is not None:
            rt.observer = observer
        rt.windowed = partial(_windowed, models, rt)
        harness = cls(rt, registry)
        interpreters = Interpreters.build(
            host=harness._host,
            entries=storage,
            context=rt.context,
            models=models,
            env=env,
            store_id=loaded.store_id,
            on_report=on_report if on_report is not None else log_report,
        )
        unsubscribe = registry.subscribe(
            lambda: rt.send(
                RegistryChanged(
                    now=rt.clock(),
                    catalog=registry.catalog(),
                    task_catalog=registry.task_catalog(),
                    extensions=registry.extension_catalog(),
                )
            )
        )
        try:
            async with trio.open_nursery() as nursery:
                rt.start(nursery, interpreters)
                await nursery.start(rt.run)
                # Step Opened inline: when open() returns, the state is loaded
                # and recovery is committed (reads like inspect() see it).
                await rt.handle(
                    Opened(
                        now=rt.clock(),
                        next_id=loaded.next_id,
                        next_seq=loaded.next_seq,
                        conversations=loaded.conversations,
                        tasks=loaded.tasks,
                        submissions=loaded.submissions,
                        catalog=registry.catalog(),
                        resume=resume,
                        settings=settings,
                        task_catalog=registry.task_catalog(),
                        extensions=registry.extension_catalog(),
                        documents=loaded.documents,
                        keep_settled=KEEP_SETTLED,
                    )
                )
                try:
                    yield harness
                finally:
                    rt.close()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            leaves = _leaves(group)
            if len(leaves) == 1:
                raise leaves[0] from None
            raise
        finally:
            rt.close()
            unsubscribe()
            storage.close()

    # --- scheduling -------------------------------------------------------------
    async def resume(self) -> None:
        """Start scheduling (after ``Harness.open(..., resume=False)``)."""
        _live(self._rt)
        self._rt.send(Resumed(now=self._rt.clock()))

    # --- conversations ------------------------------------------------------------
    async def root(self, agent: AgentConfig | None = None) -> Conversation:
        """The root conversation (id 1), created on first call with ``agent``."""
        _live(self._rt)
        agent = self._rt.windowed(check_agent(agent))
        resp = await self._rt.request(lambda ticket, now: RootRequested(now=now, ticket=ticket, agent=agent))
        return Conversation(ConversationId(_unwrap(resp)), self._rt)

    async def conversation(self, conversation_id: int) -> Conversation | None:
        _live(self._rt)
        check_id_number(conversation_id, "conversation_id")
        if self._rt.storage.conversation(ConversationId(conversation_id)) is None:
            return None
        return Conversation(ConversationId(conversation_id), self._rt)

    async def conversations(self) -> list[Conversation]:
        _live(self._rt)
        return [Conversation(c.id, self._rt) for c in self._rt.storage.conversations()]

    # --- settings -------------------------------------------------------------------
    async def update_settings(self, settings: Settings) -> None:
        """Replace the host settings (queue modes); read at the next decision."""
        _live(self._rt)
        check_settings_object(settings)
        held = self._rt.state.conversations
        for cid, conv in held.items():
            check_keep_fits(conv.agent.context_window, settings.compaction.keep_recent_tokens, f"conversation {cid} agent")
        for c in self._rt.storage.conversations():  # the settled ones the core does not hold (loading.py)
            agent = None if c.id in held else self._rt.storage.document(c.id, AGENT_DOC)
            if isinstance(agent, AgentConfig):
                check_keep_fits(agent.context_window, settings.compaction.keep_recent_tokens, f"conversation {c.id} agent")
        self._rt.send(SettingsChanged(now=self._rt.clock(), settings=settings))

    # --- submissions and tasks --------------------------------------------------------
    async def abort_submission(self, submission_id: int, conversation_id: int | None = None) -> SubmissionAbortResult:
        """``aborted`` (was queued: now ``unanswered/aborted``),
        ``already_placed``, ``settled`` or ``not_found``."""
        _live(self._rt)
        check_id_number(submission_id, "submission_id")
        if conversation_id is not None:
            check_id_number(conversation_id, "conversation_id")
        return await abort_submission(self._rt, submission_id, conversation_id)

    async def submission(self, submission_id: int) -> SubmissionHandle | None:
        _live(self._rt)
        check_id_number(submission_id, "submission_id")
        if self._rt.storage.submission(SubmissionId(submission_id)) is None:
            return None
        return SubmissionHandle(SubmissionId(submission_id), self._rt)

    async def entry(self, entry_id: int) -> Entry | None:
        _live(self._rt)
        check_id_number(entry_id, "entry_id")
        return self._rt.storage.entry(entry_id)

    async def task(self, task_id: int) -> Task | None:
        _live(self._rt)
        check_id_number(task_id, "task_id")
        return self._rt.storage.task(TaskId(task_id))

    async def tasks(self, conversation_id: int | None = None, live_only: bool = False) -> list[Task]:
        _live(self._rt)
        if conversation_id is not None:
            check_id_number(conversation_id, "conversation_id")
        if type(live_only) is not bool:
            raise InvalidInput(f"live_only must be True or False, not {type(live_only).__name__}")
        cid = None if conversation_id is None else ConversationId(conversation_id)
        return self._rt.storage.tasks(cid, live_only=live_only)

    async def wait_for_task(self, task_id: int) -> Task:
        """The terminal record of the task, once durable."""
        _live(self._rt)
        check_id_number(task_id, "task_id")
        if self._rt.storage.task(TaskId(task_id)) is None:
            raise NotFound(f"Task {task_id} does not exist")

        return await self._rt.waits.record(
            Task,
            task_id, lambda: self._rt.storage.task(TaskId(task_id)), lambda t: t.status == "terminal"
        )

    async def wait_idle(self) -> None:
        """Return once no ownerless conversation reaches a live
        non-background task (so: every run has ended)."""
        _live(self._rt)

        def idle() -> bool | None:
            st = self._rt.state
            return (
                True
                if all(
                    conversation_is_idle(st, c.id)
                    for c in st.conversations.values()
                    if c.conversation.owner_task_id is None
                )
                else None
            )

        await self._rt.waits.until(idle)

    async def abort_task(self, task_id: int) -> TaskAbortResult:
        """Mark a task for abort: ``marked`` or ``terminal``. Its abort runs
        once its owned work is gone; ``wait_for_task`` waits for the end.
        An unknown id raises ``NotFound``."""
        _live(self._rt)
        check_id_number(task_id, "task_id")
        resp = await self._rt.request(
            lambda ticket, now: TaskAbortRequested(now=now, ticket=ticket, task_id=TaskId(task_id))
        )
        _unwrap(resp)
        # join the invocation the mark cancelled (its body has left when we return)
        await self._rt.waits.until(lambda: True if TaskId(task_id) not in self._rt.inflight else None)
        return TaskAbortResult(accepted(resp).data)

    async def create_conversation(
        self,
        *,
        agent: AgentConfig | None = None,
        owner: int | None = None,
        ownership: Any = None,
        owner_task_id: int | None = None,
    ) -> Conversation:
        """A new conversation, ownerless or owned by a live task ``owner``
        (then it starts with a copy of the owner's conversation's agent
        settings, and an abort of the owner cascades into it).

        ``owner_task_id=N`` is the same as ``owner=N``; ``ownership``: None /
        ``"ownerless"`` / ``{"kind": "ownerless"}``, or ``{"kind": "task",
        "task_id": N}`` (the reference's form). Ways that name different tasks
        are refused."""
        _live(self._rt)
        agent = self._rt.windowed(check_agent(agent))
        named: dict[str, Any] = {}
        if owner is not None:
            named["owner"] = owner
        if owner_task_id is not None:
            named["owner_task_id"] = owner_task_id
        if ownership is not None:
            if ownership == "ownerless" or (isinstance(ownership, dict) and ownership.get("kind") == "ownerless"):
                pass
            elif isinstance(ownership, dict) and ownership.get("kind") == "task" and "task_id" in ownership:
                named["ownership['task_id']"] = ownership["task_id"]
            else:
                raise InvalidInput(
                    "ownership must be None, 'ownerless', {'kind': 'ownerless'} or {'kind': 'task', 'task_id': N}"
                )
        for what, value in named.items():
            check_id_number(value, what)
        if len(set(named.values())) > 1:
            raise InvalidInput(f"{' and '.join(named)} name different tasks")
        owner_task_id = next(iter(named.values()), None)
        resp = await self._rt.request(
            lambda ticket, now: ConversationCreationRequested(
                now=now,
                ticket=ticket,
                owner_task_id=None if owner_task_id is None else TaskId(owner_task_id),
                agent=agent,
            )
        )
        return Conversation(ConversationId(_unwrap(resp)), self._rt)

    async def create_task(
        self,
        kind: str,
        input: dict[str, Any] | None = None,
        *,
        conversation_id: int = 1,
        background: bool = False,
    ) -> int:
        """Create a custom task (its definition must be installed); returns
        its id once durable. It runs when scheduling is on."""
        _live(self._rt)
        check_text(kind, "kind", empty=False)
        check_id_number(conversation_id, "conversation_id")
        return await create_task(self._host, kind, input or {}, conversation_id, background=background)

    async def usage(self) -> UsageDoc:
        """Token usage summed over every conversation's ``pi.usage``: per
        ``provider:model`` and per tool (tools that report usage)."""
        _live(self._rt)
        models: dict[str, UsageTotals] = {}
        tools: dict[str, UsageTotals] = {}
        for conv in self._rt.storage.conversations():
            doc = self._rt.storage.document(conv.id, USAGE_DOC)
            if doc is None:
                continue
            for target, part in ((models, doc.models), (tools, doc.tools)):
                for key, u in part.items():
                    target[key] = target.get(key, UsageTotals()) + u
        return UsageDoc(models=models, tools=tools)

    async def inspect(self) -> list[TaskInspection]:
        """Every live task's derived state: ``running``, ``waiting`` (on live
        ids), ``ready``, ``completing``, or ``blocked`` with a reason."""
        _live(self._rt)
        return list(inspect_tasks(self._rt.state))

    async def conversations_owned_by(self, task_id: int) -> list[Conversation]:
        _live(self._rt)
        check_id_number(task_id, "task_id")
        return [
            Conversation(c.id, self._rt)
            for c in self._rt.storage.conversations()
            if c.owner_task_id == task_id
        ]

    def watch_task_graph(self, *, interval_ms: int = 0) -> AbstractAsyncContextManager[TaskGraphViews]:
        """``async with harness.watch_task_graph() as graphs: async for g in
        graphs`` - every live task with its owner link, after each commit
        that created, moved or ended a task (latest value, as ``conv.watch``)."""
        _live(self._rt)
        return watch_task_graph(self._rt.watches, self._rt, interval_ms)

    @property
    def runtime(self) -> Loop:
        """The reducer loop and its state (for tests, benchmarks and tools):
        ``state``, ``storage``, ``store_id``, ``inflight``, ``next_commit()``."""
        return self._rt



def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            out.extend(_leaves(e))
        else:
            out.append(e)
    return out


__all__ = [
    "Conversation",
    "EntryRecord",
    "Harness",
    "HarnessClosed",
    "Input",
    "SubmissionHandle",
    "Write",
    "SubmissionRecord",
    "TaskRecord",
]


def _windowed(models: Models | None, rt: Loop, agent: AgentConfig | None) -> AgentConfig | None:
    """``agent`` with its model's window (from the adapter's ``context_window``)."""
    window = None
    if models is not None and agent is not None and agent.model is not None and agent.context_window is None:
        try:
            window = getattr(models.resolve(agent.model), "context_window", None)
        except Exception:  # host code: a model that cannot resolve now has no known window (the call fails later)
            window = None
    return with_window(agent, window, rt.state.settings.compaction.keep_recent_tokens)
