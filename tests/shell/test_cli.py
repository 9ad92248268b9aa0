"""The ``pidurable`` CLI: ``demo`` (real SIGKILLs, real child processes) and
``inspect`` (read-only, even on a store a live process holds).

Everything runs ``python -m pidurable.shell.cli`` as a subprocess, as a user
would, and checks the exit status and the words printed - never a traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidurable.core.model import SubmissionStatus, TaskStatus
from pidurable.shell.cli import main
from pidurable.shell.cli.demo.report import read_snapshot

CLI = [sys.executable, "-m", "pidurable.shell.cli"]


def run_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


#: The store of each demo run, relative to its directory (``--storage``).
DEMO_STORES = {"sqlite": "tmp/x.sqlite", "jsonl": "tmp/x-jsonl"}


@pytest.fixture(scope="module", params=sorted(DEMO_STORES))
def demo_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str], float]:
    """One demo run per kind of store, shared by the tests below (each takes
    a couple of seconds). Its store is ``cwd / store_of(cwd)``."""
    cwd = tmp_path_factory.mktemp(f"demo-{request.param}")
    (cwd / "tmp").mkdir()
    (cwd / "storage").write_text(request.param)
    started = time.monotonic()
    proc = run_cli("demo", "--storage", request.param, "--db", DEMO_STORES[request.param], cwd=cwd)
    return cwd, proc, time.monotonic() - started


def store_of(cwd: Path) -> str:
    """The store a demo run in ``cwd`` made (relative to ``cwd``)."""
    return DEMO_STORES[(cwd / "storage").read_text()]


@pytest.mark.slow
def test_demo_is_killed_three_times_and_resumes(demo_run: tuple[Path, subprocess.CompletedProcess[str], float]) -> None:
    cwd, proc, elapsed = demo_run
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Traceback" not in out + proc.stderr
    print(f"the demo took {elapsed:.1f} s")  # a hang fails by run_cli's timeout; speed is bench/'s business
    # three real processes died by SIGKILL, and three fresh ones resumed
    assert len(re.findall(r"killed by signal 9 \(SIGKILL\)", out)) == 3
    assert len(re.findall(r"reopens the store and resumes", out)) == 3
    # part 1: at the crash the edit had no stored result; recovery reported it interrupted
    assert re.search(r"edit\(path=config/dev\.json, old=8080, new=8081\) -> NO result stored \(task #\d+ running, phase execute\)", out)
    assert re.search(r"edit: reported interrupted, NOT run again \(stored replay=unsafe", out)
    assert 'result the model sees: "<harness>\\n[error] Tool edit was interrupted and may have partially run\\n</harness>"' in out
    assert "read: kept" in out
    assert re.search(r"new call by the model: read\(path=config/dev\.json\) -> ran once in life 2: \{\"port\": 8081\}", out)
    assert "config/dev.json now sets port 8081" in out
    # part 2: weather and museums kept, only trains re-run
    assert re.search(r"trains\(origin=Munich, destination=Vienna\) -> NO result stored", out)
    assert "weather: kept" in out
    assert "museums: kept" in out
    assert re.search(r"trains: re-run in the new process \(stored replay=safe, installed tool replay=safe\)", out)
    assert "Vienna weekend itinerary:" in out
    assert "Railjet RJ 61" in out
    # part 3 (issue 15): the booking was made, the process died before its
    # result was committed; reconcile found it: the model gets the real
    # booking, not "may have partially run", and the seat is booked once
    assert re.search(r"book_train\(train=RJ 61, date=Saturday\) -> NO result stored \(task #\d+ running, phase execute\)", out)
    assert "book_train: settled by its reconcile, NOT run again" in out
    assert re.search(r'result the model sees: "Booked RJ 61 on Saturday: coach 27, seat 45, booking reference PNR-\d+"', out)
    assert "Done - your seat is booked." in out
    assert "may have partially run" not in out.split("== Part 3")[1]
    # every submission ends done; body-run counts across processes
    assert len(re.findall(r"submission #\d+: done", out)) == 3
    counts = dict(re.findall(r"^  (\w+)\s+(\d+)  \(life", out, flags=re.M))
    assert counts == {"read": "2", "edit": "1", "weather": "1", "museums": "1", "trains": "2", "book_train": "1"}
    assert "All 3 submissions are done" in out
    kind = (cwd / "storage").read_text()
    assert f"store:    {(cwd / store_of(cwd)).resolve()} ({'embedded SQLite' if kind == 'sqlite' else 'a JSONL store directory'})" in out
    assert (cwd / store_of(cwd)).is_dir() is (kind == "jsonl")


@pytest.mark.slow
def test_demo_store_as_read_back(demo_run: tuple[Path, subprocess.CompletedProcess[str], float]) -> None:
    cwd, proc, _ = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = cwd / store_of(cwd)
    config = read_snapshot(db, "config")
    assert config.submission is not None and config.submission.status is SubmissionStatus.DONE
    edit = next(t for t in config.tasks if t.input.get("name") == "edit")
    assert edit.outcome is not None and edit.outcome.status.value == "failed"
    vienna = read_snapshot(db, "vienna")
    assert vienna.submission is not None and vienna.submission.status is SubmissionStatus.DONE
    assert all(t.status is TaskStatus.TERMINAL for t in vienna.tasks)


@pytest.mark.slow
def test_inspect_after_demo(demo_run: tuple[Path, subprocess.CompletedProcess[str], float]) -> None:
    cwd, proc, _ = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = run_cli("inspect", "--db", store_of(cwd), cwd=cwd)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "conversation 1 (root): idle" in out
    assert re.search(r"#\d+ input done request=demo-config-fix", out)
    assert re.search(r"#\d+ input done request=demo-vienna-trip", out)
    assert "live tasks: none" in out
    assert "in use by process" not in out
    # --all shows the finished tree, including the interrupted edit
    res = run_cli("inspect", "--db", store_of(cwd), "--all", cwd=cwd)
    assert res.returncode == 0, res.stderr
    assert re.search(r"pi\.tool edit  terminal \(failed: Tool edit was interrupted", res.stdout)
    assert re.search(r"└─ #\d+  pi\.tool trains  terminal \(completed\)", res.stdout)
    # the booking settled by its reconcile (issue 15)
    assert re.search(r"pi\.tool book_train  terminal \(completed\)[^\n]*\n\s+settled by reconcile: done", res.stdout)
    res = run_cli("transcript", "--db", store_of(cwd), cwd=cwd)
    assert res.returncode == 0, res.stderr
    assert re.search(r"#\d+ tool book_train \[ok, reconciled: done\] for ", res.stdout)


@pytest.mark.slow
def test_inspect_a_store_held_by_a_live_process(tmp_path: Path) -> None:
    """A live child holds the lock with a run in flight: inspect reads a
    snapshot read-only (mode=ro, lock untouched) and shows the live tree."""
    work = tmp_path / "work"
    work.mkdir()
    db = tmp_path / "live.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-m", "pidurable.shell.cli.demo", "child", "vienna", "--db", str(db), "--work", str(work), "--life", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert child.poll() is None, "the child exited early"
            assert time.monotonic() < deadline, "trains never started"
            try:
                snap = read_snapshot(db, "vienna")
            except Exception:  # noqa: BLE001 - the store may not exist yet
                snap = None
            if snap is not None and any(
                t.input.get("name") == "trains" and t.status is TaskStatus.RUNNING for t in snap.tasks
            ):
                break
            time.sleep(0.02)
        res = run_cli("inspect", "--db", str(db), cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        out = res.stdout
        assert f"in use by process {child.pid}" in out
        assert "conversation 1 (root): busy" in out
        assert re.search(r"#\d+ input placed request=demo-vienna-trip", out)
        assert re.search(r"#\d+  pi\.generation  waiting  phase=tools  on=\[#\d+, #\d+, #\d+\]", out)
        assert re.search(r"└─ #\d+  pi\.tool trains  running  phase=execute  replay=safe", out)
        assert child.poll() is None, "inspect must not disturb the owner"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def test_inspect_missing_file(tmp_path: Path) -> None:
    res = run_cli("inspect", "--db", "nope.sqlite", cwd=tmp_path)
    assert res.returncode == 2
    assert "nope.sqlite does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "nope.sqlite").exists(), "inspect must not create a store"
    assert not (tmp_path / "nope.sqlite.lock").exists()


def test_inspect_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not a pidurable store is a bad --db argument: one line, exit status 2."""
    (tmp_path / "junk.sqlite").write_text("not a database at all")
    assert main(["inspect", "--db", str(tmp_path / "junk.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pidurable: error: ") and err.count("\n") == 1
    assert "is not a SQLite database" in err
    empty = tmp_path / "empty.sqlite"
    import sqlite3

    sqlite3.connect(empty).execute("CREATE TABLE t (x)").connection.close()
    assert main(["inspect", "--db", str(empty)]) == 2
    assert "is not a pidurable store (tables: t)" in capsys.readouterr().err


def test_inspect_missing_file_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--db", str(tmp_path / "gone.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_demo_refuses_an_existing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "used.sqlite").write_text("")
    assert main(["demo", "--db", str(tmp_path / "used.sqlite")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["demo", "--db", str(tmp_path / "no" / "dir" / "x.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "used-jsonl").mkdir()
    assert main(["demo", "--storage", "jsonl", "--db", str(tmp_path / "used-jsonl")]) == 2
    assert "already exists; the demo needs a new store directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: not a choice
        main(["demo", "--storage", "postgres"])
    assert exited.value.code == 2
    assert "invalid choice: 'postgres'" in capsys.readouterr().err


def test_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    res = run_cli(cwd=tmp_path)
    assert res.returncode == 2 and "usage: pidurable" in res.stderr
    res = run_cli("inspect", cwd=tmp_path)
    assert res.returncode == 2 and "--db" in res.stderr
    assert "Traceback" not in res.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    res = run_cli("--debug", "inspect", "--db", "nope.sqlite", cwd=tmp_path)
    assert res.returncode != 0
    assert "Traceback" in res.stderr
    res = run_cli("inspect", "--db", "nope.sqlite", "--debug", cwd=tmp_path)
    assert "Traceback" in res.stderr


# --- issue 7: version, help, provider errors, no store created ------------------------

COMMANDS = ["demo", "inspect", "run", "resume", "chat", "replay", "check"]


def test_issue7_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`pidurable --version` prints the package version and exits 0."""
    import pidurable

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pidurable {pidurable.__version__}"


@pytest.mark.parametrize("command", COMMANDS)
def test_issue7_every_command_has_a_description(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`pidurable X --help` prints a description paragraph between the usage and the options."""
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    usage, _, rest = out.partition("\n\n")
    assert usage.startswith(f"usage: pidurable {command}")
    description = rest.split("\n\n")[0]
    assert not re.match(r"(options|positional arguments):", description), out
    assert len(description.split()) >= 8, out


def test_issue7_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`pidurable --help` lists each command with a one-line help."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s+\S.{{10,}}", out, flags=re.M), (command, out)


def test_issue7_unknown_provider_names_the_configured_ones() -> None:
    """The provider error names what is configured ("none" when nothing is),
    tells an unknown provider from one without a key, and names the key."""
    import argparse

    from pidurable.core.model import ModelRef
    from pidurable.shell.cli.agent import _models
    from pidurable.shell.cli.common import EXIT_USAGE, CliError

    args = argparse.Namespace(api_key=None, base_url=None)
    with pytest.raises(CliError, match=r"no anthropic provider is configured for anthropic:claude \(set ANTHROPIC_API_KEY.*configured: none$") as refused:
        _models(args, ModelRef("anthropic", "claude"), env={})
    assert refused.value.status == EXIT_USAGE
    with pytest.raises(CliError, match=r"set ANTHROPIC_API_KEY.*configured: openai$"):
        _models(args, ModelRef("anthropic", "claude"), env={"OPENAI_API_KEY": "k"})
    with pytest.raises(CliError, match=r"unknown provider 'olama' in olama:x \(known: anthropic, openai\); configured: anthropic, openai$"):
        _models(args, ModelRef("olama", "x"), env={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    # --api-key configures the asked-for provider
    flagged = argparse.Namespace(api_key="k", base_url="http://127.0.0.1:9")
    assert _models(flagged, ModelRef("anthropic", "claude"), env={}).providers.keys() == {"anthropic"}


@pytest.mark.parametrize("command", ["resume", "replay", "inspect"])
def test_issue7_reading_commands_never_create_a_store(command: str, tmp_path: Path) -> None:
    """resume, replay and inspect on a missing store: exit 2, one line, and no file (or lock) is created."""
    res = run_cli(command, "--db", "nope.sqlite", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "does not exist" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_issue7_resume_leaves_an_empty_file_alone(tmp_path: Path) -> None:
    """resume on an empty file (which opening for writing would turn into a
    store) refuses it in one line, exit 2, and leaves the file empty."""
    (tmp_path / "empty.sqlite").write_bytes(b"")
    res = run_cli("resume", "--db", "empty.sqlite", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("pidurable: error: ") and res.stderr.count("\n") == 1
    assert (tmp_path / "empty.sqlite").read_bytes() == b""
