"""Property-based run of every documented operation against the live service: never a 5xx,
and every refusal the service's JSON error shape.

Schemathesis generates requests from ``openapi.yaml`` (valid and invalid bodies, odd path
values, bad times, page limits and cursors) and sends them with an admin token, so the
admin-only paths are exercised too, and with a plain user's token, so the refusals of the
authorization checks are. Bounded by ``MAX_EXAMPLES`` per operation; each operation is a test
of its own, so the hang guard (pytest-timeout) bounds one operation's examples, not the whole
run's, which on a loaded machine passed it. The module's Hub turns the write rate limit off:
the run sends far more writes than a person, and a 429 before validation would hide the bodies
it means to try.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import schemathesis
import yaml
from hub_harness import start_booking_hub
from hypothesis import HealthCheck, given, settings

from jhub_gpubooking.service import app as service_app

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = 15
OPENAPI_PATH = Path(service_app.__file__).with_name("openapi.yaml")


def documented_operations() -> list[tuple[str, str]]:
    paths = yaml.safe_load(OPENAPI_PATH.read_text())["paths"]
    methods = {"get", "post", "put", "patch", "delete"}
    return [(path, method) for path, item in paths.items() for method in item if method in methods]


@pytest.fixture(scope="module")
def fuzzed_hub(tmp_path_factory):
    extra = "c.GPUBookingService.write_rate_per_minute = 0\n"
    with start_booking_hub(
        tmp_path_factory.mktemp("fuzzed-hub"), extra_service_config=extra
    ) as hub:
        yield hub


def error_fields() -> set[str]:
    """The keys the documented error shape may have besides ``status`` and ``message``."""
    error = yaml.safe_load(OPENAPI_PATH.read_text())["components"]["schemas"]["Error"]
    return set(error["properties"])


def refusal_shape_problem(response) -> str | None:
    """None if a 4xx answer is the service's JSON ``{"status", "message"}`` (plus only the
    documented optional fields of the error shape), else what is off."""
    try:
        body = response.json()
    except ValueError:
        return "not JSON"
    if not isinstance(body, dict) or not {"status", "message"} <= set(body) <= error_fields():
        return f"not the error shape: {str(body)[:100]}"
    if body["status"] != response.status_code or not body["message"]:
        return "status or message missing"
    return None


@cache
def parsed_operations() -> dict[tuple[str, str], object]:
    """Schemathesis's operations of ``openapi.yaml``, by (path, method)."""
    schema = schemathesis.openapi.from_path(OPENAPI_PATH)
    operations = [result.ok() for result in schema.get_all_operations()]
    return {(operation.path, operation.method.lower()): operation for operation in operations}


def test_schemathesis_parses_every_documented_operation():
    assert sorted(parsed_operations()) == sorted(documented_operations())


# side by side, each dependency set fuzzes every operation with one of the two tokens (tests/one_set.py)
@pytest.mark.parametrize("who", [pytest.param("admin", marks=pytest.mark.one_set("pins")),
                                 pytest.param("ada", marks=pytest.mark.one_set("latest"))])
@pytest.mark.parametrize(("path", "method"), documented_operations(),
                         ids=[f"{method.upper()} {path}" for path, method in documented_operations()])
def test_no_operation_answers_with_a_server_error(fuzzed_hub, who, path, method):
    booking_hub = fuzzed_hub
    operation = parsed_operations()[(path, method)]
    headers = {"Authorization": f"token {booking_hub.user_token(who)}"}
    # the schema's server is the default prefix; the running Hub's service URL replaces it
    base_url = booking_hub.service_url.rstrip("/")
    server_errors: list[str] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def exercise(case):
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        problem = None
        if response.status_code >= 500:
            problem = response.text[:200]
        elif response.status_code >= 400:
            problem = refusal_shape_problem(response)
        if problem:
            server_errors.append(
                f"{case.method} {case.formatted_path} -> {response.status_code}: {problem}"
            )

    exercise()
    assert not server_errors, "\n".join(server_errors[:20])
