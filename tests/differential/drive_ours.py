"""One process life of a differential scenario on pidurable.

``python drive_ours.py SCENARIO WORKDIR LIFE`` runs the life's host steps
against a SQLite store in WORKDIR and prints, as one JSON line, the
submissions and the transcript in the common form (test_differential.py
reads it). A tool body may end the process instead (``common.crash_after``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential_scenarios as common  # noqa: E402

from pidurable.shell import (  # noqa: E402
    AgentConfig,
    Harness,
    Input,
    ModelRef,
    Registry,
    ToolCallContext,
    define_tool,
    open_sqlite_storage,
)
from pidurable.shell.providers import ScriptedModels  # noqa: E402
from pidurable.shell.providers.base import ModelRequest  # noqa: E402
from pidurable.shell.providers.scripted import ScriptedCall, ScriptedReply  # noqa: E402


def request_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request as the model reads it, in the common form."""
    labels = common.call_labels([[c.id for c in m.tool_calls] for m in request.messages if m.role == "assistant"])
    out: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "assistant":
            out.append({"role": "assistant", "text": m.text, "calls": [c.name for c in m.tool_calls]})
        elif m.role == "tool":
            label = labels.get(m.tool_call_id or "", "?")
            out.append({"role": "tool", "call": label, "tool": m.tool_name, "error": m.is_error, "text": m.text})
        else:
            out.append({"role": m.role, "text": m.text})
    return out


def scripted(scenario: dict[str, Any], workdir: str) -> ScriptedModels:
    def answer(request: ModelRequest) -> ScriptedReply:
        common.log_request(workdir, request_messages(request))
        k = sum(1 for m in request.messages if m.role == "assistant")
        r = scenario["replies"][k]
        if "error" in r:
            return ScriptedReply(error=r["error"])
        calls = tuple(ScriptedCall(name=c["name"], arguments=dict(c["arguments"])) for c in r.get("calls", ()))
        return ScriptedReply(text=r.get("text"), tool_calls=calls)

    return ScriptedModels(answer)


class Gate:
    def __init__(self) -> None:
        self.entered = trio.Event()
        self.opened = trio.Event()


def body(tool: dict[str, Any], workdir: str, life: int, gate: Gate) -> Any:
    async def execute(ctx: ToolCallContext, args: dict[str, Any]) -> str:
        common.log_run(workdir, life, tool["name"])
        if tool.get("gate"):
            gate.entered.set()
            await gate.opened.wait()
        await trio.sleep(common.seconds(tool, life))
        text = common.answer(tool, args, workdir)
        common.crash_after(tool, life)
        return text

    return execute


async def snapshot(harness: Harness, handles: dict[str, Any]) -> dict[str, Any]:
    conv = await harness.root()
    entries = await conv.transcript()
    labels = common.call_labels([[c.id for c in e.tool_calls] for e in entries if e.kind == "assistant"])
    names = {c.id: c.name for e in entries if e.kind == "assistant" for c in e.tool_calls}
    transcript: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    system = 0
    for e in entries:
        if e.kind == "system":
            system += 1
            continue
        index[e.id] = len(transcript)
        if e.kind == "user":
            transcript.append({"kind": "user", "text": e.text})
        elif e.kind == "assistant":
            error = e.stop_reason in ("error", "aborted")
            transcript.append({"kind": "assistant", "text": e.text, "calls": [c.name for c in e.tool_calls], "error": error})
        elif e.kind == "tool_result":
            cid = e.tool_call_id or ""
            transcript.append(
                {"kind": "tool_result", "call": labels.get(cid, "?"), "tool": names.get(cid), "error": e.is_error, "text": e.text}
            )
        else:
            transcript.append({"kind": str(e.kind), "text": e.text})
    submissions = {}
    for label, handle in handles.items():
        record = await handle.record()
        submissions[label] = {
            "status": str(record.status),
            "reason": None if record.reason is None else str(record.reason),
            "detail": record.detail,
            "entry": index.get(record.entry_id) if record.entry_id is not None else None,
            "answer": index.get(record.answer_entry_id) if record.answer_entry_id is not None else None,
        }
    return {"submissions": submissions, "transcript": transcript, "system_entries": system}


async def main(name: str, workdir: str, life: int) -> None:
    scenario = common.setup(name, workdir)
    gate = Gate()
    registry = Registry()
    for tool in scenario["tools"]:
        execute = body(tool, workdir, life, gate)
        registry.install(define_tool(tool["name"], f"The {tool['name']} tool.", tool["parameters"], execute, replay=tool["replay"]))
    storage = open_sqlite_storage(str(Path(workdir, "store.sqlite")))
    handles: dict[str, Any] = {}
    async with Harness.open(storage, models=scripted(scenario, workdir), registry=registry, env=None) as harness:
        conv = await harness.root(agent=AgentConfig(model=ModelRef("scripted", "m"), cwd=workdir))
        with trio.fail_after(60):
            for step in scenario["lives"][life - 1]:
                op = step["op"]
                if op == "submit":
                    draft = Input(step["content"], request_id=step.get("request_id"), when_busy=step.get("when_busy", "follow_up"))
                    handles[step["label"]] = await conv.submit(draft)
                elif op == "await_gate":
                    await gate.entered.wait()
                elif op == "open_gate":
                    gate.opened.set()
                elif op == "abort":
                    await conv.abort()
                elif op == "wait":
                    await handles[step["label"]].wait()
                else:
                    raise ValueError(f"unknown step {op!r}")
            result = await snapshot(harness, handles)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
