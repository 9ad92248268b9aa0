"""The coding tools: ``read``, ``write``, ``edit``, ``bash`` over an env.

Expected failures (missing file, ``old`` text not found, a path outside the
env root, a command that times out) are *error results* the model can act on;
only bugs raise. ``read`` is replay-safe; the others change the world and are
``unsafe`` (an interrupted call is reported, never repeated).

File tools resolve paths against the conversation's working directory
(``call.cwd``, inside the env root) and refuse anything outside the root.
``bash`` is different in kind: it runs any command as the user running the
agent and is NOT confined to the root - offer it only where that is meant
(:func:`read_tools` is the read-only set). Its process group is recorded
durably before the command starts (``call.record_process``) and killed on
timeout, abort, and at the next open if a crash left it running. Its
output streams into the call's live slot as it arrives
(``call.report_output``), and its result keeps the *tail* when it is over the
output limits (where a command's error is); ``read`` keeps the head. A
non-zero exit is an error result whose diagnostic reads "Command exited with
code N" (code ``exit_code``), a timeout one that reads "Command timed out
after N seconds" (``tool_error``), after the output, as the reference's bash.
"""

from __future__ import annotations

from typing import Any

from pidurable.core.diagnostics import exit_code_message
from pidurable.core.model import Diagnostic, ResultCode, Severity

from ..env import EnvError, LocalEnv
from ..limits import OutputLimits
from ..registry import Extension, ToolCallContext, ToolDefinition, ToolResult, define_extension, define_tool


def _env(ctx: ToolCallContext) -> LocalEnv:
    if ctx.env is None:
        raise EnvError("this harness has no environment (pass env=LocalEnv(dir) to Harness.open)")
    return ctx.env  # type: ignore[no-any-return]


async def _read(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    try:
        return ToolResult(text=_env(ctx).read_text(args["path"], cwd=ctx.cwd))
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)


async def _write(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    try:
        n = _env(ctx).write_text(args["path"], args["content"], cwd=ctx.cwd)
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)
    return ToolResult(text=f"Wrote {n} bytes to {args['path']}")


async def _edit(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    path, old, new = args["path"], args["old"], args["new"]
    try:
        env, cwd = _env(ctx), ctx.cwd
        text = env.read_text(path, cwd=cwd)
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times (must be unique)"
            return ToolResult(text=f"Cannot edit {path}: the text to replace was {where}", is_error=True)
        env.write_text(path, text.replace(old, new, 1), cwd=cwd)
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)
    return ToolResult(text=f"Edited {path}: replaced 1 occurrence")


async def _bash(ctx: ToolCallContext, args: dict[str, Any]) -> ToolResult:
    timeout = float(args.get("timeout", 30))
    try:
        result = await _env(ctx).run(
            args["command"], timeout=timeout, cwd=ctx.cwd, on_start=ctx.record_process, on_output=ctx.report_output
        )
    except EnvError as e:
        return ToolResult(text=str(e), is_error=True)
    if result.timed_out:  # the reference's bash throws this: a tool_error
        timed_out = Diagnostic(Severity.ERROR, f"Command timed out after {timeout:g} seconds", ResultCode.TOOL_ERROR)
        return ToolResult(text=result.output, is_error=True, diagnostics=(timed_out,))
    if result.exit_code != 0:
        exited = Diagnostic(Severity.ERROR, exit_code_message(result.exit_code), ResultCode.EXIT_CODE)
        return ToolResult(text=result.output, is_error=True, diagnostics=(exited,))
    return ToolResult(text=result.output)


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


_S = {"type": "string"}

READ = define_tool(
    "read",
    "Read a UTF-8 text file (paths are relative to the working directory and must stay inside it).",
    _obj({"path": _S}, ["path"]),
    _read,
    replay="safe",
)
WRITE = define_tool(
    "write",
    "Create or overwrite a text file inside the working directory.",
    _obj({"path": _S, "content": _S}, ["path", "content"]),
    _write,
)
EDIT = define_tool(
    "edit",
    "Replace one unique occurrence of `old` with `new` in a file inside the working directory.",
    _obj({"path": _S, "old": _S, "new": _S}, ["path", "old", "new"]),
    _edit,
)
BASH = define_tool(
    "bash",
    "Run a command with /bin/sh, starting in the working directory. It runs as the user running the "
    "agent and is NOT confined to the working directory: it can read, change or delete anything that "
    "user can. Default timeout 30 s; on timeout the command and every process it started are killed.",
    _obj({"command": _S, "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}}, ["command"]),
    _bash,
    output_limits=OutputLimits(retain="tail"),
)

#: The tool sets by name, as ``pidurable run --tools NAME`` offers them.
TOOL_SETS: dict[str, tuple[ToolDefinition, ...]] = {
    "none": (),
    "read": (READ,),
    "coding": (READ, WRITE, EDIT, BASH),
}


def read_tools() -> Extension:
    """Only ``read`` (replay-safe, confined to the env root)."""
    return define_extension("read", tools=TOOL_SETS["read"])


def coding_tools() -> Extension:
    """``read``, ``write``, ``edit`` and ``bash``. ``bash`` runs any command as
    the user: it is not confined to the env root."""
    return define_extension("coding", tools=TOOL_SETS["coding"])
