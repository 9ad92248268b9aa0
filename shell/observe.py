"""Logs and traces for hosts, derived from what each durable commit changed.

Theory of operation
-------------------
The loop hands every commit to :meth:`Observer.committed` once it is durable,
with the events it journals and the reducer's ``State`` from before the step
that produced it. Comparing a written record with its version in that state
says what happened: a task created, a phase entered, a task ended, a run
started (``pi.live.run`` set) or ended (cleared). Each such change that
matters to a host becomes one record on the ``pidurable`` logger, with
structured fields in ``extra`` (``kind``, ``conversation_id``, ``task_id``,
``seq`` and per kind ``attempt``, ``delay_ms``, ``tool``, ``outcome``...):

=====================  =======  ==================================================
``kind``               level    when
=====================  =======  ==================================================
``run_start``          INFO     ``pi.live.run`` set (fields: ``inputs``)
``run_end``            INFO     ``pi.live.run`` cleared (``statuses``, ``reasons``);
                                WARNING when an input settled ``model_error`` /
                                ``faulted`` / ``no_model`` / ``context_overflow``
``tool_start``         INFO     a ``pi.tool`` task stored its ``execute`` intent
                                and runs (``tool``, ``call_id``, ``replay``); a
                                safe body re-run after a restart commits nothing,
                                so ``Observer.acted`` reports it (``resumed``)
``tool_end``           INFO     a ``pi.tool`` task ended (``outcome``, ``is_error``)
``retry``              WARNING  a request (or a summary) failed retryably and
                                waits: ``attempt``, ``delay_ms``, ``until``, ``error``
``compaction_start``   INFO     a ``pi.compaction`` task was created (``reason``)
``compaction_end``     INFO     it ended (``outcome``)
``fault``              WARNING  a task ended ``faulted`` or ``orphaned`` (``error``)
``model_request``      DEBUG    a generation sent a request (``attempt``, ``model``)
``task_start/_end``    DEBUG    any other task created / ended
``recovered``          INFO     the opening commit moved ``running`` tasks back
=====================  =======  ==================================================

Cheap when nobody listens: the loop calls in only after the commit, and the
observer returns at once unless the logger is enabled for WARNING (Python's
default) or lower, or a tracer is active (one given to ``Harness.open``, or
a global provider set); a record's message is formatted only if emitted.

Traces: when ``opentelemetry-api`` is importable (the ``otel`` extra), spans
for runs, model requests, tool calls and compactions, the way DBOS and
Temporal's interceptors make them: ``tracer.start_span(name,
context=set_span_in_context(parent), attributes=...)`` at the start commit,
``span.end()`` at the end commit, an ERROR status on failure; conversation
and task ids as attributes (``pidurable.conversation_id``,
``pidurable.task_id``, ...). Model-request and tool spans are children of
their run's span. Without the package nothing is imported and no span is made.
Spans still open when the harness closes end with ``pidurable.closed=true``
(their work resumes, under new spans, at the next open).

This module only reads; it never writes, never touches the core's decisions.
"""

from __future__ import annotations

import importlib
import logging
import os
from operator import attrgetter, itemgetter, methodcaller
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pidurable.core.builtins import builtin_address
from pidurable.core.effects import Commit, Effect, PutDocument, PutEntry, PutSubmission, PutTask, RunTool, Write
from pidurable.core.events import Event, Opened
from pidurable.core.model import (
    COMPACTION,
    GENERATION,
    TOOL,
    ConversationId,
    EntryKind,
    OutcomeStatus,
    SubmissionStatus,
    SubmissionType,
    Task,
    TaskId,
    TaskStatus,
)
from pidurable.core.state import LIVE_DOC, Live, State

from .errors import InvalidInput

log = logging.getLogger("pidurable")

#: ``opentelemetry.environment_variables.OTEL_PYTHON_TRACER_PROVIDER`` (not
#: imported: the package is optional).
_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"

#: Reasons a run's input settled with that are a problem, not a choice.
TROUBLE = frozenset({"model_error", "faulted", "no_model", "context_overflow"})

#: Phases that mean "a request is out" (a deferred one is polled).
ASKING = frozenset({"request", "poll"})

#: Phases that wait out a retryable failure (generation, compaction).
RETRYING = frozenset({"retry", "summarize_retry"})


