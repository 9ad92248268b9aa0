"""docs/fork.md's example runs as written (issue 10 item 2)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "fork.md"


def test_the_fork_example_runs() -> None:
    """The first python block of docs/fork.md executes and its assertions hold."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/fork.md has a python example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "docs_example"})
