"""``evolve``: ``attrs.evolve`` with each class's field list read once; and
the spelt-out ``__init__``s of the hottest records (record_inits.py).

Every change of a record in the core (a task's move, a slot's, ``pi.live``'s,
a conversation's built-ins) makes a changed copy. ``attrs.evolve`` reads the
class's fields and walks them one ``getattr`` at a time on every call; this
one reads them once per class (an ``attrgetter`` of every init field) and
builds the copy through the class's own ``__init__`` exactly as
``attrs.evolve`` does (validators and converters run; an unknown name is a
``TypeError``), so it is the same copy, made with less work: steps make
several per event (issue 11 item 2).

attrs' ``__init__`` of a frozen slotted class sets each field with
``object.__setattr__(self, "x", x)``: the generic attribute path, a type
lookup per field, ~1,000 machine instructions a field set in C, and ~40
records are built a durable step. record_inits.py gives the records built
most often an ``__init__`` that makes its instance, while it fills it, the
class's mutable twin (:func:`mutable_twin`: the same slots, ``object``'s
``__setattr__``; ``__class__`` set through its own descriptor), stores each
field with a plain attribute store (~80 machine instructions; a slot's
``__set__`` called from Python is ~650) and gives the instance its class
back: the same stores, without the lookup. The class stays what it was - frozen
(``setattr``/``delattr`` still raise ``FrozenInstanceError``), the same
signature, defaults, factories, aliases and errors; ``attrs.fields``,
``evolve``, cattrs, pickle, copy, ``==``, ``hash`` and ``repr`` are attrs'
own. The core runs no code from strings (test_purity), so those
``__init__``s are source, written by :func:`init_source` and checked in;
:func:`install_init` checks each against its class at import and keeps
attrs' ``__init__`` for a class it does not match or that is not plain (a
validator, a converter, a pre/post-init hook, an ``init=False`` field, a
``Factory(takes_self=True)``, a cached hash, ``on_setattr``, anything else
in attrs' ``__init__``); tests/core/test_records_init.py checks the file is
current and each ``__init__`` builds what attrs' own builds.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Any, NoReturn, TypeVar, cast

import attrs

T = TypeVar("T")

#: Per class: the ``__init__`` argument names of its init fields, and one
#: reader of their values in that order.
_INIT: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _learn(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    fields = [f for f in attrs.fields(cls) if f.init]
    args = tuple(f.alias for f in fields)
    names = [f.name for f in fields]
    read: Callable[[Any], tuple[Any, ...]]
    if len(names) > 1:
        read = attrgetter(*names)
    elif names:
        only = names[0]
        read = lambda inst: (getattr(inst, only),)  # noqa: E731
    else:
        read = lambda inst: ()  # noqa: E731
    known = _INIT[cls] = (args, read)
    return known


def evolve(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes`` (as ``attrs.evolve``)."""
    cls = type(inst)
    known = _INIT.get(cls)
    if known is None:
        known = _learn(cls)
    args, read = known
    values = dict(zip(args, read(inst)))
    values.update(changes)
    return cls(**values)


def spelt_out(cls: type, names: tuple[str, ...]) -> frozenset[str]:
    """``names``, checked to be ``cls``'s attrs fields in order (all set by
    ``__init__``), as a set. For a copy that spells every field out instead
    of calling :func:`evolve` (a hot path: no dict of every field): checked
    at import, so a field added to ``cls`` fails until the copy names it."""
    fields = attrs.fields(cls)
    if tuple(f.name for f in fields) != names or not all(f.init for f in fields):
        raise AssertionError(f"{cls.__name__} has fields {[f.name for f in fields]}: its spelt-out copy names {list(names)}")
    return frozenset(names)


def refuse_changes(allowed: frozenset[str], changes: Mapping[str, Any], what: str) -> NoReturn:
    """A spelt-out copy's ``changes`` name a field not ``allowed``: the
    ``TypeError`` ``evolve`` raises for an unknown name. (The caller tests
    ``allowed.issuperset(changes)`` itself: no call on the hot path.)"""
    raise TypeError(f"{what} cannot set {sorted(set(changes) - allowed)}")


#: attrs' own ``__init__`` of each class given a spelt-out one (tests compare them).
ATTRS_INIT: dict[type, Callable[..., None]] = {}

#: Why :func:`install_init` kept attrs' ``__init__`` of a class (tests read it).
REFUSED: dict[type, str] = {}

