"""``define_tool(..., reconcile=fn)`` in the shell (issue 15): an unsafe call
interrupted by closing the harness mid-body is reconciled by the next
process, with the same call context; each verdict, a raising reconcile, the
definition's checks and the catalog's wire shape."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from pidurable.core.events import RegistryChanged
from pidurable.core.model import TOOL, AgentConfig, EntryKind, ModelRef, SubmissionStatus, TaskStatus, ToolInfo, Usage
from pidurable.shell import Harness, Input, MemoryStorage, Reconciled, Registry, ToolResult, define_tool
from pidurable.shell.providers import ScriptedModels, reply, tool_call
from pidurable.shell.storage import codec

AGENT = AgentConfig(model=ModelRef("scripted", "demo"), cwd="sub")
WAIT = 10
ARGS: dict[str, Any] = {"type": "object", "properties": {"amount": {"type": "integer"}}}


class Service:
    """A payment service keyed by idempotency key; the first execution blocks
    (after charging, or before, per ``charge_first``) until the harness closes."""

    def __init__(self, answer: Any, *, charge_first: bool = True) -> None:
        self.answer = answer
        self.charge_first = charge_first
        self.charges: dict[str, int] = {}
        self.executions: list[tuple[int, str, str | None]] = []
        self.asked: list[tuple[int, str, str | None, dict[str, Any]]] = []
        self.entered = trio.Event()

    def tool(self) -> Any:
        async def execute(ctx: Any, args: dict[str, Any]) -> str:
            self.executions.append((ctx.task_id, ctx.idempotency_key, ctx.cwd))
            if len(self.executions) == 1:
                if self.charge_first:
                    self.charges[ctx.idempotency_key] = args["amount"]
                self.entered.set()
                await trio.sleep_forever()
            self.charges[ctx.idempotency_key] = args["amount"]
            return f"charged {args['amount']}"

        async def reconcile(ctx: Any, args: dict[str, Any]) -> Reconciled:
            self.asked.append((ctx.task_id, ctx.idempotency_key, ctx.cwd, args))
            answer = self.answer
            if callable(answer):
                return answer(self, ctx, args)  # type: ignore[no-any-return]
            return answer  # type: ignore[no-any-return]

        return define_tool("pay", "Charge once.", ARGS, execute, replay="unsafe", reconcile=reconcile)


async def _interrupted_then_resumed(service: Service) -> tuple[MemoryStorage, Any]:
    models = ScriptedModels([reply(tool_calls=[tool_call("pay", amount=42)]), reply(text="paid")])
    storage = MemoryStorage()
    registry = Registry()
    registry.install(service.tool())
    async with Harness.open(storage, models=models, registry=registry) as h:
        conv = await h.root(agent=AGENT)
        handle = await conv.submit(Input("pay 42"))
        with trio.fail_after(WAIT):
            await service.entered.wait()
    [stuck] = [t for t in storage.tasks(live_only=True) if t.kind == TOOL]
    assert stuck.status == TaskStatus.RUNNING and stuck.phase == "execute"
    async with Harness.open(storage, models=models, registry=registry) as h:
        again = await h.submission(handle.id)
        assert again is not None
        with trio.fail_after(WAIT):
            settled = await again.wait()
    assert settled.status == SubmissionStatus.DONE
    [result] = [e for e in storage.entries(1) if e.kind == EntryKind.TOOL_RESULT]
    return storage, result


def _done(service: Service, ctx: Any, args: dict[str, Any]) -> Reconciled:
    amount = service.charges.get(ctx.idempotency_key)
    if amount is None:
        return Reconciled.not_done()
    return Reconciled.done(ToolResult(text=f"charged {amount}", usage=Usage(input_tokens=1, output_tokens=2)))


async def test_done_settles_with_the_found_result_and_the_same_context(autojump_clock: trio.testing.MockClock) -> None:
    """Charged before the crash: reconcile (same task, idempotency key and
    cwd as the execution, the stored arguments) says done; the body never runs again."""
    service = Service(_done)
    storage, result = await _interrupted_then_resumed(service)
    assert not result.is_error and result.text == "charged 42"
    assert result.data == {"reconciled": "done"}
    assert len(service.executions) == 1 and len(service.charges) == 1
    (task, key, cwd), (rtask, rkey, rcwd, args) = service.executions[0], service.asked[0]
    assert (rtask, rkey, rcwd, args) == (task, key, cwd, {"amount": 42})
    usage = storage.document(1, "pi.usage")
    assert usage is not None and usage.tools["pay"].calls == 1  # the done result's usage, counted once


async def test_not_done_runs_execute_again(autojump_clock: trio.testing.MockClock) -> None:
    """Not charged before the crash: reconcile says not_done, execute runs
    again (same idempotency key) and the result says so."""
    service = Service(_done, charge_first=False)
    _, result = await _interrupted_then_resumed(service)
    assert not result.is_error and result.text == "charged 42" and result.data == {"reconciled": "not_done"}
    assert len(service.executions) == 2 and service.executions[0][1] == service.executions[1][1]
    assert len(service.charges) == 1


async def test_unknown_settles_interrupted_with_the_note(autojump_clock: trio.testing.MockClock) -> None:
    """``Reconciled.unknown(note)``: the interrupted result plus the note."""
    service = Service(Reconciled.unknown("the bank is closed"))
    _, result = await _interrupted_then_resumed(service)
    assert result.is_error and result.data is not None and result.data["reconciled"] == "unknown"
    assert result.text == (
        "<harness>\n[error] Tool pay was interrupted and may have partially run\n"
        "[warn] Reconcile could not tell whether it ran: the bank is closed\n</harness>"
    )


async def test_a_raising_reconcile_is_unknown_and_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A reconcile that raises: ``unknown`` with the error as the note, and a WARNING on ``pidurable``."""

    def boom(service: Service, ctx: Any, args: dict[str, Any]) -> Reconciled:
        raise ConnectionError("bank unreachable")

    with caplog.at_level(logging.WARNING, logger="pidurable"):
        _, result = await _interrupted_then_resumed(Service(boom))
    assert result.is_error and result.data is not None and result.data["reconciled"] == "unknown"
    assert "Reconcile could not tell whether it ran: bank unreachable" in result.text
    assert any("reconcile of tool pay" in r.getMessage() and "bank unreachable" in r.getMessage() for r in caplog.records)


