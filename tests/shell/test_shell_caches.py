"""The shell's per-call shortcuts give what the long way gives (issue 11
item 2): the registry's installed-tools cache and a request's offered tools
follow every install and uninstall; a tool result short enough to fit any
limits skips ``bound`` only when ``bound`` would keep it whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pidurable.shell import Registry, define_extension, define_tool
from pidurable.shell.context_cache import ContextCache
from pidurable.shell.interpreters.hooks import HookRunner
from pidurable.shell.interpreters.models import ModelInterpreter
from pidurable.shell.limits import OutputLimits, bound


async def noop(ctx: Any, args: dict[str, Any]) -> str:
    return "ok"


class NoLoop:
    def send(self, event: object) -> None: ...

    def clock(self) -> int:
        return 0

    def background(self, job: object) -> None: ...

    async def request(self, make: object) -> object:
        raise AssertionError


def interpreter(registry: Registry) -> ModelInterpreter:
    hooks = HookRunner(registry=registry, loop=NoLoop(), harness=None, on_report=lambda r: None, env=None, entries=None)
    return ModelInterpreter(loop=NoLoop(), models=None, registry=registry, hooks=hooks, context=ContextCache(lambda cid: []))


def test_installed_tools_follow_install_and_uninstall() -> None:
    """``tool``, ``tools``, ``catalog`` and the tools a request offers (all
    or a filter, in its order) see every change; ``tools()`` is the
    caller's own dict."""
    registry = Registry()
    models = interpreter(registry)
    registry.install(define_tool("a", "A", {"type": "object"}, noop))
    assert [s.name for s in models._offered(None)] == ["a"]
    assert [s.name for s in models._offered(("b", "a"))] == ["a"]
    registry.install(define_extension("ext", tools=[define_tool("b", "B", {"type": "object"}, noop)]))
    assert registry.tool("b") is not None
    assert [s.name for s in models._offered(None)] == ["a", "b"]
    assert [s.name for s in models._offered(("b", "a"))] == ["b", "a"]
    mine = registry.tools()
    mine.clear()  # a caller's copy: the registry is untouched
    assert list(registry.tools()) == ["a", "b"] and registry.tool("a") is not None
    registry.uninstall("ext")
    assert registry.tool("b") is None and [t.name for t in registry.catalog()] == ["a"]
    assert [s.name for s in models._offered(None)] == ["a"]
    assert [s.name for s in models._offered(("b", "a"))] == ["a"]
    # a replaced tool (a later install of the same name) is offered as replaced
    registry.install(define_tool("a", "A again", {"type": "object"}, noop))
    assert [s.description for s in models._offered(None)] == ["A again"]


TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=60)


@settings(max_examples=500, deadline=None)
@given(TEXT, st.integers(1, 80), st.integers(1, 80), st.sampled_from(["head", "tail"]))
def test_a_text_within_the_shortcut_is_never_cut(text: str, max_bytes: int, max_lines: int, retain: str) -> None:
    """ToolInterpreter._bound returns a text of at most ``max_lines``
    characters and at most ``max_bytes / 4`` characters unchanged without
    asking ``bound``: ``bound`` keeps every such text whole (any line
    separators, any UTF-8 width)."""
    limits = OutputLimits(max_bytes=max_bytes, max_lines=max_lines, retain=retain)
    if len(text) <= max_lines and 4 * len(text) <= max_bytes:
        kept = bound(text, limits)
        assert not kept.truncated and kept.text == text
