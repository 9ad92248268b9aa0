"""Storage adapters behind one protocol: memory (tests), SQLite and JSONL."""

from .base import (
    SCHEMA_VERSION,
    DamagedRecord,
    Loaded,
    NotAStore,
    Storage,
    StorageError,
    StoreFenced,
    StoreLocked,
    StoreMissing,
)
from .jsonl import JsonlStorage, open_jsonl_storage
from .memory import MemoryStorage
from .sqlite import SqliteStorage, open_sqlite_storage

__all__ = [
    "SCHEMA_VERSION",
    "DamagedRecord",
    "JsonlStorage",
    "Loaded",
    "MemoryStorage",
    "NotAStore",
    "SqliteStorage",
    "Storage",
    "StorageError",
    "StoreFenced",
    "StoreLocked",
    "StoreMissing",
    "open_jsonl_storage",
    "open_sqlite_storage",
]
