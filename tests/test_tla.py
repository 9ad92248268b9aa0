"""The TLA+ model (tla/) checked by TLC, as ``pidurable check`` runs it: the
good model holds every invariant and property, and each known-bad variant
fails with its named invariant and a counterexample of the recorded length
(issue 12 items 1-3). Skipped only when ``java`` is missing; a missing jar
(the ``check`` extra not installed) fails."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pidurable.shell.cli import main
from pidurable.shell.cli.check import (
    EXIT_UNAVAILABLE,
    Model,
    Result,
    Verdict,
    find_tlc,
    load_manifest,
    parse_output,
    run_model,
)

from test_specs import spec_invariants

needs_java = pytest.mark.skipif(
    shutil.which("java") is None, reason="java is not on PATH: TLC cannot run here (install a Java runtime)"
)

TLA = Path(__file__).resolve().parent.parent / "tla"


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    """Every model of tla/manifest.json, run once for the module: two TLC
    processes at a time (each runs one worker, as ``pidurable check`` does),
    so the good model's 30 s overlap the six others' 14."""
    tlc = find_tlc()
    manifest = load_manifest(TLA)
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = pool.map(lambda m: run_model(tlc, manifest, m, timeout=600), manifest.models)
        out = {r.model.name: r for r in runs}
    for r in out.values():
        print(f"{r.model.name}: {r.verdict.value} {r.violated or ''} {r.distinct_states} states, "
              f"trace {r.trace_length}, {r.seconds:.1f} s")
    return out


@needs_java
def test_good_model_holds_every_invariant_and_property(results: dict[str, Result]) -> None:
    """MCDurable.cfg: TLC explores every state and finds no error."""
    good = results["MCDurable"]
    assert good.verdict is Verdict.PASS, good
    assert good.distinct_states is not None and good.distinct_states > 10_000, good


@needs_java
def test_act_before_commit_breaks_intent_before_effect(results: dict[str, Result]) -> None:
    """A tool body started before its execute intent is committed: TLC
    names IntentBeforeEffect, with a 10-state counterexample."""
    bad = results["MCDurableActBeforeCommit"]
    assert (bad.verdict, bad.violated, bad.trace_length) == (Verdict.VIOLATION, "IntentBeforeEffect", 10), bad


@needs_java
def test_replay_unsafe_breaks_unsafe_tool_runs_at_most_once(results: dict[str, Result]) -> None:
    """Recovery re-running a tool stored unsafe (its new declaration says
    safe): TLC names UnsafeToolRunsAtMostOnce, with a 15-state
    counterexample (crash while the body runs, recover, run again)."""
    bad = results["MCDurableReplayUnsafe"]
    assert (bad.verdict, bad.violated, bad.trace_length) == (Verdict.VIOLATION, "UnsafeToolRunsAtMostOnce", 15), bad


@needs_java
def test_every_verdict_is_the_manifests(results: dict[str, Result]) -> None:
    """What `pidurable check` compares: each run gives the verdict recorded
    in tla/manifest.json."""
    assert all(r.as_expected for r in results.values()), [r for r in results.values() if not r.as_expected]


@needs_java
def test_check_prints_states_times_and_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """`pidurable check --only M` runs M and prints its states, time and
    verdict beside the expected one; exit 0 when it is as expected."""
    assert main(["check", "--dir", str(TLA), "--only", "MCDurableActBeforeCommit"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^ok\s+MCDurableActBeforeCommit\s+[\d,]+ states\s+[\d.]+ s\s+IntentBeforeEffect violated in 10 states", out, re.M
    ), out
    assert "all 1 verdicts as expected" in out


def test_check_without_java_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No java on PATH: one line naming it, exit status 3 (not a verdict)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["check", "--dir", str(TLA)]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "java not found" in err, err


@needs_java
def test_check_without_the_jar_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TLA2TOOLS_JAR naming nothing: one line, exit status 3."""
    monkeypatch.setenv("TLA2TOOLS_JAR", str(tmp_path / "missing.jar"))
    assert main(["check", "--dir", str(TLA)]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.jar" in err, err


def test_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--dir", str(TLA), "--only", "Nope"]) == 2
    assert "unknown model Nope" in capsys.readouterr().err


def test_tlc_output_is_read_into_verdicts() -> None:
    """The three endings of a TLC run: no error, an invariant violated
    (with its trace), and an error that is neither."""
    m = Model(config="X.cfg", expect=Verdict.PASS)
    ok = parse_output(m, "Model checking completed. No error has been found.\n"
                         "43329 states generated, 34885 distinct states found, 0 states left on queue.\n"
                         "The depth of the complete state graph search is 41.\n", 1.0)
    assert (ok.verdict, ok.distinct_states, ok.generated_states, ok.depth) == (Verdict.PASS, 34885, 43329, 41)
    bad = parse_output(m, "Error: Invariant Foo is violated.\nState 1: <Initial predicate>\nState 2: <A>\n"
                          "State 3: <B>\n492 states generated, 352 distinct states found, 123 states left on queue.\n", 1.0)
    assert (bad.verdict, bad.violated, bad.trace_length, bad.distinct_states) == (Verdict.VIOLATION, "Foo", 3, 352)
    live = parse_output(m, "Error: Temporal properties were violated.\nState 1: x\nState 2: Stuttering\n", 1.0)
    assert (live.verdict, live.violated, live.trace_length) == (Verdict.VIOLATION, "Temporal properties", 2)
    err = parse_output(m, "Error: TLC threw an unexpected exception.\n", 1.0)
    assert err.verdict is Verdict.ERROR and "unexpected exception" in err.detail


def _cfg_names(path: Path, section: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"^{section}\n((?:[ \t]+\w+\n?)+)", text, re.M)
    return match.group(1).split() if match else []


def test_model_invariants_carry_the_names_of_specs_and_checkers() -> None:
    """Each rule under one name in four places: every invariant TLC checks
    (TypeOK aside) is named in a spec's Invariants section - which
    tests/test_specs.py ties to a checker in tests/invariants.py - and so
    is every action property (``XStep`` is the step half of ``X``); the
    liveness properties are the ones tla/README.md describes."""
    named = set(spec_invariants())
    invariants = _cfg_names(TLA / "MCDurable.cfg", "INVARIANTS")
    properties = _cfg_names(TLA / "MCDurable.cfg", "PROPERTIES")
    assert len(invariants) >= 15 and "TypeOK" in invariants
    assert [n for n in invariants if n != "TypeOK" and n not in named] == []
    liveness = {"EveryInputSettles", "AbortDrains"}
    assert [p for p in properties if p not in liveness and p.removesuffix("Step") not in named] == []
    readme = (TLA / "README.md").read_text(encoding="utf-8")
    assert all(f"`{n}`" in readme for n in invariants + properties), "tla/README.md maps every checked name"
    for m in load_manifest(TLA).models:
        assert m.invariant is None or m.invariant in named, m
        assert (TLA / m.config).is_file()
    durable = (TLA / "Durable.tla").read_text(encoding="utf-8")
    assert all(re.search(rf"^{n} ==", durable, re.M) for n in invariants + properties)


@needs_java
def test_leases_model_holds_and_each_bad_variant_fails_its_invariant(results: dict[str, Result]) -> None:
    """tla/Leases.tla (scale-out, specs/scale-out.md): the protocol holds;
    an unfenced commit, a per-worker id block and a takeover re-running an
    unsafe tool each fail their named invariant with the shortest trace."""
    good = results["MCLeases"]
    assert good.verdict is Verdict.PASS and (good.distinct_states or 0) > 10_000, good
    bad = {n: (results[n].verdict, results[n].violated, results[n].trace_length)
           for n in ("MCLeasesUnfenced", "MCLeasesWorkerBlock", "MCLeasesRerun")}
    assert bad == {
        "MCLeasesUnfenced": (Verdict.VIOLATION, "CommitsAreFenced", 7),
        "MCLeasesWorkerBlock": (Verdict.VIOLATION, "TreeIdsIncrease", 6),
        "MCLeasesRerun": (Verdict.VIOLATION, "UnsafeBodyRunsAtMostOnceAcrossWorkers", 8),
    }


def test_leases_invariants_carry_the_names_of_the_spec_and_checkers() -> None:
    """The scale-out model's invariants are specs/scale-out.md's, each with a
    checker of the same name in tests/invariants.py."""
    named = spec_invariants()
    invariants = [n for n in _cfg_names(TLA / "MCLeases.cfg", "INVARIANTS") if n != "TypeOK"]
    assert len(invariants) == 4 and all("scale-out.md" in named.get(n, []) for n in invariants), invariants
    leases = (TLA / "Leases.tla").read_text(encoding="utf-8")
    assert all(re.search(rf"^{n} ==", leases, re.M) for n in invariants)
