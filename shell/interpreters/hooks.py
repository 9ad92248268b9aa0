"""Extension hooks: host code the shell runs around model requests and tools.

Owns the three hook loops (``before_tool``, ``after_tool``, ``before_request``)
and what a raising hook means: a raising ``before_tool`` blocks the call (the
error result "Tool call blocked: <message>"); a raising observer
(``after_tool``, ``before_request``) is reported - a :class:`HookReport` to the
host's ``on_report`` sink (``Harness.open(on_report=...)``; by default the
``pidurable`` logger at WARNING) - and skipped. Nothing is swallowed silently:
a sink that itself raises is logged. Hooks see a ``HookContext`` (who asks, the asking task's memos,
the facade handed through opaque); nothing here touches ``State``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from pidurable.core.diagnostics import blocked_message
from pidurable.core.effects import RenderSystem, RunAbortHooks, RunAfterTools, RunTool, SelectCut
from pidurable.core.events import AfterToolsRan, SystemRendered
from pidurable.core.state import SystemSection
from pidurable.core.model import AgentConfig, ConversationId, Json, TaskId, ToolCall

from ..edge import check_control, control_json, tool_result
from ..providers.base import ModelReply, ModelRequest
from ..registry import PromptInput, Registry, ToolResult
from ..tasks import HookContext
from .ports import EntryReads, Requester

if TYPE_CHECKING:
    from ..harness import Harness

log = logging.getLogger("pidurable")

#: The user message that continues a run when an ``on_yield`` hook returns True.
CONTINUE = "Continue."


@attrs.frozen(kw_only=True)
class CompactInfo:
    """What a ``before_compact`` hook is told: why the compaction runs, what
    it would summarize (entries, and the messages a model would read), the
    first entry it keeps, and the manual instructions."""

    reason: str
    entries: tuple[Any, ...]
    messages: tuple[Any, ...]
    first_kept: int
    instructions: str | None = None


class Blocked(Exception):
    """A ``before_tool`` hook refused the call (its message is the reason)."""


@attrs.frozen(kw_only=True)
class HookReport:
    """A hook raised: which hook of which extension, for which task, and
    what the harness did about it."""

    hook: str
    extension: str
    task_id: int
    conversation_id: int
    error: str
    #: What happened next ("skipped", "blocked the call", ...).
    handled: str
    exception: BaseException = attrs.field(eq=False, repr=False)


def log_report(report: HookReport) -> None:
    """The default ``on_report`` sink: the ``pidurable`` logger at WARNING."""
    log.warning(
        "%s hook of extension %s raised (task %s, conversation %s): %s; %s",
        report.hook,
        report.extension,
        report.task_id,
        report.conversation_id,
        report.error,
        report.handled,
        exc_info=report.exception,
    )


@attrs.frozen(kw_only=True)
class HookRunner:
    """Runs the registry's hooks, in extension install order."""

    registry: Registry
    loop: Requester
    harness: Harness
    on_report: Callable[[HookReport], None] = log_report
    env: object = None
    #: Committed entries (what ``after_tools`` hooks are shown).
    entries: EntryReads | None = None

    def report(self, hook: str, extension: str, task_id: int, conversation_id: int, e: BaseException, handled: str) -> None:
        """Hand a hook failure to the host's sink (never raises)."""
        report = HookReport(
            hook=hook,
            extension=extension,
            task_id=task_id,
            conversation_id=conversation_id,
            error=f"{type(e).__name__}: {e}",
            handled=handled,
            exception=e,
        )
        try:
            self.on_report(report)
        except Exception as sink_error:  # the sink failing must not hide the report
            log.exception("the on_report sink raised while reporting %r: %s", report, sink_error)
            log_report(report)

    def _context(self, task_id: int, conversation_id: int) -> HookContext:
        return HookContext(task_id, conversation_id, self.harness, self.loop)

    def before_tool_installed(self, extensions: tuple[str, ...] | None = None) -> bool:
        return bool(self.registry.named_hooks("before_tool", extensions))

    async def before_tool(
        self,
        task_id: TaskId,
        conversation_id: ConversationId,
        call: ToolCall,
        extensions: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """The call's final arguments; raises :class:`Blocked`."""
        ctx = self._context(task_id, conversation_id)
        arguments = dict(call.arguments)
        for extension, hook in self.registry.named_hooks("before_tool", extensions):
            try:
                changed = await hook(ctx, attrs.evolve(call, arguments=arguments))
            except Exception as e:  # a raising hook blocks the call (reported too)
                self.report("before_tool", extension, task_id, conversation_id, e, "blocked the call")
                raise Blocked(blocked_message(str(e))) from e
            if changed is not None:
                arguments = dict(changed)
        return arguments

    async def after_tool(self, effect: RunTool, result: ToolResult) -> ToolResult:
        hooks = self.registry.named_hooks("after_tool", effect.extensions)
        if not hooks:
            return result
        ctx = self._context(effect.task_id, effect.conversation_id)
        call = ToolCall(id=effect.call_id, name=effect.name, arguments=dict(effect.arguments))
        for extension, hook in hooks:
            try:
                replaced = await hook(ctx, call, result)
            except Exception as e:  # an observer failing does not fail the call: reported
                self.report("after_tool", extension, effect.task_id, effect.conversation_id, e, "skipped")
                continue
            if replaced is not None:
                result = tool_result(call.name, replaced)
        return result

    async def after_response(
        self, task_id: int, conversation_id: int, reply: ModelReply, extensions: tuple[str, ...] | None = None
    ) -> None:
        """``after_response(ctx, reply)`` observers see every complete model
        message (answers and tool rounds; not partials, not deferred
        handles). They change nothing; one that raises is reported and the
        next runs. They run before the answer's commit, so a crash there may
        run them again."""
        hooks = self.registry.named_hooks("after_response", extensions)
        if not hooks:
            return
        ctx = self._context(task_id, conversation_id)
        for extension, hook in hooks:
            try:
                await hook(ctx, reply)
            except Exception as e:  # an observer failing changes nothing: reported
                self.report("after_response", extension, task_id, conversation_id, e, "skipped")

    async def on_yield(
        self, task_id: int, conversation_id: int, reply: ModelReply, extensions: tuple[str, ...] | None = None
    ) -> str | None:
        """``on_yield(ctx, answer)`` hooks, in order, for an answer without
        tool calls: the first that returns True (continue with the message
        ``CONTINUE``) or a non-empty text (continue with that message) wins;
        later ones are not asked. None: the run ends with this answer. A
        raising hook, or one returning anything else, is reported and the
        next asked. They run before the answer's commit (a crash runs them
        again)."""
        hooks = self.registry.named_hooks("on_yield", extensions)
        ctx = self._context(task_id, conversation_id)
        for extension, hook in hooks:
            try:
                decision = await hook(ctx, reply)
                if decision is True:
                    return CONTINUE
                if isinstance(decision, str) and decision.strip():
                    return decision
                if decision not in (None, False):
                    raise TypeError(f"on_yield returned {decision!r:.80}, not a bool, a text or None")
            except Exception as e:  # reported; the next hook decides
                self.report("on_yield", extension, task_id, conversation_id, e, "skipped")
        return None

    async def after_tools(self, effect: RunAfterTools) -> None:
        """``after_tools(ctx, results)`` hooks, in order, over the settled
        round's result entries (call order); each may return a ``Control``
        (a later hook's fields override an earlier one's: handoff, reset;
        ``terminate`` and ``add_tools`` accumulate). A raising hook, or one
        returning something else, is reported and skipped. Answers
        ``AfterToolsRan``."""
        ctx = self._context(effect.task_id, effect.conversation_id)
        reads = self.entries
        found = (reads.entry(i) for i in effect.result_entry_ids) if reads is not None else iter(())
        results = tuple(e for e in found if e is not None)
        merged: dict[str, Json] = {}
        for extension, hook in self.registry.named_hooks("after_tools", effect.extensions):
            try:
                control = control_json(check_control(await hook(ctx, results), "after_tools"))
            except Exception as e:  # reported; the round finishes without it
                self.report("after_tools", extension, effect.task_id, effect.conversation_id, e, "skipped")
                continue
            for key, value in (control or {}).items():
                if key == "add_tools":
                    prior = merged.get("add_tools")
                    merged[key] = [*(prior if isinstance(prior, list) else []), *(value if isinstance(value, list) else [])]
                else:
                    merged[key] = value
        self.loop.send(AfterToolsRan(now=self.loop.clock(), task_id=effect.task_id, control=merged or None))

    async def on_abort(self, effect: RunAbortHooks) -> ToolResult | None:
        """``on_abort(ctx, call, result)`` hooks, in order: a replacement
        chain over the aborted call's error result (its ``text``: the partial
        output; its ``diagnostics``: "Tool X was aborted"). A ``ToolResult``
        or a text replaces it whole (its ``is_error`` and controls are
        ignored: an aborted call is an error and asks nothing). A raising
        hook is reported and the chain goes on. The replacement, or None."""
        ctx = self._context(effect.task_id, effect.conversation_id)
        call = ToolCall(id=effect.call_id, name=effect.name, arguments=dict(effect.arguments))
        result = ToolResult(text=effect.text, is_error=True, diagnostics=effect.diagnostics)
        replaced = False
        for extension, hook in self.registry.named_hooks("on_abort", effect.extensions):
            try:
                changed = await hook(ctx, call, result)
                if changed is not None:
                    result = attrs.evolve(tool_result(effect.name, changed), is_error=True, control=None)
                    replaced = True
            except Exception as e:  # reported; the chain goes on
                self.report("on_abort", extension, effect.task_id, effect.conversation_id, e, "skipped")
        return result if replaced else None

    async def render_system(self, effect: RenderSystem, agent: AgentConfig) -> None:
        """Render the sections of the selected extensions, in order (a later
        extension's section with the same key replaces an earlier one in
        place), and report them: ``SystemRendered``. A renderer that raises
        is reported and its section keeps the text the model was shown."""
        prompt = PromptInput(conversation_id=effect.conversation_id, agent=agent, env=self.env)
        rendered: dict[str, str | None] = {}
        failed: list[str] = []
        for name in effect.extensions:
            ext = self.registry.extension(name)
            for sec in ext.sections if ext is not None else ():
                try:
                    text = sec.render(prompt)
                    if inspect.isawaitable(text):
                        text = await text
                    if text is not None and not isinstance(text, str):
                        raise TypeError(f"section {sec.key} rendered a {type(text).__name__}, not str or None")
                except Exception as e:  # reported; the section keeps what was shown
                    self.report(f"section:{sec.key}", name, effect.task_id, effect.conversation_id, e, "kept the shown text")
                    failed.append(sec.key)
                    rendered.pop(sec.key, None)
                    continue
                rendered[sec.key] = None if text is None else (f"<{sec.key}>\n{text}\n</{sec.key}>" if sec.tag else text)
        sections = tuple(SystemSection(key=k, text=t) for k, t in rendered.items() if t is not None)
        self.loop.send(
            SystemRendered(now=self.loop.clock(), task_id=effect.task_id, sections=sections, failed=tuple(failed))
        )

    async def before_compact(self, effect: SelectCut, info: "CompactInfo") -> str | None:
        """``before_compact(ctx, info)`` hooks, in order; the first decision
        wins: ``{"decline": True}`` -> ``"decline"``, ``{"summary": text}``
        -> the text. A raising hook is reported and the next asked."""
        ctx = self._context(effect.task_id, effect.conversation_id)
        for extension, hook in self.registry.named_hooks("before_compact", effect.extensions):
            try:
                decision = await hook(ctx, info)
            except Exception as e:  # reported; the next hook decides
                self.report("before_compact", extension, effect.task_id, effect.conversation_id, e, "skipped")
                continue
            if decision is None:
                continue
            if isinstance(decision, dict) and decision.get("decline") is True:
                return "decline"
            if isinstance(decision, dict) and isinstance(decision.get("summary"), str) and decision["summary"].strip():
                return str(decision["summary"])
            err = TypeError(f"before_compact returned {decision!r}, not None, {{'decline': True}} or {{'summary': text}}")
            self.report("before_compact", extension, effect.task_id, effect.conversation_id, err, "skipped")
        return None

    async def before_request(self, request: ModelRequest, extensions: tuple[str, ...] | None = None) -> ModelRequest:
        """``before_request`` hooks may replace the messages of this request
        only (nothing is stored)."""
        hooks = self.registry.named_hooks("before_request", extensions)
        if not hooks:
            return request
        ctx = self._context(request.task_id, request.conversation_id)
        messages = list(request.messages)
        for extension, hook in hooks:
            try:
                replaced = await hook(ctx, list(messages))
            except Exception as e:  # reported; the request goes on unchanged by it
                self.report("before_request", extension, request.task_id, request.conversation_id, e, "skipped")
                continue
            if replaced is not None:
                messages = list(replaced)
        return attrs.evolve(request, messages=tuple(messages))
