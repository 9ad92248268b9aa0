"""Custom tasks and timers: ``RunPhase``, ``MigrateTask``, ``Sleep``.

``RunPhase`` runs host code - ``phases[phase]`` (mode ``run``) or the abort
handler (mode ``abort``) - with a ``TaskRuntime`` whose durable operations are
requests to the core. Whatever happens, the phase reports back exactly once
with ``PhaseReturned``: normally, with the error text when host code raised
(the task faults; the harness goes on), or ``cancelled`` when its scope was
cancelled. The task record it runs from is a read-only snapshot the loop took
at dispatch; nothing here touches ``State``.
"""

from __future__ import annotations

import attrs
import trio

from pidurable.core.effects import MigrateTask, RunPhase, Sleep
from pidurable.core.events import MigrationFinished, PhaseReturned, TimerFired
from pidurable.core.model import Task

from ..errors import InvalidInput
from ..registry import Progress
from ..storage import codec
from ..tasks import TaskCommitError, TaskRuntime
from .ports import HostPort, Reporter


@attrs.frozen(kw_only=True)
class TaskInterpreter:
    port: HostPort

    async def run_phase(self, effect: RunPhase, task: Task | None) -> None:
        port = self.port
        ran = dict(effect.checkpoint)

        def returned(error: str | None = None, cancelled: bool = False) -> None:
            port.loop.send(
                PhaseReturned(
                    now=port.clock(), task_id=effect.task_id, mode=effect.mode, ran=ran, error=error, cancelled=cancelled
                )
            )

        definition = port.registry.task(effect.kind)
        if definition is None or task is None:
            returned(error=f"Task {effect.task_id}: no definition of {effect.kind} is installed")
            return
        handler = definition.abort if effect.mode == "abort" else definition.phases.get(str(ran.get("phase")))
        if handler is None:
            returned(error=f"Task {effect.task_id}: {effect.kind} has no handler for {ran.get('phase')!r}")
            return
        runtime = TaskRuntime(port, attrs.evolve(task, checkpoint=ran), effect.mode)
        try:
            progress = await handler(attrs.evolve(task, checkpoint=ran), runtime)
            if isinstance(progress, Progress):
                await runtime.commit(
                    progress.status,
                    checkpoint=progress.checkpoint,
                    on=progress.on,
                    policy=progress.policy,
                    outcome=progress.outcome,
                )
        except trio.Cancelled:
            returned(cancelled=True)
            raise
        except Exception as e:  # host code failed: the task faults, the harness goes on
            returned(error=str(e) if isinstance(e, (TaskCommitError, InvalidInput)) else f"{type(e).__name__}: {e}")
            return
        returned()

    async def migrate(self, effect: MigrateTask) -> None:
        port = self.port
        definition = port.registry.task(effect.kind)
        version = definition.version if definition is not None else effect.from_version
        try:
            if definition is None or definition.migrate is None:
                raise RuntimeError(f"no migrate() for {effect.kind}")
            new_input, new_checkpoint = definition.migrate(dict(effect.input), dict(effect.checkpoint), effect.from_version)
            codec.dumps([new_input, new_checkpoint])
        except Exception as e:  # host code failed: reported as a failed migration
            port.loop.send(MigrationFinished(now=port.clock(), task_id=effect.task_id, version=version, error=str(e)))
            return
        port.loop.send(
            MigrationFinished(
                now=port.clock(), task_id=effect.task_id, version=version, input=new_input, checkpoint=new_checkpoint
            )
        )


async def sleep(loop: Reporter, effect: Sleep) -> None:
    """Fire ``TimerFired`` once the harness clock reaches ``until`` (re-read
    after each timer: the harness clock need not be Trio's)."""
    while (remaining := (effect.until - loop.clock()) / 1000) > 0:
        await trio.sleep(remaining)
    loop.send(TimerFired(now=loop.clock(), task_id=effect.task_id, until=effect.until))
