"""Compaction: what a summary replaces, and how big a context is (pure).

Theory of operation
-------------------
The full transcript is kept for ever. What a model request *sees* starts at
the newest *head marker* at or before its cutoff (reference §3.13, §3.15.1):

- a ``compaction`` entry: its text is the summary message, and its
  ``data["head"]`` names the first entry it keeps - the context is the
  summary, then every non-marker entry from ``head`` on;
- a ``reset`` entry: ``data["head"]`` is its own id - the context is its
  handoff text (if any), then what follows it.

Range selection (:func:`select_cut`) decides where a new summary starts keeping
entries: walk the entries of the current range from the newest backwards,
summing their estimated tokens; at the first entry where the sum reaches
``keep_recent_tokens`` the cut is the first *candidate* at or after it (else
the newest candidate). A candidate is an entry whose first message is an
assistant message, or a user message that is not inside a tool round - so a
cut never separates a tool call from its result. Nothing is compacted when the
kept budget is never reached, or nothing before the cut is sent to a model.

Token estimates are the documented heuristic of the reference (pi-ai's
``estimateMessageTokens``): a quarter of the characters, rounded up; a tool
call counts its name and its JSON arguments. A provider-reported usage, when
known, replaces the estimate for everything up to the message it answered
(:func:`estimate_context_tokens`).

Invariants: ``ContextPairsCallsWithResults`` (a cut never splits a call from
its result), ``OneResultPerCall``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .context import HEAD_MARKERS, Message, active_range, entry_message, is_marker, marker_head
from .model import Entry, EntryId, EntryKind

__all__ = ["HEAD_MARKERS", "active_range", "is_marker", "marker_head"]

#: How the summary is shown to the model (the reference's wording).
SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
SUMMARY_SUFFIX = "\n</summary>"

#: Tool results are cut to this many characters when serialized for the summarizer.
SERIALIZED_RESULT_CHARS = 2000



def summary_text(summary: str) -> str:
    """The text of a compaction entry: the summary as the model reads it."""
    return SUMMARY_PREFIX + summary + SUMMARY_SUFFIX


# --- token estimates -------------------------------------------------------------------


def _quarter(chars: int) -> int:
    return -(-chars // 4)


def estimate_message_tokens(message: Message) -> int:
    """Characters / 4, rounded up; a tool call counts its name and arguments."""
    chars = len(message.text)
    for call in message.tool_calls:
        chars += len(call.name) + len(json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False))
    return _quarter(chars)


def estimate_entry_tokens(entry: Entry) -> int:
    message = entry_message(entry)
    return 0 if message is None else estimate_message_tokens(message)


def estimate_context_tokens(entries: Sequence[Entry], system: str | None = None) -> int:
    """The size of the context a request over ``entries`` (a range, oldest
    first) would send: the newest assistant entry whose usage reports the
    tokens of its request counts those, plus an estimate of every entry
    after it and of the system prompt; without one, everything is estimated."""
    total = _quarter(len(system)) if system else 0
    anchor = None
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if e.kind == EntryKind.ASSISTANT and e.usage is not None and e.usage.input_tokens + e.usage.output_tokens > 0:
            anchor = i
            break
    if anchor is None:
        return total + sum(estimate_entry_tokens(e) for e in entries)
    usage = entries[anchor].usage
    assert usage is not None
    return total + usage.input_tokens + usage.output_tokens + sum(estimate_entry_tokens(e) for e in entries[anchor + 1 :])


# --- range selection ---------------------------------------------------------------------


def _candidates(entries: Sequence[Entry]) -> list[bool]:
    """Per entry: may a kept range start here without separating a tool
    call from its result?"""
    out: list[bool] = []
    open_calls: set[str] = set()  # calls of the previous assistant still without a result
    for i, e in enumerate(entries):
        message = entry_message(e)
        if message is None:
            out.append(False)
            continue
        if message.role == "assistant":
            out.append(True)
            open_calls = {c.id for c in message.tool_calls}
            continue
        if message.role == "tool":
            out.append(False)
            open_calls.discard(message.tool_call_id or "")
            continue
        # a user/system message: a candidate unless a result for the previous
        # assistant's calls follows before the next assistant message
        answered_later = False
        for later in entries[i + 1 :]:
            m = entry_message(later)
            if m is None:
                continue
            if m.role == "assistant":
                break
            if m.role == "tool" and m.tool_call_id in open_calls:
                answered_later = True
                break
        out.append(not answered_later)
    return out


def select_cut(entries: Sequence[Entry], keep_recent_tokens: int) -> EntryId | None:
    """The first entry a summary of ``entries`` (the non-marker entries of the
    active range, oldest first) keeps, or None when there is nothing to
    compact."""
    if not entries:
        return None
    candidates = _candidates(entries)
    reached = None
    total = 0
    for i in range(len(entries) - 1, -1, -1):
        total += estimate_entry_tokens(entries[i])
        if total >= keep_recent_tokens:
            reached = i
            break
    if reached is None:
        return None
    cut = next((j for j in range(reached, len(entries)) if candidates[j]), None)
    if cut is None:
        cut = next((j for j in range(len(entries) - 1, -1, -1) if candidates[j]), None)
    if cut is None or not any(entry_message(e) is not None for e in entries[:cut]):
        return None
    return entries[cut].id


# --- the summarization request ------------------------------------------------------------

SUMMARY_SYSTEM_PROMPT = (
    "You are a context summarization assistant. Your task is to read a conversation between a user and an AI "
    "coding assistant, then produce a structured summary following the exact format specified. Do NOT continue "
    "the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary."
)

SUMMARY_PROMPT = """The messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work.

If the conversation contains an earlier summary, carry its content forward: merge it with what happened since.

Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]

Keep each section concise. Preserve exact file paths, function names, and error messages."""


def serialize_messages(messages: Sequence[Message]) -> str:
    """The conversation as plain text for the summarizer (system messages
    omitted; tool results cut to ``SERIALIZED_RESULT_CHARS``)."""
    lines: list[str] = []
    for m in messages:
        if m.role == "user":
            lines.append(f"[User]: {m.text}")
        elif m.role == "assistant":
            if m.text:
                lines.append(f"[Assistant]: {m.text}")
            if m.tool_calls:
                calls = ", ".join(
                    f"{c.name}("
                    + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in c.arguments.items())
                    + ")"
                    for c in m.tool_calls
                )
                lines.append(f"[Assistant tool calls]: {calls}")
        elif m.role == "tool":
            text = m.text if len(m.text) <= SERIALIZED_RESULT_CHARS else m.text[:SERIALIZED_RESULT_CHARS] + "…"
            lines.append(f"[Tool result]: {text}")
    return "\n\n".join(lines)


def summary_request_text(messages: Sequence[Message], instructions: str | None) -> str:
    """The one user message of a summarization request."""
    text = f"<conversation>\n{serialize_messages(messages)}\n</conversation>\n\n{SUMMARY_PROMPT}"
    if instructions:
        text += f"\n\nAdditional focus: {instructions}"
    return text
