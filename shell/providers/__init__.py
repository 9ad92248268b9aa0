"""Model providers: ``ScriptedModels`` (deterministic); HTTP providers later."""

from .base import ModelError, ModelReply, ModelRequest, Models, Provider, ToolSpec
from .scripted import ScriptedModels, ScriptedReply, reply, tool_call

__all__ = [
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "Models",
    "Provider",
    "ScriptedModels",
    "ScriptedReply",
    "ToolSpec",
    "reply",
    "tool_call",
]
