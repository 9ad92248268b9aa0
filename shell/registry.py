"""Tools and the process-local registry that holds them.

A tool is defined once (``define_tool``) and installed in a ``Registry``; the
registry is never stored. The core only learns each tool's *replay promise*
and execution mode (its catalog); resolution, argument validation (JSON
Schema, via ``jsonschema``) and execution happen in the shell.

``replay`` is the tool's promise about being run again after an interruption:
``"safe"`` (reading, querying: may run twice) or ``"unsafe"`` (the default:
writing, deploying, paying - an interrupted call becomes the error result
"Tool X was interrupted and may have partially run" and is never repeated).

``reconcile`` (unsafe tools only) lets a tool *find out* after an
interruption instead of settling blind: ``async def reconcile(call, args) ->
Reconciled`` gets the interrupted execution's context (same
``idempotency_key``, env, cwd) and the stored arguments, and answers
``Reconciled.done(result)`` (the effect happened: settle with this result),
``Reconciled.not_done()`` (it provably did not: run ``execute`` again) or
``Reconciled.unknown(note)`` (the interrupted result plus the note). It may
run more than once (a crash while it runs asks again): it must only look,
never act. See docs/recovery.md.

``output_limits`` bounds what of a tool's result reaches the transcript (and
the store): 50 KiB / 2000 lines by default, ``retain`` ``head`` or ``tail``;
the shell's tool interpreter cuts, adds the notice and spills the full output
(limits.py). ``ToolCallContext.report_output`` streams running output into
the call's live slot.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import jsonschema

from pidurable.core.bounds import is_int_in
from pidurable.core.model import AgentConfig, Diagnostic, ExtensionInfo, Task, TaskInfo, ToolInfo, Usage

from .doc_types import DocDefinition
from .limits import OutputLimits
from .limits import output_limits as _output_limits
from .strict_json import check_definition_json

if TYPE_CHECKING:  # for annotations only: the facade and task contexts import this module
    from .harness import Harness
    from .tasks import TaskRuntime

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


@attrs.frozen(kw_only=True)
class Control:
    """What a tool result (``ToolResult.control``) or an ``after_tools`` hook
    asks of the run when its tool round finishes (reference §3.7, §3.10):

    - ``terminate``: end the run now, answered by the tool-calling assistant
      entry, without asking the model again. From tool results it takes
      *every* call of the round asking for it; from a hook, one is enough.
    - ``handoff``: end the run like ``terminate`` and start the next context
      afresh with this text (a reset marker carrying it); the last one in
      call order wins, a hook's over the results'.
    - ``reset`` (hooks only): end the run with a reset marker and no text.
    - ``add_tools``: tool names the agent is offered from now on (appended to
      its ``tools`` list; an agent offered every tool already has them).
    """

    terminate: bool = False
    handoff: str | None = None
    reset: bool = False
    add_tools: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class ToolResult:
    """What a tool returns: text for the model, and whether it is an error."""

    text: str
    is_error: bool = False
    #: Tokens the tool spent (e.g. calling a model), added to ``pi.usage``.
    usage: Usage | None = None
    #: What the result asks of the run (``terminate``, ``handoff``,
    #: ``add_tools``); see :class:`Control`.
    control: Control | None = None
    #: Problems to report next to ``text`` (``Diagnostic(severity, message,
    #: code=None)``, severity ``info``/``warn``/``error``): the model reads
    #: them after the text in the result's ``<harness>`` block, the entry's
    #: ``data["diagnostics"]`` keeps them. A ``warn`` does not make the result
    #: an error; ``is_error`` does.
    diagnostics: tuple[Diagnostic, ...] = ()


@attrs.frozen(kw_only=True)
class ToolCallContext:
    """Given to ``execute``: where the call runs and who asked.

    ``idempotency_key`` is stable for this tool call across restarts (it names
    the store and the tool task): pass it to external services that
    de-duplicate requests, so a re-run after a crash is recognised there.
    """

    #: where tools touch the world (a ``LocalEnv``, or what the host passed)
    env: Any
    task_id: int
    conversation_id: int
    call_id: str
    harness: Harness
    idempotency_key: str
    #: The conversation's working directory (its agent's ``cwd``): tools run
    #: there, inside the env's root. None means the env's root.
    cwd: str | None = None
    _record: Callable[[int], Awaitable[None]] | None = attrs.field(default=None, repr=False, alias="record")
    _update_document: Callable[[Any, Any], Awaitable[Any]] | None = attrs.field(
        default=None, repr=False, alias="update_document"
    )
    _report: Callable[[str], None] | None = attrs.field(default=None, repr=False, alias="report")

    def report_output(self, chunk: str) -> None:
        """Append ``chunk`` to this call's running output. Not blocking: the
        shell keeps the tail and shows it in the call's ``pi.live`` slot,
        throttled (at most one commit per ``partial_interval_ms``), so a
        watcher sees a long command's progress. Without a harness it is a
        no-op. The result is what the model gets, not this."""
        if self._report is not None and isinstance(chunk, str):
            self._report(chunk)

    async def update_document(self, doc: Any, fn: Any) -> Any:
        """Stage ``fn(old) -> new`` (or a new value) for a document (its
        definition, or its kind): the conversation's, or this call's task's
        for a task-scoped kind. It is checked now (``InvalidInput`` if the
        result does not fit the schema) and committed with this call's
        result, or not at all; returns the new value."""
        if self._update_document is None:
            raise RuntimeError("this tool call cannot update documents (no harness)")
        return await self._update_document(doc, fn)

    async def record_process(self, pid: int) -> None:
        """Durably record the OS process group ``pid`` leads in this call's
        checkpoint; returns once the commit is durable. Call it after
        starting a process but before letting its command run (see
        ``LocalEnv.run``): if the harness dies, the next open kills what was
        left running."""
        if self._record is None:
            raise RuntimeError("this tool call cannot record processes (no harness)")
        await self._record(pid)


Execute = Callable[[ToolCallContext, dict[str, Any]], Awaitable["ToolResult | str"]]


@attrs.frozen(kw_only=True)
class Reconciled:
    """What a tool's ``reconcile`` found: make one with :meth:`done`,
    :meth:`not_done` or :meth:`unknown`."""

    #: ``done`` | ``not_done`` | ``unknown`` (the entry's ``data["reconciled"]``).
    verdict: str
    #: ``done``: the result the call settles with (as if execute returned it).
    result: ToolResult | str | None = None
    #: ``unknown``: what the model is told next to "may have partially run".
    note: str = ""

    @classmethod
    def done(cls, result: ToolResult | str) -> Reconciled:
        """The effect happened; ``result`` is what execute would have returned."""
        return cls(verdict="done", result=result)

    @classmethod
    def not_done(cls) -> Reconciled:
        """The effect provably did not happen: run ``execute`` again."""
        return cls(verdict="not_done")

    @classmethod
    def unknown(cls, note: str) -> Reconciled:
        """It cannot tell; ``note`` says why (or what is known)."""
        return cls(verdict="unknown", note=note)


Reconcile = Callable[[ToolCallContext, dict[str, Any]], Awaitable[Reconciled]]


@attrs.frozen(kw_only=True)
class ToolDefinition:
    name: str
    description: str
    parameters: dict[str, Any]
    execute: Execute
    replay: str = "unsafe"
    execution_mode: str = "parallel"
    #: How much of a result reaches the transcript (and what is kept).
    output_limits: OutputLimits = OutputLimits()
    #: Asked after an interrupted execution (unsafe tools): see ``Reconciled``.
    reconcile: Reconcile | None = None

    def info(self) -> ToolInfo:
        return ToolInfo(
            name=self.name, replay=self.replay, execution_mode=self.execution_mode, reconcile=self.reconcile is not None
        )

    def validate(self, arguments: Any) -> str | None:
        """None if ``arguments`` fit the schema, else a readable problem."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, not {type(arguments).__name__}"
        validator = _validator(self.parameters)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        parts = []
        for e in errors[:5]:
            where = "/".join(str(p) for p in e.absolute_path)
            parts.append(f"{where}: {e.message}" if where else e.message)
        return "; ".join(parts)


