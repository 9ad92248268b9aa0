"""Numbers too big to store, ids outside 64 bits, and settings of the wrong
shape are refused at the edge with a clear message: none reaches a commit
(where an int of over 4,300 digits made Python's JSON encoder raise and
stopped the harness), a SQLite parameter (``OverflowError`` from deep
inside, or a stopped harness for ``fork``), or the reducer (a ``retry`` that
is not a ``RetryPolicy`` stopped the harness; a ``partial_interval_ms`` that
is not an int faulted every model call). The harness keeps working and the
store reopens.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from pidurable.core.admission import SETTINGS_SHAPE, check_settings
from pidurable.core.bounds import MAX_INT64
from pidurable.core.model import Usage
from pidurable.shell import (
    AgentConfig,
    CompactionSettings,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    RetryPolicy,
    Settings,
    ToolResult,
    Write,
    define_doc,
    define_task,
    define_tool,
    open_jsonl_storage,
    open_sqlite_storage,
)
from pidurable.core.bounds import shown as show
from pidurable.shell.edge import MAX_DEPTH, EdgeError, clean_json
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import codec

WAIT = 10
AGENT = AgentConfig(model=ModelRef("scripted", "demo"))
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}
HUGE = 10**5000  # over CPython's 4,300-digit limit for int <-> str
LONGEST = 10**640 - 1  # the longest int stored: 640 digits
TOO_LONG = 10**640


async def settle(conv: Any, text: str) -> Any:
    handle = await conv.submit(Input(text))
    with trio.fail_after(WAIT):
        return await handle.wait()


# --- the edge ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        TOO_LONG,
        -TOO_LONG,
        HUGE,
        {"n": TOO_LONG},  # a flat dict: the fast path
        {"n": [1, {"m": -HUGE}]},
        [0, TOO_LONG],
        (TOO_LONG,),
    ],
    ids=["640+1 digits", "negative", "huge", "flat dict", "nested", "list", "tuple"],
)
def test_ints_over_640_digits_are_refused_naming_where(value: Any) -> None:
    """Wherever it sits, an int of more than 640 digits is refused, with the path to it."""
    with pytest.raises(EdgeError, match=r"over 640 digits\) is too long to store") as err:
        clean_json(value, "data")
    assert err.value.args[0].startswith("data")


def test_ints_up_to_640_digits_and_bools_pass_unchanged() -> None:
    """The longest allowed int, its negative, bools and a flat dict of them come back as they went in."""
    for value in (LONGEST, -LONGEST, True, {"a": LONGEST, "b": False, "c": 1}, [LONGEST, [True]]):
        cleaned = clean_json(value, "data")
        assert cleaned == value
    flat = {"a": LONGEST, "b": 2}
    assert clean_json(flat, "data") is flat  # clean: no copy


def test_show_never_prints_an_int_python_cannot_print() -> None:
    """Messages name a huge int by its size (``repr`` of it raises)."""
    with pytest.raises(ValueError):
        repr(HUGE)
    assert show(HUGE) == f"an int of {HUGE.bit_length()} bits"
    assert show(2**64) == "an int of 65 bits"
    assert show(2**63) == repr(2**63) and show("x") == "'x'"



def test_is_int_in_is_the_one_64_bit_check() -> None:
    """ids, versions, settings, token counts and waits all use it: bools and floats are not ints."""
    from pidurable.core.bounds import MIN_INT64, is_int_in

    assert is_int_in(0) and is_int_in(MAX_INT64) and is_int_in(MIN_INT64, MIN_INT64)
    assert not any((is_int_in(MAX_INT64 + 1), is_int_in(-1), is_int_in(0, 1), is_int_in(True), is_int_in(1.0), is_int_in(HUGE)))


async def test_the_longest_int_is_stored_and_read_back_after_reopen(tmp_path: Path) -> None:
    """A 640-digit int in a write's data goes through the store and a reopen."""
    db = tmp_path / "s.sqlite"
    async with Harness.open(open_sqlite_storage(db), models=ScriptedModels([]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(WAIT):
            await (await conv.submit(Write("w", data={"n": LONGEST, "m": -LONGEST}))).wait()
    async with Harness.open(open_sqlite_storage(db), models=ScriptedModels([]), registry=Registry()) as h:
        [entry] = [e for e in await (await h.root()).transcript() if e.text == "w"]
        assert entry.data == {"n": LONGEST, "m": -LONGEST}


# --- host input -----------------------------------------------------------------------------


NOTES = define_doc("notes", {"type": "object"}, {})


@pytest.mark.parametrize(
    "act",
    [
        lambda conv: conv.submit(Write("w", data={"n": HUGE})),
        lambda conv: conv.submit(Write("w", data={"n": [TOO_LONG]})),
        lambda conv: conv.update_document(NOTES, lambda old: {"n": HUGE}),
    ],
    ids=["write data", "write data nested", "document update"],
)
async def test_huge_ints_from_the_host_are_refused_and_nothing_is_stored(
    act: Callable[[Any], Awaitable[Any]], tmp_path: Path
) -> None:
    """The call raises InvalidInput naming the value's size; the harness then answers."""
    registry = Registry()
    registry.install(NOTES)
    storage = open_sqlite_storage(tmp_path / "s.sqlite")
    async with Harness.open(storage, models=ScriptedModels([reply(text="fine")]), registry=registry) as h:
        conv = await h.root(agent=AGENT)
        before = len(await conv.transcript())
        with pytest.raises(InvalidInput, match="over 640 digits"):
            await act(conv)
        assert len(await conv.transcript()) == before
        assert await conv.document(NOTES) == {}
        assert (await settle(conv, "still there?")).status == "done"


# --- provider and tool values ----------------------------------------------------------------


async def test_a_huge_int_in_tool_arguments_ends_that_run_only(tmp_path: Path) -> None:
    """A reply whose arguments hold a 5,001-digit int cannot be stored: the
    run ends unanswered/model_error; the next input is answered; the store
    reopens and its journal replays."""
    db = tmp_path / "s.sqlite"
    registry = Registry()
    registry.install(define_tool("calc", "calc", NO_ARGS, lambda call, args: _text("ran"), replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("calc", x=HUGE)]), reply(text="fine")])
    async with Harness.open(open_sqlite_storage(db), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        rec = await settle(conv, "compute")
        assert (rec.status, rec.reason) == ("unanswered", "model_error")
        assert "over 640 digits" in (rec.detail or "")
        assert (await settle(conv, "again")).status == "done"
    async with Harness.open(open_sqlite_storage(db), models=ScriptedModels([]), registry=registry) as h:
        for entry in await (await h.root()).transcript():
            codec.to_json(entry)


async def _text(value: str) -> str:
    return value


@pytest.mark.parametrize("counts", [(HUGE, 1), (1, 2**63)], ids=["huge", "over 64 bits"])
async def test_token_counts_over_64_bits_are_dropped_with_a_warning(
    counts: tuple[int, int], caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """A tool's and a provider's usage beyond a 64-bit count is dropped
    (logged, by size); the result and the answer are kept."""
    usage = Usage(input_tokens=counts[0], output_tokens=counts[1])

    async def spend(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text="spent", usage=usage)

    registry = Registry()
    registry.install(define_tool("spend", "spend", NO_ARGS, spend, replay="safe"))
    models = ScriptedModels([reply(tool_calls=[tool_call("spend")]), reply(text="done", usage=usage)])
    with caplog.at_level(logging.WARNING, logger="pidurable"):
        async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
            conv = await h.root(agent=AGENT)
            assert (await settle(conv, "go")).status == "done"
            assert [e.text for e in await conv.transcript() if e.kind == "tool_result"] == ["spent"]
            usage_doc = await conv.usage()
            assert "spend" not in usage_doc.tools
            assert all(t.input_tokens < 2**63 for t in usage_doc.models.values())
    dropped = [r.getMessage() for r in caplog.records if "is not a token count" in r.getMessage()]
    assert len(dropped) == 2  # the tool's and the provider's
    assert all(("bits" in m) == (counts[0] == HUGE) for m in dropped)


# --- ids ------------------------------------------------------------------------------------


def _stores(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    return {
        "memory": MemoryStorage,
        "sqlite": lambda: open_sqlite_storage(tmp_path / "s.sqlite"),
        "jsonl": lambda: open_jsonl_storage(tmp_path / "j"),
    }


@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, HUGE], ids=["2**63", "-2**63-1", "huge"])
async def test_ids_outside_64_bits_are_refused_on_every_backend(backend: str, bad: int, tmp_path: Path) -> None:
    """Every host call taking a record id refuses one outside 64 bits with
    InvalidInput (SQLite raised OverflowError from deep inside, and
    ``fork(at=...)`` stopped the harness); the harness then answers."""
    registry = Registry()
    registry.install(define_task("noop", lambda inp: {"phase": "only"}, {"only": _noop_phase}))
    storage = _stores(tmp_path)[backend]()
    models = ScriptedModels(lambda request: reply(text="fine"))
    async with Harness.open(storage, models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        assert (await settle(conv, "first")).status == "done"
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: h.conversation(bad),
            lambda: h.submission(bad),
            lambda: h.entry(bad),
            lambda: h.task(bad),
            lambda: h.wait_for_task(bad),
            lambda: h.abort_task(bad),
            lambda: h.abort_submission(bad),
            lambda: h.abort_submission(1, conversation_id=bad),
            lambda: h.tasks(conversation_id=bad),
            lambda: h.conversations_owned_by(bad),
            lambda: h.create_conversation(owner=bad),
            lambda: h.create_conversation(owner_task_id=bad),
            lambda: h.create_conversation(ownership={"kind": "task", "task_id": bad}),
            lambda: h.create_task("noop", conversation_id=bad),
            lambda: conv.fork(at=bad),
        ]
        for call in calls:
            with pytest.raises(InvalidInput, match="64-bit"):
                with trio.fail_after(WAIT):
                    await call()
        assert (await settle(conv, "after")).status == "done"
        assert await h.conversation(2**63 - 1) is None  # the largest id: simply not there


async def _noop_phase(task: Any, runtime: Any) -> None:
    await runtime.commit("terminal", outcome={"status": "completed"})


# --- create_conversation(owner=...) (API.md's name) and create_task's background ------------------


async def test_create_conversation_takes_the_owner_by_its_api_name(autojump_clock: trio.testing.MockClock) -> None:
    """``owner=`` (API.md) makes a task-owned conversation, as ``owner_task_id=``
    does; two ways naming different tasks, or a bool, are refused."""
    made: list[Any] = []

    async def spawn(call: Any, args: dict[str, Any]) -> str:
        child = await call.harness.create_conversation(owner=call.task_id)
        made.append((call.task_id, await child.owned_by()))
        same = await call.harness.create_conversation(owner=call.task_id, owner_task_id=call.task_id)
        made.append((call.task_id, await same.owned_by()))
        for kw in (
            {"owner": call.task_id, "owner_task_id": call.task_id + 1},
            {"owner": call.task_id, "ownership": {"kind": "task", "task_id": call.task_id + 1}},
            {"owner": True},
            {"ownership": {"kind": "task", "task_id": "1"}},
        ):
            with pytest.raises(InvalidInput):
                await call.harness.create_conversation(**kw)
        return "spawned"

    registry = Registry()
    registry.install(define_tool("spawn", "Spawn.", NO_ARGS, spawn))
    models = ScriptedModels([reply(tool_calls=[tool_call("spawn")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        assert (await settle(conv, "go")).status == "done"
        assert [e.text for e in await conv.transcript() if e.kind == "tool_result"] == ["spawned"]
    assert len(made) == 2 and all(task_id == owner for task_id, owner in made)


async def test_create_task_refuses_a_background_that_is_not_a_bool(autojump_clock: trio.testing.MockClock) -> None:
    registry = Registry()
    registry.install(define_task("noop", lambda inp: {"phase": "only"}, {"only": _noop_phase}))
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=registry) as h:
        await h.root(agent=AGENT)
        with pytest.raises(InvalidInput, match="background must be True or False"):
            await h.create_task("noop", background="yes")  # type: ignore[arg-type]
        assert await h.tasks() == []


# --- settings ---------------------------------------------------------------------------------


def _bad_settings() -> list[tuple[str, Settings]]:
    """From SETTINGS_SHAPE: each part of the wrong class, each flag not a
    bool, each integer of the wrong type, below its least value, or over 64 bits."""
    cases: list[tuple[str, Settings]] = []

    def with_part(path: str, **changes: Any) -> Settings:
        base = Settings()
        if path == "settings":
            return attrs.evolve(base, **changes)
        name = path.rpartition(".")[2]
        return attrs.evolve(base, **{name: attrs.evolve(getattr(base, name), **changes)})

    for path, cls, flags, ints in SETTINGS_SHAPE:
        if path != "settings":
            cases.append((path, attrs.evolve(Settings(), **{path.rpartition(".")[2]: "fast"})))
        for flag in flags:
            cases.append((f"{path}.{flag}", with_part(path, **{flag: "no"})))
        for name, least in ints:
            for bad in ("1", 1.0, True, least - 1, MAX_INT64 + 1, HUGE):
                cases.append((f"{path}.{name}", with_part(path, **{name: bad})))
    return cases


BAD_SETTINGS = _bad_settings()


def test_the_settings_shape_covers_every_field() -> None:
    """Every field of Settings, RetryPolicy and CompactionSettings is in the
    table (as a part, a flag or an integer), so none goes unchecked."""
    covered = {
        f"{path}.{name}" for path, _, flags, ints in SETTINGS_SHAPE for name in (*flags, *(n for n, _ in ints))
    } | {path for path, _, _, _ in SETTINGS_SHAPE} | {"settings.follow_up_mode", "settings.steering_mode"}
    fields = {f"settings.{f.name}" for f in attrs.fields(Settings)}
    fields |= {f"settings.retry.{f.name}" for f in attrs.fields(RetryPolicy)}
    fields |= {f"settings.compaction.{f.name}" for f in attrs.fields(CompactionSettings)}
    assert fields <= covered


@pytest.mark.parametrize("where, settings", BAD_SETTINGS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BAD_SETTINGS)])
def test_bad_settings_are_named_by_check_settings(where: str, settings: Settings) -> None:
    problem = check_settings(settings)
    assert problem is not None and problem.startswith(where + " must be")


async def test_bad_settings_are_refused_at_open_and_update(autojump_clock: trio.testing.MockClock) -> None:
    """Every bad case raises InvalidInput at open and from update_settings;
    the harness keeps its settings and answers; the largest values pass."""
    for where, settings in BAD_SETTINGS:
        with pytest.raises(InvalidInput, match=where.replace(".", r"\.")):
            async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry(), settings=settings):
                pass  # pragma: no cover
    models = ScriptedModels(lambda request: reply(text="fine"))
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        for where, settings in BAD_SETTINGS:
            with pytest.raises(InvalidInput, match=where.replace(".", r"\.")):
                await h.update_settings(settings)
        largest = Settings(retry=RetryPolicy(max_retries=MAX_INT64, max_delay_ms=MAX_INT64))
        await h.update_settings(largest)
        assert (await settle(conv, "go")).status == "done"


@pytest.mark.parametrize("window", [MAX_INT64 + 1, HUGE, 0], ids=["2**63", "huge", "zero"])
async def test_a_context_window_outside_64_bits_is_refused(window: int, autojump_clock: trio.testing.MockClock) -> None:
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry()) as h:
        with pytest.raises(InvalidInput, match="context_window must be None or a positive int"):
            await h.root(agent=attrs.evolve(AGENT, context_window=window))
        conv = await h.root(agent=attrs.evolve(AGENT, context_window=MAX_INT64))
        assert (await conv.agent()).context_window == MAX_INT64


