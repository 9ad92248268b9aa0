"""pidurable: durable LLM agents.

The distribution has two import packages: :mod:`pidurable.core` (pure reducer)
and :mod:`pidurable.shell` (Trio runtime, storage, providers, tools, CLI).
"""

__version__ = "0.1.0"
