"""pidurable.shell: the Trio runtime, storage, providers, tools and CLI.

Names here follow API.md and are the public API.
"""

from pidurable.core.model import AgentConfig, CompactionSettings, Diagnostic, ModelRef, RetryPolicy, Settings, ToolCall

from .documents import DocDefinition, define_doc
from .env import EnvError, LocalEnv
from .errors import ConversationBusy, HarnessClosed, InvalidInput, NotFound, StorageError, StoreLocked
from .harness import (
    Conversation,
    EntryRecord,
    Harness,
    Input,
    SubmissionHandle,
    SubmissionRecord,
    TaskRecord,
    Write,
)
from .registry import (
    Control,
    Extension,
    Progress,
    Reconciled,
    TaskDefinition,
    define_task,
    Registry,
    ToolCallContext,
    ToolDefinition,
    ToolResult,
    define_extension,
    define_tool,
    PromptInput,
    section,
)
from .loop import Hooks
from .limits import OutputLimits
from .interpreters.hooks import HookReport
from .tasks import HookContext, TaskCommitError, TaskRuntime
from .storage import JsonlStorage, MemoryStorage, SqliteStorage, open_jsonl_storage, open_sqlite_storage
from .storage import open_postgres_storage
from .subagents import define_subagent_tool
from .tools.coding import coding_tools
from .watch import ConversationView, TaskGraphView

__all__ = [
    "AgentConfig",
    "Conversation",
    "ConversationBusy",
    "ConversationView",
    "Diagnostic",
    "EntryRecord",
    "EnvError",
    "Extension",
    "Harness",
    "HarnessClosed",
    "Hooks",
    "Input",
    "InvalidInput",
    "LocalEnv",
    "JsonlStorage",
    "MemoryStorage",
    "ModelRef",
    "NotFound",
    "Progress",
    "Registry",
    "TaskDefinition",
    "TaskRuntime",
    "TaskCommitError",
    "TaskGraphView",
    "HookContext",
    "HookReport",
    "PromptInput",
    "section",
    "define_task",
    "Settings",
    "CompactionSettings",
    "RetryPolicy",
    "SqliteStorage",
    "StorageError",
    "StoreLocked",
    "SubmissionHandle",
    "SubmissionRecord",
    "TaskRecord",
    "ToolCall",
    "ToolCallContext",
    "ToolDefinition",
    "ToolResult",
    "Reconciled",
    "Control",
    "OutputLimits",
    "Write",
    "coding_tools",
    "define_extension",
    "define_doc",
    "DocDefinition",
    "define_subagent_tool",
    "define_tool",
    "open_jsonl_storage",
    "open_postgres_storage",
    "open_sqlite_storage",
]
