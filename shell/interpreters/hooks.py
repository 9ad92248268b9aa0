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

from pidurable.core.effects import RenderSystem, RunTool, SelectCut
from pidurable.core.events import SystemRendered
from pidurable.core.state import SystemSection
from pidurable.core.model import AgentConfig, ConversationId, TaskId, ToolCall

from ..edge import tool_result
from ..providers.base import ModelReply, ModelRequest
from ..registry import PromptInput, Registry, ToolResult
from ..tasks import HookContext
from .ports import Requester

if TYPE_CHECKING:
    from ..harness import Harness

log = logging.getLogger("pidurable")


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
                raise Blocked(f"Tool call blocked: {e}") from e
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
