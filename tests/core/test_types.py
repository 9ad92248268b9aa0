"""The core type-checks under ``mypy --strict`` (which also proves the
``match`` dispatches over the closed unions exhaustive)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

CORE = Path(__file__).resolve().parents[2] / "core"


def test_core_passes_mypy_strict() -> None:
    """``mypy --strict core/`` reports no error."""
    out, err, status = api.run(["--strict", "--no-error-summary", "--cache-dir", "/tmp/pidurable-mypy", str(CORE)])
    assert status == 0, out + err
