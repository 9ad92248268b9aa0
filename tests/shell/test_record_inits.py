"""shell/record_inits.py: the shell's per-step records (ToolCallContext,
ToolResult, ModelRequest, ModelReply) get a spelt-out ``__init__`` and a
``new_X`` maker (core/records.py's mechanism) that build exactly what attrs'
own ``__init__`` builds; the file is what ``shell_init_source`` writes."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path
from typing import Any

import attrs
import pytest

from pidurable.core.records import ATTRS_INIT, MAKERS, REFUSED
from pidurable.shell import record_inits
from pidurable.shell.providers.base import ModelReply, ModelRequest
from pidurable.shell.record_source import shell_init_source
from pidurable.shell.registry import ToolCallContext, ToolResult

COVERED: tuple[type, ...] = record_inits.COVERED


def _by_attrs(cls: type, **kwargs: Any) -> Any:
    inst = object.__new__(cls)
    ATTRS_INIT[cls](inst, **kwargs)
    return inst


def _arguments(cls: type, given: frozenset[str]) -> dict[str, Any]:
    """A unique value for every required field and each optional one named."""
    return {f.alias: object() for f in attrs.fields(cls) if f.default is attrs.NOTHING or f.name in given}


def _same(cls: type, a: Any, b: Any) -> None:
    assert type(a) is type(b) is cls
    for f in attrs.fields(cls):
        assert getattr(a, f.name) is getattr(b, f.name), f"{cls.__name__}.{f.name}"


def _error(build: Any, **kwargs: Any) -> str:
    with pytest.raises(TypeError) as info:
        build(**kwargs)
    return str(info.value).split("()", 1)[1]


def test_record_inits_py_is_current() -> None:
    """record_inits.py is what shell_init_source writes for its classes (regenerate it after one changes)."""
    assert Path(record_inits.__file__).read_text(encoding="utf-8") == shell_init_source(COVERED)


def test_the_per_step_records_are_covered() -> None:
    """The records the shell builds per step are the ones covered."""
    assert set(COVERED) == {ToolCallContext, ToolResult, ModelRequest, ModelReply}


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_each_init_and_maker_builds_what_attrs_builds(cls: type) -> None:
    """Installed (not refused), with attrs' signature and defaults; for no optional field, each one alone and
    all of them, X(...) and new_X(...) build attrs' record slot for slot; attrs' TypeErrors; still frozen."""
    maker = getattr(record_inits, f"new_{cls.__name__}")
    assert cls not in REFUSED and MAKERS[cls] is maker
    assert cls.__init__ is getattr(record_inits, f"_init_{cls.__name__}")  # type: ignore[misc]
    old = inspect.signature(ATTRS_INIT[cls])
    assert inspect.signature(cls.__init__) == old  # type: ignore[misc]
    for p, q in zip(inspect.signature(maker).parameters.values(), list(old.parameters.values())[1:]):
        assert (p.name, p.kind) == (q.name, q.kind) and p.default is q.default
    optional = [f.name for f in attrs.fields(cls) if f.default is not attrs.NOTHING]
    for given in [frozenset(), *(frozenset({n}) for n in optional), frozenset(optional)]:
        kwargs = _arguments(cls, given)
        slow = _by_attrs(cls, **kwargs)
        _same(cls, cls(**kwargs), slow)
        _same(cls, maker(**kwargs), slow)
        assert repr(maker(**kwargs)) == repr(slow) and maker(**kwargs) == slow
    kwargs = _arguments(cls, frozenset())
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING:
            rest = {k: v for k, v in kwargs.items() if k != f.alias}
            assert _error(maker, **rest) == _error(cls, **rest) == _error(_by_attrs, cls=cls, **rest)
    assert _error(maker, **kwargs, unknown=1) == _error(cls, **kwargs, unknown=1)
    inst = maker(**kwargs)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(inst, attrs.fields(cls)[0].name, 1)
    plain = maker(**dict.fromkeys(kwargs, 1))
    assert pickle.loads(pickle.dumps(plain)) == plain == attrs.evolve(plain)