# --- nesting ------------------------------------------------------------------------------------


def nest(depth: int, leaf: Any = 1, *, lists: bool = False) -> Any:
    """``depth`` objects (or arrays) around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value] if lists else {"a": value}
    return value


@pytest.mark.parametrize("lists", [False, True], ids=["objects", "arrays"])
def test_json_nested_past_max_depth_is_refused_without_running_out_of_stack(lists: bool) -> None:
    """MAX_DEPTH levels pass; one more, or 50,000 (past Python's stack), is
    refused naming the path down to the limit, in a message of bounded size."""
    assert clean_json(nest(MAX_DEPTH, lists=lists), "data") == nest(MAX_DEPTH, lists=lists)
    for depth in (MAX_DEPTH + 1, 50_000):
        with pytest.raises(EdgeError, match=f"nested more than {MAX_DEPTH} levels deep") as err:
            clean_json(nest(depth, lists=lists), "data")
        step = "[0]" if lists else ".a"
        assert err.value.args[0].startswith("data" + step * MAX_DEPTH + ":")  # down to the container past the limit


def test_a_refusal_deep_inside_is_still_named_by_its_path() -> None:
    """A NaN 50 levels down is found where it is."""
    with pytest.raises(EdgeError, match="nan is not a JSON number") as err:
        clean_json(nest(50, float("nan")), "data")
    assert err.value.args[0].startswith("data" + ".a" * 50 + ":")


async def test_host_values_nested_too_deep_are_invalid_input(autojump_clock: trio.testing.MockClock) -> None:
    """A write's data nested past the limit raised RecursionError out of submit; now InvalidInput."""
    async with Harness.open(MemoryStorage(), models=ScriptedModels([reply(text="fine")]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        for depth in (MAX_DEPTH + 1, 5_000):
            with pytest.raises(InvalidInput, match="levels deep"):
                await conv.submit(Write("w", data=nest(depth)))
        assert (await settle(conv, "still there?")).status == "done"


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
def test_the_deepest_values_go_through_store_reopen_fork_and_replay(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Values MAX_DEPTH deep in a write, a document, tool arguments and a
    tool's document update are stored, read back after reopen, forked, and
    the journal replays byte for byte; arguments one level deeper end that
    run unanswered/model_error (they faulted it as an internal error)."""
    from pidurable.shell.cli import main

    seen: list[Any] = []

    async def execute(call: Any, args: dict[str, Any]) -> str:
        await call.update_document(NOTES, lambda old: {"deep": nest(MAX_DEPTH - 1)})
        seen.append(args)
        return "ok"

    def registry() -> Registry:
        r = Registry()
        r.install(NOTES)
        r.install(define_tool("t", "t", NO_ARGS, execute, replay="safe"))
        return r

    path = tmp_path / ("s.sqlite" if backend == "sqlite" else "j")
    store = _stores(tmp_path)[backend]

    async def first() -> None:
        models = ScriptedModels(
            [
                reply(tool_calls=[tool_call("t", x=nest(MAX_DEPTH - 1))]),
                reply(text="fin"),
                reply(tool_calls=[tool_call("t", x=nest(MAX_DEPTH))]),
            ]
        )
        async with Harness.open(store(), models=models, registry=registry()) as h:
            conv = await h.root(agent=AGENT)
            with trio.fail_after(WAIT):
                await (await conv.submit(Write("w", data=nest(MAX_DEPTH)))).wait()
            await conv.update_document(NOTES, lambda old: nest(MAX_DEPTH))
            assert (await settle(conv, "go")).status == "done"
            rec = await settle(conv, "deeper")
            assert (rec.status, rec.reason) == ("unanswered", "model_error")
            assert "levels deep" in (rec.detail or "")

    async def second() -> None:
        async with Harness.open(store(), models=ScriptedModels([]), registry=registry()) as h:
            conv = await h.root()
            entries = await conv.transcript()
            assert [e.data for e in entries if e.text == "w"] == [nest(MAX_DEPTH)]
            assert await conv.document(NOTES) == {"deep": nest(MAX_DEPTH - 1)}
            fork = await conv.fork(at=entries[-1].id)
            assert await fork.document(NOTES) == {"deep": nest(MAX_DEPTH - 1)}

    trio.run(first)
    assert seen == [{"x": nest(MAX_DEPTH - 1)}]
    trio.run(second)
    assert main(["replay", "--check", "--db", str(path)]) == 0
    assert "reproduced byte for byte" in capsys.readouterr().out


def test_tool_arguments_nested_past_the_parsers_stack_are_invalid_json() -> None:
    """json.loads raises RecursionError (not ValueError) on JSON nested past
    the stack; parse_arguments reports it as invalid arguments (not retryable)."""
    from pidurable.shell.providers.base import ModelError
    from pidurable.shell.providers.openai import parse_arguments

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ModelError, match="invalid JSON arguments") as err:
        parse_arguments('{"x": ' + deep + "}", "calc", "call_1")
    assert not err.value.retryable


# --- definitions (host code): what they hold is sent to providers and stored -----------------------


async def _execute(call: Any, args: dict[str, Any]) -> str:
    return "ok"


@pytest.mark.parametrize(
    "define, message",
    [
        (lambda: define_tool("t", "d", {"type": "object", "properties": {"x": {"maximum": float("nan")}}}, _execute), "parameters.properties.x.maximum: nan"),
        (lambda: define_tool("t", "d", {"type": "object", "properties": {"x": {"maximum": HUGE}}}, _execute), "over 640 digits"),
        (lambda: define_tool("t", None, {"type": "object"}, _execute), "description must be valid text"),
        (lambda: define_tool("t", "bad \ud800", {"type": "object"}, _execute), "description must be valid text"),
        (lambda: define_task("k", lambda i: {"phase": "a"}, {"a": _noop_phase}, version=HUGE), "at most 2\\*\\*63 - 1"),
        (lambda: define_task("k", lambda i: {"phase": "a"}, {"a": _noop_phase}, version=True), "positive integer"),
        (lambda: define_doc("d", {"type": "object"}, {}, version=2**63), "at most 2\\*\\*63 - 1"),
        (lambda: define_doc("d", {"type": "object", "maxProperties": HUGE}, {}), "schema.maxProperties: an integer"),
    ],
    ids=["schema nan", "schema huge int", "description None", "description surrogate", "task version huge",
         "task version bool", "doc version 2**63", "doc schema huge int"],
)
def test_definitions_holding_values_that_cannot_be_sent_or_stored_fail_at_definition(define: Any, message: str) -> None:
    """A task version of 5,001 digits reached a task record and the commit;
    a NaN in a tool's schema reached every request. Each fails where it is
    defined, loudly (ValueError naming the definition and the value)."""
    with pytest.raises(ValueError, match=message):
        define()


def test_the_largest_definition_versions_are_accepted() -> None:
    assert define_task("k", lambda i: {"phase": "a"}, {"a": _noop_phase}, version=2**63 - 1).version == 2**63 - 1
    assert define_doc("d", {"type": "object"}, {}, version=2**63 - 1).version == 2**63 - 1


# --- messages about a huge int never print it (repr of an int over 4,300 digits raises) ------------


async def test_refusals_of_huge_ints_in_choices_and_flags_are_invalid_input(autojump_clock: trio.testing.MockClock) -> None:
    """Where a message shows the refused value, a huge int is named by its
    size; a ValueError from repr used to escape instead of InvalidInput."""
    registry = Registry()
    registry.install(define_task("noop", lambda inp: {"phase": "only"}, {"only": _noop_phase}))
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=registry) as h:
        conv = await h.root(agent=AGENT)
        for act in (
            lambda: conv.submit(Input("x", when_busy=HUGE)),  # type: ignore[arg-type]
            lambda: h.update_settings(Settings(follow_up_mode=HUGE)),  # type: ignore[arg-type]
            lambda: h.update_settings(Settings(retry=RetryPolicy(enabled=HUGE))),  # type: ignore[arg-type]
            lambda: h.create_task("noop", background=HUGE),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidInput, match="an int of 16610 bits"):
                await act()
        with pytest.raises(InvalidInput, match="live_only must be True or False"):
            await h.tasks(live_only="yes")  # type: ignore[arg-type]
        assert await h.tasks(live_only=True) == []


async def test_a_custom_task_committing_huge_values_faults_with_a_readable_error(autojump_clock: trio.testing.MockClock) -> None:
    """runtime.commit with a status, outcome status, policy or task id that
    is a huge int raises InvalidInput naming its size (a status reached the
    reducer, whose message repr'd it: ValueError, and the harness stopped);
    a float task id is refused (int(1.5) named task 1)."""
    errors: list[str] = []

    def phase(commit_args: tuple[Any, ...]) -> Any:
        async def run(task: Any, runtime: Any) -> None:
            try:
                await runtime.commit(*commit_args[:1], **commit_args[1])
            except InvalidInput as e:
                errors.append(str(e))
                await runtime.commit("terminal", outcome={"status": "failed", "error": "refused"})

        return run

    registry = Registry()
    registry.install(define_task("status", lambda inp: {"phase": "a"}, {"a": phase((HUGE, {}))}))
    registry.install(define_task("outcome", lambda inp: {"phase": "a"}, {"a": phase(("terminal", {"outcome": {"status": HUGE}}))}))
    waiting = {"checkpoint": {"phase": "a"}}
    registry.install(define_task("policy", lambda inp: {"phase": "a"}, {"a": phase(("waiting", {**waiting, "policy": HUGE}))}))
    registry.install(define_task("on", lambda inp: {"phase": "a"}, {"a": phase(("waiting", {**waiting, "on": [HUGE]}))}))
    registry.install(define_task("on-float", lambda inp: {"phase": "a"}, {"a": phase(("waiting", {**waiting, "on": [1.5]}))}))
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=registry) as h:
        await h.root(agent=AGENT)
        for kind in ("status", "outcome", "policy", "on", "on-float"):
            tid = await h.create_task(kind)
            with trio.fail_after(WAIT):
                assert (await h.wait_for_task(tid)).outcome.error == "refused"
    assert len(errors) == 5 and all("an int of 16610 bits" in e for e in errors[:4]), errors
    assert "task id must be an int, not float" in errors[4]  # (int(1.5) named task 1 before)


@pytest.mark.parametrize("interval", [HUGE, 2**63, -1], ids=["huge", "2**63", "negative"])
async def test_a_watch_interval_outside_64_bits_is_invalid_input(interval: int, autojump_clock: trio.testing.MockClock) -> None:
    """interval_ms=10**5000 raised OverflowError (int to float) from inside the watch."""
    async with Harness.open(MemoryStorage(), models=ScriptedModels([]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        for watch in (lambda: conv.watch(interval_ms=interval), lambda: h.watch_task_graph(interval_ms=interval)):
            with pytest.raises(InvalidInput, match=r"0 <= N <= 2\*\*63 - 1"):
                async with watch():
                    pass  # pragma: no cover
        async with conv.watch(interval_ms=2**63 - 1) as views:
            async for view in views:
                assert view.idle
                break
