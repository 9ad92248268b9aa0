"""docs/documents.md's todo-list example runs as written (issue 10)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "documents.md"


def test_the_todo_list_example_runs() -> None:
    """The first python block of docs/documents.md executes and its assertion holds."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/documents.md has a python example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "docs_example"})
