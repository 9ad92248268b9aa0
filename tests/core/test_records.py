"""records.evolve makes the same copy as attrs.evolve (it only makes it
with less work: each class's copier is made once, records.py)."""

from __future__ import annotations

import attrs
import pytest

from pidurable.core.model import ConversationId, Replay, Task, TaskId, TaskStatus, ToolInfo
from pidurable.core.records import evolve, refuse_changes, spelt_out
from pidurable.core.state import ConvState, Live, RunInfo, ToolSlot, UsageDoc
from pidurable.core.model import Conversation


@attrs.frozen(kw_only=True)
class _Private:
    """A private field (its ``__init__`` argument is its alias) and a validator."""

    _hidden: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    shown: str = "x"
    derived: int = attrs.field(init=False, default=7)


@attrs.frozen
class _Empty:
    pass


TASK = Task(id=TaskId(5), conversation_id=ConversationId(1), kind="pi.tool", input={"a": 1}, checkpoint={"phase": "call"})


@pytest.mark.parametrize(
    ("inst", "changes"),
    [
        (TASK, {}),
        (TASK, {"status": TaskStatus.RUNNING}),
        (TASK, {"status": TaskStatus.WAITING, "on": (TaskId(7),), "started_at": 3}),
        (Live(), {"run": RunInfo(task_id=TaskId(2), inputs=())}),
        (ToolSlot(call_id="c", name="t"), {"entry_id": 9, "output": None}),
        (ConvState(conversation=Conversation(id=ConversationId(1))), {"usage": UsageDoc(), "stored": {"pi.live": 1}}),
        (_Private(hidden=2), {"hidden": 3}),
        (_Private(hidden=2), {"shown": "y"}),
        (_Empty(), {}),
    ],
)
def test_evolve_is_attrs_evolve(inst: object, changes: dict[str, object]) -> None:
    copy = evolve(inst, **changes)
    assert type(copy) is type(inst)
    assert copy == attrs.evolve(inst, **changes)  # type: ignore[misc]
    assert attrs.asdict(copy, recurse=False) == attrs.asdict(attrs.evolve(inst, **changes), recurse=False)  # type: ignore[misc]


def test_evolve_runs_converters_and_validators() -> None:
    assert evolve(ToolInfo(name="t"), replay="safe").replay is Replay.SAFE  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        evolve(_Private(), hidden=-1)


def test_an_unknown_field_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        evolve(TASK, nonsense=1)
    with pytest.raises(TypeError):
        evolve(_Private(), _hidden=1)  # the argument is the alias, as attrs.evolve's
    with pytest.raises(TypeError):
        evolve(_Private(), derived=1)  # not an init field


def test_a_spelt_out_copy_must_name_every_field_in_order() -> None:
    """spelt_out guards the copies that write every field out (lifecycle,
    live, builtins): a field added to the class, a name missing or out of
    order fails at import instead of a copy silently dropping a field."""
    names = tuple(f.name for f in attrs.fields(Live))
    assert spelt_out(Live, names) == frozenset(names)
    for wrong in (names[:-1], names[::-1], (*names, "extra")):
        with pytest.raises(AssertionError, match="spelt-out copy"):
            spelt_out(Live, wrong)
    with pytest.raises(TypeError, match=r"a move cannot set \['tools'\]"):
        refuse_changes(frozenset({"run"}), {"run": None, "tools": ()}, "a move")
