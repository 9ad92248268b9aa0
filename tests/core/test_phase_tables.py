"""The phase tables in core/generation.py and core/tools.py agree with the
handlers: a task can be reserved exactly at the phases that have a reserve
handler, and every row leads to a known phase (or ends the task)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from pidurable.core import generation, tools


@pytest.mark.parametrize("module", [generation, tools], ids=["generation", "tools"])
def test_reserve_rows_match_the_reserve_handlers(module: Any) -> None:
    """Every phase with a ``reserve`` row has a handler in ON_RESERVE and
    every handler has a row: a missing row (or handler) is a bug."""
    table: Mapping[tuple[str, str], str] = module.PHASES
    handlers: Mapping[str, Callable[..., None]] = module.ON_RESERVE
    reservable = {phase for (phase, move) in table if move.startswith("reserve")}
    assert reservable == set(handlers)


@pytest.mark.parametrize("module", [generation, tools], ids=["generation", "tools"])
def test_every_row_leads_to_a_known_phase(module: Any) -> None:
    """Each row's target is a phase the table knows, or ``-`` (terminal)."""
    table: Mapping[tuple[str, str], str] = module.PHASES
    phases = {phase for (phase, _) in table}
    for (phase, move), target in table.items():
        assert target == "-" or target in phases, (phase, move, target)
