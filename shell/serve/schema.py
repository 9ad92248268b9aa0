"""The API's OpenAPI document, and the one validator of request bodies.

The JSON schemas below are used twice: published in ``/api/openapi.json``
and checked against every request body (``jsonschema``, Draft 2020-12, as
the tool arguments are). A body that does not fit is a 400 naming the
first problem; what fits is then checked by the library itself
(``conv.submit`` etc. raise ``InvalidInput``, also a 400), so the document
never promises less than the server checks, and the server never refuses
what the document allows for any reason but the library's own rules.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from pidurable.core.bounds import MAX_INT64

from ..errors import InvalidInput

#: The largest record id the store can hold (SQLite's INTEGER).
MAX_ID = MAX_INT64  # (ids are 64-bit: core/bounds.py)

ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
TEXT = {"type": "string"}

SUBMIT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["content"],
    "properties": {
        "content": {**TEXT, "description": "The input's text (non-empty for an input)."},
        "kind": {"enum": ["input", "write"], "default": "input", "description": "An input starts (or joins) a run; a write only appends an entry."},
        "request_id": {
            "type": ["string", "null"],
            "minLength": 1,
            "maxLength": 200,
            "description": "Repeating it returns the existing submission (status 200) and stores nothing.",
        },
        "when_busy": {"enum": ["follow_up", "steer", "reject"], "default": "follow_up"},
        "entry_kind": {"type": "string", "minLength": 1, "maxLength": 200, "default": "user", "description": "A write's entry kind."},
        "data": {"type": ["object", "null"], "description": "A write's entry data."},
    },
}
CREATE = {"type": "object", "additionalProperties": False, "properties": {}}
ABORT = {"type": "object", "additionalProperties": False, "properties": {"background": {"type": "boolean", "default": False}}}
COMPACT = {"type": "object", "additionalProperties": False, "properties": {"instructions": {"type": ["string", "null"]}}}
FORK = {
    "type": "object",
    "additionalProperties": False,
    "required": ["at"],
    "properties": {"at": {**ID, "description": "The entry the fork continues from."}, "documents": {"enum": ["as_of", "current", "initial"]}},
}

_VALIDATORS = {name: jsonschema.Draft202012Validator(s) for name, s in {"submit": SUBMIT, "create": CREATE, "abort": ABORT, "compact": COMPACT, "fork": FORK}.items()}


def check_body(kind: str, body: Any) -> dict[str, Any]:
    """``body`` if it fits the request schema ``kind``, else ``InvalidInput``
    naming where and what (the first problem, deepest first)."""
    error = jsonschema.exceptions.best_match(_VALIDATORS[kind].iter_errors(body))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise InvalidInput(f"{'body' if not where else where}: {error.message}")
    assert isinstance(body, dict)
    return body


# --- responses -----------------------------------------------------------------------

NULLABLE_ID = {"type": ["integer", "null"]}
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"enum": ["invalid_input", "unauthorized", "not_found", "busy", "too_large", "method_not_allowed", "closed", "internal"]},
                "message": TEXT,
            },
        }
    },
}
ENTRY = {
    "type": "object",
    "required": ["id", "conversation_id", "kind", "text"],
    "properties": {
        "id": {"type": "integer"},
        "conversation_id": {"type": "integer"},
        "kind": TEXT,
        "text": TEXT,
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": ["string", "null"]},
        "tool_name": {"type": ["string", "null"]},
        "is_error": {"type": "boolean"},
        "stop_reason": {"type": ["string", "null"]},
        "usage": {"type": ["object", "null"]},
        "data": {"type": ["object", "null"]},
    },
}
SUBMISSION = {
    "type": "object",
    "required": ["id", "conversation_id", "type", "status"],
    "properties": {
        "id": {"type": "integer"},
        "conversation_id": {"type": "integer"},
        "type": {"enum": ["input", "write"]},
        "status": {"enum": ["queued", "placed", "done", "unanswered"]},
        "request_id": {"type": ["string", "null"]},
        "entry_id": NULLABLE_ID,
        "answer_entry_id": NULLABLE_ID,
        "reason": {"type": ["string", "null"]},
        "detail": {"type": ["string", "null"]},
    },
}
CONVERSATION = {
    "type": "object",
    "required": ["id", "idle"],
    "properties": {
        "id": {"type": "integer"},
        "idle": {"type": "boolean"},
        "root": {"type": "boolean"},
        "title": {"type": ["string", "null"]},
        "owner_task_id": NULLABLE_ID,
        "parent_id": NULLABLE_ID,
        "fork_at": NULLABLE_ID,
        "agent": {"type": "object"},
        "usage": {"$ref": "#/components/schemas/Usage"},
    },
}
TOTALS = {"type": "object", "properties": {k: {"type": "integer"} for k in ("input_tokens", "output_tokens", "calls")}}
USAGE = {
    "type": "object",
    "required": ["models", "tools"],
    "properties": {"models": {"type": "object", "additionalProperties": TOTALS}, "tools": {"type": "object", "additionalProperties": TOTALS}},
}
TASK = {
    "type": "object",
    "required": ["id", "kind", "status"],
    "properties": {
        "id": {"type": "integer"},
        "kind": TEXT,
        "tool": {"type": ["string", "null"]},
        "conversation_id": {"type": "integer"},
        "owner": NULLABLE_ID,
        "status": TEXT,
        "phase": {"type": ["string", "null"]},
        "state": {"type": ["string", "null"], "description": "running | waiting | ready | completing | blocked"},
        "waiting_on": {"type": "array", "items": {"type": "integer"}},
        "reason": {"type": ["string", "null"]},
    },
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _json(_ref("Error"), "Bad input (the message names the problem); nothing was stored"),
    "401": _json(_ref("Error"), "A missing or wrong bearer token"),
    "404": _json(_ref("Error"), "No such conversation, submission or route"),
}
_ID_PARAM = {"name": "id", "in": "path", "required": True, "schema": ID}


def _op(summary: str, ok: dict[str, Any], *, body: str | None = None, required: bool = False, params: list[Any] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **_ERRORS, **(extra or {})}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": required, "content": {"application/json": {"schema": _ref(body)}}}
        op["responses"]["413"] = _json(_ref("Error"), "The body is larger than the server accepts")
    return op


def openapi(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document served at ``/api/openapi.json``."""
    conv_list = {"type": "array", "items": _ref("Conversation")}
    entries = {"type": "array", "items": _ref("Entry")}
    busy = {"409": _json(_ref("Error"), "when_busy=reject on a busy conversation; nothing was stored")}
    paths: dict[str, Any] = {
        "/api/conversations": {
            "get": _op("Every conversation", {"200": _json(conv_list, "The conversations, oldest first")}),
            "post": _op("A new conversation (the server's agent)", {"201": _json(_ref("Conversation"), "Created")}, body="Create"),
        },
        "/api/conversations/{id}": {
            "get": _op("One conversation with its agent and usage", {"200": _json(_ref("Conversation"), "The conversation")}, params=[_ID_PARAM]),
        },
        "/api/conversations/{id}/transcript": {
            "get": _op(
                "The conversation's entries, oldest first",
                {"200": _json(entries, "Entries")},
                params=[
                    _ID_PARAM,
                    {"name": "after", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0, "maximum": MAX_ID}},
                ],
            ),
        },
        "/api/conversations/{id}/submissions": {
            "post": _op(
                "Submit an input (follow_up / steer / reject) or a passive write",
                {"201": _json(_ref("Submission"), "Accepted (durable)"), "200": _json(_ref("Submission"), "The request_id's existing submission")},
                body="Submit",
                required=True,
                params=[_ID_PARAM],
                extra=busy,
            ),
        },
        "/api/conversations/{id}/abort": {
            "post": _op("Abort the conversation's work; returns once it is idle", {"200": _json(_ref("Conversation"), "Idle now")}, body="Abort", params=[_ID_PARAM]),
        },
        "/api/conversations/{id}/compact": {
            "post": _op("Start a manual compaction", {"202": _json({"type": "object", "properties": {"task_id": {"type": "integer"}}}, "Started")}, body="Compact", params=[_ID_PARAM]),
        },
        "/api/conversations/{id}/fork": {
            "post": _op("A new conversation continuing this one from an entry", {"201": _json(_ref("Conversation"), "The fork")}, body="Fork", required=True, params=[_ID_PARAM]),
        },
        "/api/conversations/{id}/events": {
            "get": _op(
                "Server-Sent Events: `view` (the conversation, then one per committed change; the first is the current view) and `tasks` (its live task tree)",
                {"200": {"description": "An endless event stream", "content": {"text/event-stream": {"schema": TEXT}}}},
                params=[_ID_PARAM],
            ),
        },
        "/api/submissions/{id}": {
            "get": _op(
                "A submission; `wait` seconds for it to settle",
                {"200": _json(_ref("Submission"), "The record (settled, or as it is when the wait ends)")},
                params=[_ID_PARAM, {"name": "wait", "in": "query", "required": False, "schema": {"type": "number", "minimum": 0, "maximum": 60}}],
            ),
        },
        "/api/inspect": {
            "get": _op(
                "Every live task and why it is where it is",
                {"200": _json({"type": "object", "properties": {"tasks": {"type": "array", "items": _ref("Task")}}}, "Live tasks")},
                params=[{"name": "conversation", "in": "query", "required": False, "schema": ID}],
            ),
        },
        "/api/usage": {"get": _op("Token usage over every conversation", {"200": _json(_ref("Usage"), "Usage")})},
    }
    schemas = {
        "Submit": SUBMIT, "Create": CREATE, "Abort": ABORT, "Compact": COMPACT, "Fork": FORK,
        "Error": ERROR, "Entry": ENTRY, "Submission": SUBMISSION, "Conversation": CONVERSATION,
        "Usage": USAGE, "Task": TASK,
    }  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {"title": "pidurable", "version": version, "description": "Durable LLM agents over HTTP (docs/serve.md)."},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