#: The maker :func:`install_maker` accepted for each class (tests compare them).
MAKERS: dict[type, Callable[..., Any]] = {}

#: The by-position maker :func:`install_positional` accepted for each class.
BY_POSITION: dict[type, Callable[..., Any]] = {}

#: What attrs' generated ``__init__`` may name besides the fields' factories
#: (anything else - a validator, a converter, a hook - is refused).
_PLAIN_NAMES = frozenset({"_cached_setattr_get", "NOTHING"})


def _member(cls: type, name: str) -> Any:
    return next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)


def _absent(*args: Any) -> NoReturn:
    raise AttributeError("no such slot or factory: install_init refuses this __init__")


def slot_setters(cls: type, names: Iterable[str]) -> tuple[Callable[[Any, Any], None], ...]:
    """The ``__set__`` of each of ``cls``'s slots ``names`` (one that is not
    a slot: a stand-in that :func:`install_init` refuses)."""
    members = [_member(cls, name) for name in names]
    return tuple(m.__set__ if isinstance(m, types.MemberDescriptorType) else _absent for m in members)


def field_factories(cls: type, names: Iterable[str]) -> tuple[Callable[[], Any], ...]:
    """The factory of each of ``cls``'s fields ``names`` (as above)."""
    defaults: dict[str, Any] = {f.name: f.default for f in attrs.fields(cls)}
    found = [defaults.get(name) for name in names]
    return tuple(d.factory if isinstance(d, attrs.Factory) else _absent for d in found)  # type: ignore[arg-type,union-attr]


def plain_refusal(cls: type) -> str | None:
    """Why ``cls`` must keep attrs' ``__init__`` (None: it only sets its
    fields, each from its parameter, its default or its factory)."""
    inspect_props = getattr(attrs, "inspect", None)  # attrs >= 25.4
    if inspect_props is None or not attrs.has(cls) or "__attrs_props__" not in cls.__dict__:
        return "not an attrs class (or attrs < 25.4)"
    props = inspect_props(cls)
    if not (props.is_slotted and props.is_frozen and props.added_init) or props.is_exception:
        return "not a frozen slotted attrs class with attrs' __init__"
    if props.hashability is attrs.ClassProps.Hashability.HASHABLE_CACHED or props.on_setattr_hook is not None:
        return "a cached hash or an on_setattr hook"
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        return "a pre/post-init hook"
    fields = attrs.fields(cls)
    factories = set()
    for f in fields:
        if not f.init or f.validator is not None or f.converter is not None or f.on_setattr is not None:
            return f"field {f.name}: init=False, a validator, a converter or on_setattr"
        if isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            if f.default.takes_self:
                return f"field {f.name}: Factory(takes_self=True)"
            factories.add(f"__attr_factory_{f.name}")
        if not isinstance(_member(cls, f.name), types.MemberDescriptorType):
            return f"field {f.name}: no slot"
    code = _attrs_init(cls).__code__
    if not _PLAIN_NAMES.union(factories).issuperset(code.co_names):
        return f"attrs' __init__ does more: {sorted(set(code.co_names) - _PLAIN_NAMES - factories)}"
    if not {f.name for f in fields}.issuperset(c for c in code.co_consts if isinstance(c, str)):
        return "attrs' __init__ sets more than the fields"
    return None


def _attrs_init(cls: type) -> Any:
    """attrs' own ``__init__`` of ``cls`` (also once replaced)."""
    return ATTRS_INIT.get(cls) or cls.__init__  # type: ignore[misc]


