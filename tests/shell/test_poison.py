"""Issue 7, item 1: no value from outside can poison a store.

NaN/Infinity in tool-call arguments, lone surrogates in model text, partials
and tool output, non-JSON tool results, malformed provider replies and a
shell bug while interpreting one conversation's effect: each settles that
conversation's work with a clear reason, the harness keeps working, another
conversation in the same store finishes, and the store reopens cleanly (no
crash loop).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.model import EntryKind
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    MemoryStorage,
    ModelRef,
    Registry,
    ToolResult,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.edge import EdgeError, clean_json, clean_text
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.providers.base import ModelReply, ModelRequest
from pidurable.shell.providers.openai import parse_arguments
from pidurable.shell.providers.base import ModelError
from pidurable.shell.storage import codec

WAIT = 10
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}
POISON = "bad \ud800 text \udcff end"


def agent(model: str = "demo") -> AgentConfig:
    return AgentConfig(model=ModelRef("scripted", model))


class ByModel:
    """One scripted provider per model id (two conversations, two scripts)."""

    def __init__(self, **scripts: Any) -> None:
        self.scripts = scripts

    def resolve(self, ref: ModelRef) -> Any:
        return self.scripts.get(ref.model_id)


async def settle(conv: Any, text: str) -> Any:
    handle = await conv.submit(Input(text))
    with trio.fail_after(WAIT):
        return await handle.wait()


def encodes(entries: list[Any]) -> None:
    """Every stored entry is strict JSON and valid UTF-8."""
    for e in entries:
        codec.to_json(e).encode("utf-8")


# --- the edge functions ----------------------------------------------------------


def test_clean_text_replaces_lone_surrogates_and_keeps_valid_text() -> None:
    """A lone surrogate becomes U+FFFD; valid text is returned unchanged (same object)."""
    ok = "héllo ✓ 😀"
    assert clean_text(ok) is ok
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text(POISON).encode("utf-8")


def test_clean_json_refuses_non_finite_numbers_and_objects() -> None:
    """NaN, Infinity, non-string keys and objects are refused with the path named."""
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(EdgeError, match="args.x"):
            clean_json({"x": [1, bad]}, "args")
    with pytest.raises(EdgeError, match="not a JSON value"):
        clean_json({"x": object()}, "args")
    with pytest.raises(EdgeError, match="key"):
        clean_json({1: "x"}, "args")
    value = {"a": [1, 2.5, "ok", None, True]}
    assert clean_json(value, "v") is value


def test_openai_arguments_refuse_nan_and_infinity() -> None:
    """json.loads accepts NaN; the adapter's argument parser does not."""
    for raw in ('{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}'):
        with pytest.raises(ModelError, match="invalid JSON arguments"):
            parse_arguments(raw, "calc", "call_1")
    assert parse_arguments('{"x": 1.5}', "calc", "call_1") == {"x": 1.5}


# --- provider values ----------------------------------------------------------------


async def test_nan_in_tool_arguments_settles_model_error_and_the_harness_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A reply whose tool-call arguments hold NaN cannot be stored: the run
    ends unanswered/model_error naming the value; a second conversation in
    the same harness then finishes."""
    registry = Registry()
    registry.install(define_tool("calc", "calc", NO_ARGS, lambda call, args: _text("ran")))
    poison = ScriptedModels([reply(tool_calls=[tool_call("calc", x=math.nan)])])
    healthy = ScriptedModels([reply(text="fine")])
    storage = MemoryStorage()
    async with Harness.open(storage, models=ByModel(p=poison, h=healthy), registry=registry) as h:
        a = await h.create_conversation(agent=agent("p"))
        b = await h.create_conversation(agent=agent("h"))
        rec = await settle(a, "compute")
        assert (rec.status, rec.reason) == ("unanswered", "model_error")
        assert "NaN" in (rec.detail or "") or "nan" in (rec.detail or "")
        assert (await settle(b, "hello")).status == "done"
        encodes(await a.transcript())


async def test_lone_surrogates_in_model_text_partials_and_tool_output_are_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Surrogates in a streamed answer, its partials and a tool's output are
    stored as U+FFFD; the run answers."""

    async def echo(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text=POISON)

    registry = Registry()
    registry.install(define_tool("echo", "echo", NO_ARGS, echo, replay="safe"))
    models = ScriptedModels(
        [
            reply(text=POISON, tool_calls=[tool_call("echo")]),
            reply(text="final " + POISON, stream=4, delay=1.0),
        ]
    )
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=registry) as h:
        conv = await h.root(agent=agent())
        rec = await settle(conv, "go")
        assert rec.status == "done"
        entries = await conv.transcript()
        encodes(entries)
        result = next(e for e in entries if e.kind == EntryKind.TOOL_RESULT)
        assert result.text == clean_text(POISON) and "\ufffd" in result.text
        assert entries[-1].text == "final " + clean_text(POISON)
    journal = storage.journal()
    assert journal and all(json.loads(row.events) is not None for row in journal)


