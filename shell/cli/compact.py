"""``pidurable compact-store --db FILE|DIR [--journal-retention N]``: reclaim
a store's space (issue 11).

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

It prints the bytes of the file and its ``-wal`` before and after.

A JSONL store (a directory, or its ``main.jsonl``) is compacted by
``JsonlStorage.compact`` under its lock: ``main.jsonl`` rewritten as the
store's records (snapshot rows) and the journal rows retention keeps (all
without ``--journal-retention``), every sidecar deleted
(jsonl_snapshot.py); the bytes of the directory's store files before and
after are printed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..storage.jsonl import MAIN, open_jsonl_storage
from ..storage.jsonl_sidecars import NAME as SIDECAR_NAME
from ..storage.readonly import is_jsonl_store
from ..storage.sqlite import open_sqlite_storage
from ..storage.sqlite_retention import check_retention
from .common import EXIT_USAGE, CliError, Subparsers, existing_store


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compact-store",
        parents=[common],
        help="reclaim a store's space (SQLite: VACUUM; JSONL: rewrite main.jsonl), optionally dropping old journal rows",
        description="Reclaim the space of a store: optionally drop old journal rows (--journal-retention). "
        "A SQLite store: rewrite records written by older versions in the lean form, then VACUUM. A JSONL "
        "store: rewrite main.jsonl as its current records and the journal rows kept, and delete its sidecar "
        "files. Takes the store's lock: refuses a store another process has open. Prints the size before and after.",
    )
    p.add_argument("--db", metavar="FILE|DIR", required=True, help="the store (a SQLite file or a JSONL directory)")
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


def jsonl_bytes(directory: Path) -> int:
    """A JSONL store's ``main.jsonl`` and sidecar files."""
    total = 0
    for p in directory.iterdir():
        if p.name == MAIN or SIDECAR_NAME.fullmatch(p.name):
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
    return total


def _report(path: Path, before: int, after: int) -> None:
    saved = before - after
    share = f" ({saved / before:.0%})" if before else ""
    print(f"compacted {path}: {before:,} -> {after:,} bytes, {saved:,} reclaimed{share}")


def cmd_compact(args: argparse.Namespace) -> int:
    path = existing_store(args.db)
    retention: int | str = "all"
    if args.journal_retention is not None:
        try:
            retention = check_retention(args.journal_retention)
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from e
    if is_jsonl_store(path):
        return _compact_jsonl(path if path.is_dir() else path.parent, retention, args.journal_retention is not None)
    before = store_bytes(path)
    store = open_sqlite_storage(path, create=False, journal_retention=retention)
    try:
        dropped = store.prune_journal()
        rows = store.journal_span()
        rewritten = store.compact()
    finally:
        store.close()
    _report(path, before, store_bytes(path))
    if args.journal_retention is not None:
        kept = f"commits {rows[0]}-{rows[1]}" if rows is not None else "no commits"
        print(f"journal: {dropped:,} rows dropped, {kept} kept")
    if rewritten:
        print(f"records: {rewritten:,} task and entry rows rewritten in the lean form (schema 4)")
    return 0


def _compact_jsonl(path: Path, retention: int | str, say_journal: bool) -> int:
    """A JSONL store: ``JsonlStorage.compact`` under its lock."""
    before = jsonl_bytes(path)
    store = open_jsonl_storage(path, create=False)
    try:
        done = store.compact(retention)
    finally:
        store.close()
    _report(path, before, jsonl_bytes(path))
    if say_journal:
        kept = f"commits {done.kept[0]}-{done.kept[1]}" if done.kept is not None else "no commits"
        print(f"journal: {done.dropped:,} rows dropped, {kept} kept")
    print(f"records: {done.rows:,} rows in the snapshot, {done.sidecars:,} sidecar files deleted")
    return 0
