"""The built-in documents (pi.agent, pi.live, pi.inbox, pi.usage, pi.context)
as documents (issue 10 item 1, core/builtins.py): hosts read them and never
write them, a fork takes pi.agent as of its fork point, the values are the
codec's shape, and stores written before keep them (schema migration)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.builtins import BUILTINS, builtin_id, to_json
from pidurable.core.model import ModelRef, TaskId
from pidurable.core.state import ContextDoc, DocScope, InboxItem, InboxMode, Live, RunInfo, SlotStatus, ToolSlot, UsageDoc, UsageTotals
from pidurable.shell import AgentConfig, Harness, Input, InvalidInput, MemoryStorage, Registry, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import SCHEMA_VERSION, decode_doc

import invariants

FIXTURES = Path(__file__).parent / "fixtures"


def named(request: Any) -> Any:
    """Answers naming the model it was sent to."""
    last = [m for m in request.messages if m.role == "user"][-1].text
    return reply(text=f"{request.model.model_id}: {last}")


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return MemoryStorage() if request.param == "memory" else open_sqlite_storage(tmp_path / "b.sqlite")


async def test_hosts_read_the_built_ins_as_json_and_never_write_them(storage: Any) -> None:
    agent = AgentConfig(model=ModelRef("scripted", "one"), instructions="Be brief.")
    async with Harness.open(storage, models=ScriptedModels(named), registry=Registry()) as h:
        conv = await h.root(agent=agent)
        assert await conv.document("pi.agent") == {"model": {"provider": "scripted", "model_id": "one"}, "instructions": "Be brief."}
        assert await conv.document("pi.live") == {} and await conv.document("pi.inbox") == []
        assert await conv.document("pi.usage") == {}
        await (await conv.submit(Input("hi"))).wait()
        usage = await conv.document("pi.usage")
        assert usage["models"][str(ModelRef("scripted", "one"))]["calls"] == 1
        assert await conv.document("pi.live") == {}  # idle again
        with pytest.raises(InvalidInput, match="built in"):
            await conv.update_document("pi.agent", lambda a: {})
        with pytest.raises(InvalidInput, match="built in"):
            await conv.update_document("pi.usage", {})
        with pytest.raises(InvalidInput, match="built in"):
            await conv.fork(at=(await conv.transcript())[-1].id, documents={"pi.agent": "current"})
        assert await conv.document("pi.usage") == usage  # nothing written
    invariants.journal_invariants(storage if isinstance(storage, MemoryStorage) else open_sqlite_storage(storage.path))


async def test_a_fork_takes_the_agent_as_of_its_fork_point(storage: Any) -> None:
    """issue 10 (a): the parent is reconfigured after the fork point; the
    fork runs under the agent it had then (pi.agent is rewindable), the
    parent under its new one."""
    async with Harness.open(storage, models=ScriptedModels(named), registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "first")))
        await (await conv.submit(Input("one"))).wait()
        point = (await conv.transcript())[-1]
        await conv.configure(model=ModelRef("scripted", "second"), instructions="Later rules.")
        await (await conv.submit(Input("two"))).wait()
        fork = await conv.fork(at=point.id)
        assert (await fork.agent()).model == ModelRef("scripted", "first")
        assert (await fork.agent()).instructions is None
        await (await fork.submit(Input("three"))).wait()
        assert [e.text for e in await fork.transcript() if e.kind == "assistant"] == ["first: one", "first: three"]
        assert [e.text for e in await conv.transcript() if e.kind == "assistant"] == ["first: one", "second: two"]
        assert list((await fork.document("pi.usage"))["models"]) == [str(ModelRef("scripted", "first"))]  # its own spend only


@pytest.mark.parametrize(
    "value",
    [
        AgentConfig(),
        AgentConfig(model=ModelRef("p", "m"), cwd="/w", tools=("a",), extensions=("x", "y"), context_window=9),
        Live(),
        Live(
            run=RunInfo(task_id=TaskId(3), inputs=(4, 5)),  # type: ignore[arg-type]
            tools=(ToolSlot(call_id="c", name="n", task_id=TaskId(6), status=SlotStatus.RUNNING, output="o"),),
            attempt=2,
            partial="abc",
            retry_at=9,
        ),
        (InboxItem(submission_id=7, mode=InboxMode.STEER, content="x"),),  # type: ignore[arg-type]
        UsageDoc(models={"p/m": UsageTotals(input_tokens=3, calls=1)}, tools={"t": UsageTotals(calls=2)}),
        ContextDoc(head=4),  # type: ignore[arg-type]
    ],
)
def test_a_built_ins_json_is_the_stores_lean_encoding_and_reads_back(value: Any) -> None:
    """core/builtins.to_json is the codec's store encoder's shape (fields at
    their default left out), so the shell reads a stored value back typed."""
    assert to_json(value) == codec.stored.unstructure(value)
    cl = tuple[InboxItem, ...] if isinstance(value, tuple) else type(value)
    assert codec.converter.structure(to_json(value), cl) == value


async def test_a_usage_increment_stores_a_delta_not_the_whole_usage(tmp_path: Path) -> None:
    """Many models in pi.usage: one more call journals and stores the few
    numbers that changed (O(delta)), not the document."""
    path = tmp_path / "u.sqlite"
    models = ScriptedModels(named)
    async with Harness.open(open_sqlite_storage(path), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m0")))
        for i in range(24):
            await conv.configure(model=ModelRef("scripted", f"m{i}"))
            await (await conv.submit(Input(f"q{i}"))).wait()
        await (await conv.submit(Input("once more"))).wait()
    store = open_sqlite_storage(path)
    try:
        did = builtin_id(1, "pi.usage")
        rows = store.db.execute(
            "SELECT action, content FROM document_revisions WHERE document_id = ? ORDER BY seq", [did]
        ).fetchall()
        doc = store.document_state(DocScope.CONVERSATION, 1, "pi.usage")
        assert doc is not None and len(doc.value["models"]) == 24
        action, content = rows[-1]
        assert action == "delta" and codec.loads(content)["ops"] == [["s", ["models", "scripted:m23", "calls"], 2]]
        assert len(content) < len(codec.dumps(doc.value)) / 2
    finally:
        store.close()


def test_a_schema_2_store_keeps_its_built_ins_as_documents(tmp_path: Path) -> None:
    """The schema migration moves each ``documents`` row into its built-in's
    record and a base revision at the row's commit and drops the table; the
    values read back as they were, pi.agent also as of that commit."""
    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "schema2_lives_store.sqlite", path)
    with sqlite3.connect(path) as raw:
        old = raw.execute("SELECT conversation_id, kind, seq, value FROM documents").fetchall()
    assert {k for _, k, _, _ in old} == {"pi.agent", "pi.live", "pi.inbox", "pi.usage", "pi.context"}
    store = open_sqlite_storage(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "documents" not in tables
        for cid, kind, seq, value in old:
            typed = decode_doc(kind, value)
            assert store.document(cid, kind) == typed
            (row,) = store.db.execute(
                "SELECT scope, owner, kind, history, created_seq FROM document_records WHERE id = ?", [builtin_id(cid, kind)]
            ).fetchall()
            assert row == ("conversation", cid, kind, BUILTINS[kind].history.value, seq)
            if kind == "pi.agent":
                past = store.document_at(cid, kind, seq)
                assert past is not None and past.value == to_json(typed)
        loaded = store.load()
        by_id = {c.id: c for c in loaded.conversations}
        for cid, kind, _, value in old:
            assert getattr(by_id[cid], BUILTINS[kind].field) == decode_doc(kind, value)
            assert by_id[cid].stored[kind] == 0
    finally:
        store.close()

    async def resume() -> None:
        async with Harness.open(open_sqlite_storage(path), models=ScriptedModels(named), registry=Registry()) as h:
            conv = await h.root()
            await (await conv.submit(Input("after the migration"))).wait()
            assert (await conv.document("pi.live")) == {}

    trio.run(resume)
