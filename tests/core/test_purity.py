"""The core is pure: no module under core/ imports I/O, clocks, randomness or the shell."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pidurable.core

CORE_DIR = Path(pidurable.core.__file__).resolve().parent
CORE_PACKAGE = "pidurable.core"

FORBIDDEN = frozenset(
    {
        "trio",
        "sqlite3",
        "sqlite_utils",
        "httpx",
        "os",
        "time",
        "random",
        "asyncio",
        "subprocess",
        "socket",
        "pathlib",
        "datetime",
        "uuid",
        "threading",
        "pidurable.shell",
    }
)

#: Builtins that perform I/O or run code from strings.
FORBIDDEN_CALLS = frozenset({"open", "input", "print", "exec", "eval", "breakpoint"})


def _resolve_relative(module: str | None, level: int, package: str) -> str:
    """The absolute name of ``from <level dots><module> import ...`` inside ``package``."""
    parts = package.split(".")
    if level - 1 > len(parts):
        return module or ""
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _is_forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def imported_names(source: str, package: str = CORE_PACKAGE) -> list[str]:
    """Every module name ``source`` imports (absolute, including the
    ``from pkg import sub`` spelling and ``__import__``/``import_module`` calls
    with a literal name), wherever in the file the import appears."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve_relative(node.module, node.level, package) if node.level else (node.module or "")
            )
            names.append(base)
            # ``from pidurable import shell`` imports the submodule too.
            names.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if fname in ("__import__", "import_module") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.append(arg.value)
    return names


def violations(source: str, package: str = CORE_PACKAGE) -> list[str]:
    """Forbidden imports and I/O builtin calls in ``source``."""
    found = [n for n in imported_names(source, package) if _is_forbidden(n)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{node.func.id}()")
    return found


def core_files() -> list[Path]:
    return sorted(CORE_DIR.rglob("*.py"))


def _package_of(path: Path) -> str:
    rel = path.relative_to(CORE_DIR).parent.parts
    return ".".join([CORE_PACKAGE, *rel])


# --- self-test of the checker ------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import os",
        "import os.path",
        "import time as clock",
        "from random import choice",
        "from datetime import datetime",
        "import trio, attrs",
        "def f():\n    import sqlite3\n",
        "class C:\n    def m(self):\n        from uuid import uuid4\n",
        "import pidurable.shell.runtime",
        "from pidurable.shell import harness",
        "from pidurable import shell",
        "from ..shell import runtime",
        "from .. import shell",
        "x = __import__('subprocess')",
        "import importlib\nm = importlib.import_module('socket')",
        "from pathlib import Path",
        "import threading",
        "import asyncio",
        "import httpx",
        "import sqlite_utils",
        "with open('f') as fh:\n    pass\n",
        "print('hi')",
    ],
)
def test_checker_flags_forbidden_source(source: str) -> None:
    """The checker reports a forbidden import or I/O call in a synthetic module, wherever it appears."""
    assert violations(source), f"checker missed a violation in: {source!r}"


@pytest.mark.parametrize(
    "source",
    [
        "import attrs",
        "from collections.abc import Mapping",
        "from . import generation, tools",
        "from .model import Task",
        "from .draft import Tx",
        "import enum\nfrom typing import Any",
        "ostrich = 1\nimport osmosis_lib",  # a prefix of 'os' is not 'os'
        "from pidurable.core import step",
    ],
)
def test_checker_accepts_pure_source(source: str) -> None:
    """The checker does not flag pure imports, including core-relative ones and names that merely start like a forbidden one."""
    assert violations(source) == []


def test_relative_imports_resolve_against_the_core_package() -> None:
    """Relative imports are resolved to absolute names so ``from .. import shell`` cannot slip through."""
    assert "pidurable.core.model" in imported_names("from .model import Task")
    assert "pidurable.shell" in imported_names("from .. import shell")
    assert "pidurable.shell.storage" in imported_names("from ..shell import storage")


# --- the real check ----------------------------------------------------------


def test_checker_sees_the_core_files() -> None:
    """The walk finds the core's modules (so the purity test below cannot pass vacuously)."""
    names = {p.name for p in core_files()}
    assert {"step.py", "state.py", "generation.py", "tools.py", "scheduling.py"} <= names


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(CORE_DIR)))
def test_core_module_is_pure(path: Path) -> None:
    """A core module imports nothing that does I/O, reads clocks, draws randomness or reaches the shell."""
    source = path.read_text(encoding="utf-8")
    assert violations(source, _package_of(path)) == []
