"""``pidurable replay``: re-run a journal through the pure core and compare
each produced commit with the recorded one, byte for byte.

``--db STORE`` reads a store, a SQLite file or a JSONL store's directory
(read-only; the lock is never taken and nothing is repaired, so a live store
works too), a positional ``JOURNAL.jsonl`` reads an exported journal
(``--export`` writes one; see :mod:`..journal_file`). Without ``--check``
every commit is listed; ``--check`` prints only what went wrong, and how
much was checked; ``--explain`` tells each commit as a story
(:mod:`..explain`). Exit status 1 if any commit differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pidurable.core.events import Opened

from ..explain import explain
from ..explain_html import write_explain_html
from ..journal import (
    READABLE_FORMATS,
    CheckResult,
    Divergence,
    check,
    check_format,
    describe_writes,
    journal_writes,
    replay,
)
from ..journal_file import read_journal, write_journal
from ..storage import codec
from ..storage.base import JournalRow, StorageError
from ..storage.readonly import is_jsonl_store, open_view
from ..storage.sqlite_layout import SQLITE_MAGIC
from .common import EXIT_USAGE, CliError, Subparsers, existing_store


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "replay",
        parents=[common],
        help="re-run the journal through the pure core and compare",
        description="Re-run a journal (a store's, or an exported JSONL file) through the current pure core and "
        "compare each produced commit with the recorded one, byte for byte. Read-only; exits 1 if any commit "
        "differs. The store is a SQLite file or a JSONL store's directory.",
    )
    p.add_argument("journal", nargs="?", metavar="JOURNAL", help="a journal exported as JSONL (or a store)")
    p.add_argument("--db", metavar="STORE", help="the store: a SQLite file or a JSONL store's directory")
    p.add_argument("--check", action="store_true", help="print only the first divergence (and how much was checked)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every commit's writes and whole texts")
    p.add_argument("--export", metavar="OUT", help="write the journal as JSONL to OUT ('-': stdout) instead")
    p.add_argument(
        "--explain",
        action="store_true",
        help="tell each commit as a story: the event, the rules that fired (linked to specs/), what was written, "
        "the effects that followed, and what reopening did after a crash",
    )
    p.add_argument(
        "--html", metavar="FILE", help="with --explain: write the story as one self-contained page (task tree at each step)"
    )
    p.add_argument("--conversation", type=int, metavar="ID", help="with --explain: only commits writing conversation ID")
    p.add_argument("--from", dest="first", type=int, metavar="SEQ", help="with --explain: start at commit SEQ")
    p.add_argument("--to", dest="last", type=int, metavar="SEQ", help="with --explain: stop after commit SEQ")
    p.set_defaults(func=cmd_replay)


def _is_store(path: Path) -> bool:
    """Whether a positional JOURNAL names a store (a SQLite file, a JSONL
    store's directory or its ``main.jsonl``) rather than an exported journal."""
    if is_jsonl_store(path):
        return True
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def load_rows(args: argparse.Namespace) -> tuple[list[JournalRow], str]:
    """The journal rows ``args`` name, and what to call their source."""
    if (args.db is None) == (args.journal is None):
        raise CliError("give a store (--db STORE) or a journal file (JOURNAL.jsonl), one of them", EXIT_USAGE)
    if args.db is not None or _is_store(Path(args.journal)):
        path = existing_store(args.db if args.db is not None else args.journal)
        store = open_view(path)
        try:
            return store.journal(), f"store {path}"
        finally:
            store.close()
    return read_journal(args.journal), f"journal {args.journal}"


def cmd_replay(args: argparse.Namespace) -> int:
    rows, source = load_rows(args)
    partial = partial_note(rows, source)
    if partial is not None and not args.check:
        print(f"pidurable replay: {partial[0]}", file=sys.stderr)
    if args.export is not None:
        return _export(rows, args.export)
    if args.check:
        return _check(rows, source, verbose=args.verbose)
    if args.explain:
        check_format(rows, source)
        if args.html is not None:
            target = Path(args.html)
            if not target.parent.is_dir():
                raise CliError(f"cannot write {target}: directory {target.parent} does not exist", EXIT_USAGE)
            try:
                size = write_explain_html(
                    rows, str(target), source=source, conversation=args.conversation, first=args.first, last=args.last
                )
            except OSError as e:
                raise CliError(f"cannot write {target}: {e.strerror or e}") from e
            print(f"wrote {target} ({size} bytes)", file=sys.stderr)
            return 0
        for line in explain(rows, conversation=args.conversation, first=args.first, last=args.last):
            print(line)
        return 0
    if args.conversation is not None or args.first is not None or args.last is not None or args.html is not None:
        raise CliError("--conversation, --from, --to and --html go with --explain", EXIT_USAGE)
    check_format(rows, source)
    bad = skipped = 0
    # each commit's writes described only where they are printed (a third of a replay)
    for row, t in zip(rows, replay(rows, describe=args.verbose), strict=True):
        flag = "ok " if t.matches else ("skip" if t.skipped else "DIFF")
        print(f"[{flag}] commit {t.seq}: {' + '.join(t.events)}")
        if args.verbose or t.divergence is not None:
            for w in t.writes if args.verbose else describe_writes(row.writes):
                print(f"        {w}")
            if t.acts:
                print(f"        then: {', '.join(t.acts)}")
        if t.divergence is not None:
            bad += 1
            print("\n".join("        " + line for line in divergence_lines(t.divergence, verbose=args.verbose)))
        skipped += t.skipped
    extra = f", {skipped} skipped (after a difference in the same process life)" if skipped else ""
    print(f"{len(rows)} commits replayed through the pure core: {len(rows) - bad - skipped} identical, {bad} different{extra}")
    return 0 if bad == 0 else 1


def _export(rows: list[JournalRow], out: str) -> int:
    rows = _readable(rows)
    if out == "-":
        write_journal(rows, sys.stdout)
        return 0
    target = Path(out)
    if not target.parent.is_dir():
        raise CliError(f"cannot write {target}: directory {target.parent} does not exist", EXIT_USAGE)
    try:
        with target.open("w", encoding="utf-8") as f:
            n = write_journal(rows, f)
    except OSError as e:
        raise CliError(f"cannot write {target}: {e.strerror or e}") from e
    print(f"wrote {n} journal rows to {target}", file=sys.stderr)
    return 0


def _readable(rows: list[JournalRow]) -> list[JournalRow]:
    """Rows with their writes as JSON, for an export a reviewer reads: a lean
    row's digest is replaced by the writes this code recomputes from its
    events (they matched the digest; the row keeps its format, which names
    the encoding). A journal that does not
    replay is exported as stored (``--check`` says where it differs)."""
    if not any(codec.is_digest(r.writes) for r in rows):
        return rows
    try:
        recomputed = journal_writes(rows, "journal")
    except StorageError:
        return rows
    return [JournalRow(seq=r.seq, events=r.events, writes=w, format=r.format) for r, (_, _, w) in zip(rows, recomputed, strict=True)]


def partial_note(rows: list[JournalRow], source: str) -> tuple[str, int | None] | None:
    """For a journal whose first commits were dropped (journal retention,
    ``compact-store --journal-retention``): what to say, and the index of
    the first row that starts a process life (None: no row does). Replay
    can check from there on: each life's ``opened`` carries what it loaded,
    so its commits replay without the rows before it."""
    if not rows or rows[0].seq == 1:
        return None
    start = next((i for i, r in enumerate(rows) if _opens(r)), None)
    dropped = f"commits 1-{rows[0].seq - 1} are" if rows[0].seq > 2 else "commit 1 is"
    note = (
        f"the journal of {source} is partial: it starts at commit {rows[0].seq} ({dropped} not in it: "
        "dropped by journal retention, or cut)"
    )
    if start is None:
        return note + "; it holds no process life's start (an opened), so nothing can be replayed", None
    skipped = f"; commits {rows[0].seq}-{rows[start].seq - 1} before it are not compared" if start else ""
    return note + f"; replaying from commit {rows[start].seq}, the first process life it holds{skipped}", start


def _opens(row: JournalRow) -> bool:
    try:
        datas = json.loads(row.events)
    except ValueError:
        return False
    return bool(datas) and isinstance(datas[0], dict) and datas[0].get("type") == Opened.TAG


def _check(rows: list[JournalRow], source: str, *, verbose: bool) -> int:
    if not rows:
        print(f"replay --check: {source} has no commits; nothing to check")
        return 0
    partial = partial_note(rows, source)
    if partial is not None:
        note, start = partial
        print(f"replay --check: {note}")
        if start is None:
            return 1
        rows = rows[start:]
    result = check(rows, source)
    if result.ok:
        print(
            f"replay --check: {result.commits} commits ({result.events} events, {_plural(result.lives, 'process life', 'process lives')}) "
            f"of {source} reproduced byte for byte by this code"
        )
        return 0
    first = result.divergences[0]
    print(f"replay --check: {source} DIVERGES at commit {first.seq} ({first.kind.value})")
    print("\n".join("  " + line for line in divergence_lines(first, verbose=verbose)))
    print(_summary(result, rows))
    return 1


def divergence_lines(d: Divergence, *, verbose: bool) -> list[str]:
    """How the current core left the recorded path at ``d``, readably."""
    out = [d.message]
    if d.life_start:
        out.append(f"(in the process life opened at commit {d.life_start})")
    if d.event_index is not None:
        out.append(f"event {d.event_index}: {d.event_tag} {d.event_text}")
    if d.diff:
        out.append("difference (recorded -> this code):")
        out.extend("  " + line for line in d.diff)
    limit = None if verbose else 400
    for label, text in (("recorded writes", d.recorded), ("produced writes", d.produced)):
        if text and (verbose or not d.diff):
            cut = text if limit is None or len(text) <= limit else text[:limit] + f"… ({len(text)} characters; -v shows all)"
            out.append(f"{label}: {cut}")
    if d.kind.value == "undecodable":
        formats = ", ".join(str(f) for f in sorted(READABLE_FORMATS))
        out.append(f"(this pidurable reads journal format {formats}; an event it cannot decode was written by other code)")
    return out


def _summary(result: CheckResult, rows: list[JournalRow]) -> str:
    first = result.divergences[0]
    before = sum(1 for r in rows if r.seq < first.seq)
    lines = [f"{before} commits before it are identical."]
    if len(result.divergences) > 1:
        at = ", ".join(str(d.seq) for d in result.divergences[1:])
        lines.append(f"Later process lives diverge too, first at commits {at}.")
    n = len(result.divergences)
    lines.append(
        f"In all: {result.commits} of {result.total} commits identical; {_plural(n, 'process life diverges', 'process lives diverge')}"
        f" ({result.skipped} later commits of {'it' if n == 1 else 'them'} not compared)."
    )
    return "\n".join(lines)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
