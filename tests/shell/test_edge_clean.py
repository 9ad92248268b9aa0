"""``edge.clean_event`` on the records an interpreter event nests (a model
reply's tool calls and prepared arguments): what is clean comes back as the
same objects, what is not is cleaned (a lone surrogate) or refused (NaN), at
any depth, with the field named."""

from __future__ import annotations

import math

import pytest

from pidurable.core.events import ModelFailed, ModelResponded, PreparedCall, ToolFinished
from pidurable.core.model import ToolCall
from pidurable.shell.edge import clean_event


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
