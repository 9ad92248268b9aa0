"""pidurable.core: the pure reducer. ``step(state, event) -> Step``.

Nothing in this package performs I/O, reads a clock, draws random numbers or
imports the shell; a test enforces it.
"""

from .effects import Step
from .state import State
from .step import step

__all__ = ["State", "Step", "step"]
