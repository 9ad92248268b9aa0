"""``Conversation``: the host's handle on one conversation.

Thin like every handle (harness.py): a call sends an event to the reducer and
waits for its answer (``submit``, ``configure``, ``compact``, ``abort``) or reads
committed state (``transcript``, ``context``, ``usage``). Liveness questions
(``idle``) come from the reducer's ``State``, history from storage.
"""

from __future__ import annotations

import copy
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs

from pidurable.core.builtins import BUILTINS
from pidurable.core.builtins import to_json as builtin_json
from pidurable.core.context import Message, context_messages
from pidurable.core.inbox import HEAD_SELF
from pidurable.core.ownership import conversation_is_idle
from pidurable.core.events import (
    AgentConfigurationRequested,
    CompactionRequested,
    ConversationAbortRequested,
    DocumentUpdateRequested,
    InputSubmitted,
    WriteSubmitted,
)
from pidurable.core.bounds import is_int_in, shown
from pidurable.core.fork_events import ForkRequested
from pidurable.core.model import AgentConfig, ConversationId, Entry, EntryId, EntryKind, SubmissionId, TaskId
from pidurable.core.state import AGENT_DOC, CONTEXT_DOC, USAGE_DOC, DocScope, DocumentChange, UsageDoc
from pidurable.core.system import system_text

from .documents import Staged, current, to_host
from .host_input import check_agent, check_choice, check_id, check_json_object, check_text
from .errors import InvalidInput, accepted
from .fork import fork_policies
from .loop import Loop
from .submissions import Input, SubmissionHandle, Write, _live, _unwrap
from .watch import DEFAULT_ENTRIES, ConversationViews, watch_conversation

WHEN_BUSY = ("follow_up", "steer", "reject")