def _mismatch(cls: type, fn: Any, first: tuple[str, ...], by_position: bool = False) -> str | None:
    """Why the generated ``fn`` (an ``__init__``: ``first`` is ``("self",)``;
    a maker: ``()``; ``by_position``: a maker taking every field by position)
    does not fit ``cls`` (None: it does, and ``cls`` is plain)."""
    why = plain_refusal(cls)
    if why is not None:
        return why
    fields = attrs.fields(cls)
    positional = tuple(f.alias for f in fields if not f.kw_only)
    keyword = tuple(f.alias for f in fields if f.kw_only)
    code = fn.__code__
    if by_position:
        positional, keyword = (*positional, *keyword), ()
    if (
        (code.co_argcount, code.co_kwonlyargcount) != (len(first) + len(positional), len(keyword))
        or code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] != (*first, *positional, *keyword)
        or (by_position and (code.co_posonlyargcount != code.co_argcount or fn.__defaults__ is not None))
    ):
        return f"{fn.__name__} has other parameters: regenerate it"
    # it stores every field into the class's twin, and gives the record its class back
    twin = TWINS.get(cls)
    if twin is None or fn.__globals__.get(f"_{cls.__name__}_twin") is not twin:
        return f"{fn.__name__} builds another class than cls's twin: regenerate it"
    if first and fn.__globals__.get("_set_class") != _SET_CLASS:
        return f"{fn.__name__} does not make its instance the twin through __class__: regenerate it"
    if not set(code.co_names).issuperset([*(f.name for f in fields), "__class__"]):
        return f"{fn.__name__} does not store every field: regenerate it"
    for f in fields:
        factory = fn.__globals__.get(f"_{cls.__name__}_{f.name}_f")
        if isinstance(f.default, attrs.Factory) and factory is not f.default.factory:  # type: ignore[arg-type]
            return f"field {f.name}: the factory {fn.__name__} uses is not its own: regenerate it"
    if by_position:  # every field given: no defaults, no factories
        return None
    # The defaults are attrs' own objects (a factory's parameter defaults to NOTHING).
    optional = {f.alias: attrs.NOTHING if isinstance(f.default, attrs.Factory) else f.default for f in fields if f.default is not attrs.NOTHING}  # type: ignore[arg-type]
    fn.__defaults__ = tuple(optional[a] for a in positional if a in optional) or None
    fn.__kwdefaults__ = {a: optional[a] for a in keyword if a in optional} or None
    return None


#: The mutable twin of each class a maker or a spelt-out ``__init__`` fills (:func:`mutable_twin`).
TWINS: dict[type, type] = {}
#: What a spelt-out ``__init__`` makes its instance a twin with (``__class__``'s
#: own setter: the frozen class's ``__setattr__`` refuses it).
_SET_CLASS = object.__dict__["__class__"].__set__


def mutable_twin(cls: type) -> Any:
    """A subclass of ``cls`` that adds nothing but ``object``'s own
    ``__setattr__`` / ``__delattr__`` in place of attrs' frozen ones. A maker
    (record_makers.py) builds its record as this twin, each field one plain
    slot store (a specialised ``STORE_ATTR``: ~80 machine instructions, where
    a slot's ``__set__`` called from Python is ~650), then sets its
    ``__class__`` to ``cls``: the same layout, so CPython allows it, and the
    record is from then on a ``cls`` like any other (frozen; attrs' eq, hash,
    repr). No twin is ever seen outside a maker (issue 11 item 2)."""
    twin = TWINS.get(cls)
    if twin is None:
        namespace = {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}Twin",
            "__doc__": f"{cls.__name__} while a maker builds it (records.mutable_twin).",
        }
        twin = TWINS[cls] = type(f"{cls.__name__}Twin", (cls,), namespace)
    return twin


def install_init(cls: type, init: Callable[..., None]) -> None:
    """Make ``init`` (from record_inits.py) ``cls.__init__`` if it matches
    ``cls`` (the parameters attrs' has, in its order; the slot setters and
    factories of ``cls``'s fields) and ``cls`` is plain; else keep attrs'
    ``__init__`` and say why in :data:`REFUSED`."""
    old, new = _attrs_init(cls), cast(Any, init)
    why = _mismatch(cls, new, ("self",))
    if why is not None:
        REFUSED[cls] = why
        return
    new.__qualname__, new.__doc__ = old.__qualname__, old.__doc__
    new.__annotations__ = dict(old.__annotations__)
    ATTRS_INIT[cls] = old
    cls.__init__ = new  # type: ignore[misc]


def install_maker(cls: type[T], maker: Callable[..., T]) -> Callable[..., T]:
    """``maker`` (from record_makers.py) if it matches ``cls`` as
    :func:`install_init` checks an ``__init__`` (else ``cls`` itself, and
    :data:`REFUSED` says why): ``maker(**fields)`` builds what ``cls(**fields)``
    builds without the type call's keyword dict (a heap type has no
    vectorcall in 3.11: ``cls(**kw)`` packs the keywords into a dict for
    ``type.__call__`` and unpacks them again for ``__init__``)."""
    why = _mismatch(cls, maker, ())
    if why is not None:
        REFUSED.setdefault(cls, why)
        return cls
    MAKERS[cls] = maker
    return maker


