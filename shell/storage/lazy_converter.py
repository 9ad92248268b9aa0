"""A cattrs converter that configures itself on first use, not at import
(``codec.converter`` and ``codec.stored``; issue 11: start-up).

The hooks ``codec._configure`` generates for every record and event compile
~2,000 code objects (~0.26 s for the two converters here; ``pidurable
--version`` took 1.5 s while they were made at import).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import cattrs


class LazyConverter(cattrs.Converter):
    """A converter that runs ``configure(self)`` on its first use. Until
    then the four entry points are instance attributes that configure the
    converter, remove themselves (the class's methods answer from then on,
    with no check per call) and call on.

    Threads (the facades' host threads, a commit on a worker thread) may
    meet here at once: the first configures under a lock while the others
    wait for it, and the entry points go only once the configuration is
    whole. The hooks ``configure`` asks for on its own thread meanwhile are
    the class's methods on the converter being configured, as in an eager
    configuration."""

    _LAZY = ("structure", "unstructure", "get_structure_hook", "get_unstructure_hook")

    def __init__(self, configure: Callable[[cattrs.Converter], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.configured = False
        self._configure = configure
        self._configuring = False
        for name in self._LAZY:
            setattr(self, name, partial(self._first_use, name))

    def configure_now(self) -> None:
        """Configure this converter now, as its first use would (once)."""
        with _CONFIGURING:  # re-entrant: configure's own calls come back here
            if not self.configured and not self._configuring:
                self._configuring = True
                try:
                    self._configure(self)
                finally:
                    self._configuring = False
                self.configured = True
                for lazy in self._LAZY:
                    delattr(self, lazy)

    def _first_use(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.configure_now()
        return getattr(cattrs.Converter, name)(self, *args, **kwargs)


#: Held while a converter configures itself.
_CONFIGURING = threading.RLock()