@attrs.frozen
class Conversation:
    id: ConversationId
    _rt: Loop = attrs.field(repr=False, eq=False)

    async def submit(self, item: "Input | Write") -> SubmissionHandle:
        """Durably accept ``item``; returns once accepted (not answered).
        Bad input raises ``InvalidInput`` and stores nothing."""
        _live(self._rt)
        if isinstance(item, Write):
            content = check_text(item.content, "Write content")
            kind = check_id(item.kind, "Write kind")
            if kind is None:
                raise InvalidInput("Write kind must be a non-empty string")
            data = check_json_object(item.data, "Write data")
            request_id = check_id(item.request_id, "request_id")
            resp = await self._rt.request(
                lambda ticket, now: WriteSubmitted(
                    now=now,
                    ticket=ticket,
                    conversation_id=self.id,
                    content=content,
                    kind=kind,
                    data=data,
                    request_id=request_id,
                )
            )
            return SubmissionHandle(SubmissionId(_unwrap(resp, self.id)), self._rt)
        if not isinstance(item, Input):
            raise InvalidInput(f"submit() takes an Input or a Write, not {type(item).__name__}")
        content = check_text(item.content, "Input content", empty=False)
        request_id = check_id(item.request_id, "request_id")
        when_busy = check_choice(item.when_busy, "when_busy", WHEN_BUSY)
        resp = await self._rt.request(
            lambda ticket, now: InputSubmitted(
                now=now,
                ticket=ticket,
                conversation_id=self.id,
                content=content,
                request_id=request_id,
                when_busy=when_busy,
            )
        )
        return SubmissionHandle(SubmissionId(_unwrap(resp, self.id)), self._rt)

    async def transcript(self) -> list[Entry]:
        _live(self._rt)
        return self._rt.storage.entries(self.id)

    async def reset(self, handoff: str | None = None) -> SubmissionHandle:
        """Start the model context afresh: a ``reset`` head marker (its text
        the handoff, or empty) written like any write - at once when idle,
        else at the next boundary (a post-tools one then ends the run with
        its inputs ``unanswered/reset``). The transcript is kept."""
        if handoff is not None and not isinstance(handoff, str):
            raise InvalidInput("handoff must be a string or None")
        return await self.submit(Write(handoff or "", kind=EntryKind.RESET, data={"head": HEAD_SELF}))

    async def compact(self, instructions: str | None = None) -> TaskId:
        """Start a manual compaction (``pi.compaction``); its id. It completes
        with nothing placed when there is nothing to compact."""
        _live(self._rt)
        if instructions is not None:
            instructions = check_text(instructions, "instructions")
        resp = await self._rt.request(
            lambda ticket, now: CompactionRequested(now=now, ticket=ticket, conversation_id=self.id, instructions=instructions)
        )
        return TaskId(_unwrap(resp, self.id))

    async def context(self) -> list[Message]:
        """The messages the next model request would see (from the newest
        compaction or reset marker on)."""
        _live(self._rt)
        messages = context_messages(self._rt.storage.entries(self.id))
        shown = self._rt.storage.document(self.id, CONTEXT_DOC)
        prompt = system_text(shown.sections) if shown is not None else None
        return messages if prompt is None else [Message(role="system", text=prompt), *messages]

    async def usage(self) -> UsageDoc:
        """This conversation's ``pi.usage``."""
        _live(self._rt)
        doc = self._rt.storage.document(self.id, USAGE_DOC)
        return doc if doc is not None else UsageDoc()

    async def agent(self) -> AgentConfig:
        _live(self._rt)
        doc = self._rt.storage.document(self.id, AGENT_DOC)
        return doc if doc is not None else AgentConfig()

    async def configure(self, **changes: Any) -> AgentConfig:
        """Replace the given ``AgentConfig`` fields (others stay)."""
        current = await self.agent()
        try:
            agent = self._rt.windowed(check_agent(attrs.evolve(current, **changes)))
        except TypeError as e:
            raise InvalidInput(f"configure(): {e}") from None
        assert agent is not None
        resp = await self._rt.request(
            lambda ticket, now: AgentConfigurationRequested(now=now, ticket=ticket, conversation_id=self.id, agent=agent)
        )
        _unwrap(resp, self.id)
        return agent

    def _idle_now(self) -> bool:
        # The reducer's state mirrors storage after every commit; reading it
        # (never writing) is how waits avoid a storage scan per commit.
        st = self._rt.state
        return conversation_is_idle(st, self.id)

    async def idle(self) -> bool:
        """No live non-background task is reached from this conversation."""
        _live(self._rt)
        return self._idle_now()

    async def wait_idle(self) -> None:
        """Return once no live non-background task is reached from here."""
        _live(self._rt)
        await self._rt.waits.until(lambda: True if self._idle_now() else None)

    async def abort(self, background: bool = False) -> None:
        """Abort the conversation's task tree (``background=True`` also its
        background tasks), withdraw its queued inputs (writes stay), and return
        once it is idle. A no-op on an idle conversation."""
        _live(self._rt)
        if not isinstance(background, bool):
            raise InvalidInput("background must be a bool")
        resp = await self._rt.request(
            lambda ticket, now: ConversationAbortRequested(
                now=now, ticket=ticket, conversation_id=self.id, background=background
            )
        )
        marked = set(accepted(resp, self.id).data or ())
        st = self._rt

        def done() -> bool | None:
            # settled, and every cancelled invocation has really left (its
            # cleanup finished): the abort joins the work it stopped
            still = any(t in st.state.tasks or t in st.inflight for t in marked)
            return True if not still and self._idle_now() else None

        await self._rt.waits.until(done)

    async def document(self, doc: Any) -> Any:
        """The committed value of this conversation's document ``doc`` (its
        definition or its kind): the definition's initial value while none
        is stored; a value stored at an older version is migrated on the way
        (not written back: the next update does that). A built-in kind
        (``"pi.agent"``, ``"pi.live"``, ``"pi.inbox"``, ``"pi.usage"``,
        ``"pi.context"``) reads its stored JSON; hosts never change those."""
        _live(self._rt)
        if isinstance(doc, str) and doc in BUILTINS:  # pi.agent, pi.live...: read-only JSON (core/builtins.py)
            stored = self._rt.storage.document_state(DocScope.CONVERSATION, self.id, doc)
            return copy.deepcopy(stored.value) if stored is not None else builtin_json(BUILTINS[doc].initial)
        definition = self._rt.documents.definition(doc)
        stored = self._rt.storage.document_state(definition.scope, self.id, definition.kind)
        return to_host(definition, current(definition, stored)[0])

    async def update_document(self, doc: Any, fn: Any) -> Any:
        """Change this conversation's document ``doc``: ``fn(old) -> new``
        (or a new value), run on the committed value on the reducer,
        validated against the definition's schema; one commit, storing the
        difference. Returns the new value. ``InvalidInput`` (nothing stored)
        when ``fn`` raises or the result does not fit."""
        _live(self._rt)
        definition = self._rt.documents.definition(doc)
        if definition.scope is not DocScope.CONVERSATION:
            raise InvalidInput(f"Document {definition.kind!r} belongs to tasks (runtime.update_document)")
        staged = Staged(doc=definition, owner=self.id, update=fn)
        self._rt.documents.preview([staged])  # fails here, where it is asked for
        change = DocumentChange(
            scope=definition.scope,
            owner=self.id,
            kind=definition.kind,
            version=definition.version,
            history=definition.history,
            fork=definition.fork,
        )

        def make(ticket: int, now: int) -> DocumentUpdateRequested:
            self._rt.documents.stage(("ticket", ticket), [staged])
            return DocumentUpdateRequested(now=now, ticket=ticket, change=change)

        _unwrap(await self._rt.request(make), self.id)
        return await self.document(definition)

    def watch(
        self, entries: int = DEFAULT_ENTRIES, *, interval_ms: int = 0
    ) -> AbstractAsyncContextManager[ConversationViews]:
        """``async with conv.watch() as views: async for view in views`` -
        committed :class:`~pidurable.shell.watch.ConversationView`\\ s, the
        first one the conversation as it is now, then one per commit that
        touched it; a slow consumer gets the newest next (docs/watch.md).
        ``entries``: how many of the newest entries a view holds;
        ``interval_ms``: at most one view per interval (0: every commit)."""
        _live(self._rt)
        return watch_conversation(self._rt.watches, self._rt, self.id, entries, interval_ms)

    async def fork(self, at: int, documents: Any = None) -> Conversation:
        """A new conversation continuing this one from entry ``at`` (one
        commit, docs/fork.md): it sees this conversation's transcript up to
        and including ``at`` (read through this one, not copied), then its
        own; it keeps the agent, starts idle with empty usage. ``documents``:
        None (each document's own fork policy), ``"as_of"`` / ``"current"``
        / ``"initial"`` for all, or ``{doc or kind: policy}``. ``InvalidInput``
        when ``at`` is not an entry this conversation sees."""
        _live(self._rt)
        if not is_int_in(at, 1):
            raise InvalidInput(f"fork(at=...) takes the id of an entry (a positive int, 64-bit), not {shown(at)}")
        held = {d.kind for d in self._rt.state.documents.values() if d.scope is DocScope.CONVERSATION and d.owner == self.id}
        settled = self.id not in self._rt.state.conversations  # not held (loading.py): storage knows its documents

        def has(kind: str) -> bool:
            if settled:
                return self._rt.storage.document_state(DocScope.CONVERSATION, self.id, kind) is not None
            return kind in held

        policy, policies = fork_policies(documents, self._rt.documents.definition, has)
        resp = await self._rt.request(
            lambda ticket, now: ForkRequested(
                now=now, ticket=ticket, conversation_id=self.id, at=EntryId(at), policy=policy, policies=policies
            )
        )
        return Conversation(ConversationId(_unwrap(resp, self.id)), self._rt)

    async def forked_from(self) -> tuple[ConversationId, EntryId] | None:
        """``(parent conversation id, fork point)`` of a fork, else None."""
        _live(self._rt)
        conv = self._rt.storage.conversation(self.id)
        if conv is None or conv.parent_id is None or conv.fork_at is None:
            return None
        return conv.parent_id, conv.fork_at

    async def owned_by(self) -> int | None:
        _live(self._rt)
        conv = self._rt.storage.conversation(self.id)
        return None if conv is None else conv.owner_task_id