def install_positional(cls: type[T], made: Callable[..., T]) -> Callable[..., T]:
    """``made`` (from record_makers.py) if it matches ``cls`` as
    :func:`install_maker` checks a maker, but with every field a positional
    parameter in field order (else a function that passes them to ``cls`` by
    name): ``made(*values)`` builds what ``cls(**dict(zip(fields, values)))``
    builds. For a record of 16 or more fields, where a call naming each one
    is compiled to a dict and ``CALL_FUNCTION_EX`` (CPython 3.11 builds a dict
    once a call's keywords take more than 30 stack slots), about 8,000
    machine instructions more than a call by position (issue 11 item 2)."""
    why = _mismatch(cls, made, (), by_position=True)
    if why is None:
        BY_POSITION[cls] = made
        return made
    REFUSED.setdefault(cls, why)
    names = tuple(f.alias for f in attrs.fields(cast(Any, cls)))

    def by_name(*values: Any) -> T:
        if len(values) != len(names):
            raise TypeError(f"{made.__name__} takes {len(names)} positional arguments but {len(values)} were given")
        return cls(**dict(zip(names, values)))

    return by_name


_HEADERS = {
    "record_inits": '''"""The spelt-out ``__init__`` of each record built on the hot path (issue 11 item 2).

GENERATED by ``records.init_source`` (records.py says why: each makes its
instance, while it fills it, the class's mutable twin and stores each field
with a plain attribute store, not attrs' ``object.__setattr__``).
Do not edit; after a change of one of these classes, regenerate:

    PYTHONSAFEPATH=1 python -c "from pidurable.core import records, record_inits as r; s = records.init_source(r.COVERED); open('core/record_inits.py', 'w').write(s)"

``install_init`` checks each against its class at import (other parameters,
or a class given a validator, a converter or a hook, keep attrs'
``__init__``); tests/core/test_records_init.py checks this file is current
and each ``__init__`` builds what attrs' own builds.
"""
''',
    "record_makers": '''"""``new_X(**fields)``: what ``X(**fields)`` builds, for the records the core
copies most (issue 11 item 2).

A heap type has no vectorcall in Python 3.11: ``X(a=1, b=2)`` packs the
keywords into a dict for ``type.__call__``, which unpacks them again to call
``X.__init__``. ``new_X`` is a plain function, with no dict: it makes an
``X``'s mutable twin (``records.mutable_twin``: the same slots, ``object``'s
``__setattr__``), stores each field with a plain attribute store, and makes
it an ``X`` (``self.__class__ = X``): the same record, without a call of a
slot's ``__set__`` per field.

GENERATED by ``records.init_source`` - do not edit; regenerate:

    PYTHONSAFEPATH=1 python -c "from pidurable.core import records, record_makers as r; s = records.init_source(r.COVERED, maker=True, by_position=r.BY_POSITION); open('core/record_makers.py', 'w').write(s)"

For a record of 16 fields or more, ``made_X(*values)`` takes every field by
position, in field order: a call naming 16 is compiled to a dict (records.py,
``install_positional``).

``install_maker`` checks each against its class at import (``new_X`` is ``X``
itself if it does not fit); tests/core/test_records_init.py checks this file
is current and each maker builds what attrs' ``__init__`` builds.
"""
''',
}


def _bind(c: str, helper: str, names: list[str], suffix: str) -> str:
    targets = ", ".join(f"_{c}_{n}{suffix}" for n in names) + ("," if len(names) == 1 else "")
    return f"{targets} = {helper}({c}, {tuple(names)!r})"


