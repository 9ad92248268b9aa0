"""``Step.rules`` names what fired (the event's handler, each phase and
lifecycle row with its task) and is pure data: same state + event, same
rules; the commit is the same with or without anyone reading them."""

from __future__ import annotations

from pidurable.core import State, step
from pidurable.core.events import Opened, RootRequested
from pidurable.core.step import HANDLERS, rule_name


def test_step_names_the_handler_that_ran() -> None:
    """Opened then RootRequested name scheduling.on_opened and admission.on_root_requested; twice gives the same Step."""
    opened = step(State(), Opened(now=1, next_id=2, next_seq=1))
    assert opened.rules == ("scheduling.on_opened",)
    root = step(opened.state, RootRequested(now=2, ticket=1))
    assert root.rules == ("admission.on_root_requested",)
    assert step(opened.state, RootRequested(now=2, ticket=1)) == root
    assert rule_name(HANDLERS[Opened]) == "scheduling.on_opened"
