"""A process crash after any file operation of a JSONL store, or in the
middle of any of its writes: what the directory holds then opens, to the
state of the commits that counted (those whose main line is whole) - the
sidecar protocol's crash cases (jsonl.py), beyond the effect boundaries
test_kill_every_boundary.py crashes at.

How: one harness run (tool calls, so tasks come and go and the built-in
documents get bases and deltas) with every ``os.write``, ``os.replace``,
``os.unlink`` and truncation of the store recorded; the directory is copied
after each operation, and half way through each write (the write done in two
parts, a crash between them). Each copy is opened as a new process would
open it: it must open, its journal must be a prefix of the run's, its state
must be a memory store's after the same commits, and its journal must
replay."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import trio

from pidurable.shell import AgentConfig, Harness, Input, ModelRef, Registry, ToolResult, define_tool, open_jsonl_storage
from pidurable.shell.journal import check
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import JsonlStorage, MemoryStorage

import invariants

SKIP = {"lock", "lock.owner"}


class Snapshots:
    """Copies of the store directory, one per file operation (and one half
    way through each write)."""

    def __init__(self, store: Path, out: Path) -> None:
        self.store, self.out, self.taken = store, out, 0

    def take(self) -> None:
        if not self.store.exists():
            return
        target = self.out / f"crash-{self.taken:04d}"
        target.mkdir()
        for name in os.listdir(self.store):
            if name not in SKIP:
                shutil.copyfile(self.store / name, target / name)
        self.taken += 1


def _patch(monkeypatch: Any, snaps: Snapshots) -> None:
    real_write, real_replace, real_unlink = os.write, os.replace, os.unlink
    real_ftruncate, real_truncate = os.ftruncate, os.truncate

    def write(fd: int, data: Any) -> int:
        data = bytes(data)
        if len(data) > 1:
            half = len(data) // 2
            n = real_write(fd, data[:half])
            snaps.take()  # a crash mid-append: a torn line
            n += real_write(fd, data[half:])
        else:
            n = real_write(fd, data)
        snaps.take()
        return n

    def after(real: Any) -> Any:
        def op(*args: Any, **kw: Any) -> Any:
            result = real(*args, **kw)
            snaps.take()
            return result

        return op

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "replace", after(real_replace))
    monkeypatch.setattr(os, "unlink", after(real_unlink))
    monkeypatch.setattr(os, "ftruncate", after(real_ftruncate))
    monkeypatch.setattr(os, "truncate", after(real_truncate))


def _recording(storage: JsonlStorage, batches: list[Any]) -> JsonlStorage:
    """``storage`` with every batch it commits appended to ``batches`` (once
    the store took it), the commits a crash copy is compared against."""
    inner = storage.commit_many

    def recorded(batch: Any) -> None:
        inner(batch)
        batches.append(list(batch))

    storage.commit_many = recorded  # type: ignore[method-assign]
    return storage


def _second_open_changes_nothing(copy: Path) -> None:
    """The first open repaired ``copy``: opening it again leaves every file
    (but the lock's) byte for byte as it was."""
    before = {n: (copy / n).read_bytes() for n in os.listdir(copy) if n not in SKIP}
    open_jsonl_storage(copy).close()
    assert {n: (copy / n).read_bytes() for n in os.listdir(copy) if n not in SKIP} == before, copy.name


def _run(path: Path, batches: list[Any]) -> None:
    async def tool(call: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text=f"ok {args.get('i')}")

    def answer(request: Any) -> Any:
        if request.messages[-1].role == "user":
            return reply(tool_calls=[tool_call("t", i=i) for i in range(2)])
        return reply(text="done")

    registry = Registry()
    registry.install(define_tool("t", "a tool", {"type": "object"}, tool, replay="safe"))
    storage = _recording(open_jsonl_storage(path), batches)

    async def main() -> None:
        async with Harness.open(storage, models=ScriptedModels(answer), registry=registry) as h:
            conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "m")))
            for n in range(2):
                assert (await (await conv.submit(Input(f"go {n}"))).wait()).status == "done"

    trio.run(main)


