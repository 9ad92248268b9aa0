"""``edge.clean_event`` on the records an interpreter event nests (a model
reply's tool calls and prepared arguments): what is clean comes back as the
same objects, what is not is cleaned (a lone surrogate) or refused (NaN), at
any depth, with the field named."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from pidurable.core.events import ModelFailed, ModelResponded, PreparedCall, ToolFinished
from pidurable.core.model import Diagnostic, Severity, ToolCall, Usage
from pidurable.shell import edge
from pidurable.shell.edge import REFUSALS, clean_event


def _reply(arguments: list[dict[str, object]], prepared: list[dict[str, object] | None]) -> ModelResponded:
    return ModelResponded(
        now=1,
        task_id=2,  # type: ignore[arg-type]
        attempt=0,
        tool_calls=tuple(ToolCall(id=f"c{i}", name="t", arguments=a) for i, a in enumerate(arguments)),  # type: ignore[misc]
        prepared=tuple(None if p is None else PreparedCall(arguments=p, replay="safe") for p in prepared),  # type: ignore[misc]
    )


def test_a_clean_event_comes_back_itself() -> None:
    ev = _reply([{"i": 0, "s": "é", "l": [1, 2.5, None, True]}, {}], [{"i": 0}, None])
    assert clean_event(ev) is ev
    done = ToolFinished(now=1, task_id=2, text="ok")  # type: ignore[arg-type]
    assert clean_event(done) is done


def test_a_lone_surrogate_deep_in_a_call_is_replaced_and_the_rest_kept() -> None:
    ev = _reply([{"i": 0}, {"s": ["x\ud800"]}, {"k": 1}], [{"i": 0}, None, {"k": 1}])
    out = clean_event(ev)
    assert isinstance(out, ModelResponded) and out is not ev
    assert out.tool_calls[1].arguments == {"s": ["x\ufffd"]}
    assert out.tool_calls[0] is ev.tool_calls[0] and out.tool_calls[2] is ev.tool_calls[2]
    assert out.prepared is ev.prepared  # nothing to clean there


def test_nan_in_prepared_arguments_refuses_the_reply_naming_the_field() -> None:
    out = clean_event(_reply([{"x": 1}], [{"x": {"y": [math.nan]}}]))
    assert isinstance(out, ModelFailed) and not out.retryable
    assert out.message == (
        "The provider's reply cannot be stored: model_responded arguments.x.y[0]: "
        "nan is not a JSON number (NaN and Infinity are not allowed)"
    )


def test_infinity_in_a_call_refuses_the_reply() -> None:
    out = clean_event(_reply([{"i": 0}, {"k": math.inf}], [None, None]))
    assert isinstance(out, ModelFailed)
    assert out.message.endswith("model_responded arguments.k: inf is not a JSON number (NaN and Infinity are not allowed)")


def test_a_usage_that_is_not_a_usage_is_dropped_even_when_empty(caplog: pytest.LogCaptureFixture) -> None:
    """An empty dict (or tuple) where usage belongs is no ``Usage``: dropped
    with a warning, as any other non-Usage - not passed on as an empty
    container that needs no cleaning."""
    for bad in ({}, (), {"input_tokens": 1}):
        done = ToolFinished(now=1, task_id=2, text="ok", usage=bad)  # type: ignore[arg-type]
        out = clean_event(done)
        assert isinstance(out, ToolFinished) and out.usage is None and out.text == "ok"
    assert caplog.text.count("is not a Usage; usage dropped") == 3


class _Text(str):
    pass


#: Values a field of an interpreter event may hold, clean or not, of every
#: type the cleaning tells apart (``_clean_event``'s quick checks included).
def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


TRICKY: list[object] = [
    "", "ok", "é", "x\ud800", _Text("sub"), Severity.INFO, 0, 10**40, True, None, 1.5, math.nan, math.inf,
    (), {}, [], [1, "é"], ("a",), {"a": 1, "b": "c"}, {"a": math.nan}, {"é": "\ud800"}, {1: 2}, {"a": _Text("s")},
    {"\ud800": 1}, {"a": "é", "b": 1.5}, {"a": {"b": [None]}}, Usage(input_tokens=1), ToolCall(id="c", name="t", arguments={"x": "\ud800"}),
    (ToolCall(id="c", name="t"), None), (Diagnostic(Severity.WARN, "m\ud800"),), object(),
    # tuples of records (``_plain_records`` checks them all at once)
    (ToolCall(id="a", name="t", arguments={"i": 0}), ToolCall(id="b", name="t", arguments={"s": "x", "n": None})),
    (ToolCall(id="a", name="t", arguments={"s": "é"}),), (ToolCall(id="a\ud800", name="t"),),
    (ToolCall(id="a", name="t", arguments={"s": "x\ud800"}),), (PreparedCall(arguments={}, replay="\ud800"),),
    (ToolCall(id="a", name="t", arguments={"\ud800": 1}),), (ToolCall(id="a", name="t", arguments={"l": [1]}),),
    (ToolCall(id="a", name="t", arguments={"f": math.nan}),), (ToolCall(id="a", name="t", arguments={1: 1}),),
    (ToolCall(id="a", name=_Text("t")),), (ToolCall(id="a", name="t", arguments={"s": _Text("v")}),),
    (ToolCall(id="a", name="t", arguments=()),), (ToolCall(id="a", name="t", arguments=None),),  # type: ignore[arg-type]
    (PreparedCall(arguments={"i": 1}, replay="safe"), PreparedCall(arguments={}, replay="safe")),
    (PreparedCall(arguments={"i": 1}, replay="safe"), ToolCall(id="a", name="t")), (None, None),
    (Diagnostic(Severity.WARN, "m"), Diagnostic(Severity.INFO, "n", "c")), (Usage(input_tokens=1),),
    # ints over 640 digits and nesting past MAX_DEPTH (refused on every path)
    10**640, -(10**640), 10**640 - 1, {"a": 10**640}, [10**640], {"a": _deep(edge.MAX_DEPTH)}, _deep(edge.MAX_DEPTH - 1),
    (ToolCall(id="a", name="t", arguments={"n": 10**640}),), (ToolCall(id="a", name="t", arguments={"d": _deep(edge.MAX_DEPTH)}),),
]


def _base(cls: type) -> object:
    """An instance of ``cls`` with every field clean (defaults, else 1 or "x")."""
    values = {}
    for f in attrs.fields(cls):
        if f.default is not attrs.NOTHING:
            values[f.name] = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[misc]
        else:
            values[f.name] = "x" if "str" in str(f.type) else 1
    return cls(**values)


def _outcome(clean: Callable[[Any], Any], event: Any, caplog: pytest.LogCaptureFixture) -> tuple[object, ...]:
    caplog.clear()
    try:
        out = clean(event)
    except Exception as e:  # the same failure, if any
        return ("raised", type(e), str(e), [(r.levelno, r.getMessage()) for r in caplog.records])
    return (out is event, out, [(r.levelno, r.getMessage()) for r in caplog.records])


def _full_loop(event: Any) -> Any:
    """``clean_event`` without the quick checks: every field through the loop."""
    refuse = REFUSALS[type(event)]
    try:
        return edge._clean_fields(event, type(event).TAG)
    except edge.EdgeError as e:
        edge.log.warning("refused a value from outside (%s): %s", type(event).TAG, e)
        return edge._clean_fields(refuse(event, e), "refusal")


def test_the_quick_checks_change_nothing(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11 item 2: ``clean_event`` passes a group of fields without the
    loop when its values are plainly clean (and a tuple of plain records). For every event an interpreter
    makes, each field (and each pair of fields) set to each tricky value:
    the same result (the event itself exactly when the loop keeps it), the
    same refusal, the same warnings, as the loop over every field."""
    caplog.set_level(logging.WARNING, logger="pidurable")
    checked = 0
    for cls in REFUSALS:
        base = _base(cls)
        names = [f.name for f in attrs.fields(cls)]
        cases = [{n: v} for n in names for v in TRICKY]
        cases += [{a: v, b: w} for a, b in zip(names, names[1:]) for v in TRICKY[::3] for w in TRICKY[1::4]]
        for change in cases:
            event = attrs.evolve(base, **change)  # type: ignore[misc]
            quick = _outcome(clean_event, event, caplog)
            with monkeypatch.context() as m:
                m.setattr(edge, "_plain_records", lambda v: False)  # every record through the loop
                full = _outcome(_full_loop, event, caplog)
            assert quick[0] == full[0] and repr(quick) == repr(full), (cls.__name__, change)
            checked += 1
    assert checked > 5000


