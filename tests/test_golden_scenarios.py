"""Golden scenarios (issue 12 item 6): ``specs/scenarios/*.jsonl`` replay byte
for byte, and are exactly what the reference scenarios journal today.

A failure here means the core (or the shell's way of driving it) behaves
differently from the checked-in journals. If the change is deliberate,
regenerate them and review the diff (specs/scenarios/README.md):

    .venv/bin/python -m tests.golden_scenarios --regenerate
"""

from __future__ import annotations

import difflib
import json

import pytest

from pidurable.shell.cli import main
from pidurable.shell.journal import Kind, check
from pidurable.shell.journal_file import read_journal
from pidurable.shell.storage import codec
from pidurable.shell.storage.base import JournalRow

from golden_scenarios import DIR, GOLDEN, Golden, path, render

REGENERATE = "regenerate with `.venv/bin/python -m tests.golden_scenarios --regenerate` if the change is deliberate"


def test_every_golden_file_is_a_known_scenario() -> None:
    """No stray file in specs/scenarios/, and no golden scenario without its file."""
    on_disk = {p.stem for p in DIR.glob("*.jsonl")}
    known = {g.name for g in GOLDEN}
    assert on_disk - known == set(), f"files in {DIR} no golden scenario generates"
    assert known - on_disk == set(), f"golden scenarios without a file: {REGENERATE}"
    assert {"config_fix", "vienna", "steer", "abort_tool", "subagent", "manual_compaction", "fork_mid_run"} <= known


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g.name)
def test_replay_check_reproduces_every_commit(golden: Golden, capsys: pytest.CaptureFixture[str]) -> None:
    """``pidurable replay --check specs/scenarios/X.jsonl`` exits 0: the
    current core produces every recorded commit, byte for byte."""
    status = main(["replay", "--check", str(path(golden))])
    out = capsys.readouterr().out
    assert status == 0, f"{out}\n{REGENERATE}"
    rows = read_journal(path(golden))
    result = check(rows, golden.name)
    assert result.ok and result.commits == result.total == len(rows)
    # readable, not digests: a reviewer sees the records in the diff
    assert not any(codec.is_digest(r.writes) for r in rows)
    assert result.lives == (2 if golden.crash_before is not None else 1)


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g.name)
def test_scenario_still_journals_the_golden_file(golden: Golden) -> None:
    """Running the scenario again (deterministic clock, seeded scheduler)
    journals exactly the checked-in file."""
    expected = path(golden).read_text(encoding="utf-8")
    produced = render(golden)
    if produced != expected:
        diff = difflib.unified_diff(
            _pretty(expected), _pretty(produced), f"{path(golden).name} (checked in)", "produced now", lineterm="", n=2
        )
        shown = "\n".join(list(diff)[:80])
        pytest.fail(f"{golden.name} journals differently now ({REGENERATE}):\n{shown}")


def _pretty(text: str) -> list[str]:
    """One line per event and per write, so a diff points at the record."""
    out: list[str] = []
    for line in text.splitlines():
        row = json.loads(line)
        out.append(f"commit {row['seq']} (format {row['format']})")
        out.extend("  event " + json.dumps(e, sort_keys=True) for e in json.loads(row["events"]))
        out.extend("  write " + json.dumps(w, sort_keys=True) for w in json.loads(row["writes"]))
    return out


def test_a_changed_commit_is_caught() -> None:
    """The check bites: a golden file whose writes the core would not produce
    diverges at that commit, with a field-by-field diff."""
    rows = read_journal(path(GOLDEN[0]))
    n = len(rows) // 2
    writes = json.loads(rows[n].writes)
    writes.append({"type": "pi.live", "conversation_id": 99, "live": {}})
    tampered = [*rows[:n], JournalRow(seq=rows[n].seq, format=rows[n].format, events=rows[n].events, writes=codec.dumps(writes)), *rows[n + 1 :]]
    result = check(tampered, "tampered")
    assert not result.ok
    (first,) = result.divergences
    assert first.seq == rows[n].seq and first.kind == Kind.WRITES and first.diff


def test_readme_names_every_golden_file() -> None:
    """specs/scenarios/README.md documents every file."""
    readme = (DIR / "README.md").read_text(encoding="utf-8")
    missing = [g.name for g in GOLDEN if f"`{g.name}.jsonl`" not in readme]
    assert not missing, f"specs/scenarios/README.md does not describe {', '.join(missing)}"


def test_readme_counts_each_golden_files_commits() -> None:
    """The table's commits column is each file's number of journal rows
    (it said 8 for abort_tool's 9, and 7 for vienna's 6 after group commit)."""
    said = {}
    for line in (DIR / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith(".jsonl`"):
            said[cells[0].strip("`")[: -len(".jsonl")]] = int(cells[2].split()[0])
    assert said, "specs/scenarios/README.md has no table of golden files"
    actual = {g.name: len(read_journal(path(g))) for g in GOLDEN}
    wrong = {name: (said.get(name), n) for name, n in actual.items() if said.get(name) != n}
    assert not wrong, f"specs/scenarios/README.md commits (said, actual): {wrong}"


def test_a_journal_written_before_groups_still_replays() -> None:
    """vienna as journaled before the loop grouped ready results
    (``step_many``: its three tool results were three commits, now two):
    the current core, which replays every row in one draft, reproduces each
    of those commits byte for byte."""
    from pathlib import Path

    rows = read_journal(Path(__file__).parent / "shell" / "golden" / "vienna_before_groups.jsonl")
    finished = [sum(e["type"] == "tool_finished" for e in json.loads(r.events)) for r in rows]
    assert finished.count(1) == 3 and sum(finished) == 3  # one commit per tool result then
    result = check(rows, "vienna before groups")
    assert result.ok and result.commits == result.total == len(rows) == 7