def _memory_after(batches: list[Any], commits: int) -> MemoryStorage:
    memory = MemoryStorage()
    done = 0
    for batch in batches:
        if done >= commits:
            break
        memory.commit_many(batch)
        done += len(batch)
    assert done == commits, "a copy holds part of a batch"
    return memory


def test_a_crash_after_any_file_operation_opens_to_the_commits_that_counted(tmp_path: Path, monkeypatch: Any) -> None:
    store, out = tmp_path / "store", tmp_path / "crashes"
    out.mkdir()
    snaps = Snapshots(store, out)
    batches: list[Any] = []
    _patch(monkeypatch, snaps)
    _run(store, batches)
    monkeypatch.undo()
    final = open_jsonl_storage(store)
    journal = final.journal()
    final.close()
    assert snaps.taken > 50 and len(journal) > 5
    seen = set()
    for copy in sorted(out.iterdir()):
        reopened: JsonlStorage = open_jsonl_storage(copy)
        try:
            got = reopened.journal()
            assert got == journal[: len(got)], copy.name
            memory = _memory_after(batches, len(got))
            assert attrs.evolve(reopened.load(), store_id="") == attrs.evolve(memory.load(), store_id=""), copy.name
            assert reopened.tasks() == memory.tasks() and reopened.entries(1) == memory.entries(1), copy.name
            assert check(got).ok, copy.name
            invariants.outcome_iff_terminal(reopened)
            seen.add(len(got))
        finally:
            reopened.close()
        _second_open_changes_nothing(copy)
    boundaries = {0}
    for batch in batches:
        boundaries.add(max(boundaries) + len(batch))
    assert seen == boundaries  # a copy of the store after every batch (and before the first)


SCHEMA6 = Path(__file__).parent.parent / "shell" / "fixtures" / "jsonl_schema6_running_task_store"


