"""The progress a busy conversation shows in ``pi.live``, as a table.

Theory of operation
-------------------
``pi.live`` tells a watcher what a conversation is doing right now: which run
(``run``), which request attempt is out (``attempt``), the streamed partial
answer (``partial``), a retry being waited out (``retry_at``/``retry_error``),
a deferred answer being polled (``poll_at``), the current tool round's slots
(``tools``). Its fields are not independent: together they form one
*progress* state (:func:`progress`), and every change goes through
:func:`live_to`, which looks the move up in ``LIVE_TRANSITIONS`` and checks
that the new fields really are the row's state. A move that is not a row, or
fields that do not match it, raise :class:`CoreInvariantError` - the same
discipline as the task, submission and slot tables in ``lifecycle.py``.

Not in the table: moves out of ``idle`` other than ``start`` (an idle
conversation has nothing to show), and ``start`` on a busy one (a run starts
only on an idle conversation).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .record_makers import new_Live  # (X(...) without the type call's dict: issue 11 item 2)
from .model import CoreInvariantError
from .records import refuse_changes, spelt_out
from .state import Live


class Progress(enum.StrEnum):
    """What a conversation's ``pi.live`` shows (derived from its fields)."""

    #: No run.
    IDLE = "idle"
    #: A run whose current generation has not sent its request yet.
    STARTED = "started"
    #: A request is out (``attempt``).
    ASKING = "asking"
    #: Part of the answer has streamed in (``partial``).
    STREAMING = "streaming"
    #: A retryable error is being waited out (``retry_at``).
    RETRYING = "retrying"
    #: A deferred answer is being polled (``poll_at``).
    POLLING = "polling"
    #: A tool round runs (``tools``).
    TOOLS = "tools"


class LiveMove(enum.StrEnum):
    """The inputs of the progress table."""

    #: A run starts on an idle conversation.
    START = "start"
    #: A generation prepared its request (``attempt``).
    ASK = "ask"
    #: A throttled partial of the answer arrived.
    STREAM = "stream"
    #: The partial becomes an ``aborted`` entry (a resend, an abort, a failure).
    DROP_PARTIAL = "drop_partial"
    #: The provider deferred the answer (poll at ``poll_at``).
    DEFER = "defer"
    #: Polling stopped (the answer or a failure arrived).
    STOP_POLLING = "stop_polling"
    #: The answer (or round) entry was stored: partial and polling cleared.
    ANSWERED = "answered"
    #: A retryable error: wait until ``retry_at``.
    BACK_OFF = "back_off"
    #: The backoff ended; the next attempt prepares.
    RETRY = "retry"
    #: The request overflowed the context window: it is over, and the
    #: generation waits on a blocking compaction before asking again.
    COMPACT = "compact"
    #: A tool round started (``tools``; the request is done).
    ROUND = "round"
    #: A slot of the round moved.
    SLOT = "slot"
    #: The round's successor generation took the run (slots cleared).
    HAND_OVER = "hand_over"
    #: The run ended: the conversation is idle.
    END = "end"


P = Progress
LIVE_TRANSITIONS: Mapping[tuple[Progress, LiveMove], Progress] = {
    (P.IDLE, LiveMove.START): P.STARTED,
    (P.STARTED, LiveMove.ASK): P.ASKING,
    (P.ASKING, LiveMove.ASK): P.ASKING,
    (P.ASKING, LiveMove.STREAM): P.STREAMING,
    (P.STREAMING, LiveMove.STREAM): P.STREAMING,
    (P.STREAMING, LiveMove.DROP_PARTIAL): P.ASKING,
    (P.ASKING, LiveMove.DEFER): P.POLLING,
    (P.STREAMING, LiveMove.DEFER): P.POLLING,
    (P.POLLING, LiveMove.DEFER): P.POLLING,
    (P.POLLING, LiveMove.STOP_POLLING): P.ASKING,
    (P.STREAMING, LiveMove.ANSWERED): P.ASKING,
    (P.POLLING, LiveMove.ANSWERED): P.ASKING,
    (P.ASKING, LiveMove.BACK_OFF): P.RETRYING,
    (P.RETRYING, LiveMove.RETRY): P.ASKING,
    (P.ASKING, LiveMove.COMPACT): P.STARTED,
    (P.ASKING, LiveMove.ROUND): P.TOOLS,
    (P.TOOLS, LiveMove.SLOT): P.TOOLS,
    (P.TOOLS, LiveMove.HAND_OVER): P.STARTED,
    # a round whose slots are not in pi.live (a document written without
    # them) still hands over
    (P.ASKING, LiveMove.HAND_OVER): P.STARTED,
    (P.STARTED, LiveMove.HAND_OVER): P.STARTED,
    **{(p, LiveMove.END): P.IDLE for p in Progress if p is not P.IDLE},
}