async def test_malformed_provider_replies_end_the_run_with_a_reason(autojump_clock: trio.testing.MockClock) -> None:
    """A provider returning None, non-text or non-object arguments: unanswered/model_error."""

    class Odd:
        def __init__(self, value: Any) -> None:
            self.value = value

        def resolve(self, ref: ModelRef) -> Any:
            return self

        async def complete(self, request: ModelRequest, on_partial: Any = None) -> Any:
            return self.value

    from pidurable.core.model import ToolCall

    for value, words in [
        (None, "NoneType"),
        (ModelReply(text=None), "text"),  # type: ignore[arg-type]
        (ModelReply(tool_calls=(ToolCall(id="c", name="x", arguments=[1]),)), "non-object"),  # type: ignore[arg-type]
    ]:
        async with Harness.open(MemoryStorage(), models=Odd(value), registry=Registry()) as h:
            conv = await h.root(agent=agent())
            rec = await settle(conv, "hi")
            assert (rec.status, rec.reason) == ("unanswered", "model_error")
            assert words in (rec.detail or "")


# --- tool values -------------------------------------------------------------------


async def _text(value: str) -> str:
    return value


@pytest.mark.parametrize(
    "returned",
    [
        {"not": "a result"},
        ToolResult(text=object()),  # type: ignore[arg-type]
        ToolResult(text="x", is_error="yes"),  # type: ignore[arg-type]
        12,
    ],
    ids=["dict", "object-text", "bad-is-error", "int"],
)
async def test_a_tool_returning_a_non_result_gets_an_error_result(
    returned: Any, autojump_clock: trio.testing.MockClock
) -> None:
    """Whatever a tool returns that is not text or a well-formed ToolResult
    becomes an error result the model sees; the run answers."""

    async def odd(call: Any, args: dict[str, Any]) -> Any:
        return returned

    registry = Registry()
    registry.install(define_tool("odd", "odd", NO_ARGS, odd, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("odd")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=agent())
        assert (await settle(conv, "go")).status == "done"
        result = next(e for e in await conv.transcript() if e.kind == EntryKind.TOOL_RESULT)
        assert result.is_error and "odd" in result.text


async def test_tool_usage_that_is_not_a_count_is_dropped(autojump_clock: trio.testing.MockClock) -> None:
    """A tool reporting NaN usage keeps its result; the bad usage is dropped."""
    from pidurable.core.model import Usage

    async def spend(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text="ok", usage=Usage(input_tokens=math.nan, output_tokens=3))  # type: ignore[arg-type]

    registry = Registry()
    registry.install(define_tool("spend", "spend", NO_ARGS, spend, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("spend")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=agent())
        assert (await settle(conv, "go")).status == "done"
        assert "spend" not in (await conv.usage()).tools


# --- a bug in the shell faults one conversation only ------------------------------------


async def test_an_interpreter_failure_faults_that_run_only(autojump_clock: trio.testing.MockClock) -> None:
    """When resolving a conversation's model raises (a host bug), that run
    ends unanswered/faulted with the error; another conversation finishes."""

    class Broken:
        def __init__(self, healthy: ScriptedModels) -> None:
            self.healthy = healthy

        def resolve(self, ref: ModelRef) -> Any:
            if ref.model_id == "broken":
                raise KeyError("no such deployment")
            return self.healthy

    async with Harness.open(
        MemoryStorage(), models=Broken(ScriptedModels([reply(text="fine")])), registry=Registry()
    ) as h:
        a = await h.create_conversation(agent=agent("broken"))
        b = await h.create_conversation(agent=agent("ok"))
        rec = await settle(a, "hi")
        assert (rec.status, rec.reason) == ("unanswered", "faulted")
        assert "no such deployment" in (rec.detail or "")
        assert (await settle(b, "hi")).status == "done"


# --- across process lives ----------------------------------------------------------------


async def test_the_same_poison_across_three_lives_ends_settled(tmp_path: Path) -> None:
    """Three process lives on one SQLite store: the poisoned conversations
    (a safe tool whose output holds lone surrogates, a reply with Infinity in
    its arguments) settle in the first life and are never re-run or re-sent;
    the healthy conversation finishes in every life."""
    db = tmp_path / "s.sqlite"
    runs = {"leaky": 0}

    async def leaky(call: Any, args: dict[str, Any]) -> str:
        runs["leaky"] += 1
        return "out " + POISON

    registry = Registry()
    registry.install(define_tool("leaky", "leaky", NO_ARGS, leaky, replay="safe"))
    surrogates = ScriptedModels([reply(tool_calls=[tool_call("leaky")]), reply(text=POISON)])
    infinite = ScriptedModels([reply(tool_calls=[tool_call("leaky", n=math.inf)])])
    for life in range(3):
        healthy = ScriptedModels(lambda req: reply(text=f"answer {len(req.messages)}"))
        models = ByModel(s=surrogates, i=infinite, h=healthy)
        async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
            if life == 0:
                a = await h.create_conversation(agent=agent("s"))
                c = await h.create_conversation(agent=agent("i"))
                await h.create_conversation(agent=agent("h"))
                assert (await settle(a, "surrogates")).status == "done"
                rec = await settle(c, "infinity")
                assert (rec.status, rec.reason) == ("unanswered", "model_error")
                assert "inf" in (rec.detail or "").lower()
            b = await h.conversation(4)
            assert b is not None
            assert (await settle(b, f"life {life}")).status == "done"
            await h.wait_idle()
            assert not await h.tasks(live_only=True)
    assert runs["leaky"] == 1  # the safe tool was never re-run
    assert len(surrogates.requests) == 2 and len(infinite.requests) == 1  # nothing re-sent
