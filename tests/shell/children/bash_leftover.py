"""A process life for test_leftover_process.py: run ``bash`` on a SQLite store.

argv: DB WORKDIR. The model asks for a bash command that starts a long
``sleep`` in the background and writes its pid, then blocks; the parent
SIGKILLs this process while the command runs.
"""

from __future__ import annotations

import sys

import trio

from pidurable.shell import AgentConfig, Harness, Input, LocalEnv, ModelRef, Registry, coding_tools, open_sqlite_storage
from pidurable.shell.providers import ScriptedModels, reply, tool_call

db, work = sys.argv[1], sys.argv[2]
COMMAND = "sleep 1000 & echo $! > sleeper.pid; echo $$ > shell.pid; wait"


async def main() -> None:
    registry = Registry()
    registry.install(coding_tools())
    models = ScriptedModels([reply(tool_calls=[tool_call("bash", command=COMMAND, timeout=3000)]), reply(text="done")])
    async with Harness.open(open_sqlite_storage(db), models=models, registry=registry, env=LocalEnv(work)) as h:
        conv = await h.root(agent=AgentConfig(model=ModelRef("scripted", "t")))
        sub = await conv.submit(Input("run it", request_id="bash-1"))
        print((await sub.wait()).status)


trio.run(main)
