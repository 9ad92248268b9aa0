"""Effect interpreters, each behind a narrow typed port (``ports.py``).

- ``models.py``: ``CallModel``, ``PollModel``, ``CancelDeferred``
- ``tools.py``: ``PrepareTool``, ``RunTool`` and the one tool-call validation
- ``tasks.py``: ``RunPhase``, ``MigrateTask``, ``Sleep``
- ``hooks.py``: extension hooks around requests and tools

The loop (``loop.py``) owns ``State``, ordering, commits, tickets and cancel
scopes; it dispatches each act to one of these with ``match`` (mypy proves it
total). ``Commit``, ``Cancel`` and ``Respond`` are the loop's own.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..context_cache import ContextCache
from ..providers.base import Models
from .hooks import HookReport, HookRunner, log_report
from .models import ModelInterpreter
from .ports import EntryReads, HostPort
from .tasks import TaskInterpreter
from .tools import ToolInterpreter


@attrs.frozen(kw_only=True)
class Interpreters:
    models: ModelInterpreter
    tools: ToolInterpreter
    tasks: TaskInterpreter
    hooks: HookRunner

    @classmethod
    def build(
        cls,
        *,
        host: HostPort,
        entries: EntryReads,
        context: ContextCache,
        models: Models | None,
        env: object,
        store_id: str,
        on_report: Callable[[HookReport], None] = log_report,
    ) -> "Interpreters":
        hooks = HookRunner(
            registry=host.registry, loop=host.loop, harness=host.harness, on_report=on_report, env=env, entries=entries
        )
        return cls(
            models=ModelInterpreter(loop=host.loop, models=models, registry=host.registry, hooks=hooks, context=context),
            tools=ToolInterpreter(
                loop=host.loop,
                registry=host.registry,
                hooks=hooks,
                context=context,
                storage=entries,
                env=env,
                store_id=store_id,
                harness=host.harness,
                documents=host.documents,
            ),
            tasks=TaskInterpreter(port=host),
            hooks=hooks,
        )


__all__ = ["HookReport", "HookRunner", "HostPort", "Interpreters", "ModelInterpreter", "TaskInterpreter", "ToolInterpreter"]
