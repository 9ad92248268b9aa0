"""Unsafe tools that can find out (issue 15): fake external services and the
tools with ``reconcile`` that the crash scenarios and the fuzzer use.

- :class:`Payments`, a payment service keyed by the call's idempotency key:
  ``charge(key, amount)`` charges (a naive service: charging a key twice
  charges twice, so a duplicate is visible), ``lookup(key)`` tells whether and
  what was charged. ``pay``'s reconcile looks the key up: charged -> ``done``
  with the same receipt execute returns; not charged -> ``not_done``.
- A file write checked by content hash: ``write_file``'s reconcile compares
  the file's sha256 with the content's: equal -> ``done``; absent -> ``not_done``;
  other content -> ``unknown``.
- ``notify``: a message service that keeps no record (``unknown``), and
  ``ship``: a reconcile that raises (``unknown`` with its error).

Every external effect is counted in ``World.effects`` by (tool, task id):
``ReconciledEffectHappensOnce`` (tests/invariants.py) reads it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import trio

from pidurable.shell import Reconciled, ToolDefinition, ToolResult, define_tool

from pidurable.shell.providers import reply, tool_call

from harness import Scenario, World, counting_tool


def _task(key: str) -> int:
    """The tool task of an idempotency key (``<store>:tool:<task id>``)."""
    return int(key.rsplit(":", 1)[1])


@attrs.define
class Payments:
    """A payment service: charges by idempotency key, queried by key."""

    world: World
    charges: dict[str, list[int]] = attrs.field(factory=dict)

    def charge(self, key: str, amount: int) -> str:
        self.charges.setdefault(key, []).append(amount)
        self.world.effects[("pay", _task(key))] += 1
        return self.receipt(key, amount)

    def lookup(self, key: str) -> str | None:
        amounts = self.charges.get(key)
        return self.receipt(key, amounts[0]) if amounts else None

    @staticmethod
    def receipt(key: str, amount: int) -> str:
        return f"Charged {amount} EUR, receipt R-{_task(key)}"


def payments(world: World) -> Payments:
    """The world's payment service (it outlives process lives)."""
    service = world.flags.get("payments")
    if service is None:
        service = world.flags["payments"] = Payments(world)
    assert isinstance(service, Payments)
    return service


_AMOUNT = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}


def pay_tool(world: World, *, pause: float = 0.002, before: float | None = None) -> ToolDefinition:
    """``pay(amount)``: unsafe; a crash may land before or after the charge
    (``pause`` after it, ``before`` - default ``pause`` - before it);
    reconcile looks the key up."""

    async def execute(ctx: Any, args: dict[str, Any]) -> ToolResult:
        world.runs[("pay", ctx.task_id)] += 1
        await trio.sleep(pause if before is None else before)  # a crash here: not charged
        text = payments(world).charge(ctx.idempotency_key, int(args["amount"]))
        await trio.sleep(pause)  # a crash here: charged, result not committed
        return ToolResult(text=text)

    async def reconcile(ctx: Any, args: dict[str, Any]) -> Reconciled:
        world.runs[("pay.reconcile", ctx.task_id)] += 1
        await trio.sleep(0)
        receipt = payments(world).lookup(ctx.idempotency_key)
        return Reconciled.done(receipt) if receipt is not None else Reconciled.not_done()

    return define_tool("pay", "charge the card once", _AMOUNT, execute, replay="unsafe", reconcile=reconcile)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_file_tool(world: World, *, pause: float = 0.002) -> ToolDefinition:
    """``write_file(path, content)``: unsafe; reconcile compares hashes."""

    async def execute(ctx: Any, args: dict[str, Any]) -> str:
        world.runs[("write_file", ctx.task_id)] += 1
        await trio.sleep(pause)
        world.files[args["path"]] = args["content"]
        world.effects[("write_file", ctx.task_id)] += 1
        await trio.sleep(pause)
        return f"Wrote {len(args['content'])} bytes to {args['path']}"

    async def reconcile(ctx: Any, args: dict[str, Any]) -> Reconciled:
        now = world.files.get(args["path"])
        if now is None:
            return Reconciled.not_done()
        if _sha(now) == _sha(args["content"]):
            return Reconciled.done(f"Wrote {len(args['content'])} bytes to {args['path']}")
        return Reconciled.unknown(f"{args['path']} holds other content (sha256 {_sha(now)[:12]})")

    props = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}
    return define_tool("write_file", "write a file", props, execute, replay="unsafe", reconcile=reconcile)