_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def _validator(schema: dict[str, Any]) -> Any:
    """A compiled validator per schema object (building one per call is slow)."""
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = (schema, jsonschema.Draft202012Validator(schema))
        _VALIDATORS[id(schema)] = hit
    return hit[1]


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _schema_from_attrs(cls: type) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    for f in attrs.fields(cls):
        t = f.type if isinstance(f.type, type) else None
        props[f.name] = {"type": _JSON_TYPES[t]} if t in _JSON_TYPES else {}
        if f.default is attrs.NOTHING:
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required}


def define_tool(
    name: str,
    description: str,
    parameters: dict[str, Any] | type,
    execute: Execute,
    replay: str = "unsafe",
    execution_mode: str = "parallel",
    output_limits: OutputLimits | tuple[Any, ...] | None = None,
    reconcile: Reconcile | None = None,
) -> ToolDefinition:
    """Define a tool. ``parameters`` is a JSON Schema dict (or an attrs class
    whose fields become the schema). ``output_limits``: None (50 KiB, 2000
    lines, keep the head), an ``OutputLimits`` or ``(max_bytes, max_lines,
    retain)``. ``reconcile`` (unsafe tools only): ``async fn(call, args) ->
    Reconciled``, asked after an interrupted execution (module docstring).
    Bad definitions fail here, loudly."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"Tool name {name!r} must match {_NAME.pattern}")
    if replay not in ("safe", "unsafe"):
        raise ValueError(f"Tool {name}: replay must be 'safe' or 'unsafe', not {replay!r}")
    if execution_mode not in ("parallel", "sequential"):
        raise ValueError(f"Tool {name}: execution_mode must be 'parallel' or 'sequential'")
    if not callable(execute):
        raise TypeError(f"Tool {name}: execute must be an async function")
    if reconcile is not None and not callable(reconcile):
        raise TypeError(f"Tool {name}: reconcile must be an async function")
    if reconcile is not None and replay != "unsafe":
        raise ValueError(f"Tool {name}: reconcile is for unsafe tools (a safe tool simply runs again)")
    limits = _output_limits(output_limits, f"Tool {name}")
    if isinstance(parameters, type) and attrs.has(parameters):
        schema = _schema_from_attrs(parameters)
    elif isinstance(parameters, dict):
        schema = parameters
    else:
        raise TypeError(f"Tool {name}: parameters must be a JSON Schema dict or an attrs class")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ValueError(f"Tool {name}: parameters is not a valid JSON Schema: {e.message}") from None
    check_definition_json(schema, f"Tool {name}: parameters")
    if not isinstance(description, str) or check_definition_json(description, f"Tool {name}: description") != description:
        raise ValueError(f"Tool {name}: description must be valid text (a str without lone surrogates)")
    return ToolDefinition(
        name=name,
        description=description,
        parameters=schema,
        execute=execute,
        replay=replay,
        execution_mode=execution_mode,
        output_limits=limits,
        reconcile=reconcile,
    )


@attrs.frozen(kw_only=True)
class Progress:
    """What a custom task phase may return instead of calling
    ``runtime.commit``: its next state (``running`` with a new checkpoint,
    ``waiting`` on tasks, or ``terminal`` with an outcome)."""

    status: str
    checkpoint: dict[str, Any] | None = None
    on: tuple[int, ...] = ()
    policy: str = "allSettled"
    outcome: Any = None


Phase = Callable[[Task, "TaskRuntime"], Awaitable["Progress | None"]]


@attrs.frozen(kw_only=True)
class TaskDefinition:
    """A custom task kind: ``initial(input) -> checkpoint`` and one async
    handler per phase, ``phase(task, runtime) -> Progress | None``."""

    kind: str
    initial: Callable[[dict[str, Any]], dict[str, Any]]
    phases: dict[str, Phase]
    version: int = 1
    abort: Phase | None = None
    migrate: Callable[[dict[str, Any], dict[str, Any], int], tuple[dict[str, Any], dict[str, Any]]] | None = None

    def info(self) -> TaskInfo:
        return TaskInfo(
            kind=self.kind,
            version=self.version,
            phases=tuple(self.phases),
            has_abort=self.abort is not None,
            has_migrate=self.migrate is not None,
        )


def define_task(
    kind: str,
    initial: Callable[[dict[str, Any]], dict[str, Any]],
    phases: dict[str, Phase],
    version: int = 1,
    abort: Phase | None = None,
    migrate: Callable[[dict[str, Any], dict[str, Any], int], tuple[dict[str, Any], dict[str, Any]]] | None = None,
) -> TaskDefinition:
    """Define a custom durable task kind (see docs/custom-tasks.md)."""
    if not isinstance(kind, str) or not _NAME.match(kind) or kind.startswith("pi."):
        raise ValueError(f"Task kind {kind!r} must match {_NAME.pattern} and not start with 'pi.'")
    if not is_int_in(version, 1):
        raise ValueError(f"Task {kind}: version must be a positive integer (at most 2**63 - 1)")
    if not phases or not all(isinstance(k, str) and callable(v) for k, v in phases.items()):
        raise ValueError(f"Task {kind}: phases must map phase names to async functions")
    if not callable(initial):
        raise TypeError(f"Task {kind}: initial must be a function input -> checkpoint")
    return TaskDefinition(
        kind=kind, initial=initial, phases=dict(phases), version=version, abort=abort, migrate=migrate
    )


#: The hooks an extension may define, and what each receives.
HOOK_NAMES = (
    "before_tool",
    "after_tool",
    "before_request",
    "after_response",
    "after_tools",
    "on_yield",
    "on_abort",
    "before_compact",
)
#: The hooks a step must ask the shell to run before it commits (the core
#: learns which extensions have them from ``ExtensionInfo.hooks``).
CORE_HOOKS = ("after_tools", "on_abort")


_SECTION_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")


@attrs.frozen(kw_only=True)
class PromptInput:
    """What a section renderer gets: the conversation, its agent settings
    and the harness's env."""

    conversation_id: int
    agent: AgentConfig
    env: Any


