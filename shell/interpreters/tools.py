"""Tool calls: resolution and validation (one path), preparation, execution.

``check_call`` is the ONE validation of a model's tool call: resolve the name
among the installed tools the agent's filter offers, then coerce and validate
the arguments against the tool's JSON schema (``check_arguments``, rules in
``arguments.py``; it also re-validates arguments a ``before_tool`` hook
rewrote). The coerced arguments are what the hooks see, what is stored as the
call's intent and what ``execute`` receives. Three places use it:
the model interpreter pre-validating a reply's calls (``prepared_calls``, so
tool tasks can be born at ``execute`` in the round's own commit), and the
``PrepareTool`` effect without hooks (inline) or with hooks (a child).

``RunTool`` runs the tool body with the durably recorded arguments and reports
``ToolFinished`` or ``ToolFailed`` (a raising tool, or a result that is not
one, is an error result). Nothing here touches ``State``.

Output limits (limits.py): after the body and the ``after_tool`` hooks, a
result text over the tool's ``output_limits`` is cut (head or tail) and the
full text spilled into the env's ``spill_directory`` (``<store>-<task>.txt``,
capped per store); ``ToolFinished.truncated`` carries the record of the cut,
from which the core makes the ``truncated`` and ``full_output`` diagnostics
(core/diagnostics.py); the tool's own diagnostics ride in
``ToolFinished.diagnostics``. A raising tool's message is bounded the same
way (not spilled; ``ToolFailed.truncated``). Running output the body reports
(``report_output``) is kept as a bounded tail and sent as ``ToolProgressed``,
throttled: the first report after a quiet interval at once, later ones at
most every ``partial_interval_ms`` (trailing edge), never after the result.

``RunReconcile`` asks a tool's ``reconcile`` about an interrupted call, with
the same ``ToolCallContext`` its execution had (same ``idempotency_key``, env,
cwd; no process recording, running output or document updates: it only
looks) and reports ``ToolReconciled``: a ``done`` result is checked and
bounded exactly as ``execute``'s; a reconcile that raises, returns something
that is not a ``Reconciled``, or is no longer installed is ``unknown`` with
the error as its note (a raising one logged on ``pidurable`` at WARNING).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pidurable.core.diagnostics import unavailable_message
from pidurable.core.effects import PrepareTool, Refused, RunAbortHooks, RunReconcile, RunTool
from pidurable.core.events import (
    PreparedCall,
    ToolAbortHooked,
    ToolFailed,
    ToolFinished,
    ToolPrepared,
    ToolProcessStarted,
    ToolProgressed,
    ToolRejected,
)
from pidurable.core.model import Json, ResultCode, TaskId, ToolCall
from pidurable.core.reconcile_events import ToolReconciled, Verdict

from ..arguments import Invalid, check
from ..context_cache import ContextCache
from ..documents import DocumentPort, Staging
from ..edge import control_json, tool_result
from ..strict_json import clean_text
from ..env import describe_process
from ..limits import DEFAULT_SPILL_CAP_BYTES, OutputLimits, RunningOutput, Spill, bound
from ..record_inits import new_ToolCallContext
from ..registry import Reconciled, Registry, ToolCallContext, ToolDefinition
from .hooks import Blocked, HookRunner
from .ports import EntryReads, Requester

if TYPE_CHECKING:
    from ..harness import Harness

log = logging.getLogger("pidurable")


@attrs.frozen
class Rejection:
    """Why a tool call cannot run: ``code`` for the core, ``message`` for the model."""

    code: str
    message: str


def offered_tool(registry: Registry, name: object, allowed: tuple[str, ...] | None) -> ToolDefinition | None:
    """The installed tool ``name`` if the agent's filter offers it."""
    if not isinstance(name, str) or (allowed is not None and name not in allowed):
        return None
    return registry.tool(name)


