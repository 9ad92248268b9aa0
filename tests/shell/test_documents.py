"""Host-defined documents end to end (issue 10 item 1): define_doc, host,
tool and phase updates, validation, storage of deltas, migration."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pidurable.core.documents import BASE_EVERY
from pidurable.core.state import DocScope
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Progress,
    Registry,
    define_doc,
    define_task,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from invariants import journal_history

TODO_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "done": {"type": "boolean"}},
                "required": ["text", "done"],
            },
        }
    },
    "required": ["items"],
}
TODO = define_doc("todo", TODO_SCHEMA, {"items": []})


def add(text: str) -> Any:
    return lambda todo: {"items": [*todo["items"], {"text": text, "done": False}]}


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStorage()
    return open_sqlite_storage(tmp_path / "docs.sqlite")


def reopen(storage: Any) -> Any:
    return storage if isinstance(storage, MemoryStorage) else open_sqlite_storage(storage.path)


def _doc_writes(storage: Any) -> list[dict[str, Any]]:
    return [w for _, _, writes in journal_history(storage) for w in writes if w["type"] == "document" and w["document_id"] >= 0]  # not the built-ins


async def test_host_updates_commit_deltas_and_survive_a_reopen(storage: Any) -> None:
    """conv.update_document commits one revision per update: a base first,
    then deltas carrying only the ops; the value survives a reopen."""
    registry = Registry()
    registry.install(TODO)
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        assert await conv.document("todo") == {"items": []}
        await conv.update_document(TODO, add("milk"))
        new = await conv.update_document("todo", add("eggs"))
        assert new == {"items": [{"text": "milk", "done": False}, {"text": "eggs", "done": False}]}

        def tick(todo: Any) -> Any:
            todo["items"][1]["done"] = True  # changing the given value in place is fine: it is a copy
            return todo

        await conv.update_document(TODO, tick)
    storage = reopen(storage)
    writes = _doc_writes(storage)
    assert [w["revision"]["action"] for w in writes] == ["base", "delta", "delta"]
    assert writes[2]["revision"]["ops"] == [["s", ["items", 1, "done"], True]]
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        assert (await conv.document(TODO))["items"][1] == {"text": "eggs", "done": True}


async def test_a_bad_update_raises_invalid_input_and_stores_nothing(storage: Any) -> None:
    """A result that does not fit the schema, is not strict JSON (NaN,
    infinity, a lone surrogate), or an update that raises: InvalidInput, no commit."""
    registry = Registry()
    registry.install(TODO)
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        await conv.update_document(TODO, add("milk"))
        before = len(storage.journal())
        bad: list[Any] = [
            lambda t: {"items": "not a list"},
            lambda t: {"items": [], "score": math.nan},
            lambda t: {"items": [], "score": math.inf},
            add("\ud800"),
            lambda t: 1 / 0,
        ]
        for fn in bad:
            with pytest.raises(InvalidInput):
                await conv.update_document(TODO, fn)
        with pytest.raises(InvalidInput):
            await conv.update_document("unknown", add("x"))
        assert len(storage.journal()) == before
        assert await conv.document(TODO) == {"items": [{"text": "milk", "done": False}]}
    storage = reopen(storage)  # the store reopens: nothing bad reached it
    async with Harness.open(storage, models=None, registry=registry) as h:
        assert await (await h.root()).document(TODO) == {"items": [{"text": "milk", "done": False}]}


async def test_racing_host_updates_never_lose_one() -> None:
    """Updates run on the reducer on the committed value: concurrent adds all land."""
    registry = Registry()
    registry.install(TODO)
    async with Harness.open(MemoryStorage(), models=None, registry=registry) as h:
        conv = await h.root()
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(conv.update_document, TODO, add(f"item {i}"))
        assert len((await conv.document(TODO))["items"]) == 20


async def test_a_tool_update_commits_with_its_result(storage: Any) -> None:
    """call.update_document is staged and stored in the commit of the tool's result entry."""
    registry = Registry()
    registry.install(TODO)

    async def remember(ctx: Any, args: dict[str, Any]) -> str:
        new = await ctx.update_document(TODO, add(args["text"]))
        return f"{len(new['items'])} items"

    registry.install(define_tool("remember", "add a todo", {"type": "object", "properties": {"text": {"type": "string"}}}, remember))
    models = ScriptedModels([reply(tool_calls=[tool_call("remember", text="call mom")]), reply(text="Noted.")])
    async with Harness.open(storage, models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
        await (await conv.submit(Input("remember to call mom"))).wait()
        assert await conv.document(TODO) == {"items": [{"text": "call mom", "done": False}]}
    storage = reopen(storage)
    rows = [writes for _, _, writes in journal_history(storage)]
    with_doc = [ws for ws in rows if any(w["type"] == "document" and w["document_id"] >= 0 for w in ws)]
    assert len(with_doc) == 1
    assert any(w["type"] == "entry" and w["entry"]["kind"] == "tool_result" for w in with_doc[0])


async def test_a_tool_whose_update_does_not_fit_raises_in_the_tool() -> None:
    """The staged update is checked when asked for: the tool sees InvalidInput."""
    registry = Registry()
    registry.install(TODO)
    seen: list[str] = []

    async def bad(ctx: Any, args: dict[str, Any]) -> str:
        try:
            await ctx.update_document(TODO, lambda t: {"items": 3})
        except InvalidInput as e:
            seen.append(str(e))
        return "done"

    registry.install(define_tool("bad", "bad update", {"type": "object"}, bad))
    models = ScriptedModels([reply(tool_calls=[tool_call("bad")]), reply(text="ok")])
    async with Harness.open(MemoryStorage(), models=models, registry=registry) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
        await (await conv.submit(Input("go"))).wait()
        assert seen and "schema" in seen[0]
        assert await conv.document(TODO) == {"items": []}


@attrs.frozen
class Plan:
    steps: tuple[str, ...] = ()
    cursor: int = 0


PLAN = define_doc("plan", Plan, Plan(), scope="task", history="latest", fork="initial")


async def test_a_phase_update_commits_with_the_phase_and_task_documents_retire() -> None:
    """runtime.update_document lands with the phase's next commit; a
    task-scoped document (an attrs class) is retired when the task ends."""
    registry = Registry()
    registry.install(TODO)
    registry.install(PLAN)
    seen: list[Any] = []

    async def first(task: Any, rt: Any) -> Progress:
        plan = await rt.update_document(PLAN, lambda p: attrs.evolve(p, steps=("a", "b")))
        seen.append(plan)
        await rt.update_document(TODO, add("from a phase"))
        return Progress(status="running", checkpoint={"phase": "second"})

    async def second(task: Any, rt: Any) -> Progress:
        seen.append(rt.harness.runtime.storage.document_state(DocScope.TASK, task.id, "plan"))
        return Progress(status="terminal", outcome={"status": "completed"})

    registry.install(define_task("planner", lambda i: {"phase": "first"}, {"first": first, "second": second}))
    storage = MemoryStorage()
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        tid = await h.create_task("planner")
        await h.wait_for_task(tid)
        assert seen[0] == Plan(steps=("a", "b"))
        assert seen[1] is not None and seen[1].value == {"steps": ["a", "b"], "cursor": 0}
        assert storage.document_state(DocScope.TASK, tid, "plan") is None
        assert await conv.document(TODO) == {"items": [{"text": "from a phase", "done": False}]}
    actions = [w["revision"]["action"] for w in _doc_writes(storage) if w["revision"]["kind"] == "plan"]
    assert actions == ["base", "retire"]


async def test_a_base_every_n_deltas_and_latest_history_reclaims() -> None:
    """After BASE_EVERY deltas a base is stored; a ``latest`` document keeps
    only the newest base and what follows, a ``rewindable`` one everything
    (document_at reads a past value)."""
    log = define_doc("log", {"type": "string"}, "", history="latest", fork="current")
    registry = Registry()
    registry.install(log)
    registry.install(TODO)
    storage = MemoryStorage()
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        for i in range(BASE_EVERY + 3):
            await conv.update_document(log, lambda s, i=i: s + f"{i},")
            await conv.update_document(TODO, add(str(i)))
        seq_after_first = 3
    revisions = storage._tables["document_revisions"]
    log_id = storage.document_state(DocScope.CONVERSATION, 1, "log").id
    todo_id = storage.document_state(DocScope.CONVERSATION, 1, "todo").id
    assert len([k for k in revisions if k[0] == log_id]) == 3
    assert len([k for k in revisions if k[0] == todo_id]) == BASE_EVERY + 3
    past = storage.document_at(1, "todo", seq_after_first)
    assert past is not None and past.value == {"items": [{"text": "0", "done": False}]}


async def test_lazy_migration_and_a_newer_stored_version_is_refused() -> None:
    """A value stored at version 1 is migrated on read (nothing written) and
    written back as a base by the next update; a definition older than the
    stored version is refused clearly."""
    v1 = define_doc("notes", {"type": "array"}, [])
    v2 = define_doc(
        "notes", {"type": "object"}, {"lines": []}, version=2, migrate=lambda old, value: {"lines": value}
    )
    storage = MemoryStorage()
    registry = Registry()
    registry.install(v1)
    async with Harness.open(storage, models=None, registry=registry) as h:
        await (await h.root()).update_document(v1, lambda v: [*v, "hello"])
    registry = Registry()
    registry.install(v2)
    async with Harness.open(storage, models=None, registry=registry) as h:
        conv = await h.root()
        commits = len(storage.journal())
        assert await conv.document("notes") == {"lines": ["hello"]}
        assert len(storage.journal()) == commits  # lazy: reading wrote nothing
        await conv.update_document(v2, lambda v: {"lines": [*v["lines"], "again"]})
    assert _doc_writes(storage)[-1]["revision"]["action"] == "base"
    assert _doc_writes(storage)[-1]["revision"]["version"] == 2
    registry = Registry()
    registry.install(v1)
    async with Harness.open(storage, models=None, registry=registry) as h:
        with pytest.raises(InvalidInput, match="newer than the installed definition"):
            await (await h.root()).document("notes")


def test_define_doc_refuses_bad_definitions() -> None:
    """A pi.* kind, as_of without rewindable history, a bad schema, an initial value that does not fit."""
    with pytest.raises(ValueError):
        define_doc("pi.mine", {"type": "object"}, {})
    with pytest.raises(ValueError):
        define_doc("x", {"type": "object"}, {}, history="latest")
    with pytest.raises(ValueError):
        define_doc("x", {"type": "nope"}, {})
    with pytest.raises(ValueError):
        define_doc("x", {"type": "object"}, [])
    with pytest.raises(ValueError):
        define_doc("x", {"type": "object"}, {"x": float("nan")})
