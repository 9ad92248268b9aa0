"""Storage adapters: memory and SQLite (JSONL comes later), one protocol."""

from .base import SCHEMA_VERSION, Loaded, Storage, StorageError, StoreFenced, StoreLocked
from .memory import MemoryStorage
from .sqlite import SqliteStorage, open_sqlite_storage

__all__ = [
    "SCHEMA_VERSION",
    "Loaded",
    "MemoryStorage",
    "SqliteStorage",
    "Storage",
    "StorageError",
    "StoreFenced",
    "StoreLocked",
    "open_sqlite_storage",
]
