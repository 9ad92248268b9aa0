"""Diagnostics rendering (core/diagnostics.py, reference §3.6): the exact
strings the model reads and the structured list an entry keeps."""

from __future__ import annotations

from pidurable.core import diagnostics
from pidurable.core.model import Diagnostic, ResultCode, Severity


def test_the_harness_messages_are_the_references() -> None:
    """Each harness-owned message reads as the reference writes it (specs/tools.md, "Diagnostics")."""
    assert diagnostics.unavailable_message("nope") == "Tool nope is not available"
    assert diagnostics.blocked_message("not today") == "Tool call blocked: not today"
    assert diagnostics.interrupted_message("edit") == "Tool edit was interrupted and may have partially run"
    assert diagnostics.aborted_message("bash") == "Tool bash was aborted"
    assert diagnostics.exit_code_message(3) == "Command exited with code 3"
    assert diagnostics.full_output_message("/o/s-7.txt") == "Full output: /o/s-7.txt"
    assert diagnostics.truncated_message(5, 120, "head") == "Output truncated to its beginning: 5 lines, 120 bytes dropped"
    assert diagnostics.truncated_message(5, 120, "tail") == "Output truncated to its end: 5 lines, 120 bytes dropped"
    assert diagnostics.truncated_message(0, 9, None) == "Output truncated: 0 lines, 9 bytes dropped"


def test_the_block_is_one_line_per_diagnostic_between_harness_tags() -> None:
    """``<harness>``, one ``[severity] message`` line each, in order, ``</harness>``."""
    ds = [
        Diagnostic(Severity.INFO, "Full output: /p", "full_output"),
        diagnostics.error(ResultCode.EXIT_CODE, "Command exited with code 1"),
        diagnostics.truncated(2, 10, "tail"),
    ]
    assert diagnostics.block(ds) == (
        "<harness>\n[info] Full output: /p\n[error] Command exited with code 1\n"
        "[warn] Output truncated to its end: 2 lines, 10 bytes dropped\n</harness>"
    )


def test_content_and_block_are_joined_as_the_references_openai_conversion_joins_text_items() -> None:
    """Content, a newline, the block (a trailing newline of the content is
    kept); empty content: the block alone; no diagnostics: the content alone."""
    aborted = [diagnostics.error(ResultCode.ABORTED, "Tool t was aborted")]
    assert diagnostics.render("", aborted) == "<harness>\n[error] Tool t was aborted\n</harness>"
    assert diagnostics.render("partial", aborted) == "partial\n<harness>\n[error] Tool t was aborted\n</harness>"
    assert diagnostics.render("line\n", aborted) == "line\n\n<harness>\n[error] Tool t was aborted\n</harness>"
    assert diagnostics.render("just text", []) == "just text"


def test_the_structured_list_omits_a_missing_code() -> None:
    """``data["diagnostics"]`` items are ``{severity, message, code?}``; the data keeps code and cut too."""
    ds = [Diagnostic(Severity.WARN, "careful"), diagnostics.error("blocked", "Tool call blocked: no")]
    assert diagnostics.as_json(ds) == [
        {"severity": "warn", "message": "careful"},
        {"severity": "error", "message": "Tool call blocked: no", "code": "blocked"},
    ]
    cut = {"total_bytes": 4, "total_lines": 2, "kept_bytes": 2, "kept_lines": 1, "retain": "head"}
    assert diagnostics.result_data(ds, "blocked", cut) == {"code": "blocked", "truncated": cut, "diagnostics": diagnostics.as_json(ds)}
    assert diagnostics.result_data([]) is None


def test_a_cut_becomes_the_spill_path_first_and_the_truncation_last() -> None:
    """``ordered``: full_output, the tool's own, the harness's, truncated."""
    cut = {"total_bytes": 100, "total_lines": 10, "kept_bytes": 30, "kept_lines": 3, "retain": "head", "full_output": "/p"}
    own = Diagnostic(Severity.ERROR, "bad", "x")
    harness = diagnostics.error(ResultCode.TOOL_ERROR, "boom")
    assert diagnostics.ordered([own], cut, [harness]) == (
        Diagnostic(Severity.INFO, "Full output: /p", "full_output"),
        own,
        harness,
        Diagnostic(Severity.WARN, "Output truncated to its beginning: 7 lines, 70 bytes dropped", "truncated"),
    )
    assert diagnostics.ordered([own], None) == (own,)
