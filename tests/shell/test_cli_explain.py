"""``pidurable replay --explain`` (issue 16 item 1): the demo's store told as a
story - the rules that fired, linked to specs/, and the crash-and-recovery
steps - and ``Step.rules``, which the story reads, leaves every commit alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pidurable.shell.cli import main
from pidurable.shell.explain import SPECS, anchor, spec_link

SPECS_DIR = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("explain") / "demo.sqlite"
    assert main(["demo", "--db", str(db)]) == 0
    return db


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(["replay", "--explain", *args]) == 0
    return capsys.readouterr().out


def test_explain_tells_the_demos_crash_and_recovery_story(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the demo's store, --explain shows the unsafe edit stored running at the
    crash, reopening putting it back to pending and settling it as interrupted
    (never run again), the safe tool re-run, the reconciled booking, and the
    rules by name with their spec links."""
    out = explain(capsys, "--db", str(demo_db))
    assert "── process life 2 ──" in out
    assert re.search(r"task \d+ pi\.tool edit: running at execute replay=unsafe", out)
    edit = re.search(r"task (\d+) pi\.tool edit: running at execute replay=unsafe", out)
    assert edit is not None
    tid = edit.group(1)
    assert f"task {tid}: running -> pending; interrupted, NOT re-run (replay=unsafe)" in out
    assert f"rule task:running,recover (task {tid})" in out
    assert f"rule pi.tool:execute,reserve_interrupted (task {tid})" in out
    assert "[specs/tools.md#transition-table-phases-in-coretoolspy]" in out
    assert "[specs/scheduling.md#open--recovery-opened]" in out
    assert f"task {tid} pi.tool edit: running at execute -> terminal (failed)" in out
    # the edit's body was started once: one task, never re-run
    assert len(re.findall(r"pi\.tool edit: new -> running", out)) == 1
    assert "rule pi.tool:execute,reserve_rerun" not in out.split("pi.tool trains")[0]
    assert re.search(r"task \d+: running -> pending; re-run \(replay=safe\)", out)
    assert re.search(r"task \d+: running -> pending; reconcile asked", out)
    assert "rule pi.tool:reconcile,reconciled_done" in out
    assert "event: the host submitted input" in out and "rule admission.on_input_submitted" in out
    assert re.search(r"submission \d+ \(input, request demo-config-fix\): placed -> done", out)
    assert "then: run_tool" in out


def test_explain_from_to_and_conversation_select_commits(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--from/--to keep only those commits; --conversation of a conversation the
    store does not have writes nothing but the process-life boundaries."""
    out = explain(capsys, "--db", str(demo_db), "--from", "2", "--to", "3")
    assert re.findall(r"^commit (\d+)$", out, re.M) == ["2", "3"]
    other = explain(capsys, "--db", str(demo_db), "--conversation", "999")
    assert "commit " not in other.replace("opens at commit", "")
    assert "nothing written for conversation 999" in other
    assert main(["replay", "--db", str(demo_db), "--from", "2"]) == 2  # only with --explain


def test_every_spec_link_names_a_heading_that_exists() -> None:
    """Each rule prefix links to a section that exists in specs/ (so the
    story's links never dangle)."""
    for file, heading in SPECS.values():
        headings = [line.lstrip("#").strip() for line in (SPECS_DIR / file).read_text().splitlines() if line.startswith("## ")]
        assert heading in headings, f"specs/{file} has no section {heading!r}"
    assert anchor("## Open / recovery (`Opened`)") == "open--recovery-opened"
    assert spec_link("pi.tool:execute,reserve_interrupted") == "specs/tools.md#transition-table-phases-in-coretoolspy"


def test_readme_tour_runs_on_the_demos_store(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's guided tour (issue 16 item 4): five commands, the demo first,
    each later one exits 0 on the demo's store; the last tells the crash story."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## A guided tour\n.*?```sh\n(.*?)```", readme, re.S)
    assert block is not None
    lines = [line.split("#", 1)[0].split() for line in block.group(1).strip().splitlines()]
    assert len(lines) == 5 and lines[0][:2] == [".venv/bin/pidurable", "demo"]
    for words in lines[1:]:
        args = [str(demo_db) if w == "tour.sqlite" else w for w in words[1:]]
        capsys.readouterr()
        assert main(args) == 0, args
    assert "NOT re-run (replay=unsafe)" in capsys.readouterr().out


def test_explain_html_is_one_self_contained_page_with_the_task_tree(
    demo_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--explain --html FILE writes the story as one page (no scripts, no external
    links to load) with a section per commit, the process lives marked, and the
    live task tree after each commit (the interrupted edit's task is there while
    it runs)."""
    out = tmp_path / "story.html"
    assert main(["replay", "--explain", "--html", str(out), "--db", str(demo_db)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "</html>" in page
    assert "<script" not in page and 'src="http' not in page and "<link " not in page
    assert page.count("<section") >= 10
    assert "process life 2 opens" in page
    assert re.search(r"#\d+ pi\.tool running at execute", page)
    assert "interrupted, NOT re-run" in page
    capsys.readouterr()
    assert main(["replay", "--html", str(out), "--db", str(demo_db)]) == 2  # --html goes with --explain
    assert main(["replay", "--explain", "--html", str(tmp_path / "missing" / "x.html"), "--db", str(demo_db)]) == 2
