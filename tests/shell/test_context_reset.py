"""What the model sees after a reset (issue 9 item 5): ``conv.reset(handoff)``
writes a head marker, the next request starts there, ``conv.context()`` agrees
with it, and the transcript keeps everything."""

from __future__ import annotations

import trio

from pidurable.core.model import EntryKind, SubmissionStatus
from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, ModelRef, Registry
from pidurable.shell.providers import ScriptedModels, reply
from pidurable.shell.providers.base import ModelRequest

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))


async def test_reset_starts_the_next_request_at_the_handoff() -> None:
    """After ``reset("handoff")`` the next request's messages are the handoff and the new input only; the transcript keeps all."""
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> object:
        seen.append(request)
        return reply(text=f"answer {len(seen)}")

    models = ScriptedModels(answer)
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            assert (await (await conv.submit(Input("first question"))).wait()).status == SubmissionStatus.DONE
            handle = await conv.reset("we were fixing the port")
            assert (await handle.wait()).status == SubmissionStatus.DONE
            context = await conv.context()
            assert [(m.role, m.text) for m in context] == [("user", "we were fixing the port")]
            assert (await (await conv.submit(Input("second question"))).wait()).status == SubmissionStatus.DONE
        last = seen[-1]
        assert [(m.role, m.text) for m in last.messages] == [
            ("user", "we were fixing the port"),
            ("user", "second question"),
        ]
        assert [(m.role, m.text) for m in await conv.context()] == [
            *[(m.role, m.text) for m in last.messages],
            ("assistant", "answer 2"),
        ]
        kinds = [e.kind for e in await conv.transcript()]
        assert kinds == [EntryKind.USER, EntryKind.ASSISTANT, EntryKind.RESET, EntryKind.USER, EntryKind.ASSISTANT]


async def test_bare_reset_gives_an_empty_context() -> None:
    """A reset without handoff leaves nothing for the model until new input."""
    models = ScriptedModels([reply(text="hi")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), env=None) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(10):
            await (await conv.submit(Input("hello"))).wait()
            await (await conv.reset()).wait()
        assert await conv.context() == []
        assert len(await conv.transcript()) == 3
