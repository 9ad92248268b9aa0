"""One process life of a differential scenario on pi-durable-python.

Runs inside the peer's own virtual environment (``test_differential.py``
creates it): ``python drive_peer.py SCENARIO WORKDIR LIFE`` does what
``drive_ours.py`` does, through the peer's public API (asyncio), and prints
the same JSON. Only the standard library and ``pi_durable`` are imported;
nothing here is the peer's code.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential_scenarios as common  # noqa: E402

from pi_durable import Harness, Model, create_registry  # noqa: E402
from pi_durable.context import BACKGROUND_CONTEXT as CTX  # noqa: E402
from pi_durable.context import await_with_context  # noqa: E402
from pi_durable.harness.define import define_extension, define_tool  # noqa: E402
from pi_durable.providers.base import ProviderModels  # noqa: E402
from pi_durable.providers.stream import ProviderStream, now_ms  # noqa: E402
from pi_durable.providers.usage import zero_usage  # noqa: E402
from pi_durable.storage.sqlite.posix import open_posix_sqlite_storage  # noqa: E402


def text_of(content: Any) -> str:
    """The text items of a message's content, joined (a string stays)."""
    if isinstance(content, str):
        return content
    return "".join(item.get("text", "") for item in content or () if item.get("type") == "text")


def calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in message.get("content") or () if isinstance(item, dict) and item.get("type") == "toolCall"]


