"""specs/ and tests/invariants.py agree: every invariant a spec names has a
checker of the same name that the test layers run, and every checker is
named in some spec (issue 8, item 8)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import invariants

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.md"))
#: An invariant is the leading name of a bullet: "* `Name`: ..." in a spec,
#: "- ``Name``: ..." in tests/invariants.py's docstring.
SPEC_NAME = re.compile(r"^\*\s+`([A-Z][A-Za-z0-9]+)`", re.M)
DOC_NAME = re.compile(r"^- ``([A-Z][A-Za-z0-9]+)``", re.M)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def spec_invariants() -> dict[str, list[str]]:
    """Invariant name -> the spec files naming it in an ``## Invariants`` section."""
    found: dict[str, list[str]] = {}
    for path in SPECS:
        text = path.read_text(encoding="utf-8")
        for section in re.findall(r"^## Invariants\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M):
            for name in SPEC_NAME.findall(section):
                found.setdefault(name, []).append(path.name)
    return found


def used_checkers() -> str:
    """Source of everything that runs checkers: the crash harness, the
    fuzzer and the grouped checkers in invariants.py."""
    sources = [
        (ROOT / "tests" / "crash" / "harness.py").read_text(encoding="utf-8"),
        (ROOT / "tests" / "crash" / "test_stateful.py").read_text(encoding="utf-8"),
        inspect.getsource(invariants.journal_invariants),
        inspect.getsource(invariants.life_invariants),
        inspect.getsource(invariants.lease_invariants),
    ]
    return "\n".join(sources)


def test_every_spec_invariant_has_a_checker_that_runs() -> None:
    """A name in a spec's Invariants section without a checker (or with one
    nothing runs) is a rule nobody checks."""
    names = spec_invariants()
    assert len(names) >= 20, sorted(names)
    runs = used_checkers()
    missing = [f"{n} ({', '.join(files)})" for n, files in names.items() if not callable(getattr(invariants, snake(n), None))]
    assert not missing, "spec invariants without a checker in tests/invariants.py: " + ", ".join(missing)
    idle = [n for n in names if not re.search(rf"\b{snake(n)}\(", runs)]
    assert not idle, "checkers no test layer runs: " + ", ".join(idle)


def test_every_checker_is_named_in_a_spec() -> None:
    """The checkers listed in tests/invariants.py's docstring all appear in a spec."""
    documented = set(DOC_NAME.findall(invariants.__doc__ or ""))
    named = set(spec_invariants())
    assert len(documented) >= 20, "tests/invariants.py lists its invariants in its docstring"
    assert documented <= named, "checkers no spec names: " + ", ".join(sorted(documented - named))
