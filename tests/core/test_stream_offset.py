"""A streamed partial carries only what was appended (issue 11 item 3): the
core extends its partial at the event's offset and ignores an offset past the
partial it holds (a stream it does not know)."""

from __future__ import annotations

from pidurable.core.events import ModelStreamed
from pidurable.core.model import TaskId

from .helpers import Driver, generation, opened_state, submit


def test_the_core_applies_an_offset_and_ignores_one_past_its_partial() -> None:
    d = Driver(opened_state())
    d(submit("hi"))
    gen = generation(d.state)

    def partial() -> str | None:
        return d.state.conversations[gen.conversation_id].live.partial

    d(ModelStreamed(now=11, task_id=TaskId(gen.id), attempt=1, text="Hello"))
    d(ModelStreamed(now=12, task_id=TaskId(gen.id), attempt=1, text=", world", offset=5))
    assert partial() == "Hello, world"
    d(ModelStreamed(now=13, task_id=TaskId(gen.id), attempt=1, text="??", offset=99))
    assert partial() == "Hello, world"
    d(ModelStreamed(now=14, task_id=TaskId(gen.id), attempt=1, text="Bye", offset=0))
    assert partial() == "Bye"
