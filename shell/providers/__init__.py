"""Model providers: ``ScriptedModels`` (deterministic), the HTTP adapters
``OpenAIChat``, ``Anthropic`` and ``OpenAIResponses`` (deferred), and
``Models`` (maps ``provider:model`` refs to adapters)."""

from .anthropic import Anthropic
from .base import ModelDeferredReply, ModelError, ModelReply, ModelRequest, Models as ModelsProtocol, Provider, ToolSpec
from .classify import classify, classify_exception, retry_after_ms
from .models import Models
from .openai import OpenAIChat
from .responses import OpenAIResponses
from .scripted import ScriptedModels, ScriptedReply, reply, tool_call

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
