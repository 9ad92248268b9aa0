"""Diagnostics: how a tool result's problems reach the model (reference §3.6).

Theory of operation
-------------------
A tool result has *content* (what the tool produced: its text, or for an
interrupted, aborted or raising call the durable partial output of its slot)
and *diagnostics*: problems reported next to the content, each
``Diagnostic(severity, message, code)``. The tool reports its own (a
``ToolResult``'s ``diagnostics``); the harness adds the ones it owns, with a
:class:`~pidurable.core.model.ResultCode`:

================= ======= ===================================================
tool_unavailable  error   "Tool X is not available"
invalid_arguments error   "Validation failed for tool ..." (shell/arguments.py)
blocked           error   "Tool call blocked: <text>"
invalid_call      error   the call is not in its assistant entry (ours)
interrupted       error   "Tool X was interrupted and may have partially run"
reconcile_unknown warn    "Reconcile could not tell whether it ran: <note>"
                          (after ``interrupted``; reconcile.py)
aborted           error   "Tool X was aborted"
tool_error        error   the message of a raising body
truncated         warn    "Output truncated to its beginning|end: L lines, B
                          bytes dropped" (without "to its ..." for running
                          output an aborted or interrupted call kept)
full_output       info    "Full output: <path>" (the spilled full text)
================= ======= ===================================================

The order is the reference's: what the tool reported while running (here:
``full_output``, which the reference's bash reports through
``api.diagnostic``), then the result's own, then the harness's, with
``truncated`` last. A ``warn`` or ``info`` never makes a result an error:
``is_error`` is the tool's (or the harness's error) alone.

Rendering (:func:`render`): the reference appends ONE text item
``"<harness>\\n" + "[severity] message" lines + "\\n</harness>"`` to the
result's content items; its OpenAI conversion joins a tool message's text
items with ``"\\n"`` (its Anthropic conversion sends them as separate text
blocks, dropping empty ones). Our entries hold one text, so the model reads
``content + "\\n" + block`` - the OpenAI join, exactly - or the block alone
when the content is empty. No diagnostics: the content unchanged.

The entry's ``data["diagnostics"]`` keeps the structured list
(``{severity, message, code?}``: ``code`` omitted when None, as the
reference's JSON has it); :func:`result_data` also keeps ``data["code"]``
(the harness's error code, as entries written before diagnostics have it)
and ``data["truncated"]`` (the shell's record of a cut). Entries written
before diagnostics have neither the block nor ``data["diagnostics"]``:
readers treat a missing list as empty.

Pure: strings and records only; the shell decides nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .model import Diagnostic, Json, ResultCode, Severity

OPEN = "<harness>"
CLOSE = "</harness>"


# --- the harness's messages ----------------------------------------------------


def unavailable_message(name: str) -> str:
    return f"Tool {name} is not available"


def blocked_message(reason: str) -> str:
    return f"Tool call blocked: {reason}"


def interrupted_message(name: str) -> str:
    return f"Tool {name} was interrupted and may have partially run"


def unreconciled_message(note: str) -> str:
    """The note of a ``reconcile`` that could not tell (or raised)."""
    return f"Reconcile could not tell whether it ran: {note}"


def aborted_message(name: str) -> str:
    return f"Tool {name} was aborted"


def exit_code_message(code: int | None) -> str:
    return f"Command exited with code {code}"


def full_output_message(path: str) -> str:
    return f"Full output: {path}"


def truncated_message(dropped_lines: int, dropped_bytes: int, retain: str | None) -> str:
    """``retain`` None: where the cut fell is unknown (running output an
    interrupted or aborted call kept)."""
    kept = "" if retain is None else (" to its beginning" if retain == "head" else " to its end")
    return f"Output truncated{kept}: {dropped_lines} lines, {dropped_bytes} bytes dropped"


def error(code: str, message: str) -> Diagnostic:
    """A harness error diagnostic (``code``: a :class:`ResultCode`)."""
    return Diagnostic(Severity.ERROR, message, str(code))


def truncated(dropped_lines: int, dropped_bytes: int, retain: str | None) -> Diagnostic:
    return Diagnostic(Severity.WARN, truncated_message(dropped_lines, dropped_bytes, retain), str(ResultCode.TRUNCATED))


def from_cut(cut: Mapping[str, Json] | None) -> tuple[tuple[Diagnostic, ...], tuple[Diagnostic, ...]]:
    """The diagnostics of the shell's record of a cut (``ToolFinished.truncated``:
    ``total_bytes, total_lines, kept_bytes, kept_lines, retain[, full_output]``):
    (what goes first: ``full_output``; what goes last: ``truncated``)."""
    if cut is None:
        return (), ()
    first: tuple[Diagnostic, ...] = ()
    path = cut.get("full_output")
    if isinstance(path, str):
        first = (Diagnostic(Severity.INFO, full_output_message(path), str(ResultCode.FULL_OUTPUT)),)
    lines = int(cut.get("total_lines", 0)) - int(cut.get("kept_lines", 0))
    size = int(cut.get("total_bytes", 0)) - int(cut.get("kept_bytes", 0))
    retain = cut.get("retain")
    return first, (truncated(lines, size, retain if isinstance(retain, str) else "head"),)


def ordered(
    reported: Iterable[Diagnostic], cut: Mapping[str, Json] | None, harness: Iterable[Diagnostic] = ()
) -> tuple[Diagnostic, ...]:
    """A result's diagnostics in the reference's order: the spill path, the
    tool's own, the harness's, the cut last."""
    first, last = from_cut(cut)
    return (*first, *reported, *harness, *last)


# --- rendering -----------------------------------------------------------------


def block(diagnostics: Sequence[Diagnostic]) -> str:
    """The one text item the model reads after the content."""
    lines = "\n".join(f"[{d.severity}] {d.message}" for d in diagnostics)
    return f"{OPEN}\n{lines}\n{CLOSE}"


def render(content: str, diagnostics: Sequence[Diagnostic]) -> str:
    """The result text the model reads: the content, then the block (joined
    with a newline, as the reference's OpenAI conversion joins text items)."""
    if not diagnostics:
        return content
    rendered = block(diagnostics)
    return f"{content}\n{rendered}" if content else rendered


def as_json(diagnostics: Sequence[Diagnostic]) -> list[Json]:
    """The structured list kept in the entry's ``data["diagnostics"]``."""
    out: list[Json] = []
    for d in diagnostics:
        item: dict[str, Json] = {"severity": str(d.severity), "message": d.message}
        if d.code is not None:
            item["code"] = d.code
        out.append(item)
    return out


def result_data(
    diagnostics: Sequence[Diagnostic], code: str | None = None, cut: Mapping[str, Json] | None = None
) -> dict[str, Json] | None:
    """A tool result entry's ``data``: the harness's error ``code``, the
    shell's record of a cut, the diagnostics; None when there is nothing."""
    data: dict[str, Json] = {}
    if code:
        data["code"] = code
    if cut is not None:
        data["truncated"] = dict(cut)
    if diagnostics:
        data["diagnostics"] = as_json(diagnostics)
    return data or None