def check_arguments(tool: ToolDefinition, arguments: object) -> dict[str, Json] | Rejection:
    """The arguments coerced to the tool's schema, or why they do not validate.

    ``check`` is pure (a function of the tool's name, its schema object and
    the arguments' value), so the verdict on small flat arguments is kept
    (``_CHECKED``): a model calling a tool again with the same arguments is
    not coerced and validated again. A kept coercion is handed out as a new
    dict each time (its values are immutable scalars), as ``check`` makes one."""
    key = _flat_key(tool.name, tool.parameters, arguments)
    hit = _CHECKED.get(key) if key is not None else None
    if hit is not None and hit[0] is tool.parameters:
        verdict = hit[1]
        return dict(verdict) if isinstance(verdict, dict) else verdict
    checked = check(tool.name, tool.parameters, arguments)
    result: dict[str, Json] | Rejection = (
        Rejection("invalid_arguments", checked.message) if isinstance(checked, Invalid) else checked
    )
    if key is not None:
        if len(_CHECKED) >= _MAX_CHECKED:
            _CHECKED.clear()
        _CHECKED[key] = (tool.parameters, dict(result) if isinstance(result, dict) else result)
    return result


#: ``check_arguments`` verdicts by (tool name, id of its schema, flat
#: arguments); the schema object is kept with its verdict, so an id reused
#: by another object never hits.
_CHECKED: dict[tuple[Any, ...], tuple[object, dict[str, Json] | Rejection]] = {}
_MAX_CHECKED = 1024
#: Only arguments this small are kept: at most this many keys, each string
#: value at most this long (a file's content is not worth keeping).
_FLAT_KEYS, _FLAT_TEXT = 16, 256


def _flat_key(name: str, schema: object, arguments: object) -> tuple[Any, ...] | None:
    """The key of flat arguments (a dict of str keys to str/int/bool/None
    values, in their order, each value with its exact type: ``1``, ``1.0``
    and ``True`` differ), or None for any other value (floats too: -0.0 and
    NaN compare in ways a key must not)."""
    if type(arguments) is not dict or len(arguments) > _FLAT_KEYS:
        return None
    key: list[Any] = [name, id(schema)]
    for k, v in arguments.items():
        t = type(v)
        if type(k) is not str or len(k) > _FLAT_TEXT:
            return None
        if t is str:
            if len(v) > _FLAT_TEXT:
                return None
        elif not (t is int or t is bool or v is None):
            return None
        key.append((k, t, v))
    return tuple(key)


def check_call(
    registry: Registry, call: ToolCall, allowed: tuple[str, ...] | None
) -> tuple[ToolDefinition, ToolCall] | Rejection:
    """The one validation of a tool call: its tool and the call with its
    coerced arguments, or why it cannot run."""
    checked = _checked(registry, call, allowed)
    if isinstance(checked, Rejection):
        return checked
    tool, arguments = checked
    return tool, attrs.evolve(call, arguments=arguments)


def _checked(
    registry: Registry, call: ToolCall, allowed: tuple[str, ...] | None
) -> tuple[ToolDefinition, dict[str, Json]] | Rejection:
    """``check_call`` without the new call: the tool and the coerced arguments."""
    tool = offered_tool(registry, call.name, allowed)
    if tool is None:
        return Rejection(str(ResultCode.TOOL_UNAVAILABLE), unavailable_message(call.name))
    checked = check_arguments(tool, call.arguments)
    if isinstance(checked, Rejection):
        return checked
    return tool, checked


def prepared_calls(
    registry: Registry,
    calls: tuple[ToolCall, ...],
    allowed: tuple[str, ...] | None,
    extensions: tuple[str, ...] | None = None,
) -> tuple[PreparedCall | None, ...]:
    """Validate a reply's calls now, so their tool tasks can be born at
    ``execute`` in the round's own commit. Not when before-tool hooks are
    installed (they run in the ``call`` phase); a call that does not resolve
    or validate gets None and takes the ``call`` phase, which answers it with
    the error result."""
    if not calls or registry.named_hooks("before_tool", extensions):
        return ()
    out: list[PreparedCall | None] = []
    for call in calls:
        checked = _checked(registry, call, allowed)  # check_call's validation
        if isinstance(checked, Rejection):
            out.append(None)
        else:
            tool, arguments = checked
            out.append(PreparedCall(arguments=dict(arguments), replay=tool.replay))
    return tuple(out)


