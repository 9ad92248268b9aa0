"""``replay --explain``: each journaled commit told as a short story.

Theory of operation
-------------------
:func:`~.journal.replay` re-runs the journal through the pure core; each
:class:`~.journal.Transition` carries the rules the core reports having
fired (``Step.rules``: the event's handler and each phase or lifecycle row,
with its task) and the state the row's events were stepped on. This module
only reads those and the recorded events and writes, and says per commit:

- the event(s), in words;
- the rules that fired, each linked to the spec section that states it
  (``SPECS``; ``tests/shell/test_cli_explain.py`` checks every link);
- what was written: entries, task and submission status moves (the record
  before the commit -> after), inbox changes;
- the effects that followed the commit;
- at an ``opened`` that reopens a store with running work (the previous
  process died mid-step): what was stored, and what reopening did to each
  running task (back to pending, then re-send, re-run, reconcile or
  interrupted).

It decides nothing and writes nothing: a story is derived from the journal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pidurable.core.builtins import builtin_address
from pidurable.core.builtins import to_json as builtin_json
from pidurable.core.chord import apply as apply_ops
from pidurable.core.events import Opened
from pidurable.core.model import ConversationId, Task
from pidurable.core.state import INBOX_DOC, State

from .journal import Transition, replay
from .storage import codec
from .storage.base import JournalRow


def anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (``## Open / recovery (`Opened`)``
    -> ``open--recovery-opened``)."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


#: Where each rule is stated: a rule's prefix (``pi.tool:``, ``task:``, or a
#: handler's module ``admission.``) -> (spec file, heading).
SPECS: Mapping[str, tuple[str, str]] = {
    "pi.tool:": ("tools.md", "Transition table (`PHASES` in `core/tools.py`)"),
    "pi.generation:": ("generation.md", "Transition table (`PHASES` in `core/generation.py`)"),
    "pi.compaction:": ("diagrams.md", "Compaction phases (pi.compaction)"),
    "task:": ("lifecycle.md", "Transition table"),
    "scheduling.on_opened": ("scheduling.md", "Open / recovery (`Opened`)"),
    "scheduling.": ("scheduling.md", "Rules"),
    "holding.": ("scheduling.md", "Holding conversations (`core/holding.py`)"),
    "admission.": ("admission.md", "Transition table (one commit each)"),
    "generation.": ("generation.md", "Transition table (`PHASES` in `core/generation.py`)"),
    "tools.": ("tools.md", "Transition table (`PHASES` in `core/tools.py`)"),
    "cancellation.": ("cancellation.md", "Transitions"),
    "custom.": ("custom.md", "Step rules (`PhaseReturned`)"),
    "documents.": ("documents.md", "Transition table (`core/documents.py` `ROWS`)"),
    "fork.": ("fork.md", "Transition tables (`core/fork.py`)"),
    "compaction_task.": ("diagrams.md", "Compaction phases (pi.compaction)"),
    "settlement.": ("lifecycle.md", "Transition table"),
}

#: What a rule means, in a few words (rules not listed are shown by name only).
GLOSS: Mapping[str, str] = {
    "scheduling.on_opened": "load the stored live records; every running task goes back to pending",
    "task:running,recover": "running -> pending, checkpoint unchanged",
    "holding.on_conversations_loaded": "a settled conversation read back from storage for the call that names it",
    "admission.on_root_requested": "the root conversation (created on first use)",
    "admission.on_input_submitted": "store the input; an idle conversation starts a run, a busy one queues it",
    "pi.generation:prepare,reserve": "pin the request (model, context cutoff) before calling the model",
    "pi.generation:request,reserve": "recovery: re-send the pinned request",
    "pi.generation:request,tool_calls": "store the assistant entry and one tool task per call",
    "pi.generation:request,answer": "store the answer; the run is done, the input answered",
    "pi.generation:tools,round_done": "every tool of the round settled: hand over to the next generation",
    "pi.tool:call,prepared": "arguments valid: store the intent (execute) before running the tool",
    "pi.tool:execute,finished": "store the result entry; the tool task ends",
    "pi.tool:execute,failed": "store the error result; the tool task ends",
    "pi.tool:execute,reserve_rerun": "recovery: a replay=safe tool is run again",
    "pi.tool:execute,reserve_interrupted": "recovery: a replay=unsafe tool is NOT run again; it settles as "
    "interrupted and the model reads so",
    "pi.tool:execute,reserve_reconcile": "recovery: an unsafe tool with reconcile is asked whether it happened",
    "pi.tool:reconcile,reserve_reconcile": "recovery: reconcile is asked again",
    "pi.tool:reconcile,reconciled_done": "reconcile says it happened: its result, the body not run again",
    "pi.tool:reconcile,reconciled_not_done": "reconcile says it did not happen: run the tool",
    "pi.tool:reconcile,reconciled_unknown": "reconcile cannot tell: settled as interrupted, with its note",
}

#: What reopening did to a task found running, by the row that reserved it.
RECOVERY: Mapping[str, str] = {
    "pi.tool:execute,reserve_rerun": "re-run (replay=safe)",
    "pi.tool:execute,reserve_interrupted": "interrupted, NOT re-run (replay=unsafe)",
    "pi.tool:execute,reserve_reconcile": "reconcile asked (replay=unsafe with reconcile), body not re-run",
    "pi.tool:reconcile,reserve_reconcile": "reconcile asked again",
    "pi.tool:reconcile,reserve_interrupted": "interrupted (its reconcile is gone)",
    "pi.generation:request,reserve": "the pinned model request re-sent",
}


def spec_link(rule: str) -> str:
    """``specs/<concern>.md#anchor`` for a rule name, or "" if none is known."""
    for prefix, (file, heading) in SPECS.items():
        if rule.startswith(prefix):
            return f"specs/{file}#{anchor(heading)}"
    return ""


