"""Sub-agents: a tool that delegates a prompt to a child conversation.

The child conversation is owned by the calling tool task, so aborting the
call (or the call failing) cascades into the child's work, and the tool task
cannot finish while the child still works. The tool is replay-safe by
construction: after a crash, the re-run finds the SAME child (by owner task)
and the SAME submission (request id ``subagent:<task id>``) - never a second
child, never a second input - and simply waits for the answer.
"""

from __future__ import annotations

from typing import Any

import attrs

from pidurable.core.model import AgentConfig

from .host_input import check_agent
from .harness import Input
from .registry import ToolCallContext, ToolDefinition, ToolResult, define_tool


def define_subagent_tool(
    name: str,
    description: str,
    agent: AgentConfig | None = None,
    replay: str = "safe",
) -> ToolDefinition:
    """A tool with one string argument ``prompt``. ``agent`` configures the
    child - its tool filter, instructions, model and cwd - (default: a copy
    of the caller's conversation's agent settings); a ``model`` or ``cwd``
    left None in ``agent`` is taken from the caller's conversation."""
    checked = check_agent(agent, f"define_subagent_tool({name!r}) agent") if agent is not None else None

    async def execute(call: ToolCallContext, args: dict[str, Any]) -> ToolResult:
        harness = call.harness
        owned = await harness.conversations_owned_by(call.task_id)
        if owned:
            child = owned[0]
        else:
            child_agent = checked
            if child_agent is not None and (child_agent.model is None or child_agent.cwd is None):
                conversation = await harness.conversation(call.conversation_id)
                assert conversation is not None, "a tool runs in a conversation that exists"
                caller = await conversation.agent()
                child_agent = attrs.evolve(
                    child_agent, model=child_agent.model or caller.model, cwd=child_agent.cwd or caller.cwd
                )
            child = await harness.create_conversation(owner_task_id=call.task_id, agent=child_agent)
        sub = await child.submit(Input(args["prompt"], request_id=f"subagent:{call.task_id}"))
        record = await sub.wait()
        if record.status != "done" or record.answer_entry_id is None:
            detail = f": {record.detail}" if record.detail else ""
            return ToolResult(text=f"Sub-agent gave no answer ({record.reason}{detail})", is_error=True)
        answer = await harness.entry(record.answer_entry_id)
        return ToolResult(text=answer.text if answer is not None else "")

    return define_tool(
        name,
        description,
        {
            "type": "object",
            "properties": {"prompt": {"type": "string", "minLength": 1}},
            "required": ["prompt"],
            "additionalProperties": False,
        },
        execute,
        replay=replay,
    )
