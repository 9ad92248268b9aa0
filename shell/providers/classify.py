"""Turning provider failures into :class:`ModelError`.

Theory of operation
-------------------
The core decides what a failed model call means for the run (a durable retry,
an overflow compaction, or ``unanswered/model_error``) from three facts the
shell reports: ``retryable``, ``retry_after_ms`` and ``overflow``. This module
is the one place that derives them, from what the wire gave us:

* :func:`classify` - an HTTP status (or None for an error that arrived inside
  a stream or a job), the response headers and the body / error text;
* :func:`classify_exception` - an ``httpx`` transport failure (timeouts,
  connection refused/reset, a stream cut mid-event);
* :func:`malformed` and :func:`ended_early` - the two stream-shape failures.

Precedence, first match wins:

1. context overflow (``context_length_exceeded``, ``maximum context length``,
   ``prompt is too long``, ...) -> ``overflow=True``, not retryable: sending
   the same context again cannot help; the core compacts instead;
2. quota / billing (``insufficient_quota``, ``billing``, ...) -> not
   retryable, even when it comes as a 429 (OpenAI does that);
3. status 408/409/425/429/5xx -> retryable; any other status (400, 401, 403,
   404, 422, ...) -> not retryable;
4. no status: retryable when the text says so (``overloaded``, ``rate
   limit``, ``timeout``, ``server_error``, ...).

``Retry-After`` (delta-seconds or an HTTP date) and ``retry-after-ms`` become
``retry_after_ms`` on retryable errors; the core waits that long instead of its
own backoff, under the policy's cap.
"""

from __future__ import annotations

import email.utils
import math
import http
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from pidurable.core.bounds import MAX_INT64

from .base import ModelError

#: Context-window overflow, as providers word it (pi-ai's ``isContextOverflow``
#: patterns plus the OpenAI error code).
OVERFLOW_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"context[_ ]length[_ ]exceeded",
        r"maximum context length",
        r"prompt is too long",
        r"input is too long for requested model",
        r"exceeds the context window",
        r"input token count.*exceeds the maximum",
        r"maximum prompt length is \d+",
        r"reduce the length of the messages",
        r"exceeds the limit of \d+",
        r"exceeds the available context size",
        r"exceed_context_size",
        r"greater than the context length",
        r"context window exceeds limit",
        r"exceeded model token limit",
        r"too many tokens",
        r"token limit exceeded",
    )
)

#: Account problems: waiting does not fix them.
QUOTA_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"insufficient_quota",
        r"exceeded your current quota",
        r"billing",
        r"credit balance",
        r"payment required",
    )
)

#: Transient failures named in text (errors without an HTTP status: SSE error
#: events, failed background jobs, transport errors).
TRANSIENT_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"overloaded",
        r"rate.?limit",
        r"too many requests",
        r"timed? ?out",
        r"timeout",
        r"connection (?:reset|error|closed|refused|aborted)",
        r"service.?unavailable",
        r"server.?error",
        r"internal.?error",
        r"\bapi_error\b",
        r"bad gateway",
        r"temporarily",
        r"try again",
        r"stream ended early",
        r"\b(?:408|409|425|429|500|502|503|504|529)\b",
    )
)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
#: Longest error detail kept from a response body (the message is stored).
MAX_DETAIL = 600


def is_overflow(text: str) -> bool:
    return any(p.search(text) for p in OVERFLOW_PATTERNS)


def is_quota(text: str) -> bool:
    return any(p.search(text) for p in QUOTA_PATTERNS)


def is_transient(text: str) -> bool:
    return any(p.search(text) for p in TRANSIENT_PATTERNS)


