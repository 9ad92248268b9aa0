"""Write docs/tutorial.md from real runs: ``python docs/generate.py``.

Every transcript, ``replay --explain`` excerpt and task tree in the tutorial
is produced here, by running the reference scenarios and then the real
``pidurable`` commands on the store they leave behind - nothing in those
blocks is typed by hand. The prose around them is in ``SECTIONS`` below.

The runs are the golden scenarios' (tests/golden_scenarios.py): the crash
harness's ``run_life`` with the scripted model, Trio's ``MockClock`` (virtual
time from a fixed epoch) and a seeded scheduler, on an SQLite file in a
temporary directory. A crash is deterministic too: the first life stops
before the effect found from an uninterrupted run (``crash_before``), and a
second life reopens the same file - what ``pidurable demo`` does with a real
``SIGKILL``. Generating twice gives the same bytes;
``tests/test_tutorial_fresh.py`` regenerates the text in memory and fails
when the checked-in tutorial is stale (``--check`` does the same here).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "tests", ROOT / "tests" / "crash", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from pidurable.shell import MemoryStorage, open_sqlite_storage  # noqa: E402
from pidurable.shell.cli import main as cli  # noqa: E402

import golden_scenarios as golden  # noqa: E402

OUT = ROOT / "docs" / "tutorial.md"

#: (seq, event types) of every commit of a run's journal.
Commits = list[tuple[int, list[str]]]


@attrs.frozen(kw_only=True)
class Section:
    golden: str  #: the golden scenario run (tests/golden_scenarios.py GOLDEN)
    title: str
    intro: str  #: the human explanation, before the transcript
    #: the commits worth explaining, chosen from the run's own journal
    pick: Callable[[Commits], list[int]]
    explain_note: str  #: one paragraph before the --explain excerpt


def _with(types: str, nth: int = 0, then: int = 0) -> Callable[[Commits], list[int]]:
    """The ``nth`` commit whose events include ``types`` and the ``then`` after it."""

    def pick(commits: Commits) -> list[int]:
        seqs = [seq for seq, ev in commits if types in ev]
        first = seqs[nth]
        return [seq for seq, _ in commits if first <= seq <= first + then]

    return pick


def _crash(commits: Commits) -> list[int]:
    """The last commit before the crash, the reopening, and the commit after it."""
    reopen = next(seq for seq, ev in commits if "opened" in ev and seq > 1)
    return [reopen - 1, reopen, reopen + 1]


SECTIONS: tuple[Section, ...] = (
    Section(
        golden="config_fix_crash",
        title="1. Fixing a config file, with a crash in the middle",
        intro="""\
The user asks the agent to read and fix a config file. The scripted model
reads `config/dev.json`, edits it, reads it again and answers: three tool
rounds in one run, each model turn a `pi.generation` task and each tool call
a `pi.tool` task owned by it.

`edit` is declared `replay="unsafe"`: running it twice could do damage. Here
the process dies right after the edit's body started - its intent is
committed, its result is not. This run stops the first process life before
that point deterministically (the crash point is found from an uninterrupted
run); `pidurable demo` shows the same story with a real `SIGKILL` of a child
process.

When the second life reopens the store, the edit is *not* run again: its task
ends with the result "Tool edit was interrupted and may have partially run",
the model sees that, reads the file again and answers.""",
        pick=_crash,
        explain_note="""\
The last commit of the first life, then what reopening found and did. Note
the edit task going `running -> pending` on open and then ending
interrupted, never re-run:""",
    ),
    Section(
        golden="vienna",
        title="2. The Vienna trip: three tools in parallel",
        intro="""\
One model turn asks for three safe queries at once: `weather`, `museums` and
`trains`. All three tool tasks are created in the commit that stores the
assistant's reply and their bodies run in parallel. Each result is committed
as it lands, in the order they finish; results that are ready at the same time
(here `weather` and `museums`) share one commit, each still its own event in
the journal. The generation waits on all three; when the last lands, a new
generation takes the run and writes the itinerary.

(`pidurable demo` kills this one while `trains` is still running: the two
finished results are kept, and the safe `trains` is simply run again.)""",
        pick=_with("model_responded", 0, then=1),
        explain_note="""\
The reply with three calls, and the first two results, which landed together:""",
    ),
    Section(
        golden="steer",
        title="3. Steering a run mid-round",
        intro="""\
While the run's tool is still working, a second input arrives with
`when_busy="steer"`. It does not start a second run: it is queued in the
conversation's inbox, and instead of waiting for a run of its own it joins the
current run at its next boundary (when the tool round is over), so the
model's next request sees it. One answer then settles both inputs.""",
        pick=lambda c: _with("input_submitted", 1)(c) + _with("model_responded", -1)(c),
        explain_note="""\
The steering input arriving mid-round, and the answer that settles both:""",
    ),
    Section(
        golden="abort_tool",
        title="4. Aborting a tree of work",
        intro="""\
Work is a tree: the run's generation owns its tool tasks. Here the run is in
a tool round with two tools still running (`deploy`, unsafe and blocking, and
`probe`), a follow-up input is queued behind it and a passive write is queued
too. The host aborts the conversation. In one commit the whole tree settles:
both tools end `aborted` (the model will read "Tool X was aborted"), the
generation that owns them too, and the run's input and the queued follow-up
end `unanswered/aborted`. The queued write survives and is placed; a later
input runs normally.""",
        pick=_with("conversation_abort_requested"),
        explain_note="""\
The abort, in one commit:""",
    ),
    Section(
        golden="manual_compaction",
        title="5. Compacting the context",
        intro="""\
After three long turns the host asks for a manual compaction. A
`pi.compaction` task selects where to cut (it never separates a tool call from
its result), pins a summary request in its checkpoint *before* sending it, and
places a `compaction` entry with the summary. The next turn's context starts
at that summary instead of the old entries; the transcript still holds
everything.""",
        pick=_with("compaction_requested", 0, then=2),
        explain_note="""\
The compaction task from request to placed summary:""",
    ),
    Section(
        golden="fork_mid_run",
        title="6. Forking a conversation mid-run",
        intro="""\
A fork is a new conversation that reads its parent's entries up to a point
without copying them. Here the fork is taken at the assistant entry of a tool
round that is still running. The fork answers its own question on its own
context and documents; the parent's tool then finishes and its run goes on,
unaffected.""",
        pick=_with("fork_requested", 0, then=1),
        explain_note="""\
The fork, and its first input:""",
    ),
)

