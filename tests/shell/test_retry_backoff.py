"""Durable retry timing: a restart during the backoff waits only the remainder."""

from __future__ import annotations

import trio
import trio.testing

from pidurable.core.model import RetryPolicy
from pidurable.shell import AgentConfig, Harness, Input, MemoryStorage, ModelRef, Registry, Settings
from pidurable.shell.providers import ScriptedModels, reply


async def test_restart_during_backoff_waits_only_the_remaining_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 429 schedules the retry 10 s later; the process stops 3 s in and
    restarts 4 s later; the new process waits the remaining 3 s, not 10 s."""
    offset = [0.0]

    def clock() -> int:
        return int((trio.current_time() + offset[0]) * 1000)

    storage = MemoryStorage()
    settings = Settings(retry=RetryPolicy(base_delay_ms=10_000))
    script = [reply(error="429 Too Many Requests", retryable=True), reply(text="finally")]
    agent = AgentConfig(model=ModelRef("scripted", "m"))

    async with Harness.open(storage, models=ScriptedModels(script), registry=Registry(), settings=settings, clock=clock) as h:
        conv = await h.root(agent=agent)
        sub = await conv.submit(Input("go", request_id="r1"))
        with trio.fail_after(60):
            while True:
                gen = next(t for t in storage.tasks() if t.kind == "pi.generation")
                if gen.checkpoint.get("phase") == "retry":
                    break
                await trio.sleep(0.01)
        until = gen.checkpoint["until"]
        assert until - clock() > 9_000  # scheduled ~10 s ahead
        await trio.sleep(3)  # 3 s of the backoff pass, then the process stops
        assert (await sub.record()).status == "placed"

    offset[0] += 4  # the process was down for 4 s of wall time

    models = ScriptedModels(script)
    async with Harness.open(storage, models=models, registry=Registry(), settings=settings, clock=clock) as h:
        start = trio.current_time()
        settled = await (await h.submission(sub.id)).wait()
        waited = trio.current_time() - start
    assert settled.status == "done"
    remaining = (until - (clock() - int(waited * 1000))) / 1000
    assert abs(waited - remaining) < 0.1, (waited, remaining)
    assert 2.5 < waited < 3.5  # 10 s - 3 s - 4 s
    assert len(models.requests) == 1  # only the retry was sent in the new process