def retry_after_ms(headers: Mapping[str, str] | None, now: float | None = None) -> int | None:
    """The server's wait hint in ms: ``retry-after-ms`` (OpenAI), else
    ``Retry-After`` as delta-seconds or an HTTP date; None if absent or
    unreadable (``inf`` and ``nan`` too). Never negative, at most
    ``MAX_INT64`` (the retry policy caps the wait anyway)."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw = lower.get("retry-after-ms")
    if raw is not None and (ms := _clamp_ms(_number(raw))) is not None:
        return ms
    raw = lower.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    seconds = _number(raw)
    if seconds is not None:  # delta-seconds (float() reads inf, nan, 1e400 too: no hint)
        return _clamp_ms(seconds * 1000)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return _clamp_ms((when.timestamp() - now) * 1000)


def _number(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def _clamp_ms(ms: float | None) -> int | None:
    """Whole ms in ``[0, MAX_INT64]``, or None for no number or a non-finite one."""
    if ms is None or not math.isfinite(ms):
        return None
    return max(0, min(int(ms), MAX_INT64))


def error_detail(body: str) -> str:
    """The human part of an error body: ``error.message`` of the OpenAI and
    Anthropic JSON shapes (with its type/code when the message does not name
    them), else the body text itself, shortened."""
    text = body.strip()
    try:
        data = json.loads(text) if text else None
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        found = data.get("error", data)
        if isinstance(found, str):
            return _short(found)
        if isinstance(found, dict):
            message = str(found.get("message") or "")
            kinds = [str(found[k]) for k in ("type", "code") if isinstance(found.get(k), str) and found.get(k)]
            extra = [k for k in kinds if k not in message]
            if message or extra:
                return _short(f"{message} ({', '.join(extra)})" if extra and message else message or ", ".join(extra))
    return _short(text)


def classify(status: int | None, headers: Mapping[str, str] | None = None, text: str = "") -> ModelError:
    """The :class:`ModelError` for a failed call. ``status`` is the HTTP status
    (None for an error reported inside a stream or a job); ``text`` is the
    response body or the error text."""
    detail = error_detail(text) if status is not None else _short(text)
    if status is not None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        message = f"{status} {phrase}: {detail}" if detail else f"{status} {phrase}"
    else:
        message = detail or "Provider error"
    # classify on the whole text too: a code may sit outside error.message
    haystack = f"{message}\n{text}"
    if is_overflow(haystack):
        return ModelError(message, retryable=False, overflow=True)
    if is_quota(haystack):
        return ModelError(message, retryable=False)
    if status is not None:
        retryable = status in RETRYABLE_STATUS or 500 <= status <= 599
    else:
        retryable = is_transient(haystack)
    return ModelError(message, retryable=retryable, retry_after_ms=retry_after_ms(headers) if retryable else None)


def classify_exception(exc: BaseException) -> ModelError:
    """A transport failure: timeouts, refused/reset connections and a stream
    cut mid-event are retryable; a bad URL or a client-side protocol error is
    not."""
    name = type(exc).__name__
    text = str(exc) or name
    if isinstance(exc, httpx.TimeoutException):
        return ModelError(f"Request timed out ({name}): {text}", retryable=True)
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return ModelError(f"Request failed ({name}): {text}", retryable=False)
    if isinstance(exc, httpx.RemoteProtocolError):
        return ModelError(f"Connection closed by the provider mid-response ({name}): {text}", retryable=True)
    if isinstance(exc, httpx.TransportError):
        return ModelError(f"Connection error ({name}): {text}", retryable=True)
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ModelError(f"Connection error ({name}): {text}", retryable=True)
    return ModelError(f"Request failed ({name}): {text}", retryable=False)


def malformed(what: str, data: str, error: Exception | str) -> ModelError:
    """A stream or body we cannot read: not retryable (the same server will
    most likely send the same thing again)."""
    return ModelError(f"Malformed {what} from the provider ({error}): {_short(data, 200)!r}", retryable=False)


def ended_early(provider: str) -> ModelError:
    """The stream closed cleanly but before its terminal event."""
    return ModelError(f"{provider} stream ended early (no terminal event)", retryable=True)


def stream_error(payload: Any) -> ModelError:
    """An error event inside a 200 stream (Anthropic ``event: error``, an
    OpenAI-style ``{"error": {...}}`` chunk): classified by its text."""
    found = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(found, dict):
        kind = found.get("type") or found.get("code") or "error"
        text = f"{kind}: {found.get('message') or ''}".rstrip(": ")
    else:
        text = str(found)
    return classify(None, None, text)


def _short(text: str, limit: int = MAX_DETAIL) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