PREAMBLE = """\
# Tutorial: durable agents, run by run

<!-- Generated by `python docs/generate.py` from real runs; do not edit by
hand. tests/test_tutorial_fresh.py fails when this file is stale. -->

This tutorial walks through six small runs of a pidurable agent. Each one is
executed by `docs/generate.py` - the reference scenarios of the test suite,
with a scripted model, a simulated clock and a fixed scheduler seed, on a real
SQLite store - and everything in the grey blocks is the output of the real
commands on that store:

* `pidurable transcript --db FILE` - the conversation as stored;
* `pidurable replay --explain --db FILE --from A --to B` - why each commit
  happened: the event, the rules that fired (linked to `specs/`), what was
  written and what followed;
* `pidurable inspect --db FILE --all` - the task tree: who owns what, and how
  each task ended.

Read [concepts.md](concepts.md) first for the vocabulary (submission, task,
run, entry), and [recovery.md](recovery.md) for the rules behind the crash in
the first section. Run `pidurable demo` to see crashes with real `SIGKILL`s,
then `pidurable replay --explain` on its store.
"""


def _run(name: str, db: Path) -> None:
    """Run golden scenario ``name`` onto the SQLite file ``db`` (two lives if it crashes)."""
    g = next(x for x in golden.GOLDEN if x.name == name)
    world = golden._world(g.scenario)
    crash_at = None
    if g.crash_before is not None:
        probe, _ = golden._life(MemoryStorage(), g.scenario, golden._world(g.scenario), None, golden.EPOCH_MS)
        crash_at = g.crash_before(probe.effects)
    first, end = golden._life(open_sqlite_storage(db), g.scenario, world, crash_at, golden.EPOCH_MS)
    assert first.crashed == (crash_at is not None), name
    if crash_at is not None:
        second, _ = golden._life(open_sqlite_storage(db), g.scenario, world, None, end + golden.RESTART_GAP_MS)
        assert not second.crashed, name


def _command(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli(list(argv))
    assert status == 0, (argv, out.getvalue())
    return out.getvalue()


def _journal(db: Path) -> tuple[Commits, list[int]]:
    """The run's commits (seq, event types) and the conversations it created."""
    export = db.with_suffix(".jsonl")
    _command("replay", "--db", str(db), "--export", str(export))
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    commits = [(r["seq"], [e["type"] for e in json.loads(r["events"])]) for r in rows]
    convs = [w["conversation"]["id"] for r in rows for w in json.loads(r["writes"]) if w["type"] == "conversation"]
    return commits, convs


def _block(text: str) -> str:
    return "```\n" + text.strip("\n") + "\n```\n"


def _tree(db: Path) -> str:
    """``inspect --all``, without the header line that names the temporary file."""
    lines = _command("inspect", "--db", str(db), "--all").splitlines()
    return "\n".join(line for line in lines if not line.startswith("store "))


def _section(s: Section, workdir: Path) -> str:
    db = workdir / f"{s.golden}.sqlite"
    _run(s.golden, db)
    commits, conversations = _journal(db)
    picked = s.pick(commits)
    parts = [f"## {s.title}\n", s.intro + "\n", f"The run: golden scenario `{s.golden}` ({len(commits)} commits).\n"]
    parts.append("### The transcript\n")
    for cid in conversations:
        parts.append(_block(_command("transcript", "--db", str(db), "--conversation", str(cid))))
    parts.append("### Why each commit happened\n")
    parts.append(s.explain_note + "\n")
    spans: list[list[int]] = []
    for seq in picked:
        if spans and seq == spans[-1][-1] + 1:
            spans[-1].append(seq)
        else:
            spans.append([seq])
    excerpt = [
        _command("replay", "--explain", "--db", str(db), "--from", str(span[0]), "--to", str(span[-1])).strip("\n")
        for span in spans
    ]
    parts.append(_block("\n...\n".join(excerpt)))
    parts.append("### The task tree at the end\n")
    parts.append(_block(_tree(db)))
    return "\n".join(parts)


def render() -> str:
    """The whole of docs/tutorial.md."""
    with tempfile.TemporaryDirectory(prefix="pidurable-tutorial-") as tmp:
        sections = [_section(s, Path(tmp)) for s in SECTIONS]
    return "\n".join([PREAMBLE, *sections])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python docs/generate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare with docs/tutorial.md, write nothing")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT.relative_to(ROOT)} is stale", file=sys.stderr)
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
