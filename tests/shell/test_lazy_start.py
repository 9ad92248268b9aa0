"""What a process's start leaves for later: the store's two cattrs
converters are configured on first use, not at import (``lazy_converter.LazyConverter``):
a process that never encodes or decodes a record (``pidurable --version``,
``--help``) does not compile their ~2,000 generated hooks, and one that does
gets the same hooks as an eager configuration. The HTTP adapters (and httpx)
are imported when first named (``providers.__getattr__``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import cattrs
import pytest

from pidurable.core.events import ModelResponded, Opened
from pidurable.core.model import Entry, EntryKind, Task, ToolCall, Usage
from pidurable.shell.storage import codec


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_library_and_the_cli_configures_neither_converter() -> None:
    out = _run(
        """
        import pidurable.shell, pidurable.shell.cli
        from pidurable.shell.storage import codec
        print(codec.converter.configured, codec.stored.configured)
        """
    )
    assert out == "False False"


def test_importing_the_library_and_the_cli_imports_no_http_adapter() -> None:
    out = _run(
        """
        import sys
        import pidurable.shell, pidurable.shell.cli
        print(sorted(m for m in sys.modules if m == "httpx" or m.startswith(("httpx.", "pidurable.shell.providers."))))
        """
    )
    assert out == "['pidurable.shell.providers.base', 'pidurable.shell.providers.models', 'pidurable.shell.providers.scripted']"


def test_the_http_adapters_are_imported_when_named() -> None:
    out = _run(
        """
        import sys
        from pidurable.shell import providers
        print(set(providers.__all__) <= set(dir(providers)), "httpx" in sys.modules)  # listed before imported
        from pidurable.shell.providers import Anthropic, OpenAIChat, OpenAIResponses, classify_exception
        from pidurable.shell.providers.anthropic import Anthropic as A
        print(Anthropic is A, "httpx" in sys.modules, providers.__dict__["OpenAIChat"] is OpenAIChat)
        try:
            providers.Nope
        except AttributeError as e:
            print(e)
        """
    )
    assert out.splitlines() == ["True False", "True True True", "module 'pidurable.shell.providers' has no attribute 'Nope'"]


@pytest.mark.parametrize("first", ["structure", "unstructure", "get_structure_hook", "get_unstructure_hook"])
def test_each_entry_point_configures_on_first_use_and_answers(first: str) -> None:
    out = _run(
        f"""
        from pidurable.core.model import Task
        from pidurable.shell.storage import codec
        task = Task(id=3, conversation_id=1, kind="tool", input={{"x": 1}})
        conv = codec.stored
        if "{first}" == "structure":
            got = conv.structure({{"id": 3, "conversation_id": 1, "kind": "tool", "input": {{"x": 1}}}}, Task) == task
        elif "{first}" == "unstructure":
            got = conv.unstructure(task) == {{"id": 3, "conversation_id": 1, "kind": "tool", "input": {{"x": 1}}}}
        elif "{first}" == "get_structure_hook":
            got = conv.get_structure_hook(Task)({{"id": 3, "conversation_id": 1, "kind": "tool"}}, Task).id == 3
        else:
            got = conv.get_unstructure_hook(Task)(task)["input"] == {{"x": 1}}
        # configured once; the lazy entry points are gone from the instance
        print(got, conv.configured, sorted(set(vars(conv)) & set(conv._LAZY)), codec.converter.configured)
        """
    )
    assert out == "True True [] False"


def _eager(**kwargs: object) -> cattrs.Converter:
    conv = cattrs.Converter(**kwargs)  # type: ignore[arg-type]
    codec._configure(conv)
    return conv


SAMPLES = [
    Task(id=7, conversation_id=2, kind="pi.generation", input={"a": [1, "é"]}, owner=5),
    Entry(id=4, conversation_id=2, kind=EntryKind.ASSISTANT, text="hi", tool_calls=(ToolCall(id="c", name="t", arguments={"k": 1}),)),
    ModelResponded(now=5, task_id=7, attempt=1, text="hi", usage=Usage(input_tokens=3, output_tokens=4)),
    Opened(now=1, next_id=9, next_seq=4),
]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_lazy_converters_encode_and_decode_as_eager_ones(sample: object) -> None:
    for lazy, eager in ((codec.converter, _eager(omit_if_default=False, forbid_extra_keys=False)),
                        (codec.stored, _eager(omit_if_default=True, forbid_extra_keys=False))):  # fmt: skip
        data = eager.unstructure(sample)
        assert lazy.unstructure(sample) == data
        assert lazy.structure(data, type(sample)) == eager.structure(data, type(sample)) == sample


def test_threads_meeting_at_first_use_all_get_the_whole_configuration() -> None:
    # the first thread configures (~0.1 s, several GIL switches) while the
    # others call in: each must wait for it, none may see a half-configured converter
    out = _run(
        """
        import threading
        from pidurable.core.events import ModelResponded
        from pidurable.core.model import Task
        from pidurable.shell.storage import codec
        event = ModelResponded(now=5, task_id=7, attempt=1, text="hi")
        task = Task(id=3, conversation_id=1, kind="tool", input={"x": 1})
        start, results = threading.Barrier(8), []

        def use(i):
            start.wait()
            if i % 2:
                results.append(codec.converter.structure(codec.converter.unstructure(event, codec.Event), codec.Event) == event)
            else:
                results.append(codec.stored.unstructure(task) == {"id": 3, "conversation_id": 1, "kind": "tool", "input": {"x": 1}})

        threads = [threading.Thread(target=use, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(results.count(True), len(results))
        """
    )
    assert out == "8 8"


def test_configure_configures_both_now() -> None:
    out = _run(
        """
        from pidurable.shell.storage import codec
        before = (codec.converter.configured, codec.stored.configured)
        codec.configure()
        print(before, (codec.converter.configured, codec.stored.configured))
        """
    )
    assert out == "(False, False) (True, True)"
