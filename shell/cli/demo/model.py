"""The demo's scripted model: it replays a part's tool rounds from
``scenarios.toml``, then writes the final answer from the tool results.

The step is the number of assistant messages since the latest user message,
so a new process continues where the store stands.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from pidurable.core.context import Message

from ...providers.base import ModelRequest
from ...providers.scripted import ScriptedReply, reply, tool_call
from .scenarios import SCENARIOS, Part


def demo_model(request: ModelRequest) -> ScriptedReply:
    msgs = request.messages
    idx = max((i for i, m in enumerate(msgs) if m.role == "user"), default=None)
    if idx is None:
        return reply(error="the demo model saw no user message")
    prompt, after = msgs[idx].text, msgs[idx + 1 :]
    part = SCENARIOS.by_prompt(prompt)
    if part is None:
        return reply(error=f"the demo model has no script for {prompt!r}")
    step = sum(1 for m in after if m.role == "assistant")
    if step < len(part.replies):
        return reply(tool_calls=[tool_call(c.name, **c.arguments) for c in part.replies[step]])
    if step == len(part.replies):
        results = [m for m in after if m.role == "tool"]
        return reply(text=FINAL_ANSWERS[part.final_answer](part, results))
    return reply(error=f"the demo script has no step {step + 1}")


def config_answer(part: Part, results: Sequence[Message]) -> str:
    """Part 1: what the last read of the file shows, and how the edit went."""
    path = part.show_file
    reads = [m for m in results if m.tool_name == "read"]
    edit = next((m for m in results if m.tool_name == "edit"), None)
    try:
        port = json.loads(reads[-1].text).get("port")
    except (IndexError, ValueError, AttributeError):
        return f"I could not read {path} back, so I cannot confirm the port."
    if edit is not None and edit.is_error:
        # the harness's error is a line "[error] <message>" in the result's <harness> block
        said = next((line[8:] for line in edit.text.splitlines() if line.startswith("[error] ")), edit.text)
        how = f'The edit came back as an error ("{said}"), so I re-read the file instead of editing again:'
    else:
        how = "The edit succeeded and re-reading the file confirms it:"
    if port == 8081:
        return f"{how} {path} now sets port 8081, so the fix is in place and nothing else is needed."
    return f"{how} {path} still sets port {port}; the fix is NOT in place."


def itinerary(part: Part, results: Sequence[Message]) -> str:
    """Part 2: the weekend plan, from the three queries' answers."""
    by = {m.tool_name: m for m in results}
    missing = [n for n in ("weather", "museums", "trains") if n not in by or by[n].is_error]
    if missing:
        return "I could not get " + ", ".join(missing) + "; I cannot plan the trip yet."
    out, back = (s.strip() for s in by["trains"].text.split(";", 1))
    museums = [s.strip() for s in by["museums"].text.split(";")]
    sat, sun = (s.strip() for s in by["weather"].text.split(".", 1))
    return "\n".join(
        [
            "Vienna weekend itinerary:",
            f"Saturday ({sat.split(': ', 1)[1]}): {out}; afternoon at the {museums[1]}, evening walk in the Stadtpark.",
            f"Sunday ({sun.rstrip('.').split(': ', 1)[1]}): morning at the {museums[0]}, "
            f"after lunch the {museums[2]} (indoors for the showers); {back}.",
        ]
    )


def booking_answer(part: Part, results: Sequence[Message]) -> str:
    """Part 3: what the booking call came back with."""
    booked = next((m for m in results if m.tool_name == "book_train"), None)
    if booked is None:
        return "I did not get an answer from the booking service."
    if booked.is_error:
        return "The booking may or may not have gone through; please check your bookings before I try again."
    return f"Done - your seat is booked. {booked.text}."


#: ``final_answer`` in scenarios.toml names one of these.
FINAL_ANSWERS: dict[str, Callable[[Part, Sequence[Message]], str]] = {
    "config": config_answer,
    "itinerary": itinerary,
    "booking": booking_answer,
}
assert {p.final_answer for p in SCENARIOS.parts} <= set(FINAL_ANSWERS)