async def test_a_reconcile_returning_something_else_is_unknown(autojump_clock: trio.testing.MockClock) -> None:
    """Anything but a ``Reconciled`` is a broken answer: ``unknown``, naming it."""
    _, result = await _interrupted_then_resumed(Service("yes, probably"))
    assert result.is_error and "not Reconciled.done/not_done/unknown" in result.text


def test_define_tool_checks_reconcile() -> None:
    """reconcile is for unsafe tools, and must be callable; the catalog says which tools have one."""

    async def body(ctx: Any, args: dict[str, Any]) -> str:
        return "x"

    async def rec(ctx: Any, args: dict[str, Any]) -> Reconciled:
        return Reconciled.not_done()

    with pytest.raises(ValueError, match="reconcile is for unsafe tools"):
        define_tool("t", "d", ARGS, body, replay="safe", reconcile=rec)
    with pytest.raises(TypeError, match="reconcile must be"):
        define_tool("t", "d", ARGS, body, reconcile="nope")  # type: ignore[arg-type]
    assert define_tool("t", "d", ARGS, body, reconcile=rec).info() == ToolInfo(name="t", reconcile=True)
    assert define_tool("t", "d", ARGS, body).info().reconcile is False
    assert Reconciled.done("ok").verdict == "done" and Reconciled.unknown("n").note == "n"


def test_a_catalog_without_reconcile_keeps_its_old_bytes() -> None:
    """``reconcile`` is omitted when False (both encoders): journals written before it replay byte for byte."""
    ev = RegistryChanged(now=1, catalog=(ToolInfo(name="a"), ToolInfo(name="b", reconcile=True)))
    for conv in (codec.converter, codec.stored):
        a, b = conv.unstructure(ev)["catalog"]
        assert "reconcile" not in a and b["reconcile"] is True
    assert codec.converter.structure(codec.converter.unstructure(ev), RegistryChanged) == ev
