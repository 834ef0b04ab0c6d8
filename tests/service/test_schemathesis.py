"""Property-based run of every documented operation against the live service: never a 5xx.

Schemathesis generates requests from ``openapi.yaml`` (valid and invalid bodies, odd path
values, bad times) and sends them with an admin token, so the admin-only paths are exercised
too. Bounded by ``MAX_EXAMPLES`` per operation to keep the run to a few minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings

from jhub_gpubooking.service import app as service_app

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = 15
OPENAPI_PATH = Path(service_app.__file__).with_name("openapi.yaml")


def documented_operations() -> list[tuple[str, str]]:
    paths = yaml.safe_load(OPENAPI_PATH.read_text())["paths"]
    methods = {"get", "post", "put", "patch", "delete"}
    return [(path, method) for path, item in paths.items() for method in item if method in methods]


def test_no_operation_answers_with_a_server_error(booking_hub):
    schema = schemathesis.openapi.from_path(OPENAPI_PATH)
    headers = {"Authorization": f"token {booking_hub.user_token('admin')}"}
    # the schema's server is the default prefix; the running Hub's service URL replaces it
    base_url = booking_hub.service_url.rstrip("/")
    server_errors: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(documented_operations())  # every one parsed, none skipped

    for operation in operations:

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def exercise(case):
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            if response.status_code >= 500:
                server_errors.append(
                    f"{case.method} {case.formatted_path} -> {response.status_code}: "
                    f"{response.text[:200]}"
                )

        exercise()

    assert not server_errors, "\n".join(server_errors[:20])
