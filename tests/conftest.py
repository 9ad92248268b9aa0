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
