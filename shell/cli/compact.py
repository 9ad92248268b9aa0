"""``pidurable compact-store --db FILE [--journal-retention N]``: reclaim a
SQLite store's free space (issue 11).

What it does, in order, with the store open read-write (so under its lock:
a store another process has open is refused with ``StoreLocked``, naming
that process, and nothing is touched):

1. with ``--journal-retention N``: drop the journal rows that retention does
   not keep (the newest N commits and every run not yet settled stay;
   ``SqliteStorage.prune_journal``);
2. rewrite task and entry rows written before schema 4 in their lean form
   (the same records; ``SqliteStorage.compact``);
3. ``VACUUM`` (SQLite rebuilds the file with only what it holds; it needs
   about the store's size in free disk space, and a crash during it leaves
   the store as it was) and a WAL checkpoint that truncates ``FILE-wal``.

It prints the bytes of the file and its ``-wal`` before and after. A JSONL
store (a directory) is refused: its ``main.jsonl`` is the store itself.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..storage.sqlite import open_sqlite_storage
from ..storage.sqlite_retention import check_retention
from .common import EXIT_USAGE, CliError, Subparsers, existing_store


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compact-store",
        parents=[common],
        help="reclaim a SQLite store's free space (VACUUM), optionally dropping old journal rows",
        description="Reclaim the free space of a SQLite store: optionally drop old journal rows "
        "(--journal-retention), rewrite records written by older versions in the lean form, then VACUUM. "
        "Takes the store's lock: refuses a store another process has open. Prints the size before and after.",
    )
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    p.add_argument(
        "--journal-retention",
        metavar="N",
        type=int,
        default=None,
        help="first drop the journal rows of settled runs older than the newest N commits "
        "(pidurable replay then checks only from the first process life kept)",
    )
    p.set_defaults(func=cmd_compact)


def store_bytes(path: Path) -> int:
    """The store file and its ``-wal`` (what a copy of the store must take)."""
    total = 0
    for name in (str(path), f"{path}-wal"):
        try:
            total += os.path.getsize(name)
        except FileNotFoundError:
            pass
    return total


def cmd_compact(args: argparse.Namespace) -> int:
    path = existing_store(args.db)
    if path.is_dir():
        raise CliError(
            f"{path} is a directory (a JSONL store?): compact-store works on SQLite stores; a JSONL store's "
            "main.jsonl is its journal and its records at once",
            EXIT_USAGE,
        )
    retention: int | str = "all"
    if args.journal_retention is not None:
        try:
            retention = check_retention(args.journal_retention)
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from e
    before = store_bytes(path)
    store = open_sqlite_storage(path, create=False, journal_retention=retention)
    try:
        dropped = store.prune_journal()
        rows = store.journal_span()
        rewritten = store.compact()
    finally:
        store.close()
    after = store_bytes(path)
    saved = before - after
    share = f" ({saved / before:.0%})" if before else ""
    print(f"compacted {path}: {before:,} -> {after:,} bytes, {saved:,} reclaimed{share}")
    if args.journal_retention is not None:
        kept = f"commits {rows[0]}-{rows[1]}" if rows is not None else "no commits"
        print(f"journal: {dropped:,} rows dropped, {kept} kept")
    if rewritten:
        print(f"records: {rewritten:,} task and entry rows rewritten in the lean form (schema 4)")
    return 0