def notify_tool(world: World, *, pause: float = 0.002) -> ToolDefinition:
    """``notify(text)``: the message service keeps no record: reconcile says
    ``unknown``."""

    async def execute(ctx: Any, args: dict[str, Any]) -> str:
        world.runs[("notify", ctx.task_id)] += 1
        await trio.sleep(pause)
        world.effects[("notify", ctx.task_id)] += 1
        await trio.sleep(pause)
        return "sent"

    async def reconcile(ctx: Any, args: dict[str, Any]) -> Reconciled:
        return Reconciled.unknown("the message service keeps no delivery record")

    return define_tool("notify", "send a message", {"type": "object"}, execute, replay="unsafe", reconcile=reconcile)


def ship_tool(world: World, *, pause: float = 0.002) -> ToolDefinition:
    """``ship()``: its reconcile raises (the tracking service is down)."""

    async def execute(ctx: Any, args: dict[str, Any]) -> str:
        world.runs[("ship", ctx.task_id)] += 1
        await trio.sleep(pause)
        world.effects[("ship", ctx.task_id)] += 1
        await trio.sleep(pause)
        return "shipped"

    async def reconcile(ctx: Any, args: dict[str, Any]) -> Reconciled:
        raise ConnectionError("tracking service unreachable")

    return define_tool("ship", "ship the parcel", {"type": "object"}, execute, replay="unsafe", reconcile=reconcile)


# --- the kill-at-every-boundary scenarios -------------------------------------------


def _quote(world: World) -> ToolDefinition:
    """A fast replay-safe tool beside the unsafe one: its result's commit is
    an effect boundary while the unsafe body is still running."""
    return counting_tool(world, "quote", replay="safe")


def _results(storage: Any, name: str) -> list[Any]:
    return [e for e in storage.entries(1) if e.kind == "tool_result" and e.tool_name == name]


def _check_paid(storage: Any) -> None:
    """Every crash position: the payment and the file write settled with
    their real results (so, by ReconciledEffectHappensOnce, charged and
    written exactly once), never "may have partially run"."""
    for name in ("pay", "write_file"):
        for e in _results(storage, name):
            assert not e.is_error, f"{name} settled as an error: {e.text!r}"
    for e in _results(storage, "pay"):
        assert e.text == f"Charged 42 EUR, receipt R-{e.by_task_id}", e.text


def _check_unknown(storage: Any) -> None:
    for name in ("notify", "ship"):
        for e in _results(storage, name):
            if e.is_error:
                assert (e.data or {}).get("reconciled") == "unknown", e.data
                assert "Reconcile could not tell whether it ran: " in e.text, e.text


_PAY_ROUND = reply(
    tool_calls=[
        tool_call("pay", amount=42),
        tool_call("write_file", path="receipt.txt", content="paid 42"),
        tool_call("quote"),
    ]
)

RECONCILE_PAY = Scenario(
    name="reconcile_pay",
    script=(_PAY_ROUND, reply(text="Paid once, receipt written.")),
    tools=lambda w: [pay_tool(w), write_file_tool(w), _quote(w)],
    final_check=_check_paid,
    verdicts=("done", "not_done"),
)

RECONCILE_UNKNOWN = Scenario(
    name="reconcile_unknown",
    script=(reply(tool_calls=[tool_call("notify"), tool_call("quote")]), reply(text="Notified (maybe).")),
    tools=lambda w: [notify_tool(w), _quote(w)],
    unsafe=("notify",),
    final_check=_check_unknown,
    verdicts=("unknown",),
)

RECONCILE_RAISES = Scenario(
    name="reconcile_raises",
    script=(reply(tool_calls=[tool_call("ship"), tool_call("quote")]), reply(text="Shipped (maybe).")),
    tools=lambda w: [ship_tool(w), _quote(w)],
    unsafe=("ship",),
    final_check=_check_unknown,
    verdicts=("unknown",),
)

RECONCILE_KILLED = Scenario(
    name="reconcile_killed",
    script=(reply(tool_calls=[tool_call("pay", amount=42), tool_call("quote")]), reply(text="Paid once.")),
    tools=lambda w: [pay_tool(w), write_file_tool(w), _quote(w)],
    final_check=_check_paid,
    verdicts=("done", "not_done"),
    sweep_recovery=True,
)

SCENARIOS = (RECONCILE_PAY, RECONCILE_UNKNOWN, RECONCILE_RAISES, RECONCILE_KILLED)
