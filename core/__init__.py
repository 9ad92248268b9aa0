"""pidurable.core: the pure reducer. ``step(state, event) -> Step``.

Nothing in this package performs I/O, reads a clock, draws random numbers or
imports the shell; a test enforces it.
"""

from . import record_inits  # noqa: F401 - installs the hot records' __init__s (records.py)
from .effects import Step
from .state import State
from .step import step, step_many

__all__ = ["State", "Step", "step", "step_many"]
