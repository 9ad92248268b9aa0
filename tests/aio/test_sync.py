"""``pidurable.sync``: the shell's API as blocking calls, Trio in a
background thread (docs/asyncio.md "Scripts: pidurable.sync")."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import trio

import pidurable.sync
from pidurable.shell import AgentConfig, HarnessClosed, Input, InvalidInput, MemoryStorage, ModelRef, Write
from pidurable.shell.providers import ScriptedModels, reply

AGENT = AgentConfig(model=ModelRef("scripted", "demo"))

SCRIPT = """
import pidurable.sync
from pidurable.shell import AgentConfig, Input, ModelRef
from pidurable.shell.providers import ScriptedModels, reply

models = ScriptedModels([reply(text="Hello from a script.")])
with pidurable.sync.open({db!r}, models=models) as harness:
    record = harness.root(agent=AgentConfig(model=ModelRef("scripted", "demo"))).submit(Input("hi", request_id="hello-1")).wait()
    print(record.status, harness.root().transcript()[-1].text)
"""


def test_a_script_runs_a_conversation(tmp_path: Path) -> None:
    """The README's script shape works as a plain program: open a SQLite
    path, submit, wait, print; a second run reopens the same store, where the
    same request_id returns the settled submission."""
    db = tmp_path / "script.sqlite"
    for expected in ("done Hello from a script.", "done Hello from a script."):
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SCRIPT.format(db=str(db)))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


def test_blocking_calls_watch_and_errors() -> None:
    """Methods block and return the shell's records and facade handles;
    ``with conv.watch() as views: for view in views`` iterates; errors keep
    their types; calls after the block raise HarnessClosed."""
    models = ScriptedModels([reply(text="one", delay=0.05)])
    with pidurable.sync.open(MemoryStorage(), models=models) as harness:
        conv = harness.root(agent=AGENT)
        handle = conv.submit(Input("go", request_id="g"))
        with conv.watch() as views:
            seqs = []
            for view in views:
                seqs.append(view.seq)
                if view.idle:
                    break
        assert seqs == sorted(set(seqs))
        assert handle.wait().status == "done"
        assert conv.submit(Input("go", request_id="g")) == handle
        assert [e.text for e in conv.transcript()] == ["go", "one"]
        assert conv.submit(Write("note")).wait().status == "done"
        with pytest.raises(InvalidInput):
            conv.submit(Input(""))
    with pytest.raises(HarnessClosed):
        conv.transcript()


def test_inside_a_running_event_loop_it_refuses() -> None:
    """Blocking in an event loop's thread would stall the loop: opening, and
    calling a harness opened outside, raise RuntimeError naming
    pidurable.aio (under asyncio) or pidurable.shell (under Trio)."""

    async def open_in_asyncio() -> None:
        with pidurable.sync.open(MemoryStorage()):
            pass

    with pytest.raises(RuntimeError, match="asyncio event loop: use pidurable.aio"):
        asyncio.run(open_in_asyncio())

    with pidurable.sync.open(MemoryStorage()) as harness:

        async def call_in_asyncio() -> None:
            harness.root()

        with pytest.raises(RuntimeError, match="use pidurable.aio"):
            asyncio.run(call_in_asyncio())

        async def call_in_trio() -> None:
            harness.root()

        with pytest.raises(RuntimeError, match="runs Trio: use pidurable.shell"):
            trio.run(call_in_trio)
        assert harness.root().id == 1  # still fine from plain code


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_ctrl_c_during_a_wait_cancels_only_the_wait() -> None:
    """KeyboardInterrupt (SIGINT to the main thread) while ``wait()`` blocks
    stops that wait; the run goes on and a new wait gets the answer."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is handled by someone else here")
    models = ScriptedModels([reply(text="late", delay=0.4)])
    with pidurable.sync.open(MemoryStorage(), models=models) as harness:
        conv = harness.root(agent=AGENT)
        handle = conv.submit(Input("slow"))
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            handle.wait()
        timer.join()
        assert not conv.idle()
        assert handle.wait().status == "done"
        assert conv.transcript()[-1].text == "late"


def test_fork_is_blocking_too() -> None:
    """``conv.fork(at=...)`` returns a ``pidurable.sync.Conversation``."""
    with pidurable.sync.open(MemoryStorage(), models=ScriptedModels([reply(text="a")])) as harness:
        conv = harness.root(agent=AGENT)
        conv.submit(Input("x")).wait()
        fork = conv.fork(at=conv.transcript()[-1].id)
        assert isinstance(fork, pidurable.sync.Conversation)
        assert [e.text for e in fork.transcript()] == ["x", "a"]