def test_a_crash_while_a_schema6_store_is_upgraded_and_resumed_opens_to_the_commits_that_counted(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The schema-6 fixture with live tasks in sidecars (tests/shell/
    fixtures/make_lives_store.py): its first open with today's code rewrites
    the header (``main.jsonl.reclaim``, renamed over), then a life settles
    its tasks with schema-7 lines and deletes their sidecars. A crash after
    any of those file operations, or half way through a write, opens: the
    journal a prefix of the run's, the state that of the fixture plus the
    batches that counted, the journal replays, and a second open changes
    nothing."""
    store, out = tmp_path / "store", tmp_path / "crashes"
    shutil.copytree(SCHEMA6, store)
    out.mkdir()
    snaps = Snapshots(store, out)
    batches: list[Any] = []
    _patch(monkeypatch, snaps)
    storage = _recording(open_jsonl_storage(store), batches)

    async def life() -> None:
        async with Harness.open(storage, models=ScriptedModels(lambda r: reply(text="settled")), registry=Registry()) as h:
            conv = await h.root()
            assert (await (await conv.submit(Input("What is the port?", request_id="q1"))).wait()).status == "done"

    trio.run(life)
    monkeypatch.undo()
    final = open_jsonl_storage(store)
    journal = final.journal()
    final.close()
    fixture_commits = len(journal) - sum(len(b) for b in batches)
    assert fixture_commits == 10 and batches and not any(n.startswith("task-") for n in os.listdir(store))
    assert (store / "main.jsonl").read_bytes().startswith(b'{"pidurable":"jsonl","schema":8,')
    assert snaps.taken > 20, snaps.taken  # the header's rewrite, the sidecars' appends and deletions, the main lines
    seen = set()
    for copy in sorted(out.iterdir()):
        reopened: JsonlStorage = open_jsonl_storage(copy)
        try:
            got = reopened.journal()
            assert got == journal[: len(got)] and len(got) >= fixture_commits, copy.name
            reference_dir = tmp_path / "reference" / copy.name
            shutil.copytree(SCHEMA6, reference_dir)
            reference = open_jsonl_storage(reference_dir)
            try:
                done = fixture_commits
                for batch in batches:
                    if done >= len(got):
                        break
                    reference.commit_many(batch)
                    done += len(batch)
                assert done == len(got), f"{copy.name}: a copy holds part of a batch"
                assert attrs.evolve(reopened.load(), store_id="") == attrs.evolve(reference.load(), store_id=""), copy.name
                assert reopened.tasks() == reference.tasks() and reopened.entries(1) == reference.entries(1), copy.name
            finally:
                reference.close()
            assert check(got).ok, copy.name
            invariants.outcome_iff_terminal(reopened)
            seen.add(len(got))
        finally:
            reopened.close()
        _second_open_changes_nothing(copy)
    boundaries = {fixture_commits}
    for batch in batches:
        boundaries.add(max(boundaries) + len(batch))
    assert seen == boundaries


def test_a_crash_at_any_file_operation_of_a_compaction_opens_to_the_same_records(tmp_path: Path, monkeypatch: Any) -> None:
    """``JsonlStorage.compact(journal_retention=2)`` of the run's store, then
    a process life on the compacted store (a new input: sidecars again),
    with a copy of the directory after every file operation and half way
    through every write: the new ``main.jsonl`` written to
    ``main.jsonl.reclaim`` (a stray one is deleted at open), renamed over,
    the sidecars deleted (ones left open as records of no line, deleted at
    open). Each copy opens to the run's records plus the new batches that
    counted; its journal is the whole run's (before the rename) or the kept
    rows and the new commits (after it), and replays from its first process
    life; a second open changes nothing."""
    store, out = tmp_path / "store", tmp_path / "crashes"
    out.mkdir()
    batches: list[Any] = []
    _run(store, batches)
    whole = open_jsonl_storage(store)
    journal = whole.journal()
    whole.close()
    assert any(n.startswith(("task-", "doc-")) for n in os.listdir(store))
    snaps = Snapshots(store, out)
    _patch(monkeypatch, snaps)
    storage = open_jsonl_storage(store)
    done = storage.compact(journal_retention=2)
    after_compaction = snaps.taken
    assert done.dropped == len(journal) - 2 and done.sidecars > 0
    new: list[Any] = []
    storage = _recording(storage, new)

    async def life() -> None:
        async with Harness.open(storage, models=ScriptedModels(lambda r: reply(text="more")), registry=Registry()) as h:
            conv = await h.root()
            assert (await (await conv.submit(Input("again"))).wait()).status == "done"

    trio.run(life)
    monkeypatch.undo()
    assert new and after_compaction > 5 and snaps.taken > after_compaction
    final = open_jsonl_storage(store)
    kept = final.journal()
    final.close()
    assert kept[: 2] == journal[-2:] and kept[0].seq > 1
    seen = set()
    for copy in sorted(out.iterdir()):
        reopened: JsonlStorage = open_jsonl_storage(copy)
        try:
            got = reopened.journal()
            if got == journal:  # before the rename: the store as it was
                counted = 0
            else:
                assert got == kept[: len(got)] and len(got) >= 2, copy.name
                counted = len(got) - 2
            memory = _memory_after(batches + new, len(journal) + counted)
            assert attrs.evolve(reopened.load(), store_id="") == attrs.evolve(memory.load(), store_id=""), copy.name
            assert reopened.tasks() == memory.tasks() and reopened.entries(1) == memory.entries(1), copy.name
            assert reopened.submissions() == memory.submissions() and reopened.conversations() == memory.conversations()
            if counted:  # from the new life's opened (the kept rows start inside a life)
                opened = [i for i, r in enumerate(got) if json.loads(r.events)[0]["type"] == "opened"]
                assert opened and check(got[opened[0] :]).ok, copy.name
            if got[0].seq == 1:
                invariants.outcome_iff_terminal(reopened)  # it replays the journal: a whole one
            assert all((t.status.value in ("terminal", "completing")) == (t.outcome is not None) for t in reopened.tasks())
            seen.add((got[0].seq, len(got)))
        finally:
            reopened.close()
        _second_open_changes_nothing(copy)
    boundaries = {(1, len(journal)), (kept[0].seq, 2)}
    for batch in new:
        boundaries.add((kept[0].seq, max(n for s, n in boundaries if s > 1) + len(batch)))
    assert seen == boundaries