@attrs.frozen(kw_only=True)
class Section:
    """A system-prompt section: ``render(PromptInput) -> str | None`` (sync
    or async; None omits it), wrapped ``<key>\n...\n</key>`` when ``tag``."""

    key: str
    render: Callable[[PromptInput], Any]
    tag: bool = True


def section(key: str, render: Callable[[PromptInput], Any], *, tag: bool = True) -> Section:
    """A section for ``define_extension(sections=[...])``. Keys match
    ``^[a-z][a-z0-9_-]*$``; ``instructions`` is reserved (the agent's own)."""
    if not isinstance(key, str) or not _SECTION_KEY.match(key):
        raise ValueError(f"Section key {key!r} must match {_SECTION_KEY.pattern}")
    if key == "instructions":
        raise ValueError("Section key 'instructions' is reserved for AgentConfig.instructions")
    if not callable(render):
        raise TypeError(f"Section {key}: render must be a function PromptInput -> str | None")
    if not isinstance(tag, bool):
        raise TypeError(f"Section {key}: tag must be a bool")
    return Section(key=key, render=render, tag=tag)


@attrs.frozen(kw_only=True)
class Extension:
    """A named bundle of tools, task definitions, hooks and prompt sections."""

    name: str
    tools: tuple[ToolDefinition, ...] = ()
    tasks: tuple[TaskDefinition, ...] = ()
    hooks: dict[str, Callable[..., Awaitable[Any]]] = attrs.field(factory=dict)
    sections: tuple[Section, ...] = ()
    #: Host-defined document kinds (``define_doc``).
    docs: tuple[DocDefinition, ...] = ()

    def info(self) -> ExtensionInfo:
        return ExtensionInfo(
            name=self.name,
            tools=tuple(t.name for t in self.tools),
            sections=tuple(s.key for s in self.sections),
            hooks=tuple(h for h in CORE_HOOKS if h in self.hooks),
        )