def request_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request as the model reads it, in the common form."""
    labels = common.call_labels([[c["id"] for c in calls_of(m)] for m in messages if m.get("role") == "assistant"])
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            out.append({"role": "assistant", "text": text_of(m.get("content")), "calls": [c["name"] for c in calls_of(m)]})
        elif role == "toolResult":
            label = labels.get(m.get("toolCallId", ""), "?")
            out.append(
                {"role": "tool", "call": label, "tool": m.get("toolName"), "error": bool(m.get("isError")), "text": text_of(m.get("content"))}
            )
        else:
            out.append({"role": str(role), "text": text_of(m.get("content"))})
    return out


class ScriptedStream(ProviderStream):
    def __init__(self, output: dict[str, Any], messages: list[dict[str, Any]], scenario: dict[str, Any], workdir: str) -> None:
        self._messages, self._scenario, self._workdir = messages, scenario, workdir
        super().__init__(output)

    async def _produce(self) -> None:
        common.log_request(self._workdir, request_messages(self._messages))
        k = sum(1 for m in self._messages if m.get("role") == "assistant")
        r = self._scenario["replies"][k]
        if "error" in r:
            self.output["stopReason"] = "error"
            self.output["errorMessage"] = r["error"]
            return
        content: list[dict[str, Any]] = []
        if r.get("text"):
            content.append({"type": "text", "text": r["text"]})
        for i, c in enumerate(r.get("calls", ())):
            content.append({"type": "toolCall", "id": f"call_{k}_{i}", "name": c["name"], "arguments": dict(c["arguments"])})
        self.output["content"] = content
        self.output["stopReason"] = "toolUse" if r.get("calls") else "stop"


class ScriptedModels(ProviderModels):
    api = "scripted"

    def __init__(self, scenario: dict[str, Any], workdir: str) -> None:
        super().__init__([Model(provider="scripted", model_id="m", context_window=1_000_000, max_tokens=1000)])
        self._scenario, self._workdir = scenario, workdir

    def stream_simple(self, model: Any, context: Any, options: Any = None) -> ScriptedStream:
        output = {
            "role": "assistant",
            "content": [],
            "api": self.api,
            "provider": model.provider,
            "model": model.model_id,
            "usage": zero_usage(),
            "stopReason": "pending",
            "timestamp": now_ms(),
        }
        return ScriptedStream(output, list(context.get("messages") or []), self._scenario, self._workdir)

    stream = stream_simple


class Gate:
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()


def body(tool: dict[str, Any], workdir: str, life: int, gate: Gate) -> Any:
    async def execute(args: dict[str, Any], api: Any, context: Any) -> dict[str, Any]:
        common.log_run(workdir, life, tool["name"])
        # the peer's bodies are stopped by honouring the invocation's abort
        # signal (ours by Trio cancellation): every wait goes through it
        if tool.get("gate"):
            gate.entered.set()
            await await_with_context(gate.opened.wait(), context)
        await await_with_context(asyncio.sleep(common.seconds(tool, life)), context)
        text = common.answer(tool, args, workdir)
        common.crash_after(tool, life)
        return {"output": [{"type": "text", "text": text}]}

    return execute


async def snapshot(conv: Any, handles: dict[str, Any]) -> dict[str, Any]:
    page = await conv.entries({}, 10_000, None, CTX)
    entries = sorted(page["items"], key=lambda e: e["id"])
    messages = [(e, (e.get("model") or [{}])[0]) for e in entries]
    labels = common.call_labels([[c["id"] for c in calls_of(m)] for e, m in messages if e["kind"] == "pi.assistant"])
    names = {c["id"]: c["name"] for e, m in messages if e["kind"] == "pi.assistant" for c in calls_of(m)}
    transcript: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    system = 0
    for e, m in messages:
        kind = e["kind"]
        if kind == "pi.system":
            system += 1
            continue
        index[e["id"]] = len(transcript)
        if kind == "pi.user":
            transcript.append({"kind": "user", "text": text_of(m.get("content"))})
        elif kind == "pi.assistant":
            error = m.get("stopReason") in ("error", "aborted")
            transcript.append({"kind": "assistant", "text": text_of(m.get("content")), "calls": [c["name"] for c in calls_of(m)], "error": error})
        elif kind == "pi.tool-result":
            cid = m.get("toolCallId", "")
            transcript.append(
                {"kind": "tool_result", "call": labels.get(cid, "?"), "tool": names.get(cid), "error": bool(m.get("isError")), "text": text_of(m.get("content"))}
            )
        else:
            transcript.append({"kind": kind, "text": text_of(m.get("content"))})
    submissions = {}
    for label, handle in handles.items():
        record = await handle.status(CTX)
        submissions[label] = {
            "status": record.get("status"),
            "reason": record.get("reason"),
            "detail": record.get("detail"),
            "entry": index.get(record["entry"]) if "entry" in record else None,
            "answer": index.get(record["answer"]) if "answer" in record else None,
        }
    return {"submissions": submissions, "transcript": transcript, "system_entries": system}


async def main(name: str, workdir: str, life: int) -> None:
    scenario = common.setup(name, workdir)
    gate = Gate()
    tools = [
        define_tool(
            name=tool["name"],
            description=f"The {tool['name']} tool.",
            parameters=tool["parameters"],
            execute=body(tool, workdir, life, gate),
            replay=tool["replay"],
        )
        for tool in scenario["tools"]
    ]
    registry = create_registry()
    registry.install(define_extension(name="differential", tools=tools))
    storage = await open_posix_sqlite_storage(str(Path(workdir, "store.sqlite")))
    harness = await Harness.open(storage, {"models": ScriptedModels(scenario, workdir), "registry": registry}, CTX)
    handles: dict[str, Any] = {}
    try:
        conv = await harness.root(CTX, {"agent": {"model": {"provider": "scripted", "modelId": "m"}, "cwd": workdir}})
        harness.resume()
        async with asyncio.timeout(60):
            for step in scenario["lives"][life - 1]:
                op = step["op"]
                if op == "submit":
                    draft: dict[str, Any] = {"type": "input", "content": step["content"]}
                    if step.get("request_id"):
                        draft["requestId"] = step["request_id"]
                    if step.get("when_busy"):
                        draft["whenBusy"] = {"follow_up": "followUp"}.get(step["when_busy"], step["when_busy"])
                    handles[step["label"]] = await conv.submit(draft, CTX)
                elif op == "await_gate":
                    await gate.entered.wait()
                elif op == "open_gate":
                    gate.opened.set()
                elif op == "abort":
                    await conv.abort(CTX)
                elif op == "wait":
                    await handles[step["label"]].wait(CTX)
                else:
                    raise ValueError(f"unknown step {op!r}")
            result = await snapshot(conv, handles)
    finally:
        await harness.close(CTX)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
