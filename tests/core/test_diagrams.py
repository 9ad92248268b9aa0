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


def test_embedded_diagrams_are_fresh() -> None:
    """Every file listed in ``EMBEDDED`` carries at least one diagram block,
    and each block is exactly what the tables give today (run ``python
    specs/diagrams.py`` after changing a table)."""
    script = _script()
    stale = []
    for rel in script.EMBEDDED:
        text = (script.ROOT / rel).read_text()
        assert script.markers(text), f"{rel} is listed in EMBEDDED but has no diagram block"
        if script.embed(text) != text:
            stale.append(rel)
    assert not stale, f"stale embedded diagrams in {', '.join(stale)}: run `python specs/diagrams.py`"


def test_every_marker_in_the_docs_is_listed() -> None:
    """A diagram block in a doc the script does not rewrite would go stale silently."""
    script = _script()
    root = script.ROOT
    for path in sorted([*root.glob("docs/*.md"), *root.glob("specs/*.md"), root / "README.md"]):
        rel = str(path.relative_to(root))
        if rel != "specs/diagrams.md" and "<!-- diagrams:" in path.read_text():
            assert rel in script.EMBEDDED, f"{rel} embeds diagrams but is not in EMBEDDED"


def test_a_stale_embedded_block_is_detected() -> None:
    """The check bites: an edited arrow, or a block left empty, is rewritten."""
    script = _script()
    fresh = "intro\n\n" + script.embedded("tool") + "\n\nafter\n"
    assert script.embed(fresh) == fresh
    tampered = fresh.replace("call --> execute : prepared", "call --> execute : prepared_by_hand")
    assert tampered != fresh and script.embed(tampered) == fresh
    empty = "intro\n\n<!-- diagrams:tool:start -->\n<!-- diagrams:tool:end -->\n\nafter\n"
    assert script.embed(empty) == fresh
    import pytest

    with pytest.raises(KeyError):
        script.embed("<!-- diagrams:nosuch:start -->\n<!-- diagrams:nosuch:end -->")