@attrs.frozen(kw_only=True)
class ToolInterpreter:
    """``PrepareTool`` and ``RunTool``."""

    loop: Requester
    registry: Registry
    hooks: HookRunner
    #: recently committed assistant entries (the call to prepare is read here first)
    context: ContextCache
    storage: EntryReads
    #: where tools touch the world (opaque to the shell)
    env: object
    store_id: str
    harness: Harness
    #: where ``call.update_document`` stages its updates
    documents: DocumentPort | None = None

    def needs_child(self, effect: PrepareTool) -> bool:
        """Preparing is short and bounded (done inline, no task per call)
        unless the agent's extensions have before-tool hooks: host code."""
        return self.hooks.before_tool_installed(effect.extensions)

    def _reject(self, effect: PrepareTool, rejection: Rejection) -> None:
        self.loop.send(
            ToolRejected(now=self.loop.clock(), task_id=effect.task_id, code=rejection.code, message=rejection.message)
        )

    def _resolve(self, effect: PrepareTool) -> tuple[ToolCall, ToolDefinition] | None:
        """The call and its tool, or None after sending the rejection."""
        entry = self.context.entry(effect.assistant_entry_id) or self.storage.entry(effect.assistant_entry_id)
        call = None if entry is None else next((c for c in entry.tool_calls if c.id == effect.call_id), None)
        if call is None:
            message = f"Tool call {effect.call_id} not found in entry {effect.assistant_entry_id}"
            self._reject(effect, Rejection("invalid_call", message))
            return None
        checked = check_call(self.registry, call, effect.tools)
        if isinstance(checked, Rejection):
            self._reject(effect, checked)
            return None
        tool, coerced = checked
        return coerced, tool

    def _prepared(self, effect: PrepareTool, arguments: Mapping[str, Any], tool: ToolDefinition) -> None:
        self.loop.send(
            ToolPrepared(now=self.loop.clock(), task_id=effect.task_id, arguments=dict(arguments), replay=tool.replay)
        )

    def prepare(self, effect: PrepareTool) -> None:
        """Inline: the answer is the next event."""
        resolved = self._resolve(effect)
        if resolved is not None:
            call, tool = resolved
            self._prepared(effect, call.arguments, tool)

    async def prepare_with_hooks(self, effect: PrepareTool) -> None:
        resolved = self._resolve(effect)
        if resolved is None:
            return
        call, tool = resolved
        try:
            arguments = await self.hooks.before_tool(effect.task_id, effect.conversation_id, call, effect.extensions)
        except Blocked as e:
            self._reject(effect, Rejection("blocked", str(e)))
            return
        checked = check_arguments(tool, arguments)
        if isinstance(checked, Rejection):
            self._reject(effect, checked)
            return
        self._prepared(effect, checked, tool)

    async def record_process(self, task_id: TaskId, pid: int) -> None:
        """``ToolCallContext.record_process``: commit the process group into
        the tool's checkpoint and wait until it is durable."""
        process = describe_process(pid)
        resp = await self.loop.request(
            lambda ticket, now: ToolProcessStarted(now=now, ticket=ticket, task_id=task_id, process=process)
        )
        if isinstance(resp.reply, Refused):
            raise RuntimeError(resp.reply.message)

    async def run(self, effect: RunTool, interval_ms: int = 100) -> None:
        now = self.loop.clock
        tool = self.registry.tool(effect.name)
        if tool is None:
            self.loop.send(ToolFailed(now=now(), task_id=effect.task_id, message=f"Tool {effect.name} is not installed"))
            return

        record = partial(self.record_process, effect.task_id)
        staging = Staging(self.documents, task_id=effect.task_id, conversation_id=effect.conversation_id)

        progress = _Progress(self.loop, effect.task_id, max(interval_ms, 1) / 1000)
        ctx = self._context(effect, record, progress.report, staging.update)
        failure: str | None = None
        try:
            result = tool_result(effect.name, await tool.execute(ctx, dict(effect.arguments)))
            if self.registry.named_hooks("after_tool", effect.extensions):  # (no coroutine when none: issue 11 item 2)
                result = await self.hooks.after_tool(effect, result)
        except Exception as e:  # a raising tool (or a result that is not one) is an error result
            failure = str(e) or type(e).__name__
        finally:
            progress.close()  # the result (or a cancellation) supersedes any pending running output
        if failure is not None:
            b = bound(failure, tool.output_limits)
            cut = b.record(None) if b.truncated else None
            self.loop.send(ToolFailed(now=now(), task_id=effect.task_id, message=b.text, truncated=cut))
            return
        text, limits = result.text, tool.output_limits
        if _surely_fits(text, limits):
            truncated = None  # (without _bound's coroutine: issue 11 item 2)
        else:
            text, truncated = await self._bound(effect.task_id, text, limits)
        staging.hand_over(("task", effect.task_id))  # committed with the result, or not at all
        # tool_result made every value of the result valid (text, usage,
        # control, diagnostics); a cut's record names a spill path, which is
        # not: only that event is cleaned again
        send = self.loop.send_checked if truncated is None else self.loop.send
        send(
            ToolFinished(
                now=now(),
                task_id=effect.task_id,
                text=text,
                is_error=result.is_error,
                usage=result.usage,
                truncated=truncated,
                control=control_json(result.control),
                diagnostics=result.diagnostics,
            )
        )

    def _context(
        self,
        effect: RunTool | RunReconcile,
        record: Callable[[int], Awaitable[None]] | None = None,
        report: Callable[[str], None] | None = None,
        update_document: Callable[[Any, Any], Awaitable[Any]] | None = None,
    ) -> ToolCallContext:
        """The context a tool body or its ``reconcile`` gets (a reconcile: none
        of the body's ``record`` / ``report`` / ``update_document``)."""
        # new_ToolCallContext, no **hooks: no keyword dicts (record_inits.py; issue 11 item 2)
        return new_ToolCallContext(
            env=self.env,
            task_id=effect.task_id,
            conversation_id=effect.conversation_id,
            call_id=effect.call_id,
            harness=self.harness,
            idempotency_key=f"{self.store_id}:tool:{effect.task_id}",
            cwd=effect.cwd,
            record=record,
            update_document=update_document,
            report=report,
        )

    async def reconcile(self, effect: RunReconcile) -> None:
        """Ask the tool's ``reconcile``; answers ``ToolReconciled``."""
        now = self.loop.clock
        tool = self.registry.tool(effect.name)
        if tool is None or tool.reconcile is None:
            note = f"Tool {effect.name} no longer has a reconcile"
            self.loop.send(ToolReconciled(now=now(), task_id=effect.task_id, verdict=Verdict.UNKNOWN, note=note))
            return
        ctx = self._context(effect)
        try:
            found = await tool.reconcile(ctx, dict(effect.arguments))
            if not isinstance(found, Reconciled) or found.verdict not in ("done", "not_done", "unknown"):
                raise TypeError(f"reconcile returned {found!r}, not Reconciled.done/not_done/unknown")
            result = tool_result(effect.name, found.result) if found.verdict == "done" else None
        except Exception as e:  # a raising reconcile cannot tell: unknown, with the error as its note
            note = str(e) or type(e).__name__
            log.warning("reconcile of tool %s (task %s) raised: %s", effect.name, effect.task_id, note)
            b = bound(note, tool.output_limits)
            self.loop.send(ToolReconciled(now=now(), task_id=effect.task_id, verdict=Verdict.UNKNOWN, note=b.text))
            return
        if result is None:
            b = bound(clean_text(str(found.note)), tool.output_limits)
            verdict = Verdict.NOT_DONE if found.verdict == "not_done" else Verdict.UNKNOWN
            self.loop.send(ToolReconciled(now=now(), task_id=effect.task_id, verdict=verdict, note=b.text))
            return
        text, truncated = await self._bound(effect.task_id, result.text, tool.output_limits)
        self.loop.send(
            ToolReconciled(
                now=now(),
                task_id=effect.task_id,
                verdict=Verdict.DONE,
                text=text,
                is_error=result.is_error,
                usage=result.usage,
                truncated=truncated,
                diagnostics=result.diagnostics,
            )
        )

    async def abort_hooks(self, effect: RunAbortHooks) -> None:
        """The ``on_abort`` hooks of an aborted call (hooks.py); a replaced
        result is bounded by the tool's current limits (defaults when it is
        no longer installed). Answers ``ToolAbortHooked``."""
        replaced = await self.hooks.on_abort(effect)
        if replaced is None:
            self.loop.send(ToolAbortHooked(now=self.loop.clock(), task_id=effect.task_id))
            return
        tool = self.registry.tool(effect.name)
        limits = tool.output_limits if tool is not None else OutputLimits()
        text, truncated = await self._bound(effect.task_id, replaced.text, limits)
        self.loop.send(
            ToolAbortHooked(
                now=self.loop.clock(),
                task_id=effect.task_id,
                text=text,
                truncated=truncated,
                diagnostics=replaced.diagnostics,
            )
        )

    async def _bound(self, task_id: TaskId, text: str, limits: OutputLimits) -> tuple[str, dict[str, Json] | None]:
        """``text`` within ``limits`` and the record of the cut, the full
        text spilled; an untruncated text unchanged and None."""
        if _surely_fits(text, limits):
            return text, None
        b = bound(text, limits)
        if not b.truncated:
            return text, None
        path: str | None = None
        directory = getattr(self.env, "spill_directory", None)
        if directory is not None:
            cap = getattr(self.env, "spill_cap_bytes", DEFAULT_SPILL_CAP_BYTES)
            spill = Spill(directory, cap, prefix=f"{self.store_id}-")
            path = await trio.to_thread.run_sync(spill.write, f"{self.store_id}-{task_id}.txt", text)
        return b.text, b.record(path)


