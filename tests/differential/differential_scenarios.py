"""The differential test's scenarios and tool bodies, shared by both drivers.

Standard library only: ``drive_peer.py`` imports this module inside the
peer's own virtual environment, where pidurable is not installed, and
``drive_ours.py`` imports it in ours. Each scenario is data:

- ``tools``: the tools both harnesses install, with the same names, schemas,
  replay promises and bodies (``answer``); a body can sleep, wait at the gate
  (the host opens it), or end the process (``crash``: ``os._exit`` after the
  body's side effect, in the given process life, before its result can be
  committed).
- ``replies``: the scripted model's replies; request k (k = the number of
  assistant messages the request holds, the rule both scripted models use)
  gets ``replies[k]``: tool calls, a text, or an error.
- ``lives``: per process life, the host's steps (``submit``, ``await_gate``,
  ``open_gate``, ``abort``, ``wait``). A life ends with its last step, or when
  a body ends the process.

Every body start appends ``life<TAB>tool`` to ``runs.log`` in the scenario's
work directory (an unbuffered append that survives ``os._exit``), and every
model request is appended, normalized, to ``requests.jsonl``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

OBJECT = "object"


def schema(**properties: str) -> dict[str, Any]:
    """An object schema whose properties all have the given types and are required."""
    return {"type": OBJECT, "properties": {k: {"type": t} for k, t in properties.items()}, "required": list(properties)}


READ = {"name": "read", "parameters": schema(path="string"), "replay": "safe", "answer": "file"}
EDIT = {"name": "edit", "parameters": schema(path="string", old="string", new="string"), "replay": "unsafe", "answer": "replace"}
GATE = {"name": "gate", "parameters": {"type": OBJECT, "properties": {}}, "replay": "unsafe", "answer": "opened", "gate": True}


def query(name: str, answer: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "parameters": schema(city="string"), "replay": "safe", "answer": answer, "seconds": seconds, **extra}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


CONFIG = {"config/dev.json": '{"port": 8080}\n'}
FIX = "The dev server must listen on port 8081. Read config/dev.json and fix it."
CONFIG_REPLIES = [
    {"calls": [call("read", path="config/dev.json")]},
    {"calls": [call("edit", path="config/dev.json", old="8080", new="8081")]},
    {"calls": [call("read", path="config/dev.json")]},
    {"text": "config/dev.json now sets port 8081."},
]

SCENARIOS: dict[str, dict[str, Any]] = {
    "config-fix": {
        "files": CONFIG,
        "tools": [READ, EDIT],
        "replies": CONFIG_REPLIES,
        "lives": [[{"op": "submit", "label": "fix", "content": FIX, "request_id": "fix-1"}, {"op": "wait", "label": "fix"}]],
    },
    "unsafe-interrupted": {
        "files": CONFIG,
        "tools": [READ, {**EDIT, "crash": 1}],
        "replies": CONFIG_REPLIES,
        "lives": [
            [{"op": "submit", "label": "fix", "content": FIX, "request_id": "fix-1"}, {"op": "wait", "label": "fix"}],
            [{"op": "submit", "label": "fix", "content": FIX, "request_id": "fix-1"}, {"op": "wait", "label": "fix"}],
        ],
    },
    "vienna": {
        "files": {},
        "tools": [
            query("weather", "Saturday: sunny, 24 C. Sunday: showers after 14:00, 17 C.", 0.05),
            query("museums", "Kunsthistorisches Museum (Tue-Sun 10:00-18:00); Belvedere (daily 09:00-18:00)", 0.1),
            # in life 1 the process ends while trains runs, long after the other two are committed
            query("trains", "Railjet RJ 61 Munich 07:27 -> Wien 11:30", 0.2, crash=1, crash_seconds=2.0),
        ],
        "replies": [
            {"calls": [call("weather", city="Vienna"), call("museums", city="Vienna"), call("trains", city="Vienna")]},
            {"text": "Itinerary: Belvedere on Saturday, Kunsthistorisches Museum on Sunday morning, RJ 61 there."},
        ],
        "lives": [
            [{"op": "submit", "label": "trip", "content": "Plan my weekend in Vienna.", "request_id": "trip-1"}, {"op": "wait", "label": "trip"}],
            [{"op": "submit", "label": "trip", "content": "Plan my weekend in Vienna.", "request_id": "trip-1"}, {"op": "wait", "label": "trip"}],
        ],
    },
    "follow-up": {
        "files": {},
        "tools": [GATE],
        "replies": [{"calls": [call("gate")]}, {"text": "answer to the first input"}, {"text": "answer to the follow-up"}],
        "lives": [
            [
                {"op": "submit", "label": "first", "content": "Open the gate."},
                {"op": "await_gate"},
                {"op": "submit", "label": "later", "content": "And then?", "when_busy": "follow_up"},
                {"op": "open_gate"},
                {"op": "wait", "label": "first"},
                {"op": "wait", "label": "later"},
            ]
        ],
    },
    "steer": {
        "files": {},
        "tools": [GATE],
        "replies": [{"calls": [call("gate")]}, {"text": "answer to both inputs"}],
        "lives": [
            [
                {"op": "submit", "label": "first", "content": "Open the gate."},
                {"op": "await_gate"},
                {"op": "submit", "label": "steer", "content": "Also say hello.", "when_busy": "steer"},
                {"op": "open_gate"},
                {"op": "wait", "label": "first"},
                {"op": "wait", "label": "steer"},
            ]
        ],
    },
    "model-error": {
        "files": {},
        "tools": [READ],
        "replies": [{"error": "401 Invalid API key"}],
        "lives": [[{"op": "submit", "label": "ask", "content": "Hello?"}, {"op": "wait", "label": "ask"}]],
    },
    "bad-tool-call": {
        "files": {"42": "forty-two\n", "notes.txt": "hello\n"},
        "tools": [READ, EDIT],
        "replies": [
            {"calls": [call("read", path=42), call("nope", x=1), call("edit", path="notes.txt")]},
            {"text": "Read 42; the other two calls failed."},
        ],
        "lives": [[{"op": "submit", "label": "ask", "content": "Try these tools."}, {"op": "wait", "label": "ask"}]],
    },
    "abort": {
        "files": {},
        "tools": [GATE],
        "replies": [{"calls": [call("gate")]}, {"text": "never requested"}],
        "lives": [
            [
                {"op": "submit", "label": "first", "content": "Open the gate."},
                {"op": "await_gate"},
                {"op": "submit", "label": "queued", "content": "Then this.", "when_busy": "follow_up"},
                {"op": "abort"},
                {"op": "wait", "label": "first"},
                {"op": "wait", "label": "queued"},
            ]
        ],
    },
}


# --- what a body does (the same on both sides) --------------------------------------------


def log_run(workdir: str, life: int, name: str) -> None:
    """Append this body start to ``runs.log`` (survives ``os._exit``)."""
    fd = os.open(os.path.join(workdir, "runs.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{life}\t{name}\n".encode())
    finally:
        os.close(fd)


def answer(tool: dict[str, Any], args: dict[str, Any], workdir: str) -> str:
    """The body's side effect and result text."""
    kind = tool["answer"]
    if kind == "file":
        return Path(workdir, str(args["path"])).read_text(encoding="utf-8")
    if kind == "replace":
        path = Path(workdir, str(args["path"]))
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(str(args["old"]), str(args["new"]), 1), encoding="utf-8")
        return f"Replaced {args['old']} with {args['new']} in {args['path']}"
    return str(kind)