def test_the_quick_check_of_a_dict_changes_nothing() -> None:
    """``_clean`` passes a flat clean dict (ASCII str keys; ints, bools,
    None, ASCII text) in C: for each tricky key and value, and their pairs,
    the same result (the dict itself exactly when the loop keeps it) or the
    same refusal as the loop (``_clean_dict``)."""
    keys: list[object] = ["a", "é", "\ud800", _Text("k"), 1, None, ""]
    values = [v for v in TRICKY if not isinstance(v, (ToolCall, Usage, tuple)) or v == ()]
    cases = [{k: v} for k in keys for v in values] + [{"a": v, k: w} for k in keys for v in values for w in values[::2]]
    for d in cases + [{}]:
        got, want = [], []
        for clean, out in ((edge._clean, got), (edge._clean_dict, want)):
            try:
                result = clean(d)
                out += [result is d, repr(result)]
            except edge._Bad as bad:
                out += ["refused", str(bad)]
        assert got == want, d


def test_a_checked_tool_result_needs_no_second_cleaning() -> None:
    """What ``Loop.send_checked`` relies on (a tool's ``ToolFinished`` is not
    cleaned again, issue 11 item 2): after ``edge.tool_result``, every value
    of the result is valid - lone surrogates in its text, usage, control and
    diagnostics replaced - so ``clean_event`` of the event the interpreter
    builds from it finds nothing to change."""
    from pidurable.shell.registry import Control, ToolResult

    bad = "x\ud800é"
    raw = ToolResult(
        text=bad,
        usage=Usage(input_tokens=3, output_tokens=4),
        control=Control(handoff=bad, add_tools=[bad]),  # type: ignore[arg-type]
        diagnostics=(Diagnostic(Severity.WARN, bad, bad),),
    )
    for given in (bad, raw):
        result = edge.tool_result("t", given)
        done = ToolFinished(
            now=1,
            task_id=2,  # type: ignore[arg-type]
            text=result.text,
            is_error=result.is_error,
            usage=result.usage,
            control=edge.control_json(result.control),
            diagnostics=result.diagnostics,
        )
        assert clean_event(done) == done
        json.dumps(attrs.asdict(done), ensure_ascii=False).encode()  # valid UTF-8 throughout
        assert done.text == "x\ufffdé"