def _surely_fits(text: str, limits: OutputLimits) -> bool:
    """``text`` is within ``limits`` whatever it holds (a line has a
    character, a character is at most 4 UTF-8 bytes): no need to count."""
    return len(text) <= limits.max_lines and 4 * len(text) <= limits.max_bytes


class _Progress:
    """A body's running output: the bounded tail, sent as ``ToolProgressed``
    at most once per ``interval`` seconds (leading edge after a quiet
    interval, then trailing edge)."""

    __slots__ = ("loop", "task_id", "interval", "output", "sent_version", "last_sent", "pending", "closed")

    def __init__(self, loop: Requester, task_id: TaskId, interval: float) -> None:
        self.loop, self.task_id, self.interval = loop, task_id, interval
        #: made at the first report (most bodies report none: issue 11 item 2)
        self.output: RunningOutput | None = None
        self.sent_version = 0
        self.last_sent = -interval
        self.pending = False
        self.closed = False

    def report(self, chunk: str) -> None:
        if self.closed:
            return
        if self.output is None:
            self.output = RunningOutput()
        self.output.append(chunk)
        if self.pending:
            return
        wait = self.last_sent + self.interval - trio.current_time()
        if wait <= 0:
            self._send()
        else:
            self.pending = True
            self.loop.background(partial(self._later, wait))  # sends nothing once closed

    async def _later(self, wait: float) -> None:
        await trio.sleep(wait)
        self.pending = False
        self._send()

    def _send(self) -> None:
        output = self.output
        if self.closed or output is None or output.version == self.sent_version:
            return
        self.sent_version = output.version
        self.last_sent = trio.current_time()
        loop = self.loop
        loop.send(ToolProgressed(now=loop.clock(), task_id=self.task_id, output=output.text()))

    def close(self) -> None:
        self.closed = True


__all__ = ["Rejection", "ToolInterpreter", "check_arguments", "check_call", "offered_tool", "prepared_calls"]