# Members read once (a member read through its class is a descriptor call:
# progress and live_to run on most steps).
_IDLE, _STARTED, _ASKING, _STREAMING = P.IDLE, P.STARTED, P.ASKING, P.STREAMING
_RETRYING, _POLLING, _TOOLS = P.RETRYING, P.POLLING, P.TOOLS
_START, _END = LiveMove.START, LiveMove.END


def progress(live: Live) -> Progress:
    """The progress state ``live``'s fields amount to."""
    if live.run is None:
        return _IDLE
    if live.retry_at is not None:
        return _RETRYING
    if live.poll_at is not None:
        return _POLLING
    if live.partial is not None:
        return _STREAMING
    if live.tools is not None:
        return _TOOLS
    if live.attempt is not None:
        return _ASKING
    return _STARTED


def next_progress(current: Progress, move: LiveMove) -> Progress:
    try:
        return LIVE_TRANSITIONS[(current, move)]
    except KeyError:
        raise CoreInvariantError(f"pi.live move {move!r} from {current.value!r} is not a transition") from None


def live_to(live: Live, move: LiveMove, **changes: Any) -> Live:
    """``live`` after ``move`` (checked against the table) with the field
    changes the move makes; ``start`` and ``end`` build a fresh document."""
    current = progress(live)
    target = LIVE_TRANSITIONS.get((current, move))
    if target is None:
        target = next_progress(current, move)  # raises: not a transition
    if move is _START:
        new = Live(**changes)
    elif move is _END:
        new = Live()
    else:
        new = _changed(live, changes)
    if progress(new) is not target:
        raise CoreInvariantError(
            f"pi.live move {move.value!r} from {current.value!r} should reach {target.value!r}, "
            f"but its fields say {progress(new).value!r}"
        )
    return new


#: Live's fields, as ``_changed`` spells them out (checked here: a field added
#: to Live must be added there too, or a move would drop it).
_FIELDS = ("run", "tools", "attempt", "partial", "retry_at", "retry_error", "poll_at")
_NAMES = spelt_out(Live, _FIELDS)


def _changed(live: Live, changes: Mapping[str, Any]) -> Live:
    """``evolve(live, **changes)`` with every field spelt out: the same copy
    (an unknown name is a ``TypeError`` as there), without evolve's dict of
    every field - ``pi.live`` moves six times a tool round."""
    if not _NAMES.issuperset(changes):
        refuse_changes(_NAMES, changes, "a pi.live move")
    # (``name in changes`` is cheaper than a ``changes.get`` call per field)
    return new_Live(
        run=changes["run"] if "run" in changes else live.run,
        tools=changes["tools"] if "tools" in changes else live.tools,
        attempt=changes["attempt"] if "attempt" in changes else live.attempt,
        partial=changes["partial"] if "partial" in changes else live.partial,
        retry_at=changes["retry_at"] if "retry_at" in changes else live.retry_at,
        retry_error=changes["retry_error"] if "retry_error" in changes else live.retry_error,
        poll_at=changes["poll_at"] if "poll_at" in changes else live.poll_at,
    )