class Span(Protocol):
    """The part of an OpenTelemetry span this module uses."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def set_status(self, status: Any, description: str | None = None) -> None: ...

    def end(self, end_time: int | None = None) -> None: ...


class _Otel:
    """The imported ``opentelemetry.trace`` pieces and the open spans."""

    def __init__(self, trace: Any, tracer: Any, *, explicit: bool) -> None:
        self.trace = trace
        self.tracer = tracer
        #: The host gave the tracer (else: the global provider's, which makes
        #: no spans until the host sets a provider).
        self.explicit = explicit
        self.error = trace.Status(trace.StatusCode.ERROR)
        #: A global provider is set (set-once in OpenTelemetry: never unset).
        self.provider_set = False
        #: ``get_tracer_provider()`` reads ``os.environ`` (a Python mapping
        #: lookup that raises KeyError inside) on every call. The variable
        #: that names a provider is read once, here (a host sets it before
        #: the process starts, OpenTelemetry's own convention); the set-once
        #: global is then a module attribute read per flush (issue 11 item 2).
        #: Without that attribute (another opentelemetry-api), the full call.
        self.lazy = not hasattr(trace, "_TRACER_PROVIDER") or _PROVIDER_ENV in os.environ
        #: ("run", conversation) / ("model", task) / ("tool", task) / ("compaction", task)
        self.open: dict[tuple[str, int], Span] = {}

    def start(self, key: tuple[str, int], name: str, attrs: Mapping[str, Any], parent: tuple[str, int] | None) -> None:
        if key in self.open:
            return
        context = None
        if parent is not None and parent in self.open:
            context = self.trace.set_span_in_context(self.open[parent])
        attributes = {f"pidurable.{k}": v for k, v in attrs.items() if isinstance(v, (str, bool, int, float))}
        self.open[key] = self.tracer.start_span(name, context=context, attributes=attributes)

    def end(self, key: tuple[str, int], attrs: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        span = self.open.pop(key, None)
        if span is None:
            return
        for k, v in (attrs or {}).items():
            if isinstance(v, (str, bool, int, float)):
                span.set_attribute(f"pidurable.{k}", v)
        if error is not None:
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, error))
        span.end()

    @property
    def active(self) -> bool:
        """Spans are recorded: an explicit tracer, or a global provider set
        (also one set mid-run, by ``set_tracer_provider``: seen at the next
        flush)."""
        if self.explicit or self.provider_set or self.open:
            return True
        if self.lazy:  # named by the environment: loaded by the first call
            self.provider_set = not isinstance(self.trace.get_tracer_provider(), self.trace.ProxyTracerProvider)
        else:
            provider = self.trace._TRACER_PROVIDER
            self.provider_set = provider is not None and not isinstance(provider, self.trace.ProxyTracerProvider)
        return self.provider_set

    def close(self) -> None:
        for key in list(self.open):
            self.end(key, {"closed": True})


def load_tracing(tracer: object = None) -> _Otel | None:
    """Tracing, when ``opentelemetry-api`` is importable (else None: nothing
    imported, no span made). ``tracer`` defaults to the global provider's."""
    try:
        trace = importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None
    if tracer is None:
        return _Otel(trace, trace.get_tracer("pidurable"), explicit=False)
    if not callable(getattr(tracer, "start_span", None)):
        raise InvalidInput("tracer must be an OpenTelemetry Tracer (with start_span)")
    return _Otel(trace, tracer, explicit=True)


class Observer:
    """Turns durable commits into log records and spans (see the module doc)."""

    def __init__(self, tracer: object = None, *, tracing: bool = True) -> None:
        self.otel = load_tracing(tracer) if tracing else None
        #: Tool tasks whose start was observed in this process life (a body
        #: re-run after a restart starts without a commit: see ``acted``).
        self.started: set[TaskId] = set()

    def acting(self) -> bool:
        """Whether the acts of the flush starting now are observed (a tracer
        active, or the logger enabled for INFO). Asked once per flush, not
        per act: a flush's acts run one after the other without a
        checkpoint, so no host code sets a tracer provider or a log level
        between them (and the tracer check reads the environment)."""
        return (self.otel is not None and self.otel.active) or log.isEnabledFor(logging.INFO)

    def acted(self, effect: Effect, state: State) -> None:
        """An act is starting (the loop calls in only when ``acting()``).
        Only a tool body that is not known to have started in this life
        matters: a safe call re-run after a restart, whose start commits
        nothing - it is logged (and traced) here."""
        if not isinstance(effect, RunTool) or effect.task_id in self.started:
            return
        otel = self.otel if self.otel is not None and self.otel.active else None
        if otel is None and not log.isEnabledFor(logging.INFO):
            return
        task = state.tasks.get(effect.task_id)
        if task is not None:
            _Commit(None, (), state, otel, self.started).tool_started(task, resumed=True)

    def close(self) -> None:
        if self.otel is not None:
            self.otel.close()

    def committed(self, commits: Sequence[tuple[Commit, Sequence[Event], State]], now: State | None = None) -> bool | None:
        """Every commit of a flush, in order, once all are durable (``now``:
        the state after the last of them; each one's is the next one's before).
        Returns ``acting()``'s answer when it is known without asking again
        (issue 11 item 2: the tracer check reads the environment): warnings
        only and none emitted (no host code ran since it was asked); else None."""
        otel = self.otel if self.otel is not None and self.otel.active else None
        if otel is None and not log.isEnabledFor(logging.WARNING):
            return None  # the cheap path: nobody listens
        # each commit's after is the next one's before (itemgetter in C: issue 11 item 2)
        afters = [*map(_BEFORE, commits[1:]), now if now is not None else commits[-1][2]] if commits else []
        if otel is None and not log.isEnabledFor(logging.INFO):
            # warnings only (Python's default): look just at what can warn
            quiet = True
            for (commit, events, before), after in zip(commits, afters):
                if _may_warn(commit.writes, after):
                    _Commit(commit, events, before, None, self.started, after).observe()
                    quiet = False
            return False if quiet else None
        for (commit, events, before), after in zip(commits, afters):
            _Commit(commit, events, before, otel, self.started, after).observe()
        return None


