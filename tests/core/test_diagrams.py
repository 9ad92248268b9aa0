"""specs/diagrams.md is generated from the core's tables and is up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("diagrams", SPECS / "diagrams.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_diagrams_match_the_tables() -> None:
    """Regenerating the diagrams in memory gives the checked-in file (run
    ``python specs/diagrams.py`` after changing a table)."""
    assert (SPECS / "diagrams.md").read_text() == _script().render()


def test_every_row_is_drawn() -> None:
    """Each machine's section has one arrow label per row input (no row is lost)."""
    from pidurable.core import generation, tools
    from pidurable.core.lifecycle import TASK_TRANSITIONS

    text = _script().render()
    for machine in (generation.MACHINE, tools.MACHINE):
        for (_, move) in machine.rows:
            assert str(move) in text
    for (_, move) in TASK_TRANSITIONS:
        assert str(move) in text
