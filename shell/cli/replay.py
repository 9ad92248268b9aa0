"""``pidurable replay --db FILE [-v]``: re-run the journal through the pure
core and compare each produced commit with the stored one, byte for byte.

Read-only (the store's lock is never taken); exits 1 if any commit differs.
"""

from __future__ import annotations

import argparse

from ..journal import replay
from ..storage.readonly import open_readonly
from .common import Subparsers, existing_store


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "replay",
        parents=[common],
        help="re-run the journal through the pure core and compare",
        description="Re-run the store's journal through the pure core from an empty state and compare each "
        "produced commit with the stored one, byte for byte. Read-only; exits 1 if any commit differs.",
    )
    p.add_argument("--db", metavar="FILE", required=True, help="the SQLite store")
    p.add_argument("-v", "--verbose", action="store_true", help="show every commit's writes")
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    store = open_readonly(existing_store(args.db))
    bad = 0
    count = 0
    try:
        for t in replay(store):
            count += 1
            flag = "ok " if t.matches else "DIFF"
            print(f"[{flag}] commit {t.seq}: {' + '.join(t.events)}")
            if args.verbose or not t.matches:
                for w in t.writes:
                    print(f"        {w}")
                if t.acts:
                    print(f"        then: {', '.join(t.acts)}")
            if not t.matches:
                bad += 1
                print(f"        stored:   {t.stored[:300]}")
                print(f"        replayed: {t.replayed[:300]}")
    finally:
        store.close()
    print(f"{count} commits replayed through the pure core: {count - bad} identical, {bad} different")
    return 0 if bad == 0 else 1