class _Commit:
    """One commit's changes, compared with ``before``."""

    def __init__(
        self,
        commit: Commit | None,
        events: Sequence[Event],
        before: State,
        otel: _Otel | None,
        started: set[TaskId],
        after: State | None = None,
    ) -> None:
        self.commit, self.before, self.otel, self.started = commit, before, otel, started
        self.writes = commit.writes if commit is not None else ()
        self.now = events[-1].now if events else None
        self.opening = any(isinstance(e, Opened) for e in events)
        #: The conversations whose ``pi.live`` the commit writes, with its new value.
        self.lives = {cid: after.conversations[cid].live for cid in _lives(self.writes, after)} if after is not None else {}

    def emit(self, level: int, kind: str, message: str, *args: Any, **fields: Any) -> None:
        """One record (``message % args``, formatted only if it is emitted)."""
        if log.isEnabledFor(level):
            seq = self.commit.seq if self.commit is not None else self.before.next_seq - 1
            log.log(level, message, *args, extra={"kind": kind, "seq": seq, **fields})

    def observe(self) -> None:
        writes = self.writes
        if self.opening:
            moved = [w.task.id for w in writes if isinstance(w, PutTask) and w.task.status is TaskStatus.PENDING]
            if moved:
                self.emit(logging.INFO, "recovered", "opened the store: %d interrupted task(s) back to pending",
                          len(moved), task_ids=moved)
            return
        for cid, live in self.lives.items():
            self.run(cid, live)
        for w in writes:
            if isinstance(w, PutTask):
                self.task(w.task)

    # --- runs ---------------------------------------------------------------------
    def run_span(self, cid: ConversationId) -> tuple[str, int]:
        """The key of ``cid``'s run span, started now (``resumed``) when the
        run began in an earlier process life."""
        key = ("run", cid)
        conv = self.before.conversations.get(cid)
        if self.otel is not None and key not in self.otel.open and conv is not None and conv.live.run is not None:
            self.otel.start(key, "pidurable.run", {"conversation_id": cid, "task_id": conv.live.run.task_id,
                                                   "resumed": True}, None)
        return key

    def run(self, cid: ConversationId, live: Live) -> None:
        conv = self.before.conversations.get(cid)
        was = conv.live.run if conv is not None else None
        if was is None and live.run is not None:
            inputs = list(live.run.inputs)
            self.emit(logging.INFO, "run_start", "run started in conversation %s (task %s, inputs %s)",
                      cid, live.run.task_id, inputs, conversation_id=cid, task_id=live.run.task_id, inputs=inputs)
            if self.otel is not None:
                self.otel.start(("run", cid), "pidurable.run", {"conversation_id": cid, "task_id": live.run.task_id,
                                                                "inputs": ",".join(map(str, inputs))}, None)
        elif was is not None and live.run is None:
            settled = [w.submission for w in self.writes if isinstance(w, PutSubmission)
                       and w.submission.type is SubmissionType.INPUT and w.submission.id in was.inputs]
            statuses = {s.id: s.status.value for s in settled}
            reasons = {s.id: s.reason for s in settled if s.reason is not None}
            trouble = sorted({r for r in reasons.values() if r in TROUBLE})
            level = logging.WARNING if trouble else logging.INFO
            self.emit(level, "run_end", "run ended in conversation %s (inputs %s, reasons %s)",
                      cid, statuses, reasons, conversation_id=cid, task_id=was.task_id, statuses=statuses, reasons=reasons)
            if self.otel is not None:
                done = all(s.status is SubmissionStatus.DONE for s in settled)
                self.otel.end(("run", cid), {"outcome": "done" if done else "unanswered",
                                             "reasons": ",".join(sorted(set(reasons.values())))},
                              error=", ".join(trouble) if trouble else None)

    # --- tasks --------------------------------------------------------------------
    def task(self, task: Task) -> None:
        old = self.before.tasks.get(task.id)
        if task.kind == GENERATION:
            self.generation(task, old)
        elif task.kind == TOOL:
            self.tool(task, old)
        elif task.kind == COMPACTION:
            self.compaction(task, old)
        elif old is None and task.live:
            self.emit(logging.DEBUG, "task_start", "task %s (%s) created", task.id, task.kind, **_ids(task))
        if task.status is TaskStatus.TERMINAL and task.outcome is not None:
            outcome = task.outcome.status
            if outcome in (OutcomeStatus.FAULTED, OutcomeStatus.ORPHANED):
                error = _error(task)
                self.emit(logging.WARNING, "fault", "task %s (%s) %s: %s", task.id, task.kind, outcome.value, error,
                          outcome=outcome.value, error=error, **_ids(task))
            elif task.kind not in (GENERATION, TOOL, COMPACTION):
                self.emit(logging.DEBUG, "task_end", "task %s (%s) %s", task.id, task.kind, outcome.value,
                          outcome=outcome.value, **_ids(task))

    def generation(self, task: Task, old: Task | None) -> None:
        phase, was = task.phase, (old.phase if old is not None else None)
        cp = task.checkpoint
        attempt = cp.get("attempt")
        if phase in ASKING and (was not in ASKING or (old is not None and old.checkpoint.get("attempt") != attempt)):
            model = cp.get("model")
            name = f"{model.get('provider')}/{model.get('model_id')}" if isinstance(model, dict) else None
            self.emit(logging.DEBUG, "model_request", "task %s sent request attempt %s to %s", task.id, attempt, name,
                      attempt=attempt, model=name, **_ids(task))
            if self.otel is not None:
                if old is not None and was in ASKING:
                    self.otel.end(("model", task.id))
                self.otel.start(("model", task.id), "pidurable.model_request",
                                {**_ids(task), "attempt": attempt, "model": name}, self.run_span(task.conversation_id))
        if phase == "retry" and was != "retry":
            live = self.lives.get(task.conversation_id)
            error = live.retry_error if live is not None else None
            self.retry(task, error)
            if self.otel is not None:
                self.otel.end(("model", task.id), error=error or "retryable failure")
        elif self.otel is not None and was in ASKING and (phase not in ASKING or not task.live):
            failed = task.outcome is not None and task.outcome.status is not OutcomeStatus.COMPLETED
            self.otel.end(("model", task.id), error=_error(task) if failed else None)

    def retry(self, task: Task, error: str | None) -> None:
        until = task.checkpoint.get("until")
        attempt = task.checkpoint.get("attempt")
        delay = until - self.now if isinstance(until, int) and self.now is not None else None
        self.emit(logging.WARNING, "retry", "task %s (%s) attempt %s failed (%s); retrying in %s ms",
                  task.id, task.kind, attempt, error, delay, attempt=attempt, delay_ms=delay, until=until, error=error, **_ids(task))

    def tool(self, task: Task, old: Task | None) -> None:
        running = task.status is TaskStatus.RUNNING and task.phase == "execute"
        was_running = old is not None and old.status is TaskStatus.RUNNING and old.phase == "execute"
        if running and not was_running:
            self.tool_started(task, resumed=False)
        if task.status is TaskStatus.TERMINAL and (old is None or old.live):
            self.started.discard(task.id)
            name, call_id = task.input.get("name"), task.input.get("call_id")
            outcome = task.outcome.status.value if task.outcome is not None else None
            is_error = any(isinstance(w, PutEntry) and w.entry.kind is EntryKind.TOOL_RESULT
                           and w.entry.tool_call_id == call_id and w.entry.is_error for w in self.writes)
            self.emit(logging.INFO, "tool_end", "tool %s ended %s%s", name, outcome,
                      " with an error result" if is_error else "", tool=name, call_id=call_id, outcome=outcome,
                      is_error=is_error, **_ids(task))
            if self.otel is not None:
                failed = is_error or outcome != OutcomeStatus.COMPLETED.value
                self.otel.end(("tool", task.id), {"outcome": outcome or "", "is_error": is_error},
                              error=(_error(task) or "error result") if failed else None)

    def tool_started(self, task: Task, *, resumed: bool) -> None:
        """Its body starts: after the commit of its ``execute`` intent, or (a
        safe re-run after a restart, which commits nothing) as it is acted."""
        self.started.add(task.id)
        name, call_id = task.input.get("name"), task.input.get("call_id")
        replay = task.checkpoint.get("replay")
        self.emit(logging.INFO, "tool_start", "tool %s started (task %s, call %s)%s", name, task.id, call_id,
                  " again after a restart" if resumed else "",
                  tool=name, call_id=call_id, replay=replay, resumed=resumed, **_ids(task))
        if self.otel is not None:
            self.otel.start(("tool", task.id), f"pidurable.tool {name}",
                            {**_ids(task), "tool": name, "call_id": call_id, "replay": replay, "resumed": resumed},
                            self.run_span(task.conversation_id))

    def compaction(self, task: Task, old: Task | None) -> None:
        reason = task.input.get("reason")
        if old is None and task.live:
            self.emit(logging.INFO, "compaction_start", "compaction %s started (%s)", task.id, reason,
                      reason=reason, **_ids(task))
            if self.otel is not None:
                self.otel.start(("compaction", task.id), "pidurable.compaction", {**_ids(task), "reason": reason},
                                ("run", task.conversation_id))
        if task.phase == "summarize_retry" and (old is None or old.phase != "summarize_retry"):
            self.retry(task, _error(task))
        if task.status is TaskStatus.TERMINAL and (old is None or old.live):
            outcome = task.outcome.status.value if task.outcome is not None else None
            self.emit(logging.INFO, "compaction_end", "compaction %s ended %s", task.id, outcome,
                      reason=reason, outcome=outcome, **_ids(task))
            if self.otel is not None:
                failed = outcome != OutcomeStatus.COMPLETED.value
                self.otel.end(("compaction", task.id), {"outcome": outcome or ""}, error=_error(task) if failed else None)


