"""The demo's scenarios, read from ``scenarios.toml`` (package data) into
typed records: what each part is, not how it runs."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class Query:
    """A replay-safe tool that sleeps, then answers a fixed text."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    answer: str
    seconds: float
    first_life_seconds: float | None = None

    def delay(self, life: int) -> float:
        return self.first_life_seconds if life == 1 and self.first_life_seconds is not None else self.seconds


@attrs.frozen(kw_only=True)
class Booking:
    """Part 3's replay-unsafe tool with a ``reconcile``: a booking service
    (a JSON file keyed by the call's idempotency key)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    service_file: str
    confirmation: str


@attrs.frozen(kw_only=True)
class Call:
    name: str
    arguments: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class ParentKill:
    """The parent kills life 1 once ``committed`` calls are stored and
    ``running`` runs its body; ``says`` narrates it (``{pid}``: the child)."""

    committed: tuple[str, ...]
    running: str
    says: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Expect:
    """What recovery must have done (the demo fails otherwise)."""

    kept: tuple[str, ...]
    rerun: tuple[str, ...]
    interrupted: tuple[str, ...]
    #: calls settled by their tool's ``reconcile`` (not run again)
    reconciled: tuple[str, ...] = ()
    body_runs: Mapping[str, int] = attrs.field(factory=dict)
    file_contains: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Part:
    """One part: a prompt in the root conversation, killed once, resumed once."""

    key: str
    title: str
    prompt: str
    request_id: str
    life_one: tuple[str, ...]
    #: the model's tool rounds, in order; then the final answer
    replies: tuple[tuple[Call, ...], ...]
    final_answer: str
    expect: Expect
    files: Mapping[str, str] = attrs.field(factory=dict)
    show_file: str | None = None
    self_kill_after: str | None = None
    parent_kill: ParentKill | None = None


@attrs.frozen(kw_only=True)
class Scenarios:
    runs_file: str
    queries: tuple[Query, ...]
    booking: Booking
    parts: tuple[Part, ...]

    def part(self, key: str) -> Part:
        return next(p for p in self.parts if p.key == key)

    def by_prompt(self, prompt: str) -> Part | None:
        return next((p for p in self.parts if p.prompt == prompt), None)


def _expect(d: dict[str, Any]) -> Expect:
    return Expect(
        kept=tuple(d["kept"]),
        rerun=tuple(d["rerun"]),
        interrupted=tuple(d["interrupted"]),
        reconciled=tuple(d.get("reconciled", ())),
        body_runs=d.get("body_runs", {}),
        file_contains=d.get("file_contains", {}),
    )


def _part(key: str, d: dict[str, Any]) -> Part:
    kill = d.get("parent_kill")
    return Part(
        key=key,
        title=d["title"],
        prompt=d["prompt"],
        request_id=d["request_id"],
        life_one=tuple(d["life_one"]),
        replies=tuple(tuple(Call(**c) for c in r["calls"]) for r in d["replies"]),
        final_answer=d["final_answer"],
        expect=_expect(d["expect"]),
        files=d.get("files", {}),
        show_file=d.get("show_file"),
        self_kill_after=d.get("self_kill_after"),
        parent_kill=None
        if kill is None
        else ParentKill(committed=tuple(kill["committed"]), running=kill["running"], says=tuple(kill["says"])),
    )


def load() -> Scenarios:
    assert __package__
    data = tomllib.loads(files(__package__).joinpath("scenarios.toml").read_text(encoding="utf-8"))
    return Scenarios(
        runs_file=data["runs_file"],
        queries=tuple(Query(**q) for q in data["queries"]),
        booking=Booking(**data["booking"]),
        parts=tuple(_part(k, v) for k, v in data["parts"].items()),
    )


#: The scenarios, read once.
SCENARIOS = load()
