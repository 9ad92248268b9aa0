"""The conformance scenarios every crash test runs (issue 2's list)."""

from __future__ import annotations

from typing import Any

from pidurable.core.model import AgentConfig, ModelRef
from pidurable.shell.providers import reply, tool_call

from harness import Scenario, World, counting_tool


def _read(world: World, args: dict[str, Any]) -> str:
    return world.files.get(args["path"], f"File not found: {args['path']}")


def _edit(world: World, args: dict[str, Any]) -> str:
    text = world.files[args["path"]]
    world.files[args["path"]] = text.replace(args["old"], args["new"], 1)
    return f"Edited {args['path']}"


def _path_props() -> dict[str, Any]:
    return {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}


CONFIG_FIX = Scenario(
    name="config_fix",
    script=(
        reply(tool_calls=[tool_call("read", path="config/dev.json")]),
        reply(tool_calls=[tool_call("edit", path="config/dev.json", old="8080", new="8081")]),
        reply(tool_calls=[tool_call("read", path="config/dev.json")]),
        reply(text="Fixed the port."),
    ),
    tools=lambda w: [
        counting_tool(w, "read", replay="safe", body=_read, properties=_path_props()),
        counting_tool(w, "edit", replay="unsafe", body=_edit, properties=_path_props()),
    ],
    inputs=("Read and fix the config",),
    files=(("config/dev.json", '{"port": 8080}'),),
    unsafe=("edit",),
)

VIENNA = Scenario(
    name="vienna",
    script=(
        reply(
            tool_calls=[
                tool_call("weather", city="Vienna"),
                tool_call("museums", city="Vienna"),
                tool_call("trains", destination="Vienna"),
            ]
        ),
        reply(text="Itinerary: Day 1 Belvedere (sunny), Day 2 Kunsthistorisches; train 08:12 Railjet."),
    ),
    tools=lambda w: [
        counting_tool(w, "weather", replay="safe"),
        counting_tool(w, "museums", replay="safe"),
        counting_tool(w, "trains", replay="safe"),
    ],
    inputs=("Check weather, museums and trains, then plan the Vienna trip.",),
)

SERIAL = Scenario(
    name="serial",
    script=(
        reply(tool_calls=[tool_call("step", n=1), tool_call("step", n=2), tool_call("step", n=3)]),
        reply(text="All three steps done in order."),
    ),
    tools=lambda w: [counting_tool(w, "step", replay="safe")],
    agent=AgentConfig(model=ModelRef("scripted", "test"), tool_execution="sequential"),
)

UNSAFE = Scenario(
    name="unsafe",
    script=(
        reply(tool_calls=[tool_call("deploy", service="api"), tool_call("status", service="api")]),
        reply(tool_calls=[tool_call("deploy", service="web")]),
        reply(text="Deployed."),
    ),
    tools=lambda w: [
        counting_tool(w, "deploy", replay="unsafe"),
        counting_tool(w, "status", replay="safe"),
    ],
    unsafe=("deploy",),
)

RAISES = Scenario(
    name="raises",
    script=(
        reply(tool_calls=[tool_call("flaky"), tool_call("fine")]),
        reply(text="One tool failed; I carried on."),
    ),
    tools=lambda w: [
        counting_tool(w, "flaky", replay="safe", raises=True),
        counting_tool(w, "fine", replay="safe"),
    ],
)

MODEL_ERROR = Scenario(
    name="model_error",
    script=(
        reply(tool_calls=[tool_call("lookup", q="x")]),
        reply(error="400 invalid request: context too odd"),
    ),
    tools=lambda w: [counting_tool(w, "lookup", replay="safe")],
)

BAD_CALLS = Scenario(
    name="bad_calls",
    script=(
        reply(tool_calls=[tool_call("nope"), tool_call("typed", n="not a number")]),
        reply(text="Handled the bad calls."),
    ),
    tools=lambda w: [counting_tool(w, "typed", replay="safe", properties={"n": {"type": "integer"}})],
)

FOLLOW_UP = Scenario(
    name="follow_up",
    script=(
        reply(tool_calls=[tool_call("lookup", q="a")]),
        reply(text="First answer."),
        reply(text="Second answer."),
    ),
    tools=lambda w: [counting_tool(w, "lookup", replay="safe")],
    inputs=("first question", "second question"),
)

ALL = (CONFIG_FIX, VIENNA, SERIAL, UNSAFE, RAISES, MODEL_ERROR, BAD_CALLS, FOLLOW_UP)
