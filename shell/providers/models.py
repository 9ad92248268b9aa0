"""``Models``: maps ``provider:model`` refs to adapters.

    models = Models({"openai": OpenAIChat(base_url, api_key), "anthropic": Anthropic(...)})
    models = Models.from_env()      # OPENAI_BASE_URL/OPENAI_API_KEY, ANTHROPIC_...

An adapter receives the model id from the request (``request.model.model_id``);
API keys live only in the adapter objects (memory): they are never part of a
request record, an event or the store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pidurable.core.model import ModelRef


class Models:
    def __init__(self, providers: Mapping[str, Any] | None = None, *, models: Mapping[str, Any] | None = None) -> None:
        #: provider name -> adapter (answers every model id of that provider)
        self.providers: dict[str, Any] = dict(providers or {})
        #: "provider:model" -> adapter, for single models
        self.models: dict[str, Any] = dict(models or {})

    def resolve(self, ref: ModelRef) -> Any | None:
        return self.models.get(f"{ref.provider}:{ref.model_id}") or self.providers.get(ref.provider)

    def add(self, provider: str, adapter: Any) -> None:
        self.providers[provider] = adapter

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Models":
        """OpenAI and Anthropic adapters from ``OPENAI_BASE_URL`` /
        ``OPENAI_API_KEY`` and ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``
        (a provider without a key is left out; ``overrides`` win)."""
        from .anthropic import Anthropic
        from .openai import OpenAIChat

        env = os.environ if env is None else env
        out = cls()
        key = overrides.get("openai_api_key") or env.get("OPENAI_API_KEY")
        if key:
            base = overrides.get("openai_base_url") or env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            out.add("openai", OpenAIChat(base, key))
        key = overrides.get("anthropic_api_key") or env.get("ANTHROPIC_API_KEY")
        if key:
            base = overrides.get("anthropic_base_url") or env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
            out.add("anthropic", Anthropic(base, key))
        return out
