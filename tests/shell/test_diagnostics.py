"""Tool diagnostics through a real Harness (issue 17 item 1): a tool's own
diagnostics pass the edge and are rendered after its text; bash reports a
non-zero exit as the reference's bash does; bad diagnostics never reach the
store raw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from pidurable.core.model import EntryKind, ModelRef
from pidurable.shell import (
    AgentConfig,
    Diagnostic,
    Harness,
    Input,
    LocalEnv,
    MemoryStorage,
    Registry,
    ToolResult,
    coding_tools,
    define_tool,
)
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "m"))
NO_ARGS: dict[str, Any] = {"type": "object"}


async def _result(registry: Registry, call: Any, env: Any = None) -> Any:
    models = ScriptedModels([reply(tool_calls=[call]), reply(text="done")])
    storage = MemoryStorage()
    async with Harness.open(storage, models=models, registry=registry, env=env) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(30):
            assert (await (await conv.submit(Input("go"))).wait()).status == "done"
    (result,) = [e for e in storage.entries(1) if e.kind == EntryKind.TOOL_RESULT]
    # what the model read is the entry's text
    assert [m.text for m in models.requests[1].messages if m.role == "tool"] == [result.text]
    return result


def _tool(returned: Any) -> Registry:
    async def execute(call: Any, args: dict[str, Any]) -> Any:
        return returned

    registry = Registry()
    registry.install(define_tool("t", "t", NO_ARGS, execute, replay="safe"))
    return registry


async def test_a_tools_own_diagnostics_follow_its_text_and_a_warn_is_no_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``ToolResult.diagnostics`` are rendered in order after the text; severities
    given as strings are accepted; a ``warn`` leaves the result a success."""
    returned = ToolResult(
        text="3 rows",
        diagnostics=(Diagnostic("warn", "2 rows skipped", "skipped"), Diagnostic("info", "cached")),  # type: ignore[arg-type]
    )
    result = await _result(_tool(returned), tool_call("t"))
    assert not result.is_error
    assert result.text == "3 rows\n<harness>\n[warn] 2 rows skipped\n[info] cached\n</harness>"
    assert result.data == {
        "diagnostics": [
            {"severity": "warn", "message": "2 rows skipped", "code": "skipped"},
            {"severity": "info", "message": "cached"},
        ]
    }


async def test_a_lone_surrogate_in_a_diagnostic_is_replaced(autojump_clock: trio.testing.MockClock) -> None:
    """Diagnostic text is checked at the edge like the result's: a lone surrogate becomes U+FFFD."""
    returned = ToolResult(text="ok", diagnostics=(Diagnostic("error", "bad \ud800 byte", "x\udfff"),))  # type: ignore[arg-type]
    result = await _result(_tool(returned), tool_call("t"))
    assert result.text == "ok\n<harness>\n[error] bad \ufffd byte\n</harness>"
    assert result.data["diagnostics"] == [{"severity": "error", "message": "bad \ufffd byte", "code": "x\ufffd"}]


@pytest.mark.parametrize(
    ("diagnostics", "problem"),
    [
        ((Diagnostic("fatal", "x"),), "severity must be one of info, warn, error"),  # type: ignore[arg-type]
        (({"severity": "warn", "message": "x"},), "is a dict, not a Diagnostic"),
        ((Diagnostic("warn", 3),), "message must be a str"),  # type: ignore[arg-type]
        ((Diagnostic("warn", "x", 7),), "code must be a str or None"),  # type: ignore[arg-type]
        ("warn", "must be a list of Diagnostic"),
    ],
    ids=["severity", "not-a-diagnostic", "message", "code", "not-a-list"],
)
async def test_a_bad_diagnostic_makes_the_call_an_error_result(
    diagnostics: Any, problem: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A result whose diagnostics are not well-formed is refused at the edge:
    the call becomes a ``tool_error`` result naming the problem."""
    result = await _result(_tool(ToolResult(text="x", diagnostics=diagnostics)), tool_call("t"))
    assert result.is_error and problem in result.text
    assert result.text.startswith("<harness>\n[error] ") and result.data["code"] == "tool_error"


async def test_bash_reports_a_non_zero_exit_after_its_output(tmp_path: Path) -> None:
    """A failing command's output is the content; "Command exited with code N"
    (code ``exit_code``) follows it in the block; the result is an error."""
    result = await _result(coding_registry(), tool_call("bash", command="echo partial; exit 3"), env=LocalEnv(tmp_path))
    assert result.is_error
    assert result.text == "partial\n\n<harness>\n[error] Command exited with code 3\n</harness>"
    assert result.data == {"diagnostics": [{"severity": "error", "message": "Command exited with code 3", "code": "exit_code"}]}


async def test_bash_success_has_no_block(tmp_path: Path) -> None:
    """A command that exits 0 reads exactly its output."""
    result = await _result(coding_registry(), tool_call("bash", command="echo fine"), env=LocalEnv(tmp_path))
    assert not result.is_error and result.text == "fine\n" and result.data is None


def coding_registry() -> Registry:
    registry = Registry()
    registry.install(coding_tools())
    return registry
