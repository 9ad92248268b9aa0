"""The spelt-out ``__init__``s of record_inits.py build exactly what attrs' own
build, and fall back to attrs' own for any class that is not plain (records.py)."""

from __future__ import annotations

import copy
import dis
import inspect
import pickle
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidurable.core import record_inits, record_makers, records
from pidurable.core.records import ATTRS_INIT, BY_POSITION, MAKERS, REFUSED, init_source, install_init, install_maker, install_positional

COVERED: tuple[type, ...] = record_inits.COVERED
MADE: tuple[type, ...] = record_makers.COVERED
WIDE: tuple[type, ...] = record_makers.BY_POSITION
RECORD_INITS = Path(record_inits.__file__)
RECORD_MAKERS = Path(record_makers.__file__)


def _by_attrs(cls: type, *args: Any, **kwargs: Any) -> Any:
    """An instance built by attrs' own ``__init__`` of ``cls``."""
    inst = object.__new__(cls)
    ATTRS_INIT[cls](inst, *args, **kwargs)
    return inst


def _call_error(build: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(TypeError) as info:
        build(*args, **kwargs)
    return str(info.value)


def _arguments(cls: type, given_optional: frozenset[str]) -> tuple[list[Any], dict[str, Any]]:
    """Unique values for every required field and for the optional ones named."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING or f.name in given_optional:
            value = object()
            (kwargs.__setitem__(f.alias, value) if f.kw_only else args.append(value))
    return args, kwargs


def _hash(inst: Any) -> object:
    """``hash(inst)``, or the error it raises (a record holding a dict has none)."""
    try:
        return hash(inst)
    except TypeError as e:
        return str(e)


def _same(cls: type, a: Any, b: Any) -> None:
    """``a`` and ``b`` hold the very same value in every slot (a factory's: an
    equal fresh one of the same type, shared by neither)."""
    assert type(a) is type(b) is cls
    for f in attrs.fields(cls):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(f.default, attrs.Factory) and x is not y:
            assert type(x) is type(y) and x == y, f"{cls.__name__}.{f.name}"
        else:
            assert x is y, f"{cls.__name__}.{f.name}"


def test_record_inits_py_is_current() -> None:
    """record_inits.py is what init_source writes for its classes (regenerate it after a record changes)."""
    assert RECORD_INITS.read_text(encoding="utf-8") == init_source(COVERED)


def test_record_makers_py_is_current() -> None:
    """record_makers.py is what init_source writes for its classes (regenerate it after a record changes)."""
    assert RECORD_MAKERS.read_text(encoding="utf-8") == init_source(MADE, maker=True, by_position=WIDE)


def test_every_wide_record_gets_a_by_position_maker() -> None:
    """The made records of 16 fields or more (a call naming them all is
    compiled to a dict) are the ones given a by-position maker; a call naming
    16 is indeed compiled through a dict, 15 not (what the makers avoid)."""
    assert WIDE == tuple(cls for cls in MADE if len(attrs.fields(cls)) >= 16)
    names = [f"a{i}" for i in range(16)]
    wide = compile(f"f({', '.join(f'{n}=1' for n in names)})", "<call>", "eval")
    narrow = compile(f"f({', '.join(f'{n}=1' for n in names[:15])})", "<call>", "eval")
    assert "CALL_FUNCTION_EX" in {i.opname for i in dis.get_instructions(wide)}
    assert "CALL_FUNCTION_EX" not in {i.opname for i in dis.get_instructions(narrow)}


@pytest.mark.parametrize("cls", WIDE, ids=lambda c: c.__name__)
def test_each_by_position_maker_builds_what_attrs_builds(cls: type) -> None:
    """made_X: installed, every field positional-only in field order, no defaults; the record attrs builds from the same values; a TypeError for one too few or too many."""
    made = getattr(record_makers, f"made_{cls.__name__}")
    assert BY_POSITION[cls] is made and cls not in REFUSED
    params = list(inspect.signature(made).parameters.values())
    assert [(p.name, p.kind, p.default) for p in params] == [
        (f.alias, inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.empty) for f in attrs.fields(cls)
    ]
    values = [object() for _ in params]
    _same(cls, made(*values), _by_attrs(cls, **{f.alias: v for f, v in zip(attrs.fields(cls), values)}))
    for wrong in (values[:-1], [*values, None]):
        with pytest.raises(TypeError):
            made(*wrong)


@pytest.mark.parametrize("cls", MADE, ids=lambda c: c.__name__)
def test_each_maker_builds_what_attrs_builds(cls: type) -> None:
    """new_X: installed, with attrs' defaults; for no optional field, each one alone, all of them, the record attrs builds; a TypeError where X(...) raises one."""
    maker = getattr(record_makers, f"new_{cls.__name__}")
    assert MAKERS[cls] is maker and cls not in REFUSED
    for p, q in zip(inspect.signature(maker).parameters.values(), list(inspect.signature(ATTRS_INIT[cls]).parameters.values())[1:]):
        assert (p.name, p.kind, p.default) == (q.name, q.kind, q.default) and p.default is q.default
    optional = [f.name for f in attrs.fields(cls) if f.default is not attrs.NOTHING]
    for given_optional in [frozenset(), *(frozenset({n}) for n in optional), frozenset(optional)]:
        args, kwargs = _arguments(cls, given_optional)
        _same(cls, maker(*args, **kwargs), _by_attrs(cls, *args, **kwargs))
    args, kwargs = _arguments(cls, frozenset())
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING and f.kw_only:
            rest = {k: v for k, v in kwargs.items() if k != f.alias}
            assert _call_error(maker, *args, **rest).endswith(_call_error(cls, *args, **rest).split("()", 1)[1])
    assert _call_error(maker, *args, **kwargs, unknown=1).endswith("got an unexpected keyword argument 'unknown'")


@pytest.mark.parametrize("cls", MADE, ids=lambda c: c.__name__)
def test_a_made_record_is_its_class_frozen_and_its_twin_is_never_seen(cls: type) -> None:
    """new_X builds an X (not its mutable twin): setattr/delattr raise
    FrozenInstanceError; copy, pickle and evolve give equal X's; the twin is a
    subclass adding no slot, with object's __setattr__, and X keeps attrs' own."""
    maker = getattr(record_makers, f"new_{cls.__name__}")
    args, kwargs = _arguments(cls, frozenset())
    inst = maker(*args, **kwargs)
    assert type(inst) is cls and inst.__class__ is cls
    name = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(inst, name, 1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delattr(inst, name)
    assert attrs.evolve(inst) == inst == records.evolve(inst) == copy.copy(inst) and type(copy.copy(inst)) is cls
    plain = maker(*[1] * len(args), **dict.fromkeys(kwargs, 1))
    assert type(pickle.loads(pickle.dumps(plain))) is cls and pickle.loads(pickle.dumps(plain)) == plain
    twin = records.TWINS[cls]
    assert twin is records.mutable_twin(cls) and twin.__bases__ == (cls,) and twin.__dict__["__slots__"] == ()
    assert twin.__setattr__ is object.__setattr__ and cls.__setattr__ is not object.__setattr__  # type: ignore[comparison-overlap]
    assert twin.__basicsize__ == cls.__basicsize__  # (the same layout: what lets the class change)


def test_a_maker_building_another_class_twin_is_refused() -> None:
    """A maker whose twin is not its class's (a stale or mixed-up file): the class itself."""
    one, two = _plain(), _plain()
    maker = _maker_of(one)
    assert install_maker(two, maker) is two and "twin" in REFUSED.pop(two)


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_every_covered_record_gets_its_spelt_out_init(cls: type) -> None:
    """Each covered class is plain, and its __init__ is record_inits.py's, with attrs' signature, names and annotations."""
    assert cls not in REFUSED and records.plain_refusal(cls) is None
    old, new = ATTRS_INIT[cls], cls.__init__  # type: ignore[misc]
    assert new is getattr(record_inits, f"_init_{cls.__name__}")
    assert inspect.signature(new) == inspect.signature(old)
    for p, q in zip(inspect.signature(new).parameters.values(), inspect.signature(old).parameters.values()):
        assert p.default is q.default, (cls.__name__, p.name)
    assert (new.__qualname__, new.__doc__, new.__annotations__) == (old.__qualname__, old.__doc__, old.__annotations__)


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_spelt_out_init_builds_what_attrs_builds(cls: type) -> None:
    """For no optional field, each one alone, and all of them given, the record equals attrs' slot for slot."""
    optional = [f.name for f in attrs.fields(cls) if f.default is not attrs.NOTHING]
    for given_optional in [frozenset(), *(frozenset({n}) for n in optional), frozenset(optional)]:
        args, kwargs = _arguments(cls, given_optional)
        fast, slow = cls(*args, **kwargs), _by_attrs(cls, *args, **kwargs)
        _same(cls, fast, slow)
        assert fast == slow and _hash(fast) == _hash(slow) and repr(fast) == repr(slow)
    # factories run on each call: two records never share a default container
    args, kwargs = _arguments(cls, frozenset())
    one, two = cls(*args, **kwargs), cls(*args, **kwargs)
    for f in attrs.fields(cls):
        if isinstance(f.default, attrs.Factory) and isinstance(getattr(one, f.name), (dict, list)):
            assert getattr(one, f.name) is not getattr(two, f.name)


@given(st.sampled_from(COVERED), st.data())
def test_spelt_out_init_builds_what_attrs_builds_for_any_optional_fields(cls: type, data: st.DataObject) -> None:
    """Any subset of the optional fields given: the same record as attrs' __init__ builds."""
    optional = [f.name for f in attrs.fields(cls) if f.default is not attrs.NOTHING]
    chosen = frozenset(data.draw(st.sets(st.sampled_from(optional))) if optional else ())
    args, kwargs = _arguments(cls, chosen)
    _same(cls, cls(*args, **kwargs), _by_attrs(cls, *args, **kwargs))


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_spelt_out_init_raises_attrs_type_errors(cls: type) -> None:
    """A missing required field, an unknown keyword, a positional too many: attrs' TypeError, word for word."""
    args, kwargs = _arguments(cls, frozenset())
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING and f.kw_only:
            rest = {k: v for k, v in kwargs.items() if k != f.alias}
            assert _call_error(cls, *args, **rest) == _call_error(_by_attrs, cls, *args, **rest)
    assert _call_error(cls, *args, **kwargs, unknown=1) == _call_error(_by_attrs, cls, *args, **kwargs, unknown=1)
    extra = [*args, *([None] * (len(attrs.fields(cls)) + 1))]
    assert _call_error(cls, *extra) == _call_error(_by_attrs, cls, *extra)


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_spelt_out_records_stay_frozen_and_copy_as_before(cls: type) -> None:
    """setattr/delattr still raise FrozenInstanceError; evolve, copy and pickle give equal records."""
    args, kwargs = _arguments(cls, frozenset())
    inst = cls(*args, **kwargs)
    name = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(inst, name, 1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delattr(inst, name)
    assert attrs.evolve(inst) == inst == records.evolve(inst) == copy.copy(inst)
    plain = cls(*[1] * len(args), **dict.fromkeys(kwargs, 1))  # (sentinels do not pickle)
    assert pickle.loads(pickle.dumps(plain)) == plain


# --- the fallback -----------------------------------------------------------


def _init_of(cls: type) -> Any:
    """record_inits.py's text for ``cls`` (a test class) run here: its __init__."""
    text = init_source([cls])
    body = "\n".join(line for line in text.splitlines() if not line.startswith("from ."))
    namespace: dict[str, Any] = {
        cls.__name__: cls,
        "install_init": lambda c, init: None,
        "mutable_twin": records.mutable_twin,
        "field_factories": records.field_factories,
    }
    exec(compile(body, "<test init>", "exec"), namespace)
    return namespace[f"_init_{cls.__name__}"]


def _maker_of(cls: type) -> Any:
    """record_makers.py's text for ``cls`` (a test class) run here: its maker."""
    text = init_source([cls], maker=True)
    body = "\n".join(line for line in text.splitlines() if not line.startswith("from ."))
    namespace: dict[str, Any] = {cls.__name__: cls, "install_maker": lambda c, m: m, "mutable_twin": records.mutable_twin, "field_factories": records.field_factories}
    exec(compile(body, "<test maker>", "exec"), namespace)
    return namespace[f"_new_{cls.__name__}"]


def _plain() -> type:
    @attrs.frozen(kw_only=True)
    class Plain:
        a: int
        b: dict[str, int] = attrs.field(factory=dict)
        c: str = "c"

    return Plain


def test_a_plain_test_class_gets_the_spelt_out_init() -> None:
    """The checker's control: a plain class takes its generated __init__ (so the refusals below are the class's doing)."""
    cls = _plain()
    init = _init_of(cls)
    install_init(cls, init)
    assert cls.__init__ is init and cls not in REFUSED  # type: ignore[misc]
    assert cls(a=1) == _by_attrs(cls, a=1) and cls(a=1).b is not cls(a=1).b


def _refused(cls: type, init: Any) -> str:
    old = cls.__init__  # type: ignore[misc]
    install_init(cls, init)
    assert cls.__init__ is old, f"{cls.__name__} took a spelt-out __init__"  # type: ignore[misc]
    return REFUSED.pop(cls)


@pytest.mark.parametrize(
    "field",
    [
        attrs.field(validator=attrs.validators.instance_of(int)),
        attrs.field(converter=int),
        attrs.field(default=attrs.Factory(lambda self: 1, takes_self=True)),
        attrs.field(default=0, init=False),
    ],
    ids=["validator", "converter", "takes_self", "init_false"],
)
def test_a_class_whose_field_is_not_plain_keeps_attrs_init(field: Any) -> None:
    """A field with a validator, a converter, Factory(takes_self=True) or init=False: attrs' __init__ stays."""
    plain = _plain()
    init = _init_of(plain)
    cls = attrs.make_class("Plain", {"a": attrs.field(), "b": attrs.field(factory=dict), "c": field}, frozen=True, slots=True, kw_only=True)
    assert "field c" in _refused(cls, init)


def test_a_class_with_a_hook_or_a_cached_hash_keeps_attrs_init() -> None:
    """A post-init hook or a cached hash: attrs' __init__ stays."""

    @attrs.frozen(kw_only=True)
    class Hooked:
        a: int

        def __attrs_post_init__(self) -> None:
            pass

    @attrs.frozen(kw_only=True, cache_hash=True)
    class Cached:
        a: int

    assert "hook" in _refused(Hooked, _init_of(Hooked))
    assert "cached hash" in _refused(Cached, _init_of(Cached))


def test_a_covered_class_given_a_validator_keeps_attrs_init() -> None:
    """A covered record redefined with a validator on one field falls back, with its generated __init__ unchanged."""
    for cls in COVERED:
        fields = {f.name: attrs.field(default=f.default, kw_only=f.kw_only, alias=f.alias) for f in attrs.fields(cls)}
        first = attrs.fields(cls)[0]
        fields[first.name] = attrs.field(default=first.default, kw_only=first.kw_only, validator=lambda *a: None)
        twin = attrs.make_class(cls.__name__, fields, frozen=True, slots=True, kw_only=False)
        assert "validator" in _refused(twin, _init_of(twin))


def test_a_stale_init_is_refused() -> None:
    """An __init__ generated before a field was added, or filling another class's twin: attrs' __init__ stays."""
    init = _init_of(_plain())
    grown = attrs.make_class("Plain", {"a": attrs.field(), "b": attrs.field(factory=dict), "c": attrs.field(default="c"), "d": attrs.field(default=0)}, frozen=True, slots=True, kw_only=True)
    assert "other parameters" in _refused(grown, init)
    assert "another class than cls's twin" in _refused(_plain(), init)


@pytest.mark.parametrize("cls", sorted({*COVERED, *MADE}, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_no_covered_record_is_subclassed_but_by_its_twin(cls: type) -> None:
    """A spelt-out __init__ makes its instance the class's twin while it
    fills it (a subclass's instance of another layout could not be one): the
    records are final, their one subclass is their twin."""
    assert [sub for sub in cls.__subclasses__() if sub is not records.TWINS.get(cls)] == []


def test_a_maker_for_a_class_not_plain_or_changed_is_the_class_itself() -> None:
    """install_maker gives the class itself for a class with a validator or a field added since (so new_X(...) is X(...))."""
    plain = _plain()
    maker = _maker_of(plain)
    assert install_maker(plain, maker) is maker and maker(a=1) == plain(a=1) and maker(a=1).b is not maker(a=1).b
    checked = attrs.make_class("Plain", {"a": attrs.field(validator=lambda *a: None), "b": attrs.field(factory=dict), "c": attrs.field(default="c")}, frozen=True, slots=True, kw_only=True)
    grown = attrs.make_class("Plain", {"a": attrs.field(), "b": attrs.field(factory=dict), "c": attrs.field(default="c"), "d": attrs.field(default=0)}, frozen=True, slots=True, kw_only=True)
    for cls in (checked, grown):
        assert install_maker(cls, _maker_of(plain)) is cls
        assert REFUSED.pop(cls)


def _made_of(cls: type) -> Any:
    """record_makers.py's by-position maker for ``cls`` (a test class) run here."""
    text = init_source([cls], maker=True, by_position=[cls])
    body = "\n".join(line for line in text.splitlines() if not line.startswith("from ."))
    namespace: dict[str, Any] = {
        cls.__name__: cls,
        "install_maker": lambda c, m: m,
        "install_positional": lambda c, m: m,
        "mutable_twin": records.mutable_twin,
        "field_factories": records.field_factories,
    }
    exec(compile(body, "<test maker>", "exec"), namespace)
    return namespace[f"_made_{cls.__name__}"]


def test_a_by_position_maker_for_a_class_not_plain_or_changed_builds_through_the_class() -> None:
    """install_positional takes a plain class's maker; for a class with a
    validator or a field added since, a function that names the values to
    the class (its validator runs; a wrong count is a TypeError)."""
    plain = _plain()
    made = _made_of(plain)
    assert install_positional(plain, made) is made and BY_POSITION.pop(plain) is made
    assert made(1, {}, "x") == plain(a=1, b={}, c="x")
    seen: list[Any] = []
    checked = attrs.make_class("Plain", {"a": attrs.field(validator=lambda *a: seen.append(a[2])), "b": attrs.field(factory=dict), "c": attrs.field(default="c")}, frozen=True, slots=True, kw_only=True)
    grown = attrs.make_class("Plain", {"a": attrs.field(), "b": attrs.field(factory=dict), "c": attrs.field(default="c"), "d": attrs.field(default=0)}, frozen=True, slots=True, kw_only=True)
    fallback = install_positional(checked, made)
    assert fallback is not made and "validator" in REFUSED.pop(checked) and checked not in BY_POSITION
    assert fallback(1, {}, "x") == checked(a=1, b={}, c="x") and seen == [1, 1]
    with pytest.raises(TypeError):
        fallback(1, {})
    fallback = install_positional(grown, made)
    assert fallback is not made and "other parameters" in REFUSED.pop(grown)
    assert fallback(1, {}, "x", 4) == grown(a=1, b={}, c="x", d=4)