def _clip(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return json.dumps(text if len(text) <= n else text[: n - 1] + "…", ensure_ascii=False)


def event_words(ev: Any) -> str:
    """One event as a sentence (its tag and fields, for events without one)."""
    tag = str(ev.TAG)
    if isinstance(ev, Opened):
        live = sum(1 for t in ev.tasks if t.status.value != "terminal")
        how = "and resumed" if ev.resume else "without resuming"
        return (
            f"the process opened the store {how}: {len(ev.conversations)} conversation(s), {live} live task(s), "
            f"{len(ev.submissions)} open submission(s) loaded"
        )
    if tag == "conversations_loaded":
        ids = ", ".join(str(c.id) for c in ev.conversations)
        return f"settled conversation(s) {ids} read back from storage for the next host call (core/holding.py)"
    if tag == "root_requested":
        return "the host asked for the root conversation"
    if tag == "input_submitted":
        req = f" (request {ev.request_id})" if ev.request_id else ""
        again = "; its request id is stored already: no new submission" if ev.existing is not None else ""
        return f"the host submitted input {_clip(ev.content)}{req}{again}"
    if tag == "model_responded":
        calls = ", ".join(f"{c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})" for c in ev.tool_calls)
        said = f"text {_clip(ev.text)}" if ev.text else ""
        return f"the model answered task {ev.task_id}: " + ("; ".join(x for x in (said, f"calls {calls}" if calls else "") if x) or "(empty)")
    if tag == "model_failed":
        return f"the model call of task {ev.task_id} failed: {_clip(ev.message)}"
    if tag == "tool_finished":
        return f"tool task {ev.task_id} returned{' an error' if ev.is_error else ''}: {_clip(ev.text)}"
    if tag == "tool_failed":
        return f"tool task {ev.task_id} raised: {_clip(ev.message)}"
    if tag == "tool_reconciled":
        return f"reconcile of tool task {ev.task_id} answered: {ev.verdict}"
    task = getattr(ev, "task_id", None)
    return tag.replace("_", " ") + (f" (task {task})" if task is not None else "")


def _task_where(t: Mapping[str, Any] | Task) -> str:
    if isinstance(t, Task):
        status, phase, out = t.status.value, t.phase, t.outcome.status.value if t.outcome else None
    else:
        status, phase = t["status"], t["checkpoint"].get("phase")
        out = (t.get("outcome") or {}).get("status")
    return status + (f" ({out})" if out else f" at {phase}" if phase else "")


def _task_name(t: Mapping[str, Any]) -> str:
    name = (t.get("input") or {}).get("name")
    return f"task {t['id']} {t['kind']}" + (f" {name}" if name else "")


def _write_line(w: Mapping[str, Any], before: State, loaded: Mapping[int, Task]) -> str:
    """One written record; a task or submission as its move from ``before``."""
    kind = w["type"]
    if kind == "task":
        t = w["task"]
        old = before.tasks.get(t["id"]) or loaded.get(t["id"])
        was = _task_where(old) if old is not None else "new"
        line = f"{_task_name(t)}: {was} -> {_task_where(t)}"
        err = ((t.get("outcome") or {}).get("error") or {}).get("message")
        return line + (f" ({_clip(err, 50)})" if err else "")
    if kind == "entry":
        e = w["entry"]
        about = f" of {e['tool_name']}" if e.get("tool_name") else ""
        return f"entry {e['id']} {e['kind']}{about}{' (error)' if e.get('is_error') else ''}: {_clip(e['text'])}"
    if kind == "submission":
        s = w["submission"]
        prev = before.submissions.get(s["id"])
        req = f", request {s['request_id']}" if s.get("request_id") else ""
        was = prev.status.value if prev is not None else "new"
        return f"submission {s['id']} ({s['type']}{req}): {was} -> {s['status']}" + (f" ({s['reason']})" if s.get("reason") else "")
    if kind == "pi.inbox":
        conv = before.conversations.get(w["conversation_id"])
        queued = len(conv.inbox) if conv is not None else 0
        return f"inbox of conversation {w['conversation_id']}: {queued} -> {len(w['items'])} queued item(s)"
    if kind == "conversation":
        return f"conversation {w['conversation']['id']} (new)"
    if kind == "document":
        address = builtin_address(int(w["document_id"]))
        if address is not None:  # a built-in's revision (core/builtins.py)
            return _builtin_line(address[0], address[1], w["revision"], before)
        return f"document {w.get('document_id')} {(w.get('revision') or {}).get('action', '')}".rstrip()
    return f"{kind} of conversation {w.get('conversation_id')}"


def _builtin_line(cid: ConversationId, kind: str, r: Mapping[str, Any], before: State) -> str:
    """A built-in's revision in words: the inbox by its queued items, the
    others by kind and what was stored (a base or a delta)."""
    if kind != INBOX_DOC:
        return f"{kind} of conversation {cid} ({r['action']})"
    conv = before.conversations.get(cid)
    old = builtin_json(conv.inbox) if conv is not None else []
    new = r["value"] if r["action"] == "base" else apply_ops(old, r["ops"])
    return f"inbox of conversation {cid}: {len(old)} -> {len(new)} queued item(s)"


def _writes(text: str) -> list[dict[str, Any]]:
    if not text or codec.is_digest(text):
        return []
    # every field written (format 3 leaves defaults out): decode, then encode as format 1 does
    out: list[dict[str, Any]] = json.loads(codec.writes_json([codec.write_from_data(d) for d in json.loads(text)], 1))
    return out


def _conversation_of(w: Mapping[str, Any]) -> int | None:
    for key in ("task", "entry", "submission"):
        if key in w:
            return int(w[key]["conversation_id"])
    if "conversation" in w:
        return int(w["conversation"]["id"])
    revision = w.get("revision")
    if isinstance(revision, Mapping) and revision.get("scope") == "conversation":
        return int(revision["owner"])
    cid = w.get("conversation_id")
    return None if cid is None else int(cid)


def _split(rule: str) -> tuple[str, int | None]:
    name, _, task = rule.partition(" #")
    return name, int(task) if task else None


def _rule_line(rule: str) -> str:
    name, task = _split(rule)
    gloss = GLOSS.get(name, "")
    link = spec_link(name)
    return (
        f"rule {name}" + (f" (task {task})" if task is not None else "")
        + (f": {gloss}" if gloss else "")
        + (f"  [{link}]" if link else "")
    )


def _reopening(opened: Opened, rules: Sequence[str]) -> list[str]:
    """What was stored at the crash, and what reopening did with each task
    that was running."""
    live = sorted((t for t in opened.tasks if t.status.value != "terminal"), key=lambda t: t.id)
    running = [t for t in live if t.status.value == "running"]
    if not running:
        return []
    out = [
        "the previous process stopped with work running (a crash or a kill; what it stepped after its last "
        "commit was never journaled). Stored at the crash:"
    ]
    for t in live:
        name = t.input.get("name") if isinstance(t.input, Mapping) else None
        replay_ = t.checkpoint.get("replay") if isinstance(t.checkpoint, Mapping) else None
        extra = (f" on={list(t.on)}" if t.on else "") + (f" replay={replay_}" if replay_ else "")
        out.append(f"  task {t.id} {t.kind}{' ' + str(name) if name else ''}: {_task_where(t)}{extra}")
    out.append("reopening did:")
    for t in running:
        did = ["running -> pending"]
        for rule in rules:
            name, task = _split(rule)
            if task == t.id and name in RECOVERY:
                did.append(RECOVERY[name])
        if len(did) == 1:
            did.append("runs again from its checkpoint")
        out.append(f"  task {t.id}: " + "; ".join(did))
    return out


def explain(
    rows: Sequence[JournalRow], *, conversation: int | None = None, first: int | None = None, last: int | None = None
) -> Iterator[str]:
    """The story of ``rows``, line by line (see the module comment)."""
    life = 0
    for row, t in zip(rows, replay(rows), strict=True):
        life += t.opens
        if (first is not None and t.seq < first) or (last is not None and t.seq > last):
            continue
        lines = list(_story(row, t, life, conversation))
        yield from lines


def _story(row: JournalRow, t: Transition, life: int, conversation: int | None) -> Iterable[str]:
    events = [codec.event_from_data(d) for d in json.loads(row.events)] if t.divergence is None and not t.skipped else []
    writes = _writes(t.produced or row.writes)
    if conversation is not None and not any(_conversation_of(w) == conversation for w in writes):
        if t.opens:
            yield f"── process life {life} opens at commit {t.seq} (nothing written for conversation {conversation}) ──"
        return
    if t.opens:
        yield ""
        yield f"── process life {life} ──" if life > 1 else "── process life 1 ──"
    if t.divergence is not None or t.skipped:
        yield f"commit {t.seq}: not explained: {t.divergence.message if t.divergence else 'an earlier commit of this life differs'}"
        return
    yield f"commit {t.seq}"
    loaded: dict[int, Task] = {}
    before = t.before if t.before is not None else State()
    for i, ev in enumerate(events):
        yield f"  event: {event_words(ev)}"
        rules = t.rules[i] if i < len(t.rules) else ()
        if isinstance(ev, Opened):
            loaded = {task.id: task for task in ev.tasks}
            yield from ("    " + line for line in _reopening(ev, rules))
        for rule in rules:
            yield f"    {_rule_line(rule)}"
    if conversation is not None:
        writes = [w for w in writes if _conversation_of(w) in (conversation, None)]
    if writes:
        yield "  wrote:"
        yield from (f"    {_write_line(w, before, loaded)}" for w in writes)
    if t.acts:
        yield f"  then: {', '.join(t.acts)}"
