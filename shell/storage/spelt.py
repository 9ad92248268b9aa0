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
from operator import is_
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


#: The tool calls :func:`tool_calls_json` encoded last and their text: an
#: assistant entry's, which its ModelResponded in the same commit shares
#: (:func:`events_json`; one pair, replaced whole, so a reader on another
#: thread sees a matching pair or calls that are not its own).
last_calls: tuple[Sequence[ToolCall], str] = ((), "[]")
#: The text :mod:`.rows` encoded last for an entry and its JSON text (a
#: str: immutable, so a text that is it encodes alike, in any commit): a
#: tool result's is its ToolFinished's, an answer's its ModelResponded's
#: (issue 11 item 2: a long tool output encoded once).
last_text: tuple[str, str] = ("", '""')
#: :data:`last_calls` forgotten (what :mod:`.rows` sets before a commit's writes).
NO_CALLS: tuple[Sequence[ToolCall], str] = last_calls


def tool_calls_json(calls: Sequence[ToolCall]) -> str:
    """The JSON text of :func:`plain_tool_calls` (an entry's tool calls),
    kept for the commit's ModelResponded (issue 11 item 2: encoded once)."""
    global last_calls
    text = "".join(_chunks(plain_tool_calls(calls), 0))
    last_calls = (calls, text)
    return text


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


def events_json(events: Sequence[Event], shared: bool = False) -> str:
    """:func:`.codec.events_json` of the current format: the same text. A
    commit of one plain ToolFinished (most tool steps) or one ModelResponded
    (a model step) is joined from pieces (issue 11 item 2: no hook, no dict,
    no encoder call); any field of another type or set goes the general way.
    ``shared``: the commit's writes were encoded just before (:mod:`.rows`):
    tool calls that are its assistant entry's, call for call, take the
    entry's text (:func:`tool_calls_json`)."""
    if len(events) == 1:
        e = events[0]
        if type(e) is ToolFinished:
            now, task_id, text = e.now, e.task_id, e.text
            if (
                type(now) is int and type(task_id) is int and type(text) is str and e.is_error is False
                and e.usage is None and e.truncated is None and e.control is None
                and type(e.documents) is tuple and not e.documents and type(e.diagnostics) is tuple and not e.diagnostics
            ):
                last, text_j = last_text
                if text is not last:
                    text_j = _encode_str(text)
                return f'[{{"now":{now},"task_id":{task_id},"text":{text_j}{_TOOL_FINISHED_TAIL}'
        elif type(e) is ModelResponded and (joined := _model_responded_json(e, shared)) is not None:
            return joined
    return codec.events_json(events, hooks=_EVENTS)


#: ``plain``'s encoder (``(value, 0)`` -> chunks), called directly.
_chunks = codec.plain_chunks
_MODEL_RESPONDED_TAIL = ',"type":' + codec.dumps(ModelResponded.TAG) + "}]"


def _model_responded_json(e: ModelResponded, shared: bool) -> str | None:
    """A commit's lone ModelResponded joined from pieces in the order of
    :func:`plain_model_responded` (keys: constants); None: the general way
    (a field of another type, or anything raised: the general way raises
    it again, itself)."""
    now, task_id, attempt, text, calls, stop, usage, prepared, cont = (
        e.now, e.task_id, e.attempt, e.text, e.tool_calls, e.stop_reason, e.usage, e.prepared, e.continuation
    )
    if (
        type(now) is not int or type(task_id) is not int or type(attempt) is not int or type(text) is not str
        or type(calls) is not tuple or type(stop) is not str or type(prepared) is not tuple
        or (cont is not None and type(cont) is not str)
    ):
        return None
    try:
        text_j = ""
        if text != "":
            last, text_j = last_text
            text_j = f',"text":{text_j if text is last else _encode_str(text)}'
        calls_j = ""
        if calls:
            last_c, calls_text = last_calls
            if shared and len(last_c) == len(calls) and all(map(is_, last_c, calls)):
                calls_j = ',"tool_calls":' + calls_text
            else:
                calls_j = ',"tool_calls":' + "".join(_chunks(plain_tool_calls(calls), 0))
        usage_j = "" if usage is None else ',"usage":' + "".join(_chunks(plain_usage(usage), 0))
        prepared_j = ""
        if prepared:
            out = []
            one_each = len(prepared) == len(calls)
            same = codec._same_json
            for i, p in enumerate(prepared):
                if p is None:
                    out.append("null")
                    continue
                if type(p) is not PreparedCall or type(replay := p.replay) is not str:
                    return None
                args = p.arguments
                if one_each and ((call_args := calls[i].arguments) is args or same(args, call_args)):
                    out.append(f'{{"replay":{_encode_str(replay)}}}')
                else:
                    out.append(f'{{"arguments":{"".join(_chunks(args, 0))},"replay":{_encode_str(replay)}}}')
            prepared_j = ',"prepared":[' + ",".join(out) + "]"
    except Exception:  # noqa: BLE001 - not plain data, or odd: the general way, which raises its own error
        return None
    return (
        f'[{{"now":{now},"task_id":{task_id},"attempt":{attempt}{text_j}'
        f'{calls_j}{"" if stop == "stop" else f",{_STOP}{_encode_str(stop)}"}{usage_j}{prepared_j}'
        f'{"" if cont is None else f",{_CONT}{_encode_str(cont)}"}{_MODEL_RESPONDED_TAIL}'
    )


_STOP, _CONT = '"stop_reason":', '"continuation":'
