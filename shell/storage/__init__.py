"""Storage adapters behind one protocol: memory (tests), SQLite, JSONL and
PostgreSQL (its driver is the optional ``postgres`` extra: imported only when
a PostgreSQL store is opened)."""

from typing import TYPE_CHECKING

from .base import (
    SCHEMA_VERSION,
    DamagedRecord,
    LeaseLost,
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

if TYPE_CHECKING:
    from .postgres import PostgresStorage


def open_postgres_storage(
    dsn: str, worker_id: str | None = None, *, schema: str = "pidurable", create: bool = True
) -> "PostgresStorage":
    """Open the store in PostgreSQL schema ``schema`` of the database at
    ``dsn`` (see :func:`.postgres.open_postgres_storage`); needs the
    ``postgres`` extra (``pip install 'pidurable[postgres]'``)."""
    try:
        from .postgres import open_postgres_storage as opener
    except ImportError as e:
        if e.name not in ("psycopg", "psycopg_pool"):
            raise
        raise StorageError("PostgreSQL storage needs psycopg: pip install 'pidurable[postgres]'") from e
    return opener(dsn, worker_id, schema=schema, create=create)


__all__ = [
    "SCHEMA_VERSION",
    "DamagedRecord",
    "JsonlStorage",
    "LeaseLost",
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
    "open_postgres_storage",
    "open_sqlite_storage",
]
