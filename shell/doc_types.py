"""``DocDefinition``: what ``define_doc`` returns (see documents.py).

A leaf module (only core records), so the registry can hold definitions
without importing the edge checks documents.py uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from pidurable.core.state import DocHistory, DocScope, ForkPolicy


@attrs.frozen(kw_only=True, eq=False)
class DocDefinition:
    """A host-defined document kind (``define_doc``)."""

    kind: str
    #: A JSON schema dict, or an attrs class.
    schema: Any
    #: The value of a document not yet written (or a function making it).
    initial: Any
    scope: DocScope = DocScope.CONVERSATION
    fork: ForkPolicy = ForkPolicy.AS_OF
    history: DocHistory = DocHistory.REWINDABLE
    version: int = 1
    #: ``migrate(old_version, value) -> value`` for values stored at an older version.
    migrate: Callable[[int, Any], Any] | None = None

    @property
    def typed(self) -> bool:
        """Is the schema an attrs class (values are its instances)?"""
        return isinstance(self.schema, type)
