"""The coding tools: ``read``, ``write``, ``edit``, ``bash`` over an env.

Expected failures (missing file, ``old`` text not found, a path outside the
env root, a command that times out) are *error results* the model can act on;
only bugs raise. ``read`` is replay-safe; the others change the world and are
``unsafe`` (an interrupted call is reported, never repeated).
"""

from __future__ import annotations

from typing import Any

from ..env import EnvError, LocalEnv
from ..registry import Extension, ToolCallContext, ToolResult, define_extension, define_tool


def _env(ctx: ToolCallContext) -> LocalEnv:
    if ctx.env is None:
        raise EnvError("this harness has no environment (pass env=LocalEnv(dir) to Harness.open)")
    return ctx.env  # type: ignore[no-any-return]


async def _read(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    try:
        return ToolResult(text=_env(ctx).read_text(args["path"]))
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)


async def _write(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    try:
        n = _env(ctx).write_text(args["path"], args["content"])
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)
    return ToolResult(text=f"Wrote {n} bytes to {args['path']}")


async def _edit(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    env = _env(ctx)
    path, old, new = args["path"], args["old"], args["new"]
    try:
        text = env.read_text(path)
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times (must be unique)"
            return ToolResult(text=f"Cannot edit {path}: the text to replace was {where}", is_error=True)
        env.write_text(path, text.replace(old, new, 1))
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)
    return ToolResult(text=f"Edited {path}: replaced 1 occurrence")


async def _bash(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    timeout = float(args.get("timeout", 30))
    result = await _env(ctx).run(args["command"], timeout=timeout)
    if result.timed_out:
        return ToolResult(text=f"Command timed out after {timeout:g} s and was killed", is_error=True)
    text = result.output
    if result.exit_code != 0:
        return ToolResult(text=f"{text}\n[exit code {result.exit_code}]".lstrip("\n"), is_error=True)
    return ToolResult(text=text)


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def coding_tools() -> Extension:
    s = {"type": "string"}
    return define_extension(
        "coding",
        tools=[
            define_tool("read", "Read a UTF-8 text file.", _obj({"path": s}, ["path"]), _read, replay="safe"),
            define_tool(
                "write",
                "Create or overwrite a text file.",
                _obj({"path": s, "content": s}, ["path", "content"]),
                _write,
            ),
            define_tool(
                "edit",
                "Replace one unique occurrence of `old` with `new` in a file.",
                _obj({"path": s, "old": s, "new": s}, ["path", "old", "new"]),
                _edit,
            ),
            define_tool(
                "bash",
                "Run a shell command in the working directory (default timeout 30 s).",
                _obj({"command": s, "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}}, ["command"]),
                _bash,
            ),
        ],
    )
