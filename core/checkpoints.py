"""Typed checkpoints of the built-in task kinds, and their one wire shape.

Theory of operation
-------------------
A task's ``checkpoint`` is stored (and shown to hosts in ``TaskRecord``) as a
JSON object with a ``phase``. Custom tasks keep that dict as it is: its shape
is host code's business. The built-in kinds have one frozen record per phase,
whose ``PHASE`` is its tag: :func:`parse` turns the stored dict into the
record once, where a phase machine dispatches (phases.py), and :func:`to_dict`
turns a record back into the dict that is stored, with the keys in the order
the store has always had them (replay compares commits byte for byte, so this
order is part of the format; an absent optional field is omitted, so the
bytes of older records are unchanged):

========== ================================================================
prepare    ``{phase, attempt[, compacted[, threshold][, overflow, head]]}``
request    ``{phase, attempt, model: {provider, model_id}, cutoff[, compacted[, threshold]]}``
retry      ``{phase, attempt, until[, compacted[, threshold]]}``
poll       ``{phase, attempt, model, cutoff, handle, poll_at[, compacted[, threshold]]}``
tools      ``{phase, assistant, tools, pending}``
call       ``{phase}``
execute    ``{phase, arguments, replay[, process][, reconciled]}``
reconcile  ``{phase, arguments, replay}``
select     ``{phase}``
summarize  ``{phase, attempt, model, max_tokens, tail, first_kept}``
========== ================================================================

Must not touch: decisions. Handlers build records; the phase machine stores
them; nothing else writes a built-in checkpoint.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeAlias, get_args

import attrs

from .model import CoreInvariantError, EntryId, Json, ModelRef, Replay, TaskId


class GenerationPhase(enum.StrEnum):
    """The phases of ``pi.generation`` (see generation.py's table)."""

    #: Nothing pinned yet; the next reservation fixes model and cutoff.
    PREPARE = "prepare"
    #: The intent of one request: which model, and the newest entry it sees.
    REQUEST = "request"
    #: A retryable failure is waited out until ``until``.
    RETRY = "retry"
    #: A deferred answer is polled by its saved ``handle``.
    POLL = "poll"
    #: Waiting on the round's tool tasks (``pending``: sequential calls left).
    TOOLS = "tools"


class ToolPhase(enum.StrEnum):
    """The phases of ``pi.tool`` (see tools.py's table)."""

    #: Nothing decided: resolve, validate, run before-tool hooks.
    CALL = "call"
    #: The durable intent: final arguments and the replay promise.
    EXECUTE = "execute"
    #: An interrupted unsafe call's ``reconcile`` is being asked (reconcile.py).
    RECONCILE = "reconcile"


class CompactionPhase(enum.StrEnum):
    """The phases of ``pi.compaction`` (see compaction_task.py's table)."""

    #: Nothing pinned: the shell chooses the cut over the committed context.
    SELECT = "select"
    #: The intent of one summarization request: model, range and budget.
    SUMMARIZE = "summarize"
    #: A retryable summarizer error is waited out (the same pinned request,
    #: sent again at ``until`` as the next attempt).
    SUMMARIZE_RETRY = "summarize_retry"


#: The plain strings written to the store (never the enum members).
_WIRE_PHASE: dict[enum.StrEnum, str] = {
    p: str(p.value) for p in (*GenerationPhase, *ToolPhase, *CompactionPhase)
}
_WIRE_REPLAY: dict[Replay, str] = {r: str(r.value) for r in Replay}
#: The replay promise read back from the store (anything else: unsafe).
REPLAYS: dict[str, Replay] = {str(r.value): r for r in Replay}


def _model_dict(model: ModelRef) -> dict[str, Json]:
    return {"provider": model.provider, "model_id": model.model_id}


@attrs.frozen(kw_only=True)
class PrepareCheckpoint:
    PHASE: ClassVar[GenerationPhase] = GenerationPhase.PREPARE
    attempt: int = 1
    #: The blocking compaction this generation started (it never starts a
    #: second one); carried through request/retry/poll.
    compacted: TaskId | None = None
    #: ``compacted`` was a threshold compaction (started before any request:
    #: attempt unchanged), not an overflow one (its resend is the next
    #: attempt): the retry budget counts accordingly. Carried like it.
    threshold: bool = False
    #: After an overflow: the provider's text (the run fails with it when the
    #: compaction placed nothing) ...
    overflow: str | None = None
    #: ... and the range start (``pi.context.head``) before the compaction:
    #: unchanged afterwards means nothing was placed.
    head: EntryId | None = None


@attrs.frozen(kw_only=True)
class RequestCheckpoint:
    PHASE: ClassVar[GenerationPhase] = GenerationPhase.REQUEST
    attempt: int
    model: ModelRef
    #: Ids are global and increasing: the request sees entries up to here.
    cutoff: EntryId
    compacted: TaskId | None = None
    threshold: bool = False


@attrs.frozen(kw_only=True)
class RetryCheckpoint:
    PHASE: ClassVar[GenerationPhase] = GenerationPhase.RETRY
    #: The attempt that failed (the next one is ``attempt + 1``).
    attempt: int
    until: int
    compacted: TaskId | None = None
    threshold: bool = False


@attrs.frozen(kw_only=True)
class PollCheckpoint:
    PHASE: ClassVar[GenerationPhase] = GenerationPhase.POLL
    attempt: int
    model: ModelRef
    cutoff: EntryId
    #: The provider's handle of the deferred answer (any JSON value).
    handle: Json
    poll_at: int
    compacted: TaskId | None = None
    threshold: bool = False


@attrs.frozen(kw_only=True)
class ToolsCheckpoint:
    PHASE: ClassVar[GenerationPhase] = GenerationPhase.TOOLS
    #: The assistant entry whose calls this round answers.
    assistant: EntryId
    #: Every tool task of the round created so far, in call order.
    tools: tuple[TaskId, ...]
    #: Call ids of a sequential batch that have no task yet, in order.
    pending: tuple[str, ...]


@attrs.frozen(kw_only=True)
class CallCheckpoint:
    PHASE: ClassVar[ToolPhase] = ToolPhase.CALL


@attrs.frozen(kw_only=True)
class ExecuteCheckpoint:
    PHASE: ClassVar[ToolPhase] = ToolPhase.EXECUTE
    arguments: dict[str, Json]
    replay: Replay
    #: The OS process group a running body started (pid, pgid, host, start).
    process: dict[str, Json] | None = None
    #: This execution follows a ``not_done`` verdict of ``reconcile`` (its
    #: result entry says so: ``data["reconciled"]``).
    reconciled: bool = False


@attrs.frozen(kw_only=True)
class ReconcileCheckpoint:
    """The intent of asking ``reconcile``: the interrupted call's stored
    arguments and replay promise (kept for the ``not_done`` re-execution)."""

    PHASE: ClassVar[ToolPhase] = ToolPhase.RECONCILE
    arguments: dict[str, Json]
    replay: Replay


@attrs.frozen(kw_only=True)
class SelectCheckpoint:
    PHASE: ClassVar[CompactionPhase] = CompactionPhase.SELECT


@attrs.frozen(kw_only=True)
class SummarizeCheckpoint:
    PHASE: ClassVar[CompactionPhase] = CompactionPhase.SUMMARIZE
    attempt: int
    model: ModelRef
    #: The summary's output budget (``0.8 * reserve_tokens``).
    max_tokens: int
    #: The newest entry of the captured context (what the summary covers up to).
    tail: EntryId
    #: The first entry the summary keeps (its marker's ``head``).
    first_kept: EntryId


GenerationCheckpoint: TypeAlias = (
    PrepareCheckpoint | RequestCheckpoint | RetryCheckpoint | PollCheckpoint | ToolsCheckpoint
)
ToolCheckpoint: TypeAlias = CallCheckpoint | ExecuteCheckpoint | ReconcileCheckpoint
@attrs.frozen(kw_only=True)
class SummarizeRetryCheckpoint:
    PHASE: ClassVar[CompactionPhase] = CompactionPhase.SUMMARIZE_RETRY
    attempt: int
    model: ModelRef
    max_tokens: int
    tail: EntryId
    first_kept: EntryId
    #: When the next attempt is sent (a saved deadline: after a restart only
    #: the remainder is waited).
    until: int


CompactionCheckpoint: TypeAlias = SelectCheckpoint | SummarizeCheckpoint | SummarizeRetryCheckpoint
Checkpoint: TypeAlias = GenerationCheckpoint | ToolCheckpoint | CompactionCheckpoint


def _compacted(out: dict[str, Json], compacted: TaskId | None, threshold: bool = False) -> dict[str, Json]:
    if compacted is not None:
        out["compacted"] = compacted
        if threshold:
            out["threshold"] = True
    return out


def _opt_id(value: Any) -> TaskId | None:
    return None if value is None else TaskId(int(value))


def _prepare_dict(cp: PrepareCheckpoint, phase: str) -> dict[str, Json]:
    out: dict[str, Json] = {"phase": phase, "attempt": cp.attempt}
    if cp.compacted is not None:
        out["compacted"] = cp.compacted
        if cp.threshold:
            out["threshold"] = True
        if cp.overflow is not None:
            out["overflow"] = cp.overflow
            out["head"] = cp.head
    return out


def _request_dict(cp: RequestCheckpoint, phase: str) -> dict[str, Json]:
    out: dict[str, Json] = {"phase": phase, "attempt": cp.attempt, "model": _model_dict(cp.model), "cutoff": cp.cutoff}
    return _compacted(out, cp.compacted, cp.threshold)


def _retry_dict(cp: RetryCheckpoint, phase: str) -> dict[str, Json]:
    return _compacted({"phase": phase, "attempt": cp.attempt, "until": cp.until}, cp.compacted, cp.threshold)


def _poll_dict(cp: PollCheckpoint, phase: str) -> dict[str, Json]:
    out: dict[str, Json] = {
        "phase": phase,
        "attempt": cp.attempt,
        "model": _model_dict(cp.model),
        "cutoff": cp.cutoff,
        "handle": cp.handle,
        "poll_at": cp.poll_at,
    }
    return _compacted(out, cp.compacted, cp.threshold)


def _tools_dict(cp: ToolsCheckpoint, phase: str) -> dict[str, Json]:
    return {"phase": phase, "assistant": cp.assistant, "tools": list(cp.tools), "pending": list(cp.pending)}


def _phase_only(cp: CallCheckpoint | SelectCheckpoint, phase: str) -> dict[str, Json]:
    return {"phase": phase}


def _execute_dict(cp: ExecuteCheckpoint, phase: str) -> dict[str, Json]:
    # Payload dicts are treated as immutable: shared, never copied here.
    out: dict[str, Json] = {"phase": phase, "arguments": cp.arguments, "replay": _WIRE_REPLAY[cp.replay]}
    if cp.process is not None:
        out["process"] = cp.process
    if cp.reconciled:
        out["reconciled"] = True
    return out


def _reconcile_dict(cp: ReconcileCheckpoint, phase: str) -> dict[str, Json]:
    return {"phase": phase, "arguments": cp.arguments, "replay": _WIRE_REPLAY[cp.replay]}


def _summarize_dict(cp: SummarizeCheckpoint, phase: str) -> dict[str, Json]:
    return {
        "phase": phase,
        "attempt": cp.attempt,
        "model": _model_dict(cp.model),
        "max_tokens": cp.max_tokens,
        "tail": cp.tail,
        "first_kept": cp.first_kept,
    }


def _summarize_retry_dict(cp: SummarizeRetryCheckpoint, phase: str) -> dict[str, Json]:
    return {
        "phase": phase,
        "attempt": cp.attempt,
        "model": _model_dict(cp.model),
        "max_tokens": cp.max_tokens,
        "tail": cp.tail,
        "first_kept": cp.first_kept,
        "until": cp.until,
    }


#: Each checkpoint record's stored JSON object (key order as the store has
#: it), by its type: one lookup, where a match tried the classes in turn
#: (to_dict runs on every stored phase of a built-in task).
_TO_DICT: Mapping[type, Callable[[Any, str], dict[str, Json]]] = {
    PrepareCheckpoint: _prepare_dict,
    RequestCheckpoint: _request_dict,
    RetryCheckpoint: _retry_dict,
    PollCheckpoint: _poll_dict,
    ToolsCheckpoint: _tools_dict,
    CallCheckpoint: _phase_only,
    ExecuteCheckpoint: _execute_dict,
    ReconcileCheckpoint: _reconcile_dict,
    SelectCheckpoint: _phase_only,
    SummarizeCheckpoint: _summarize_dict,
    SummarizeRetryCheckpoint: _summarize_retry_dict,
}
assert set(_TO_DICT) == {
    *get_args(GenerationCheckpoint), *get_args(ToolCheckpoint), *get_args(CompactionCheckpoint)
}, "every checkpoint record needs its stored form"


def to_dict(cp: Checkpoint) -> dict[str, Json]:
    """The stored JSON object of ``cp`` (key order as the store has it)."""
    t = type(cp)
    out = _TO_DICT[t](cp, _WIRE_PHASE[cp.PHASE])
    # kept (_STORED) if its stored form parses back to an equal record: a
    # request's threshold is stored only with ``compacted``; a replay
    # promise other than safe is read back as unsafe
    if (
        t is ToolsCheckpoint
        or (t is ExecuteCheckpoint and (cp.replay is _SAFE or cp.replay is _UNSAFE))  # type: ignore[union-attr]
        or (t is RequestCheckpoint and (cp.compacted is not None or not cp.threshold))  # type: ignore[union-attr]
    ):
        if len(_STORED) >= _STORED_MAX:
            _STORED.clear()
        _STORED[id(out)] = (out, cp)
    return out


#: The record each dict ``to_dict`` kept came from, by the dict's id (held:
#: an id is not reused while here; cleared when full): parsing that very
#: dict gives the record back, where a parser builds an equal one - a
#: call's intent, a round and a request are each parsed a step after they
#: are stored (issue 11 item 2). A stored dict is never changed in place
#: (payloads are immutable, see _execute_dict).
_STORED: dict[int, tuple[dict[str, Json], Checkpoint]] = {}
_STORED_MAX = 4096


def _model(m: Mapping[str, Any]) -> ModelRef:
    return ModelRef(provider=m["provider"], model_id=m["model_id"])


#: Where every generation starts (frozen: one instance serves them all; a
#: record built per generation costs ~1,000 instructions a field).
FIRST_PREPARE = PrepareCheckpoint(attempt=1)


def _prepare(cp: Mapping[str, Any]) -> PrepareCheckpoint:
    if len(cp) == 2 and cp.get("attempt") == 1:  # exactly {phase, attempt: 1}: what FIRST_PREPARE stores
        return FIRST_PREPARE
    head = cp.get("head")
    return PrepareCheckpoint(
        attempt=int(cp.get("attempt", 1)),
        compacted=_opt_id(cp.get("compacted")),
        threshold=bool(cp.get("threshold", False)),
        overflow=None if cp.get("overflow") is None else str(cp["overflow"]),
        head=None if head is None else EntryId(int(head)),
    )


def _request(cp: Mapping[str, Any]) -> RequestCheckpoint:
    return RequestCheckpoint(
        attempt=int(cp["attempt"]),
        model=_model(cp["model"]),
        cutoff=EntryId(int(cp["cutoff"])),
        compacted=_opt_id(cp.get("compacted")),
        threshold=bool(cp.get("threshold", False)),
    )


def _retry(cp: Mapping[str, Any]) -> RetryCheckpoint:
    return RetryCheckpoint(
        attempt=int(cp["attempt"]),
        until=int(cp["until"]),
        compacted=_opt_id(cp.get("compacted")),
        threshold=bool(cp.get("threshold", False)),
    )


def _poll(cp: Mapping[str, Any]) -> PollCheckpoint:
    return PollCheckpoint(
        attempt=int(cp["attempt"]),
        model=_model(cp["model"]),
        cutoff=EntryId(int(cp["cutoff"])),
        handle=cp["handle"],
        poll_at=int(cp["poll_at"]),
        compacted=_opt_id(cp.get("compacted")),
        threshold=bool(cp.get("threshold", False)),
    )


def _tools(cp: Mapping[str, Any]) -> ToolsCheckpoint:
    return ToolsCheckpoint(
        assistant=EntryId(int(cp["assistant"])),
        tools=tuple(TaskId(int(t)) for t in cp.get("tools", [])),
        pending=tuple(str(c) for c in cp.get("pending", [])),
    )


_SAFE, _UNSAFE = Replay.SAFE, Replay.UNSAFE


#: The call checkpoint: it has no fields, so one (frozen) instance serves
#: every task at ``call`` (a record built per tool call costs ~1,500 instructions).
CALL_CHECKPOINT = CallCheckpoint()


def _call(cp: Mapping[str, Any]) -> CallCheckpoint:
    return CALL_CHECKPOINT


def _execute(cp: Mapping[str, Any]) -> ExecuteCheckpoint:
    # Anything but a stored "safe" promise is treated as unsafe: an
    # interrupted call is then settled, never re-run.
    return ExecuteCheckpoint(
        arguments=cp.get("arguments", {}),
        replay=_SAFE if cp.get("replay") == "safe" else _UNSAFE,
        process=cp.get("process"),
        reconciled=cp.get("reconciled") is True,
    )


def _reconcile(cp: Mapping[str, Any]) -> ReconcileCheckpoint:
    return ReconcileCheckpoint(arguments=cp.get("arguments", {}), replay=_SAFE if cp.get("replay") == "safe" else _UNSAFE)


#: The typed record of each stored phase, by its wire name (one lookup; parse
#: runs on every event and reservation of a built-in task).
_GENERATION_PARSERS: Mapping[str, Callable[[Mapping[str, Any]], GenerationCheckpoint]] = {
    GenerationPhase.PREPARE.value: _prepare,
    GenerationPhase.REQUEST.value: _request,
    GenerationPhase.RETRY.value: _retry,
    GenerationPhase.POLL.value: _poll,
    GenerationPhase.TOOLS.value: _tools,
}
_TOOL_PARSERS: Mapping[str, Callable[[Mapping[str, Any]], ToolCheckpoint]] = {
    ToolPhase.CALL.value: _call,
    ToolPhase.EXECUTE.value: _execute,
    ToolPhase.RECONCILE.value: _reconcile,
}
assert set(_GENERATION_PARSERS) == {p.value for p in GenerationPhase}, "every generation phase needs its parser"
assert set(_TOOL_PARSERS) == {p.value for p in ToolPhase}, "every tool phase needs its parser"


def parse_generation(cp: Mapping[str, Any]) -> GenerationCheckpoint | None:
    """The typed checkpoint of a generation task; None for an unknown phase
    (the task faults). A known phase with damaged fields is a loud error."""
    stored = _STORED.get(id(cp))
    if stored is not None and stored[0] is cp:  # the dict to_dict made (_STORED)
        return stored[1]  # type: ignore[return-value]
    phase = cp.get("phase")
    parse = _GENERATION_PARSERS.get(phase) if isinstance(phase, str) else None  # (one lookup)
    if parse is None:
        return None
    try:
        return parse(cp)
    except (KeyError, TypeError, ValueError) as e:
        raise CoreInvariantError(f"damaged {phase} checkpoint {cp!r}: {e!r}") from None


def parse_tool(cp: Mapping[str, Any]) -> ToolCheckpoint | None:
    """The typed checkpoint of a tool task; None for an unknown phase."""
    stored = _STORED.get(id(cp))
    if stored is not None and stored[0] is cp:  # the dict to_dict made (_STORED)
        return stored[1]  # type: ignore[return-value]
    phase = cp.get("phase")
    parse = _TOOL_PARSERS.get(phase) if isinstance(phase, str) else None  # (one lookup)
    if parse is None:
        return None
    try:
        return parse(cp)
    except (KeyError, TypeError, ValueError) as e:
        raise CoreInvariantError(f"damaged {phase} checkpoint {cp!r}: {e!r}") from None


_COMPACTION_PHASES: dict[str, CompactionPhase] = {str(p.value): p for p in CompactionPhase}


def parse_compaction(cp: Mapping[str, Any]) -> CompactionCheckpoint | None:
    """The typed checkpoint of a compaction task; None for an unknown phase."""
    phase = cp.get("phase")
    if not isinstance(phase, str) or phase not in _COMPACTION_PHASES:
        return None
    if _COMPACTION_PHASES[phase] is CompactionPhase.SELECT:
        return SelectCheckpoint()
    try:
        pinned = SummarizeCheckpoint(
            attempt=int(cp["attempt"]),
            model=_model(cp["model"]),
            max_tokens=int(cp["max_tokens"]),
            tail=EntryId(int(cp["tail"])),
            first_kept=EntryId(int(cp["first_kept"])),
        )
        if _COMPACTION_PHASES[phase] is CompactionPhase.SUMMARIZE_RETRY:
            return SummarizeRetryCheckpoint(**attrs.asdict(pinned, recurse=False), until=int(cp["until"]))
        return pinned
    except (KeyError, TypeError, ValueError) as e:
        raise CoreInvariantError(f"damaged {phase} checkpoint {cp!r}: {e!r}") from None
