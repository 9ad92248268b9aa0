"""``pidurable demo``: durable runs that survive a real SIGKILL.

Two parts run one after the other in the root conversation of one embedded
SQLite store, each in real child processes (``python -m
pidurable.shell.demo child ...``) with a scripted model (no network):

1. *Config fix* (``read -> edit -> read -> answer``). The first child's
   ``edit`` really edits ``config/dev.json`` (8080 -> 8081) and then kills its
   own process with SIGKILL, before the result is committed. ``edit`` is
   replay-unsafe, so the next process settles the call as "Tool edit was
   interrupted and may have partially run" instead of editing again; the model
   re-reads the file (8081) and answers.
2. *Vienna trip*: three replay-safe queries ``weather``, ``museums``, ``trains``
   run in parallel. ``trains`` is slow; once the store shows weather and
   museums committed and trains running, the parent SIGKILLs the child. The
   next process keeps the two stored results, re-runs only ``trains``
   (stored replay ``safe`` and installed tool ``safe``), and the model writes the
   itinerary.

Every tool body appends ``life name call_id`` to ``tool-runs.log`` in the work
directory when it starts, so the parent can count body runs across processes.
What the report says about the crash and the recovery is read from the store
(read-only, never through the lock) and from that log; nothing is hard-coded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from pidurable.core.model import (
    AgentConfig,
    Entry,
    EntryKind,
    ModelRef,
    OutcomeStatus,
    Submission,
    SubmissionStatus,
    Task,
    TaskStatus,
    ToolCall,
)

from .cli import CliError, open_readonly, task_tree
from .env import LocalEnv
from .harness import Harness, Input
from .providers.base import ModelRequest
from .providers.scripted import ScriptedModels, ScriptedReply, reply, tool_call
from .registry import Extension, Registry, ToolCallContext, ToolResult, define_extension, define_tool
from .storage.base import StorageError
from .storage.sqlite import open_sqlite_storage
from .tools.coding import coding_tools

PROMPTS = {
    "config": "The dev server must listen on port 8081. Read config/dev.json and fix it.",
    "vienna": "Plan my weekend in Vienna: check the weather, museums and trains first, then write an itinerary.",
}
REQUESTS = {"config": "demo-config-fix", "vienna": "demo-vienna-trip"}
TITLES = {
    "config": "Part 1: config fix (read -> edit -> read -> answer); edit is replay-unsafe",
    "vienna": "Part 2: Vienna trip (weather, museums, trains in parallel); all three are replay-safe",
}
RUNS_FILE = "tool-runs.log"
CONFIG_PATH = "config/dev.json"
ROOT = 1

WEATHER = "Saturday: sunny, 24 C. Sunday: showers after 14:00, 17 C."
MUSEUMS = (
    "Kunsthistorisches Museum (Tue-Sun 10:00-18:00); Belvedere (daily 09:00-18:00, Klimt's The Kiss); "
    "Albertina (daily 10:00-18:00)"
)
TRAINS = "Railjet RJ 61 Munich Hbf 07:27 -> Wien Hbf 11:30, EUR 59.90; back RJ 68 Sunday 18:30 -> 22:33"


# --- the child process: one process life of one part ----------------------------------


def _record_run(work: Path, life: int, name: str, call_id: str) -> None:
    """Append one body run to the log before the body does anything."""
    fd = os.open(work / RUNS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{life}\t{name}\t{call_id}\n".encode())
    finally:
        os.close(fd)


def _kill_self() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - SIGKILL is not delivered late


def demo_tools(work: Path, life: int) -> Extension:
    """The demo's tools for process life ``life`` (1 = the life that dies)."""
    coding = {t.name: t for t in coding_tools().tools}
    read, edit = coding["read"], coding["edit"]

    async def read_execute(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult | str:
        _record_run(work, life, "read", ctx.call_id)
        return await read.execute(ctx, args)

    async def edit_execute(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult | str:
        _record_run(work, life, "edit", ctx.call_id)
        result = await edit.execute(ctx, args)  # the real edit, on disk
        if life == 1:
            _kill_self()  # dies before the result can be committed
        return result

    def query(name: str, answer: str, delay: float) -> Any:
        async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
            _record_run(work, life, name, ctx.call_id)
            await trio.sleep(delay)
            return answer

        return execute

    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    route = {
        "type": "object",
        "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
        "required": ["origin", "destination"],
    }
    # trains is slow in the first life: the parent kills that process while it runs.
    trains_delay = 60.0 if life == 1 else 0.2
    return define_extension(
        "demo",
        tools=[
            attrs.evolve(read, execute=read_execute),
            attrs.evolve(edit, execute=edit_execute),
            define_tool("weather", "Weather forecast for a city.", city, query("weather", WEATHER, 0.05), replay="safe"),
            define_tool("museums", "Museums and opening hours.", city, query("museums", MUSEUMS, 0.1), replay="safe"),
            define_tool("trains", "Train connections.", route, query("trains", TRAINS, trains_delay), replay="safe"),
        ],
    )


def demo_model(request: ModelRequest) -> ScriptedReply:
    """The scripted model: the step is the number of assistant messages since
    the latest user message, so a new process continues where the store stands."""
    msgs = request.messages
    idx = max((i for i, m in enumerate(msgs) if m.role == "user"), default=None)
    if idx is None:
        return reply(error="the demo model saw no user message")
    prompt, after = msgs[idx].text, msgs[idx + 1 :]
    step = sum(1 for m in after if m.role == "assistant")
    results = [m for m in after if m.role == "tool"]
    if prompt == PROMPTS["config"]:
        script = [
            lambda: reply(tool_calls=[tool_call("read", path=CONFIG_PATH)]),
            lambda: reply(tool_calls=[tool_call("edit", path=CONFIG_PATH, old="8080", new="8081")]),
            lambda: reply(tool_calls=[tool_call("read", path=CONFIG_PATH)]),  # check what is on disk
            lambda: reply(text=_config_answer(results)),
        ]
    elif prompt == PROMPTS["vienna"]:
        script = [
            lambda: reply(
                tool_calls=[
                    tool_call("weather", city="Vienna"),
                    tool_call("museums", city="Vienna"),
                    tool_call("trains", origin="Munich", destination="Vienna"),
                ]
            ),
            lambda: reply(text=_itinerary(results)),
        ]
    else:
        return reply(error=f"the demo model has no script for {prompt!r}")
    if step >= len(script):
        return reply(error=f"the demo script has no step {step + 1}")
    return script[step]()


def _config_answer(results: Sequence[Any]) -> str:
    reads = [m for m in results if m.tool_name == "read"]
    edit = next((m for m in results if m.tool_name == "edit"), None)
    try:
        port = json.loads(reads[-1].text).get("port")
    except (IndexError, ValueError, AttributeError):
        return "I could not read config/dev.json back, so I cannot confirm the port."
    if edit is not None and edit.is_error:
        how = f'The edit came back as an error ("{edit.text}"), so I re-read the file instead of editing again:'
    else:
        how = "The edit succeeded and re-reading the file confirms it:"
    if port == 8081:
        return f"{how} config/dev.json now sets port 8081, so the fix is in place and nothing else is needed."
    return f"{how} config/dev.json still sets port {port}; the fix is NOT in place."


def _itinerary(results: Sequence[Any]) -> str:
    by = {m.tool_name: m for m in results}
    missing = [n for n in ("weather", "museums", "trains") if n not in by or by[n].is_error]
    if missing:
        return "I could not get " + ", ".join(missing) + "; I cannot plan the trip yet."
    out, back = (s.strip() for s in by["trains"].text.split(";", 1))
    museums = [s.strip() for s in by["museums"].text.split(";")]
    sat, sun = (s.strip() for s in by["weather"].text.split(".", 1))
    return "\n".join(
        [
            "Vienna weekend itinerary:",
            f"Saturday ({sat.split(': ', 1)[1]}): {out}; afternoon at the {museums[1]}, evening walk in the Stadtpark.",
            f"Sunday ({sun.rstrip('.').split(': ', 1)[1]}): morning at the {museums[0]}, "
            f"after lunch the {museums[2]} (indoors for the showers); {back}.",
        ]
    )


async def _child(part: str, db: Path, work: Path, life: int) -> Submission:
    registry = Registry()
    registry.install(demo_tools(work, life))
    models = ScriptedModels(demo_model)
    storage = open_sqlite_storage(db)
    async with Harness.open(storage, models=models, registry=registry, env=LocalEnv(work)) as harness:
        conv = await harness.root(agent=AgentConfig(model=ModelRef("scripted", "demo"), cwd=str(work)))
        # The same request id finds the submission a killed life already stored.
        handle = await conv.submit(Input(PROMPTS[part], request_id=REQUESTS[part]))
        with trio.fail_after(30):
            return await handle.wait()


def child_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pidurable.shell.demo child")
    p.add_argument("part", choices=sorted(PROMPTS))
    p.add_argument("--db", required=True, type=Path)
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--life", required=True, type=int)
    a = p.parse_args(argv)
    rec = trio.run(_child, a.part, a.db, a.work, a.life)
    print(json.dumps({"submission": rec.id, "status": rec.status.value, "reason": rec.reason}))
    return 0 if rec.status is SubmissionStatus.DONE else 1


# --- the parent: reading the store -------------------------------------------------------


class DemoFailed(Exception):
    pass


@attrs.frozen(kw_only=True)
class Snapshot:
    """What the store holds for one part (read-only, one read transaction)."""

    submission: Submission | None
    tasks: tuple[Task, ...]
    entries: tuple[Entry, ...]

    def calls(self) -> list[ToolCall]:
        return [c for e in self.entries if e.kind is EntryKind.ASSISTANT for c in e.tool_calls]

    def result(self, call_id: str) -> Entry | None:
        return next((e for e in self.entries if e.kind is EntryKind.TOOL_RESULT and e.tool_call_id == call_id), None)

    def tool_task(self, call_id: str) -> Task | None:
        return next((t for t in self.tasks if t.kind == "pi.tool" and t.input.get("call_id") == call_id), None)

    def answer(self) -> Entry | None:
        if self.submission is None or self.submission.answer_entry_id is None:
            return None
        return next((e for e in self.entries if e.id == self.submission.answer_entry_id), None)


def read_snapshot(db: Path, part: str) -> Snapshot:
    store = open_readonly(db)
    try:
        store.begin()
        try:
            sub = store.submission_by_request(ROOT, REQUESTS[part])  # type: ignore[arg-type]
            if sub is None:
                return Snapshot(submission=None, tasks=(), entries=())
            tasks = tuple(t for t in store.tasks(ROOT) if t.id > sub.id)  # type: ignore[arg-type]
            first = sub.entry_id if sub.entry_id is not None else sub.id
            entries = tuple(e for e in store.entries(ROOT) if e.id >= first)  # type: ignore[arg-type]
            return Snapshot(submission=sub, tasks=tasks, entries=entries)
        finally:
            store.end()
    finally:
        store.close()


def read_runs(work: Path) -> list[tuple[int, str, str]]:
    path = work / RUNS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        life, name, call_id = line.split("\t")
        out.append((int(life), name, call_id))
    return out


def _args_text(call: ToolCall) -> str:
    return ", ".join(f"{k}={v}" for k, v in call.arguments.items())


def _one_line(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_order(call_id: str) -> tuple[int, ...]:
    """``call_3_1`` -> (3, 1): the order the scripted model made its calls."""
    try:
        return tuple(int(p) for p in call_id.split("_")[1:])
    except ValueError:
        return (1 << 30,)


def _lives(n: int) -> str:
    return "once" if n == 1 else ("twice" if n == 2 else f"{n} times")


# --- the parent: running the children ------------------------------------------------------


class _Demo:
    def __init__(self, db: Path, work: Path, logs: Path) -> None:
        self.db = db
        self.work = work
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def installed_replay(self, name: str) -> str:
        """The replay promise of the tool the resuming process installs."""
        tool = next((t for t in demo_tools(self.work, 2).tools if t.name == name), None)
        return tool.replay if tool is not None else "not installed"

    def cleanup(self) -> None:
        """Kill any child still running (the parent was interrupted)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def spawn(self, part: str, life: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.logs / f"{part}-life{life}.log"
        cmd = [
            sys.executable,
            "-m",
            "pidurable.shell.demo",
            "child",
            part,
            "--db",
            str(self.db),
            "--work",
            str(self.work),
            "--life",
            str(life),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc, log

    @staticmethod
    def _tail(log: Path) -> str:
        try:
            lines = log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join("      | " + line for line in lines[-8:])

    def _expect_killed(self, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
        if proc.returncode != -signal.SIGKILL:
            raise DemoFailed(
                f"{what}: expected the child (pid {proc.pid}) to die by SIGKILL, but it exited with "
                f"status {proc.returncode}\n{self._tail(log)}"
            )

    def life_two(self, part: str) -> None:
        proc, log = self.spawn(part, 2)
        print(f"  life 2: a fresh child process (pid {proc.pid}) reopens the store and resumes")
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise DemoFailed(f"the resuming child (pid {proc.pid}) did not finish within 40 s\n{self._tail(log)}")
        if proc.returncode != 0:
            raise DemoFailed(f"the resuming child (pid {proc.pid}) exited with status {proc.returncode}\n{self._tail(log)}")
        print("          it finished and exited with status 0")

    # part 1 ------------------------------------------------------------------------------
    def part_config(self) -> None:
        print(f"\n== {TITLES['config']} ==")
        print(f"  {CONFIG_PATH} before: {(self.work / CONFIG_PATH).read_text().strip()}")
        proc, log = self.spawn("config", 1)
        print(f"  life 1: child process pid {proc.pid} runs the script; its edit tool edits the file for real,")
        print("          then the process SIGKILLs itself before the result is committed")
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise DemoFailed(f"the first child (pid {proc.pid}) was still running after 40 s\n{self._tail(log)}")
        self._expect_killed(proc, log, "config fix")
        print(f"          child {proc.pid} died: killed by signal {-proc.returncode} (SIGKILL)")
        print(f"  {CONFIG_PATH} on disk after the crash: {(self.work / CONFIG_PATH).read_text().strip()}")
        self.report("config")

    # part 2 ------------------------------------------------------------------------------
    def part_vienna(self) -> None:
        print(f"\n== {TITLES['vienna']} ==")
        proc, log = self.spawn("vienna", 1)
        print(f"  life 1: child process pid {proc.pid} runs the three queries in parallel; trains is slow")
        deadline = time.monotonic() + 30
        snap = None
        try:
            while True:
                if proc.poll() is not None:
                    raise DemoFailed(
                        f"the first child (pid {proc.pid}) exited (status {proc.returncode}) before the parent "
                        f"could kill it\n{self._tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise DemoFailed("timed out waiting for weather and museums to commit while trains runs")
                snap = self._poll_snapshot()
                if snap is not None and self._vienna_ready(snap):
                    break
                time.sleep(0.02)
            print("          the parent, polling the store read-only, sees weather and museums committed")
            print(f"          and trains running; it sends SIGKILL to child {proc.pid}")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._expect_killed(proc, log, "Vienna trip")
        print(f"          child {proc.pid} died: killed by signal {-proc.returncode} (SIGKILL)")
        self.report("vienna")

    def _poll_snapshot(self) -> Snapshot | None:
        try:
            return read_snapshot(self.db, "vienna")
        except (CliError, StorageError):
            return None  # the child has not created the store yet
        except Exception as e:  # noqa: BLE001 - a store being created may be briefly unreadable
            if "locked" in str(e) or "no such table" in str(e):
                return None
            raise

    def _vienna_ready(self, snap: Snapshot) -> bool:
        by_name = {t.input.get("name"): t for t in snap.tasks if t.kind == "pi.tool"}
        started = {(name, call) for life, name, call in read_runs(self.work) if life == 1}
        trains = by_name.get("trains")
        return (
            all(n in by_name and by_name[n].status is TaskStatus.TERMINAL for n in ("weather", "museums"))
            and trains is not None
            and trains.status is TaskStatus.RUNNING
            and trains.phase == "execute"
            and ("trains", trains.input.get("call_id")) in started
        )

    # the report --------------------------------------------------------------------------
    def report(self, part: str) -> None:
        crash = read_snapshot(self.db, part)
        if crash.submission is None:
            raise DemoFailed("the store holds no submission for the request: the child died before accepting it")
        self.print_stored(crash)
        self.life_two(part)
        final = read_snapshot(self.db, part)
        assert final.submission is not None
        kept, rerun, interrupted = self.print_recovery(crash, final)
        answer = final.answer()
        print("  Final answer:")
        for line in (answer.text if answer else "(none)").splitlines():
            print(textwrap.fill(line, width=100, initial_indent="    ", subsequent_indent="      "))
        sub = final.submission
        why = f" (reason {sub.reason}: {sub.detail})" if sub.reason else ""
        print(f"  submission #{sub.id}: {sub.status.value}{why}")
        problems = self.check(part, crash, final, kept, rerun, interrupted)
        if problems:
            raise DemoFailed(f"{TITLES[part].split(':')[0]}: " + "; ".join(problems))

    def print_stored(self, snap: Snapshot) -> None:
        sub = snap.submission
        assert sub is not None
        print("  Stored at the crash (read from the SQLite file by the parent):")
        print(f"    submission #{sub.id} (request {sub.request_id}): {sub.status.value}")
        print("    tasks (owner -> children):")
        for line in task_tree(snap.tasks, indent="      "):
            print(line)
        print("    tool calls:")
        for call in snap.calls():
            res = snap.result(call.id)
            head = f"      {call.name}({_args_text(call)})"
            if res is not None:
                print(f"{head} -> result stored: {_one_line(res.text, 60)}")
            else:
                task = snap.tool_task(call.id)
                where = f"task #{task.id} {task.status.value}, phase {task.phase}" if task else "no task"
                print(f"{head} -> NO result stored ({where})")

    def print_recovery(
        self, crash: Snapshot, final: Snapshot
    ) -> tuple[list[str], list[str], list[str]]:
        runs = read_runs(self.work)
        kept: list[str] = []
        rerun: list[str] = []
        interrupted: list[str] = []
        print("  What recovery did (from the store and the tool-run log):")
        crash_ids = set()
        for call in crash.calls():
            crash_ids.add(call.id)
            n_before = sum(1 for life, _, c in runs if c == call.id and life == 1)
            n_after = sum(1 for life, _, c in runs if c == call.id and life == 2)
            had = crash.result(call.id)
            res = final.result(call.id)
            task = final.tool_task(call.id)
            ran = f"body ran {_lives(n_before)} in life 1" if n_before else "body never ran in life 1"
            if had is not None:
                if n_after:
                    rerun.append(call.name)
                    print(f"    {call.name}: RE-RUN although its result was stored ({ran}, {_lives(n_after)} in life 2)")
                else:
                    kept.append(call.name)
                    print(f"    {call.name}: kept - its stored result was reused, not run again ({ran})")
                continue
            stored_replay = (crash.tool_task(call.id) or task or _NO_TASK).checkpoint.get("replay", "?")
            installed = self.installed_replay(call.name)
            if n_after:
                rerun.append(call.name)
                print(
                    f"    {call.name}: re-run in the new process (stored replay={stored_replay}, installed tool "
                    f"replay={installed}); {ran}, {_lives(n_after)} in life 2"
                )
                if res is not None:
                    print(f"      new result: {_one_line(res.text, 70)}")
            elif res is not None and res.is_error and task is not None and task.outcome is not None:
                if task.outcome.status is OutcomeStatus.FAILED:
                    interrupted.append(call.name)
                    print(
                        f"    {call.name}: reported interrupted, NOT run again (stored replay={stored_replay}, "
                        f"installed tool replay={installed}); {ran}, 0 times in life 2"
                    )
                else:
                    print(f"    {call.name}: settled with an error without running again ({ran})")
                print(f'      result the model sees: "{res.text}"')
            else:
                print(f"    {call.name}: no result after recovery ({ran})")
        for call in final.calls():
            if call.id in crash_ids:
                continue
            res = final.result(call.id)
            n_after = sum(1 for life, _, c in runs if c == call.id and life == 2)
            shown = _one_line(res.text, 50) if res is not None else "no result"
            print(f"    new call by the model: {call.name}({_args_text(call)}) -> ran {_lives(n_after)} in life 2: {shown}")
        return kept, rerun, interrupted

    def check(
        self, part: str, crash: Snapshot, final: Snapshot, kept: list[str], rerun: list[str], interrupted: list[str]
    ) -> list[str]:
        problems = []
        sub = final.submission
        if sub is None or sub.status is not SubmissionStatus.DONE:
            status = "missing" if sub is None else f"{sub.status.value} ({sub.reason}: {sub.detail})"
            problems.append(f"the submission did not end done: {status}")
        if crash.submission is not None and crash.submission.status is not SubmissionStatus.PLACED:
            problems.append(f"at the crash the submission was {crash.submission.status.value}, not placed")
        if part == "config":
            if interrupted != ["edit"]:
                problems.append(f"expected only edit to be reported interrupted, got {interrupted}")
            if "read" not in kept or rerun:
                problems.append(f"expected the first read to be kept and nothing re-run (kept {kept}, re-run {rerun})")
            edits = [r for r in read_runs(self.work) if r[1] == "edit"]
            if len(edits) != 1:
                problems.append(f"the edit body ran {len(edits)} times, not once")
            text = (self.work / CONFIG_PATH).read_text()
            if '"port": 8081' not in text:
                problems.append(f"{CONFIG_PATH} is {text.strip()!r}, not port 8081")
        else:
            if sorted(kept) != ["museums", "weather"]:
                problems.append(f"expected weather and museums to be kept, got {kept}")
            if rerun != ["trains"]:
                problems.append(f"expected only trains to be re-run, got {rerun}")
            if interrupted:
                problems.append(f"no call should be reported interrupted, got {interrupted}")
        return problems


_NO_TASK = Task(id=0, conversation_id=ROOT, kind="-")  # type: ignore[arg-type]


def run_demo(db: str | None = None, keep: bool = False) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="pidurable-demo-"))
    try:
        if db is not None:
            store = Path(db).absolute()
            if store.exists():
                raise CliError(f"{store} already exists; the demo needs a new store file", 2)
            if not store.parent.is_dir():
                raise CliError(f"Cannot create {store}: directory {store.parent} does not exist", 2)
        else:
            store = tmp / "demo.sqlite"
        work = tmp / "work"
        logs = tmp / "logs"
        (work / "config").mkdir(parents=True)
        logs.mkdir()
        (work / CONFIG_PATH).write_text(json.dumps({"port": 8080}) + "\n")
        print("pidurable demo: agent runs that survive a real SIGKILL (scripted model, no network)")
        print(f"  store:    {store} (embedded SQLite)")
        print(f"  work dir: {work}")
        demo = _Demo(store, work, logs)
        started = time.monotonic()
        try:
            demo.part_config()
            demo.part_vienna()
        except DemoFailed as e:
            print(f"\nDEMO FAILED: {e}")
            if db is not None or keep:
                print(f"  inspect the store with: pidurable inspect --db {store} --all")
            return 1
        finally:
            demo.cleanup()
        runs = read_runs(work)
        print("\nTool body runs across all processes (from tool-runs.log):")
        counts: dict[str, list[int]] = {}
        for life, name, _ in sorted(runs, key=lambda r: (_call_order(r[2]), r[0])):
            counts.setdefault(name, []).append(life)
        for name, lives in counts.items():
            per = ", ".join(f"life {lf}" for lf in lives)
            print(f"  {name:8} {len(lives)}  ({per})")
        print(f"\nBoth submissions are done ({time.monotonic() - started:.1f} s).")
        if db is not None or keep:
            print(f"  Look at the store: pidurable inspect --db {store} --all")
        return 0
    finally:
        if keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        sys.exit(child_main(sys.argv[2:]))
    from pidurable.shell.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