def _lives(writes: Sequence[Write], after: State) -> list[ConversationId]:
    """The held conversations whose ``pi.live`` revision ``writes`` hold."""
    out = []
    for w in writes:
        address = builtin_address(w.document_id) if isinstance(w, PutDocument) else None
        if address is not None and address[1] == LIVE_DOC and address[0] in after.conversations:
            out.append(address[0])
    return out


def _may_warn(writes: Sequence[Write], after: State) -> bool:
    """Whether a commit's writes can make a WARNING record: a run ending (its
    inputs may have settled in trouble), a task entering a retry phase, a
    task ending faulted or orphaned. Asked of every commit when only
    warnings are logged (Python's default): the tasks' phases and outcomes
    are read in C (map, filter, isdisjoint: issue 11 item 2)."""
    tasks = [*map(_TASK, filter(_IS_TASK, writes))]
    if not RETRYING.isdisjoint(map(_PHASE, map(_CHECKPOINT, tasks))):
        return True
    if not _TROUBLE_OUTCOMES.isdisjoint(map(_STATUS, filter(None, map(_OUTCOME, tasks)))):
        return True
    for address in map(builtin_address, map(_DOCUMENT_ID, filter(_IS_DOCUMENT, writes))):
        if address is not None and address[1] == LIVE_DOC:
            conv = after.conversations.get(address[0])
            if conv is not None and conv.live.run is None:
                return True
    return False


_IS_TASK, _IS_DOCUMENT = PutTask.__instancecheck__, PutDocument.__instancecheck__  #: isinstance in one C call
_TASK, _CHECKPOINT, _OUTCOME, _STATUS = attrgetter("task"), attrgetter("checkpoint"), attrgetter("outcome"), attrgetter("status")
_PHASE, _DOCUMENT_ID = methodcaller("get", "phase"), attrgetter("document_id")
_BEFORE = itemgetter(2)  #: a commit's state before (``committed``)
_TROUBLE_OUTCOMES = frozenset({OutcomeStatus.FAULTED, OutcomeStatus.ORPHANED})


def _ids(task: Task) -> dict[str, Any]:
    return {"conversation_id": task.conversation_id, "task_id": task.id, "task_kind": task.kind}


def _error(task: Task) -> str | None:
    if task.outcome is None or task.outcome.error is None:
        return None
    message = task.outcome.error.get("message")
    return message if isinstance(message, str) else str(task.outcome.error)
