"""The core and the shell type-check under ``mypy --strict`` (which also
proves every ``match`` over the closed event and effect unions exhaustive,
e.g. the loop's dispatch of effects).

The distribution maps ``core/`` to ``pidurable.core`` and ``shell/`` to
``pidurable.shell`` (pyproject's package-dir), which mypy cannot see; the test
builds a ``pidurable`` directory of symlinks and checks the packages there,
with the ``[tool.mypy]`` settings of pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]

#: The modules of the root package beside core/ and shell/ (pidurable/*.py).
FACADES = ("_bridge", "aio", "sync")


@pytest.fixture(scope="module")
def typing_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("typing")
    package = root / "pidurable"
    package.mkdir()
    shutil.copy(ROOT / "pidurable" / "__init__.py", package / "__init__.py")
    (package / "core").symlink_to(ROOT / "core", target_is_directory=True)
    (package / "shell").symlink_to(ROOT / "shell", target_is_directory=True)
    for facade in FACADES:  # pidurable.aio, pidurable.sync and their bridge
        (package / f"{facade}.py").symlink_to(ROOT / "pidurable" / f"{facade}.py")
    return root


def test_core_and_shell_pass_mypy_strict(typing_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mypy --strict -p pidurable.core -p pidurable.shell`` (and the
    asyncio and blocking facades, ``pidurable.aio`` / ``pidurable.sync``)
    reports no error."""
    monkeypatch.chdir(typing_root)
    monkeypatch.setenv("MYPYPATH", str(typing_root))
    out, err, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-error-summary",
            "--cache-dir",
            "/tmp/pidurable-mypy-shell",
            "-p",
            "pidurable.core",
            "-p",
            "pidurable.shell",
            *(arg for facade in FACADES for arg in ("-m", f"pidurable.{facade}")),
        ]
    )
    assert status == 0, out + err