def _part(cls: type, maker: bool, by_position: bool = False) -> str:
    """One class's part of the generated file: its setters and factories
    bound once, its ``__init__`` (or maker; ``by_position``: and its
    by-position maker), and the install."""
    c = cls.__name__
    fields = attrs.fields(cls)
    body = []
    for f in fields:
        if isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            value = f"{f.alias} if {f.alias} is not _N else _{c}_{f.name}_f()"
        else:
            value = f.alias
        body.append(f"    self.{f.name} = {value}")  # (into the class's twin: mutable_twin)
    made = [f.name for f in fields if isinstance(f.default, attrs.Factory)]  # type: ignore[arg-type]
    lines = [f"# {c}"]
    if made:
        lines.append(_bind(c, "field_factories", made, "_f"))
    lines.append(f"_{c}_twin = mutable_twin({c})")
    if {f.alias for f in fields} & {"self", "was"}:
        raise ValueError(f"{c} has a field the generated code's own names would hide")
    params = [f"{f.alias}: Any" + ("" if f.default is attrs.NOTHING else " = _N") for f in fields if not f.kw_only]
    keyword = [f"{f.alias}: Any" + ("" if f.default is attrs.NOTHING else " = _N") for f in fields if f.kw_only]
    rest = [*params, *(["*", *keyword] if keyword else [])]
    if maker:
        start = [f"    self: Any = _new(_{c}_twin)"]
        end = [f"    self.__class__ = {c}", "    return self  # type: ignore[no-any-return]"]
        lines += ["", "", f"def _new_{c}({', '.join(rest)}) -> {c}:", *start, *body, *end]
        lines += ["", "", "if TYPE_CHECKING:  # (mypy checks a call as the class's own)", f"    new_{c} = {c}", "else:"]
        lines.append(f"    new_{c} = install_maker({c}, _new_{c})")
        if by_position:
            every = ", ".join(f"{f.alias}: Any" for f in fields)
            lines += ["", "", f"def _made_{c}({every}, /) -> {c}:", *start]
            lines += [f"    self.{f.name} = {f.alias}" for f in fields]
            lines += [*end, "", "", "if TYPE_CHECKING:  # (mypy checks the call's arity)", f"    made_{c} = _made_{c}", "else:"]
            lines.append(f"    made_{c} = install_positional({c}, _made_{c})")
    else:
        start = ["    was = self.__class__  # (its own class again at the end: a subclass's instance stays one)", f"    _set_class(self, _{c}_twin)"]
        lines += ["", "", f"def _init_{c}({', '.join(['self: Any', *rest])}) -> None:", *start, *body, "    self.__class__ = was"]
        lines += ["", "", f"install_init({c}, _init_{c})"]
    return "\n".join(lines)


def init_source(classes: Iterable[type], maker: bool = False, by_position: Iterable[type] = ()) -> str:
    """The text of record_inits.py for ``classes`` (or, ``maker``, of
    record_makers.py): per class, its slot setters and factories bound once,
    and its ``__init__`` (its maker; for the classes ``by_position``, a maker
    taking every field by position too)."""
    classes, by_position = tuple(classes), tuple(by_position)
    imports: dict[str, list[str]] = {}
    for cls in classes:
        imports.setdefault(cls.__module__.rsplit(".", 1)[-1], []).append(cls.__name__)
    helpers = "field_factories, install_maker, mutable_twin" if maker else "field_factories, install_init, mutable_twin"
    if by_position:
        helpers = "field_factories, install_maker, install_positional, mutable_twin"
    head = [
        "from __future__ import annotations",
        "",
        "from typing import TYPE_CHECKING, Any" if maker else "from typing import Any",
        "",
        "from attrs import NOTHING as _N",
        "",
        *(f"from .{m} import {', '.join(sorted(names))}" for m, names in sorted(imports.items())),
        f"from .records import {helpers}",
        *(["", "_new = object.__new__"] if maker else ["", "_set_class = object.__dict__[\"__class__\"].__set__"]),
    ]
    covered = ", ".join(cls.__name__ for cls in classes)
    what = "a maker" if maker else "a spelt-out __init__"
    tail = f"#: The classes given {what} here (regenerate from these).\nCOVERED = ({covered},)\n"
    if by_position:
        tail += f"#: The classes given a by-position maker too.\nBY_POSITION = ({', '.join(cls.__name__ for cls in by_position)},)\n"
    parts = "\n\n\n".join(_part(cls, maker, cls in by_position) for cls in classes)
    header = _HEADERS["record_makers" if maker else "record_inits"]
    return header + "\n" + "\n".join(head) + "\n\n\n" + parts + "\n\n\n" + tail


__all__ = [
    "ATTRS_INIT",
    "BY_POSITION",
    "MAKERS",
    "REFUSED",
    "TWINS",
    "evolve",
    "field_factories",
    "init_source",
    "install_init",
    "install_maker",
    "install_positional",
    "mutable_twin",
    "plain_refusal",
    "refuse_changes",
    "slot_setters",
    "spelt_out",
]
