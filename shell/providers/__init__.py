"""Model providers: ``ScriptedModels`` (deterministic), the HTTP adapters
``OpenAIChat``, ``Anthropic`` and ``OpenAIResponses`` (deferred), and
``Models`` (maps ``provider:model`` refs to adapters)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .base import ModelDeferredReply, ModelError, ModelReply, ModelRequest, Models as ModelsProtocol, Provider, ToolSpec
from .models import Models
from .scripted import ScriptedModels, ScriptedReply, reply, tool_call

if TYPE_CHECKING:
    from .anthropic import Anthropic
    from .classify import classify, classify_exception, retry_after_ms
    from .openai import OpenAIChat
    from .responses import OpenAIResponses

#: The HTTP adapters and their error classification, imported on first use:
#: they import httpx (~150 ms of every process's start, and its objects in
#: every full garbage collection) for a process that may only run scripted
#: models or read a store. ``Models`` imports an adapter when a ref names it.
_LAZY = {
    "Anthropic": ".anthropic",
    "OpenAIChat": ".openai",
    "OpenAIResponses": ".responses",
    "classify": ".classify",
    "classify_exception": ".classify",
    "retry_after_ms": ".classify",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups find it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Anthropic",
    "ModelDeferredReply",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "Models",
    "ModelsProtocol",
    "OpenAIChat",
    "OpenAIResponses",
    "Provider",
    "ScriptedModels",
    "ScriptedReply",
    "ToolSpec",
    "classify",
    "classify_exception",
    "reply",
    "retry_after_ms",
    "tool_call",
]
