"""Storage adapters behind one protocol: memory (tests) and SQLite."""

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
from .memory import MemoryStorage
from .sqlite import SqliteStorage, open_sqlite_storage

__all__ = [
    "SCHEMA_VERSION",
    "DamagedRecord",
    "Loaded",
    "MemoryStorage",
    "NotAStore",
    "SqliteStorage",
    "Storage",
    "StorageError",
    "StoreFenced",
    "StoreLocked",
    "StoreMissing",
    "open_sqlite_storage",
]
