"""The harness clock (milliseconds), as the loop and every interpreter read it."""

from __future__ import annotations

import time
from collections.abc import Callable

import trio


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def trio_anchored_clock() -> Callable[[], int]:
    """The default harness clock: wall time at open, advanced by Trio's clock.

    Deadlines (retry, poll, sleeps) are stored in wall milliseconds so they
    survive restarts; within one process life time advances with Trio's
    monotonic clock, so timers and the harness clock agree (also under a test
    MockClock) and a wall-clock jump cannot make a timer fire early or late.
    """
    wall0 = wall_clock_ms()
    # the run's clock read directly: trio.current_time() is this call behind
    # three more Python calls (issue 11 item 2); made inside a run, as always
    trio_time = trio.lowlevel.current_clock().current_time
    trio0 = trio_time()
    return lambda: wall0 + int((trio_time() - trio0) * 1000)
