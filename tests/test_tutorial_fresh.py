"""docs/tutorial.md is what ``python docs/generate.py`` writes today: the
tutorial's transcripts, ``replay --explain`` excerpts and task trees come from
real runs, so a behaviour change that alters them makes this fail (regenerate
with ``.venv/bin/python docs/generate.py`` and review the diff)."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_tutorial", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tutorial_is_fresh() -> None:
    expected = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    produced = _script().render()
    if produced != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), produced.splitlines(), "docs/tutorial.md (checked in)", "generated now", lineterm=""
        )
        shown = "\n".join(list(diff)[:80])
        pytest.fail(f"docs/tutorial.md is stale: run `.venv/bin/python docs/generate.py`\n{shown}")


def test_the_tutorial_shows_each_story() -> None:
    """The six sections are there, each with its transcript, explain excerpt and tree."""
    text = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    assert text.count("### The transcript") == text.count("### The task tree at the end") == 6
    assert "interrupted, NOT re-run (replay=unsafe)" in text  # the crash story, from --explain
    assert "pidurable demo" in text and "SIGKILL" in text
    assert "/tmp" not in text  # no temporary path leaks into the doc