def define_extension(
    name: str,
    *,
    sections: Iterable[Any] = (),
    tools: Iterable[ToolDefinition] = (),
    hooks: dict[str, Callable[..., Awaitable[Any]]] | None = None,
    tasks: Iterable[TaskDefinition] = (),
) -> Extension:
    """``hooks``: ``before_tool(ctx, call) -> dict | None`` (new arguments;
    raising blocks the call: "Tool call blocked: <message>"),
    ``after_tool(ctx, call, result) -> ToolResult | None``,
    ``before_request(ctx, messages) -> list | None`` (this request only),
    ``after_response(ctx, reply) -> None`` (an observer of every complete
    model message), ``after_tools(ctx, results) -> Control | None`` (the
    settled round's result entries, in call order), ``on_yield(ctx, answer)
    -> bool | str | None`` (True or a text asks the run to continue; the
    first that does wins), ``on_abort(ctx, call, result) -> ToolResult |
    None`` (replaces an aborted call's result), ``before_compact(ctx, info)
    -> None | {"decline": True} | {"summary": text}`` (the first decision
    wins). A raising hook is reported to ``on_report``."""
    sections = tuple(sections)
    if not all(isinstance(s, Section) for s in sections):
        raise TypeError(f"Extension {name}: sections must be made with section(key, render)")
    keys = [s.key for s in sections]
    if len(keys) != len(set(keys)):
        raise ValueError(f"Extension {name} defines a section key twice")
    hooks = dict(hooks or {})
    for hook_name, fn in hooks.items():
        if hook_name not in HOOK_NAMES:
            raise ValueError(f"Extension {name}: unknown hook {hook_name!r} (known: {', '.join(HOOK_NAMES)})")
        if not callable(fn):
            raise TypeError(f"Extension {name}: hook {hook_name} must be an async function")
    return Extension(name=name, tools=tuple(tools), tasks=tuple(tasks), hooks=hooks, sections=sections)


