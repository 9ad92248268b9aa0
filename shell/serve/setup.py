"""``pidurable serve --app module:factory``: the host's agent, served.

The factory is a function of no arguments returning a :class:`Setup` - the
models, tools (a ``Registry``), env and agent the served harness runs with -
so an app with its own tools and providers is served by the same command.
``module`` is imported with the current directory first on ``sys.path`` (as
ASGI servers do), so ``pidurable serve --app myagent:setup`` finds
``./myagent.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import attrs

from pidurable.core.model import AgentConfig, Settings

from ..errors import InvalidInput
from ..registry import Registry


@attrs.frozen(kw_only=True)
class Setup:
    """What a served harness runs with."""

    #: The providers (``Models.from_env()``, ``ScriptedModels``, ...); None: no model.
    models: Any
    registry: Registry = attrs.field(factory=Registry)
    #: The tools' environment (``LocalEnv(root)``), or None.
    env: Any = None
    #: The agent of the root conversation (when the store has none) and of
    #: conversations created through the API.
    agent: AgentConfig | None = None
    settings: Settings | None = None


def load_setup(spec: str) -> Setup:
    """Import ``module:factory`` and call the factory; ``InvalidInput`` says
    what is wrong with the spec or what the factory returned."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(f"--app must look like module:factory (e.g. myagent:setup), not {spec!r}")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidInput(f"--app {spec}: cannot import {module_name!r} ({e})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidInput(f"--app {spec}: {module_name} has no function {attr!r}")
    setup = factory()
    if not isinstance(setup, Setup):
        raise InvalidInput(f"--app {spec}: the factory must return a pidurable.shell.serve.Setup, not {type(setup).__name__}")
    return setup
