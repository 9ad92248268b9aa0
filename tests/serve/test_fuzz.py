"""Property-based fuzzing of the API against its own OpenAPI document
(schemathesis): generated requests, valid and not, never get a 500, and
every answer has a documented status, content type and shape. The event
stream (endless) is left out; tests/serve/test_events.py covers it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from pidurable.shell.serve.schema import openapi  # noqa: E402

from .conftest import AUTH, ServerThread  # noqa: E402

schema = schemathesis.openapi.from_dict(openapi("test")).exclude(path="/api/conversations/{id}/events")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "fuzz.sqlite"
    with ServerThread(db) as url:
        yield url


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_fails_on_generated_requests(case: object, server: str) -> None:
    """Each operation, fed generated inputs (ids, bodies, query values): no
    500, and the response matches the document."""
    case.call_and_validate(  # type: ignore[attr-defined]
        base_url=server,
        headers=AUTH,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
        timeout=30,
    )