class Registry:
    """Process-local set of installed extensions; never stored.

    ``install`` replaces an extension of the same name in place (a bare tool is
    installed as an extension of its own name). Listeners (the runtime) hear
    every change and tell the core, which reconsiders waiting work.
    """

    def __init__(self) -> None:
        self._extensions: dict[str, Extension] = {}
        self._listeners: list[Callable[[], None]] = []
        #: Bumped by every install and uninstall: what a cache of the
        #: installed tools is keyed by.
        self.version = 0
        #: ``tools()`` as of ``version`` (every tool call and request reads it)
        self._tools: dict[str, ToolDefinition] | None = None
        #: ``named_hooks`` answers as of ``version`` (asked several times per
        #: model round, nearly always for none: issue 11 item 2)
        self._hooks: dict[tuple[str, tuple[str, ...] | None], tuple[tuple[str, Callable[..., Awaitable[Any]]], ...]] = {}

    def install(
        self, item: Extension | ToolDefinition | TaskDefinition | DocDefinition | Iterable[ToolDefinition]
    ) -> None:
        if isinstance(item, DocDefinition):
            item = Extension(name=item.kind, docs=(item,))
        if isinstance(item, ToolDefinition):
            ext = Extension(name=item.name, tools=(item,))
        elif isinstance(item, TaskDefinition):
            ext = Extension(name=item.kind, tasks=(item,))
        elif isinstance(item, Extension):
            ext = item
        else:
            tools = tuple(item)
            if not all(isinstance(t, ToolDefinition) for t in tools):
                raise TypeError("install() takes an extension, a tool, or an iterable of tools")
            for t in tools:
                self.install(t)
            return
        names = [t.name for t in ext.tools]
        if len(names) != len(set(names)):
            raise ValueError(f"Extension {ext.name} defines a tool name twice")
        kinds = [t.kind for t in ext.tasks]
        others = {t.kind for e in self._extensions.values() if e.name != ext.name for t in e.tasks}
        if len(kinds) != len(set(kinds)) or others & set(kinds):
            raise ValueError(f"Extension {ext.name}: a task kind is defined twice")
        doc_kinds = [d.kind for d in ext.docs]
        other_docs = {d.kind for e in self._extensions.values() if e.name != ext.name for d in e.docs}
        if len(doc_kinds) != len(set(doc_kinds)) or other_docs & set(doc_kinds):
            raise ValueError(f"Extension {ext.name}: a document kind is defined twice")
        self._extensions[ext.name] = ext
        self._changed()

    def doc(self, kind: str) -> DocDefinition | None:
        """The installed definition of document ``kind``."""
        for ext in self._extensions.values():
            for d in ext.docs:
                if d.kind == kind:
                    return d
        return None

    def uninstall(self, name: str) -> None:
        if self._extensions.pop(name, None) is None:
            raise KeyError(f"No extension or tool named {name!r} is installed")
        self._changed()

    def tools(self) -> dict[str, ToolDefinition]:
        """Installed tools by name; a later extension's tool replaces an earlier one."""
        return dict(self._installed())

    def tool(self, name: str) -> ToolDefinition | None:
        return self._installed().get(name)

    def catalog(self) -> tuple[ToolInfo, ...]:
        return tuple(t.info() for t in self._installed().values())

    def _installed(self) -> dict[str, ToolDefinition]:
        """``tools()``, built once per change (never handed out: callers copy)."""
        if self._tools is None:
            out: dict[str, ToolDefinition] = {}
            for ext in self._extensions.values():
                for t in ext.tools:
                    out[t.name] = t
            self._tools = out
        return self._tools

    def task(self, kind: str) -> TaskDefinition | None:
        for ext in self._extensions.values():
            for t in ext.tasks:
                if t.kind == kind:
                    return t
        return None

    def extension_catalog(self) -> tuple[ExtensionInfo, ...]:
        """Every installed extension (install order): its tools and section keys."""
        return tuple(ext.info() for ext in self._extensions.values())

    def extension(self, name: str) -> Extension | None:
        return self._extensions.get(name)

    def task_catalog(self) -> tuple[TaskInfo, ...]:
        return tuple(t.info() for ext in self._extensions.values() for t in ext.tasks)

    def named_hooks(
        self, name: str, selection: tuple[str, ...] | None = None
    ) -> tuple[tuple[str, Callable[..., Awaitable[Any]]], ...]:
        """(extension name, hook) for the hooks of that name: of every
        extension in install order, or of the agent's ``selection`` (exactly
        those extensions, in its order). Found once per change of what is
        installed (an installed ``Extension`` is frozen)."""
        key = (name, selection)
        found = self._hooks.get(key)
        if found is None:
            exts = self._extensions.values() if selection is None else [
                self._extensions[n] for n in selection if n in self._extensions]
            found = tuple((ext.name, ext.hooks[name]) for ext in exts if name in ext.hooks)
            if len(self._hooks) >= 256:
                self._hooks.clear()  # too many agents' selections
            self._hooks[key] = found
        return found

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self) -> None:
        self.version += 1
        self._tools = None
        self._hooks = {}
        for listener in list(self._listeners):
            listener()
