"""The differential run's summary, printed after the tests (``pytest -m
differential``), as tests/conftest.py prints the crash boundaries: one line
per scenario, and where each pending difference (issue 17 items 1/4) was
still seen - or that it no longer is, so its allowance can be deleted."""

from __future__ import annotations

from typing import Any

import attrs
import pytest


@attrs.define
class Report:
    #: (scenario, summary line)
    lines: list[tuple[str, str]] = attrs.Factory(list)
    #: pending id -> what removes it
    pending: dict[str, str] = attrs.Factory(dict)
    #: pending id -> scenarios where it still differs
    seen: dict[str, list[str]] = attrs.Factory(dict)


REPORT = Report()


@pytest.fixture
def differential_report() -> Report:
    return REPORT


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    if not REPORT.lines:
        return
    terminalreporter.section("differential run against pi-durable-python")
    for name, line in REPORT.lines:
        terminalreporter.write_line(f"{name:<19} {line}")
    for key, who in REPORT.pending.items():
        where = REPORT.seen.get(key)
        if where:
            terminalreporter.write_line(f"pending {key}: still differs in {', '.join(where)} - {who}")
        else:
            terminalreporter.write_line(f"pending {key}: no scenario shows it any more - delete it from PENDING ({who})")