def seconds(tool: dict[str, Any], life: int) -> float:
    """How long the body sleeps before answering in this life."""
    if tool.get("crash") == life and "crash_seconds" in tool:
        return float(tool["crash_seconds"])
    return float(tool.get("seconds", 0.0))


def crash_after(tool: dict[str, Any], life: int) -> None:
    """End the process, as a kill would, when the tool crashes in this life."""
    if tool.get("crash") == life:
        os._exit(137)


def log_request(workdir: str, messages: list[dict[str, Any]]) -> None:
    """Append one model request (normalized messages) to ``requests.jsonl``."""
    fd = os.open(os.path.join(workdir, "requests.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(messages, ensure_ascii=False) + "\n").encode())
    finally:
        os.close(fd)


def setup(name: str, workdir: str) -> dict[str, Any]:
    """The scenario, with its files written (first life only)."""
    scenario = SCENARIOS[name]
    for rel, text in scenario["files"].items():
        path = Path(workdir, rel)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return scenario


def call_labels(assistant_calls: list[list[str]]) -> dict[str, str]:
    """Call id -> "k.i" (the k-th assistant entry's i-th call), so both
    sides name calls alike whatever ids their providers gave them."""
    return {cid: f"{k}.{i}" for k, ids in enumerate(assistant_calls) for i, cid in enumerate(ids)}
