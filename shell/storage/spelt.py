"""Spelt-out copies of ``codec.plain``'s hooks for what every step encodes
(issue 11 item 2: a cheap write path).

cattrs' generated hooks are good code, but a record nested in a sequence (a
message's tool calls, its prepared calls) goes through three generic calls
per item, and a field with a default factory calls it for every record. The
copies here, and the row encoders of :mod:`.rows`, spell the fields out
instead; :func:`check_spelt` checks each against its class at import (every
field in order, the default it is left out at, whether ``plain`` hands it
over as it is), and tests/shell/test_codec_plain.py checks the texts against
the reference encoding over generated records.

:func:`events_json` is :func:`.codec.events_json` for the current format with
a ModelResponded spelt out (one a tool round).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as _encode_str
from typing import Any, get_type_hints

import attrs
from cattrs.fns import identity

from pidurable.core.events import ModelResponded, PreparedCall, ToolFinished
from pidurable.core.events import Event
from pidurable.core.model import ToolCall, Usage
from pidurable.core.records import spelt_out

from . import codec

#: A field without a default: always written.
NO_DEFAULT = attrs.NOTHING


def check_spelt(cl: type, leading: tuple[str, ...], rest: tuple[tuple[str, Any, bool], ...]) -> None:
    """Check a spelt-out copy of ``codec.plain``'s hook of attrs class ``cl``
    at import: ``leading`` (fields the copy writes its own way) and then
    ``rest``'s names are its fields in order (:func:`spelt_out`), and each
    of ``rest`` is ``(name, the default the copy leaves it out at, whether
    plain hands it over as it is)``."""
    spelt_out(cl, leading + tuple(name for name, _, _ in rest))
    hints = get_type_hints(cl)
    for f, (name, default, as_is) in zip(attrs.fields(cl)[len(leading) :], rest, strict=True):
        d = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[arg-type]
        if type(d) is not type(default) or d != default or (codec.plain.get_unstructure_hook(hints[name]) is identity) != as_is:
            raise AssertionError(f"{cl.__name__}.{name}: its spelt-out encoding is out of date")


check_spelt(ToolCall, (), (("id", NO_DEFAULT, True), ("name", NO_DEFAULT, True), ("arguments", {}, True)))
check_spelt(PreparedCall, (), (("arguments", NO_DEFAULT, True), ("replay", NO_DEFAULT, True)))
check_spelt(ModelResponded, (), (
    ("now", NO_DEFAULT, True), ("task_id", NO_DEFAULT, True), ("attempt", NO_DEFAULT, True), ("text", "", True),
    ("tool_calls", (), False), ("stop_reason", "stop", True), ("usage", None, False), ("prepared", (), False),
    ("continuation", None, True),
))  # fmt: skip
#: ``plain``'s hook of a usage (rare: not spelt out).
plain_usage = codec.plain.get_unstructure_hook(Usage)


def plain_tool_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """``plain``'s encoding of a message's tool calls (an entry's, a
    ModelResponded's)."""
    out = []
    for c in calls:
        call: dict[str, Any] = {"id": c.id, "name": c.name}
        if c.arguments != {}:
            call["arguments"] = c.arguments
        out.append(call)
    return out


def plain_model_responded(e: ModelResponded) -> dict[str, Any]:
    """``plain``'s hook of ModelResponded (its lean journal form: a prepared
    call whose arguments encode like its tool call's leaves them out,
    ``codec._lean_prepared``)."""
    calls, prepared = e.tool_calls, e.prepared
    data: dict[str, Any] = {"now": e.now, "task_id": e.task_id, "attempt": e.attempt}
    if e.text != "":
        data["text"] = e.text
    if calls != ():
        data["tool_calls"] = plain_tool_calls(calls)
    if e.stop_reason != "stop":
        data["stop_reason"] = e.stop_reason
    if e.usage is not None:
        data["usage"] = plain_usage(e.usage)
    if prepared != ():
        out: list[dict[str, Any] | None] = []
        if prepared and len(prepared) == len(calls):
            same = codec._same_json
            for p, call in zip(prepared, calls, strict=True):
                if p is None:
                    out.append(None)
                elif same(p.arguments, call.arguments):
                    out.append({"replay": p.replay})
                else:
                    out.append({"arguments": p.arguments, "replay": p.replay})
        else:
            for p in prepared:
                out.append(None if p is None else {"arguments": p.arguments, "replay": p.replay})
        data["prepared"] = out
    if e.continuation is not None:
        data["continuation"] = e.continuation
    return data


#: Each event class's plain hook and wire tag (:data:`.codec.PLAIN_EVENTS`), a ModelResponded's spelt out.
_EVENTS: dict[type, tuple[Callable[[Any], dict[str, Any]], str]] = {
    **codec.PLAIN_EVENTS, ModelResponded: (plain_model_responded, ModelResponded.TAG)
}


check_spelt(ToolFinished, (), (
    ("now", NO_DEFAULT, True), ("task_id", NO_DEFAULT, True), ("documents", (), False), ("text", NO_DEFAULT, True),
    ("is_error", False, True), ("usage", None, False), ("truncated", None, True), ("control", None, True),
    ("diagnostics", (), False),
))  # fmt: skip


#: ``,"type":"tool_finished"}]``: the end of a commit's events text of one ToolFinished.
_TOOL_FINISHED_TAIL = ',"type":' + codec.dumps(ToolFinished.TAG) + "}]"


def events_json(events: Sequence[Event]) -> str:
    """:func:`.codec.events_json` of the current format: the same text. A
    commit of one plain ToolFinished (most tool steps) is joined from pieces
    (issue 11 item 2: no hook, no dict, no encoder call); any field of
    another type or set goes the general way."""
    if len(events) == 1 and type(e := events[0]) is ToolFinished:
        now, task_id, text = e.now, e.task_id, e.text
        if (
            type(now) is int and type(task_id) is int and type(text) is str and e.is_error is False
            and e.usage is None and e.truncated is None and e.control is None
            and type(e.documents) is tuple and not e.documents and type(e.diagnostics) is tuple and not e.diagnostics
        ):
            return f'[{{"now":{now},"task_id":{task_id},"text":{_encode_str(text)}{_TOOL_FINISHED_TAIL}'
    return codec.events_json(events, hooks=_EVENTS)
