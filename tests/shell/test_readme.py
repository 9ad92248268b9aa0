"""The README's embedding example runs as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_embedding_example_runs(tmp_path: Path) -> None:
    """The README's Python example fixes config/dev.json and prints the
    transcript, run in a fresh process in a scratch directory."""
    text = README.read_text()
    section = text.split("## Embedding", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "README has no python example under Embedding"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "dev.json").write_text(json.dumps({"port": 8080}))
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "config" / "dev.json").read_text()) == {"port": 8081}
    lines = out.stdout.splitlines()
    assert lines[0] == "user Read and fix the config"
    assert lines[-1] == "assistant Fixed the port."
    assert sum(1 for line in lines if line.startswith("tool_result")) == 2
