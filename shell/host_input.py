"""Host input, checked at the edge (``edge.py``): what a host passes in
(``conv.submit``, ``configure``, ``create_conversation``, memos, custom-task
checkpoints) is checked by these ``check_*`` functions. Bad input raises
:class:`InvalidInput`; nothing is stored and the harness keeps working. Host
input is never silently altered."""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core.admission import check_settings
from pidurable.core.bounds import MIN_INT64, is_int_in, shown
from pidurable.core.model import AgentConfig, ModelRef, Settings

from .strict_json import EdgeError, clean_json, has_surrogates
from .errors import InvalidInput

#: Host-given ids (request ids, kinds) longer than this are refused.
MAX_ID_LENGTH = 512


def check_text(value: Any, what: str, *, empty: bool = True) -> str:
    """A host string: a str, valid UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    if has_surrogates(value):
        raise InvalidInput(f"{what} is not valid UTF-8 text (it contains a lone surrogate)")
    if not empty and not value.strip():
        raise InvalidInput(f"{what} must be a non-empty string")
    return str(value)


def check_id(value: Any, what: str) -> str | None:
    """An optional host id (``request_id``): None, or a short non-empty string."""
    if value is None:
        return None
    text = check_text(value, what, empty=False)
    if len(text) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} is longer than {MAX_ID_LENGTH} characters")
    return text


def check_choice(value: Any, what: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InvalidInput(f"{what} must be one of {', '.join(choices)}, not {shown(value)}")
    return str(value)


def check_json(value: Any, what: str) -> Any:
    """A host JSON value: strict JSON with valid strings (never altered)."""
    try:
        cleaned = clean_json(value, what)
    except EdgeError as e:
        raise InvalidInput(f"{what} must be strict JSON: {e}") from None
    if cleaned != value or _has_bad_text(value):
        raise InvalidInput(f"{what} contains text that is not valid UTF-8 (a lone surrogate)")
    return value


def _has_bad_text(value: Any) -> bool:
    if isinstance(value, str):
        return has_surrogates(value)
    if isinstance(value, dict):
        return any(has_surrogates(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_bad_text(v) for v in value)
    return False


def check_json_object(value: Any, what: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object (dict) or None, not {type(value).__name__}")
    check_json(value, what)
    return value


def _names(names: Any, what: str, noun: str) -> Any:
    """An agent's list of tool or extension names, checked: None (every
    one), or distinct non-empty names, as a tuple (the same object if it
    is one already)."""
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise InvalidInput(f"{what} must be None (every {noun}) or a list of {noun} names")
    for name in names:
        check_text(name, f"{what} entry", empty=False)
    if len(set(names)) != len(names):
        raise InvalidInput(f"{what} names a{'n' if noun[0] in 'aeiou' else ''} {noun} twice")
    return names if type(names) is tuple else tuple(names)


def check_agent(agent: object, what: str = "agent") -> AgentConfig | None:
    """An ``AgentConfig`` from the host, checked field by field (a list of
    tool names becomes a tuple)."""
    if agent is None:
        return None
    if not isinstance(agent, AgentConfig):
        raise InvalidInput(f"{what} must be a pidurable.shell.AgentConfig, not {type(agent).__name__}")
    model = agent.model
    if model is not None:
        if not isinstance(model, ModelRef):
            raise InvalidInput(f"{what}.model must be a ModelRef(provider, model_id), not {type(model).__name__}")
        check_text(model.provider, f"{what}.model.provider", empty=False)
        check_text(model.model_id, f"{what}.model.model_id", empty=False)
    if agent.cwd is not None:
        check_text(agent.cwd, f"{what}.cwd", empty=False)
    if agent.instructions is not None:
        check_text(agent.instructions, f"{what}.instructions")
    tools = _names(agent.tools, f"{what}.tools", "tool")
    if tools is not agent.tools:
        agent = attrs.evolve(agent, tools=tools)
    check_choice(agent.tool_execution, f"{what}.tool_execution", ("parallel", "sequential"))
    extensions = _names(agent.extensions, f"{what}.extensions", "extension")
    if extensions is not agent.extensions:
        agent = attrs.evolve(agent, extensions=extensions)
    return agent


def with_window(agent: AgentConfig | None, window: object, keep_recent_tokens: int, what: str = "agent") -> AgentConfig | None:
    """The agent with its model's context window recorded: the one given, else
    ``window`` (the model adapter's ``context_window``). A window no larger
    than ``keep_recent_tokens`` could never keep the recent part: refused."""
    if agent is None:
        return None
    given = agent.context_window
    if given is not None and not is_int_in(given, 1):
        raise InvalidInput(f"{what}.context_window must be None or a positive int (at most 2**63 - 1), not {shown(given)}")
    if given is None and agent.model is not None and is_int_in(window, 1):
        agent = attrs.evolve(agent, context_window=window)
    check_keep_fits(agent.context_window, keep_recent_tokens, what)
    return agent


def check_keep_fits(window: int | None, keep_recent_tokens: int, what: str = "agent") -> None:
    """``keep_recent_tokens`` must be smaller than a known context window."""
    if window is not None and keep_recent_tokens >= window:
        raise InvalidInput(
            f"settings.compaction.keep_recent_tokens ({keep_recent_tokens}) must be smaller than "
            f"{what}.context_window ({window})"
        )


def check_id_number(value: object, what: str) -> None:
    """A host-given record id: an int (not a bool) of 64 bits."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, not {type(value).__name__}")
    if not is_int_in(value, MIN_INT64):  # (a record id is 64 bits: outside, it names nothing a store can hold)
        raise InvalidInput(f"{what} must be a 64-bit integer (ids are), not {shown(value)}")


def check_settings_object(settings: object) -> None:
    """Host ``Settings``: the right class, values the core accepts."""
    if not isinstance(settings, Settings):
        raise InvalidInput(f"settings must be a pidurable.shell.Settings, not {type(settings).__name__}")
    problem = check_settings(settings)
    if problem is not None:
        raise InvalidInput(problem)
