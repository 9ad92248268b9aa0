"""The trust boundary: every value that enters from outside is checked here.

Theory of operation
-------------------
Three kinds of values reach the harness from outside, and each is checked
once, at the edge, before it can reach the pure core or the codec:

- **Host input** (``conv.submit``, ``configure``, ``create_conversation``,
  memos, custom-task checkpoints): checked by the ``check_*`` functions
  (``host_input.py``). Bad
  input raises :class:`InvalidInput`; nothing is stored and the harness keeps
  working. Host input is never silently altered.
- **Results of the shell's own effects** that carry outside data (provider
  replies and partials, tool output, hook results, migrations): cleaned by
  :func:`clean_event` as the event enters the reducer. Text is made valid
  UTF-8 (a lone surrogate becomes U+FFFD); a value that is not strict JSON
  (NaN, Infinity, an object) cannot be repaired, so the event is replaced by
  the failure it amounts to (``REFUSALS``): a provider reply becomes a
  non-retryable ``ModelFailed`` (the run settles ``unanswered/model_error``
  with the reason), hook-rewritten arguments a rejected call, a migration a
  failed migration.
- **Tool results**: :func:`tool_result` turns whatever ``execute`` returned
  into a checked ``ToolResult`` or raises :class:`EdgeError` (the call then
  gets an error result).

Why at the edge: a value the codec cannot encode would fail the commit that
holds it; the harness would stop, and every reopen would re-send the same
request (or re-run the same safe tool) and stop again. After this module,
every event the core sees encodes. ``tests/shell/test_poison.py`` shows it.
The strict-JSON checks themselves (``clean_json``, ``clean_text``, the
limits on ints and nesting) are in ``strict_json.py``, which definitions
use too.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

import attrs

from pidurable.core.events import (
    CutSelected,
    Event,
    InvocationFailed,
    MigrationFinished,
    ModelDeferred,
    ModelFailed,
    ModelResponded,
    ModelStreamed,
    PhaseReturned,
    ToolFailed,
    ToolFinished,
    ToolAbortHooked,
    AfterToolsRan,
    ToolPrepared,
    SystemRendered,
    ToolProcessStarted,
    ToolProgressed,
    ToolRejected,
)
from pidurable.core.bounds import is_int_in, shown
from pidurable.core.model import Diagnostic, Json, Severity, Usage

from .record_inits import new_ToolResult
from .strict_json import (  # (re-exported: the edge's public names, and the quick checks' helpers)
    _AS_IS,
    _ASCII,
    _FLAT,
    _INT_LIMIT,
    _IS_STR,
    _STRS,
    MAX_DEPTH,
    EdgeError,
    _Bad,
    _clean,
    _clean_dict,
    _ints_fit,
    clean_json,
    clean_text,
    has_surrogates,
)
from .registry import Control, ToolResult

log = logging.getLogger("pidurable")

def clean_usage(usage: Any, where: str) -> Usage | None:
    """A provider's or tool's token counts, or None (with a warning) when
    they are not non-negative integers: bad usage never fails a reply."""
    if usage is None:
        return None
    if isinstance(usage, Usage):
        counts = []
        for name in ("input_tokens", "output_tokens"):
            n = getattr(usage, name)
            if isinstance(n, float) and math.isfinite(n) and n.is_integer():
                n = int(n)
            if not is_int_in(n):
                log.warning("%s: usage %s=%s is not a token count; usage dropped", where, name, shown(n))
                return None
            counts.append(n)
        return Usage(input_tokens=counts[0], output_tokens=counts[1])
    log.warning("%s: usage %r is not a Usage; usage dropped", where, usage)
    return None


# --- events from the shell's interpreters ------------------------------------------


#: Per record class (``_plan``): its field names and a getter of all their values (one call);
#: its groups of fields for ``_clean_event``'s quick checks: names and getter of each.
_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
_GROUPS: dict[type, tuple[Any, ...]] = {}
_RECORDS: dict[type, bool] = {}
_BOXES, _DICTS = frozenset({tuple, dict, type(None)}), frozenset({dict})  #: containers (JSON as they are when empty)


def _plan(cls: type) -> tuple[tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]], tuple[Any, ...]]:
    """``_FIELDS`` and ``_GROUPS`` of an attrs class. The groups: fields declared
    tuple / dict (boxes), the rest (flat; ``usage`` too); a getter None for none.
    A declared type is only a hint: a value not of its group fails the check."""
    names = [f.name for f in attrs.fields(cls)]
    groups: tuple[list[str], list[str]] = ([], [])
    for f in attrs.fields(cls):
        spelt = f.type if isinstance(f.type, str) else repr(f.type)
        groups[spelt.startswith(("tuple[", "dict[")) and f.name != "usage"].append(f.name)
    boxes = tuple(x for g in groups for x in (tuple(g), _getter(g) if g else None))
    known = _FIELDS[cls], _GROUPS[cls] = (tuple(names), _getter(names)), boxes
    return known


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    # the values as a tuple in one call (``attrgetter`` of one name gives the value itself)
    return operator.attrgetter(*(names * 2 if len(names) == 1 else names))


def _is_record(cls: type) -> bool:
    """``attrs.has(cls)``, remembered per class (asked for every field of every event)."""
    known = _RECORDS.get(cls)
    if known is None:
        known = _RECORDS[cls] = attrs.has(cls)
    return known


def _clean_event(event: Any, where: str) -> Any:
    """``_clean_fields`` of an event after a quick check in C per group of
    fields (issue 11 item 2): a group whose values the loop would all pass
    (ints, bools, None, ASCII text; empty boxes) is not looped over."""
    flat_names, flat, box_names, boxes = _GROUPS.get(type(event)) or _plan(type(event))[1]
    flat_ok = flat is None or (
        _FLAT.issuperset(map(type, fv := flat(event))) and all(map(_ASCII, filter(_IS_STR, fv))) and _ints_fit(fv)
    )
    boxes_ok = boxes is None or (_BOXES.issuperset(map(type, bv := boxes(event))) and not any(bv))
    if flat_ok:
        return event if boxes_ok else _clean_fields(event, where, (box_names, boxes))
    return _clean_fields(event, where, (flat_names, flat) if boxes_ok else None)


def _clean_fields(obj: Any, where: str, fields: tuple[tuple[str, ...], Any] | None = None) -> Any:
    """An attrs record with every str/JSON field (or those of ``fields``) cleaned
    (nested records too); raises EdgeError for a value that cannot be JSON. ASCII
    text, ints, None, empty containers pass without a call; a message is made only
    for a refusal."""
    names, get = fields or _FIELDS.get(type(obj)) or _plan(type(obj))[0]
    changes: dict[str, Any] | None = None
    for name, v in zip(names, get(obj)):
        t = type(v)
        if t is str:
            if v.isascii():
                continue
            new: Any = clean_text(v)
        elif (t in _AS_IS and (t is not int or -_INT_LIMIT < v < _INT_LIMIT)) or (
            (t is tuple or t is dict) and not v and name != "usage"
        ):
            continue  # clean: a scalar, an empty container (but an empty usage is no Usage)
        elif name == "usage":
            new = clean_usage(v, where)
        elif t is dict:
            new = _clean_value(v, where, name)
        elif t is tuple:
            new = _clean_tuple(v, where, name)
        elif _is_record(t):
            new = _clean_fields(v, where)
        else:
            new = _clean_value(v, where, name)
        if new is not v:
            if changes is None:
                changes = {}
            changes[name] = new
    return attrs.evolve(obj, **changes) if changes else obj


def _clean_value(v: Any, where: str, name: str) -> Any:
    """``clean_json(v, f"{where} {name}")``, the message formatted only on a refusal."""
    try:
        return _clean(v)
    except _Bad as bad:
        raise EdgeError(f"{where} {name}{bad.where()}: {bad}") from None


def _clean_tuple(v: tuple[Any, ...], where: str, name: str) -> tuple[Any, ...]:
    """A non-empty tuple field: of records (None allowed), each cleaned as a
    record, or of JSON values; ``v`` itself when nothing changed."""
    for x in v:
        if x is None or _is_record(type(x)):
            break
    else:
        items = _clean_value(v, where, name)  # a list of the cleaned values
        return v if all(a is b for a, b in zip(items, v)) else tuple(items)
    if _plain_records(v):
        return v
    out: list[Any] | None = None
    for i, x in enumerate(v):
        c = _clean_fields(x, where) if x is not None else None
        if out is None and c is not x:
            out = list(v[:i])
        if out is not None:
            out.append(c)
    return v if out is None else tuple(out)


def _plain_records(v: tuple[Any, ...]) -> bool:
    """Records of one class whose values ``_clean_fields`` keeps: flat fields
    of ints, bools, None, ASCII text; boxes that are dicts of ASCII keys to
    such values (a reply's tool calls). All at once, in C (issue 11 item 2)."""
    cls = type(v[0])
    if not _is_record(cls) or set(map(type, v)) != {cls}:
        return False
    _, flat, _, boxes = _GROUPS.get(cls) or _plan(cls)[1]
    fv = () if flat is None else tuple(chain.from_iterable(map(flat, v)))
    bv = () if boxes is None else tuple(chain.from_iterable(map(boxes, v)))
    if not (_FLAT.issuperset(map(type, fv)) and _DICTS.issuperset(map(type, bv))):
        return False
    keys, values = tuple(chain.from_iterable(bv)), tuple(chain.from_iterable(map(dict.values, bv)))
    return _STRS.issuperset(map(type, keys)) and _FLAT.issuperset(map(type, values)) and all(
        map(_ASCII, chain(keys, filter(_IS_STR, fv), filter(_IS_STR, values)))) and _ints_fit(chain(fv, values))


def _refuse_reply(ev: Any, error: EdgeError) -> Event:
    message = f"The provider's reply cannot be stored: {error}"
    return ModelFailed(now=ev.now, task_id=ev.task_id, attempt=ev.attempt, message=message, retryable=False)


def _refuse_arguments(ev: Any, error: EdgeError) -> Event:
    return ToolRejected(now=ev.now, task_id=ev.task_id, code="invalid_arguments", message=f"Invalid arguments: {error}")


def _refuse_migration(ev: Any, error: EdgeError) -> Event:
    return MigrationFinished(now=ev.now, task_id=ev.task_id, version=ev.version, error=f"migrate() returned {error}")


def _refuse_tool(ev: Any, error: EdgeError) -> Event:
    return ToolFailed(now=ev.now, task_id=ev.task_id, message=f"The tool's result cannot be stored: {error}")


def _refuse_process(ev: ToolProcessStarted, error: EdgeError) -> Event:
    return attrs.evolve(ev, process={"error": str(error)})


#: Every event an interpreter produces from outside data, and what it becomes
#: when that data cannot be made JSON. Events not listed come from the host
#: (checked by the ``check_*`` functions before they are sent) or carry only
#: values the shell itself made.
REFUSALS: Mapping[type, Callable[[Any, EdgeError], Event]] = {
    ModelResponded: _refuse_reply,
    ModelDeferred: _refuse_reply,
    ModelStreamed: _refuse_reply,
    ModelFailed: _refuse_reply,
    ToolPrepared: _refuse_arguments,
    ToolRejected: _refuse_arguments,
    ToolFinished: _refuse_tool,
    ToolFailed: _refuse_tool,
    MigrationFinished: _refuse_migration,
    PhaseReturned: lambda ev, e: attrs.evolve(ev, error=str(e), ran={}),
    InvocationFailed: lambda ev, e: attrs.evolve(ev, message=str(e)),
    ToolProcessStarted: _refuse_process,
    # rendered sections that cannot be stored keep what the model was shown
    SystemRendered: lambda ev, e: attrs.evolve(ev, sections=(), failed=tuple(s.key for s in ev.sections)),
    # a before_compact hook's summary is host text: cleaned; a refusal lets
    # the model summarize instead
    CutSelected: lambda ev, e: attrs.evolve(ev, summary=None),
    # hook answers are host values: an on_abort text is cleaned (a refusal
    # keeps the handler's own result); an after_tools control likewise (a
    # refusal asks nothing)
    ToolAbortHooked: lambda ev, e: attrs.evolve(ev, text=None, truncated=None, diagnostics=()),
    AfterToolsRan: lambda ev, e: attrs.evolve(ev, control=None),
    # running output is text (always cleanable); a refusal shows nothing
    ToolProgressed: lambda ev, e: attrs.evolve(ev, output=""),
}


def clean_event(event: Event) -> Event:
    """The event with its outside values made valid UTF-8 / strict JSON, or
    the failure it amounts to (``REFUSALS``). Other events pass unchanged."""
    refuse = REFUSALS.get(type(event))
    if refuse is None:
        return event
    try:
        cleaned: Event = _clean_event(event, type(event).TAG)
    except EdgeError as e:
        log.warning("refused a value from outside (%s): %s", type(event).TAG, e)
        refused: Event = _clean_fields(refuse(event, e), "refusal")
        return refused
    return cleaned


def tool_result(name: str, result: object) -> ToolResult:
    """Whatever ``execute`` (or an ``after_tool`` hook) returned, as a
    checked ``ToolResult`` with valid text; raises EdgeError for anything
    else."""
    if isinstance(result, str):
        return new_ToolResult(text=clean_text(str(result)))  # no keyword dict (record_inits.py; issue 11 item 2)
    if not isinstance(result, ToolResult):
        raise EdgeError(f"Tool {name} returned {type(result).__name__}, not str or ToolResult")
    text = getattr(result, "text")
    if not isinstance(text, str):
        raise EdgeError(f"Tool {name} returned a ToolResult whose text is a {type(text).__name__}, not str")
    is_error = getattr(result, "is_error")
    if not isinstance(is_error, bool):
        raise EdgeError(f"Tool {name} returned a ToolResult whose is_error is not a bool")
    text, usage, what = clean_text(str(text)), clean_usage(result.usage, f"tool {name}"), f"Tool {name}'s result"
    control, diagnostics = check_control(result.control, what), check_diagnostics(result.diagnostics, what)
    return attrs.evolve(result, text=text, usage=usage, control=control, diagnostics=diagnostics)


def check_diagnostics(diagnostics: object, what: str) -> tuple[Diagnostic, ...]:
    """A result's diagnostics: ``Diagnostic``s with a severity of ``info``,
    ``warn`` or ``error`` (made a ``Severity``) and text message and code
    (lone surrogates replaced); raises EdgeError."""
    if isinstance(diagnostics, (str, bytes)) or not isinstance(diagnostics, (tuple, list)):
        raise EdgeError(f"{what}: diagnostics must be a list of Diagnostic, not {type(diagnostics).__name__}")
    out: list[Diagnostic] = []
    for d in diagnostics:
        if not isinstance(d, Diagnostic):
            raise EdgeError(f"{what}: a diagnostic is a {type(d).__name__}, not a Diagnostic")
        severity, message, code = d.severity, d.message, d.code
        if not isinstance(severity, str) or severity not in SEVERITIES:
            raise EdgeError(f"{what}: a diagnostic's severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")
        if not isinstance(message, str):
            raise EdgeError(f"{what}: a diagnostic's message must be a str, not {type(message).__name__}")
        if code is not None and not isinstance(code, str):
            raise EdgeError(f"{what}: a diagnostic's code must be a str or None, not {type(code).__name__}")
        out.append(Diagnostic(Severity(severity), clean_text(str(message)), None if code is None else clean_text(str(code))))
    return tuple(out)


#: The severities a diagnostic may have.
SEVERITIES: tuple[str, ...] = tuple(Severity)


def check_control(control: object, what: str) -> Any:
    """A ``Control`` (or None) with valid values; raises EdgeError."""
    if control is None:
        return None
    if not isinstance(control, Control):
        raise EdgeError(f"{what} has a control that is a {type(control).__name__}, not a Control")
    if not isinstance(control.terminate, bool) or not isinstance(control.reset, bool):
        raise EdgeError(f"{what}: Control.terminate and Control.reset must be bools")
    handoff = control.handoff
    if handoff is not None and not isinstance(handoff, str):
        raise EdgeError(f"{what}: Control.handoff must be a string or None, not {type(handoff).__name__}")
    names = control.add_tools
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise EdgeError(f"{what}: Control.add_tools must be a list of tool names")
    return attrs.evolve(
        control, handoff=None if handoff is None else clean_text(handoff), add_tools=tuple(clean_text(n) for n in names)
    )


def control_json(control: Any) -> dict[str, Json] | None:
    """A checked ``Control`` as the JSON a core event carries (defaults
    dropped; ``reset`` is a handoff without text), or None when it asks
    nothing."""
    if control is None:
        return None
    out: dict[str, Json] = {}
    if control.terminate:
        out["terminate"] = True
    if control.handoff is not None:
        out["handoff"] = control.handoff
    elif control.reset:
        out["handoff"] = ""
    if control.add_tools:
        out["add_tools"] = list(control.add_tools)
    return out or None
