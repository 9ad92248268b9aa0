"""Shared test configuration: Hypothesis profiles chosen by environment.

``HYPOTHESIS_PROFILE``: ``ci`` (default; bounded so the suite stays well under
10 minutes), ``dev`` (fast), ``deep`` (opt-in, many more examples).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile(
    "deep", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every test run cross-checks the touched-set scheduling pass against a full
# scan of the live tasks, and the kept task index against a fresh build
# (core/scheduling.py, core/index.py): a missed readiness change fails loudly.
from pidurable.core import holding, scheduling  # noqa: E402

scheduling.CHECK_TOUCHED = True
# ... and the list of held settled conversations against every held one (core/holding.py).
holding.CHECK = True
# ... and a built-in revision whose caller placed the change against the whole value's diff (core/builtins.py).
from pidurable.core import builtins  # noqa: E402

builtins.CHECK_WITHIN = True

# A throwaway PostgreSQL for the suites that run on it too (session-scoped).
from pg_server import postgres_server  # noqa: E402, F401


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Print how many effect boundaries the crash tests killed the shell at."""
    harness = sys.modules.get("harness")
    report = getattr(harness, "CRASH_REPORT", None)
    if not report:
        return
    terminalreporter.section("crash boundaries")
    total = 0
    for (name, backend), (effects, crashed) in sorted(report.items()):
        terminalreporter.write_line(
            f"{name:<14} {backend:<7} {effects:>4} effects in an uninterrupted run, "
            f"{crashed:>4} boundaries crashed and recovered"
        )
        total += crashed
    terminalreporter.write_line(f"total: {total} crash boundaries checked")
