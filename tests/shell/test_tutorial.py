"""The custom-tasks tutorial program (docs/custom-tasks.md) runs as written and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom-tasks.md"

EXPECTED = """\
== run a report
report: completed 245
parts: [120, 80, 45]
== crash and reopen
closing during phase: review
after reopen: completed 165
same reviewer: True
waited less than the whole deadline: True
== versions
inspect: report blocked task_too_old
after installing version 2: completed USD
migrated: 2 EUR
inspect: report blocked missing_task
aborted while blocked: orphaned missing_task
== abort handler
report: aborted {'stopped_in': 'collect'}
parts: ['completed', 'aborted']
== approval hook
user Ship 1.4.2
system []
assistant ['deploy']
tool_result deployed 1.4.2
assistant Deployed 1.4.2.
asked a human: 1
"""


def tutorial_program(text: str) -> str:
    """The one python block right after the ``<!-- tutorial -->`` marker."""
    found = re.findall(r"<!-- tutorial -->\s*\n```python\n(.*?)```", text, re.S)
    assert len(found) == 1, "the page needs exactly one <!-- tutorial --> python block"
    return found[0]


def test_tutorial_program_runs_and_prints_the_documented_output(tmp_path: Path) -> None:
    """The tutorial, run in a fresh process in an empty directory, prints exactly the output the page shows."""
    text = DOC.read_text()
    script = tmp_path / "tutorial.py"
    script.write_text(tutorial_program(text))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == EXPECTED
    assert "```text\n" + EXPECTED + "```" in text, "the page shows a different output than the program prints"
    assert (tmp_path / "reports.sqlite").exists() and (tmp_path / "chat.sqlite").exists()
