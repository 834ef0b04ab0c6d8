"""The service's pool and booking JSON against the schemas of ``openapi.yaml`` (the contract):
every answer validates, every documented property is written, and the documented text limit is
the one the service applies."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from openapi_schema_validator import OAS30Validator

from jhub_gpubooking.core.model import MAX_TEXT_LENGTH, Booking, Placement, Pool
from jhub_gpubooking.service import app as service_app
from jhub_gpubooking.service.serialize import booking_json, pool_json

OPENAPI = yaml.safe_load(Path(service_app.__file__).with_name("openapi.yaml").read_text())
T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
POOL = Pool(
    name="a100",
    nodes={"gpu-node-1": 2, "gpu-node-2": 1},
    slices_per_gpu=4,
    gpu_model="A100",
    gpu_memory_mib=81920,
    backend="hami",
    gpu_uuids={"gpu-node-1": ("GPU-a0", "GPU-a1"), "gpu-node-2": ("GPU-b0",)},
    node_selector={"gpu-type": "a100"},
)


def validator(name: str) -> OAS30Validator:
    # the components travel along so the schema's $refs resolve inside the document
    return OAS30Validator({"$ref": f"#/components/schemas/{name}", "components": OPENAPI["components"]})


def documented(name: str) -> set[str]:
    return set(OPENAPI["components"]["schemas"][name]["properties"])


BOOKINGS = [
    Booking(
        id=1, user="ada", pool="a100", amount=Fraction(1, 4), start=T0, end=T0 + timedelta(hours=2),
        placement=Placement("gpu-node-1", (0,), 1), note="n" * MAX_TEXT_LENGTH,
        created=T0 - timedelta(days=1), updated=T0 - timedelta(days=1), server="",
    ),
    Booking(
        id=2, user="grace", pool="a100", amount=Fraction(2), start=T0, end=T0 + timedelta(hours=1),
        placement=Placement("gpu-node-1", (0, 1), 4), created=T0, updated=T0,
        released_end=T0 + timedelta(hours=3), release_reason="server_stopped", series_id=5,
    ),
    Booking(
        id=3, user="bob", pool="a100", amount=Fraction(1, 2), start=T0, end=T0 + timedelta(hours=1),
        status="cancelled", opportunistic=True,
    ),
]


@pytest.mark.parametrize("booking", BOOKINGS, ids=lambda booking: f"booking-{booking.id}")
@pytest.mark.parametrize("now", [T0 - timedelta(hours=1), T0 + timedelta(minutes=5), T0 + timedelta(days=1)])
def test_booking_json_validates_against_the_booking_schema(booking, now):
    answer = booking_json(booking, POOL, now)
    validator("Booking").validate(answer)
    assert set(answer) == documented("Booking")


def test_pool_json_validates_against_the_pool_schema():
    answer = pool_json(POOL)
    validator("Pool").validate(answer)
    assert set(answer) == documented("Pool")


def test_the_validator_does_catch_a_broken_answer():
    # guards the two tests above against a validator that accepts anything
    broken = {**booking_json(BOOKINGS[0], POOL, T0), "start": "2026-11-23T09:00:00+00:00"}
    assert not validator("Booking").is_valid(broken)
    assert not validator("Pool").is_valid({**pool_json(POOL), "slices_per_gpu": 0})


def test_the_documented_text_limit_is_the_one_the_service_applies():
    schemas = OPENAPI["components"]["schemas"]
    limits = {
        (schema, field): schemas[schema]["properties"][field].get("maxLength")
        for schema, field in [
            ("BookingRequest", "note"),
            ("SeriesRequest", "note"),
            ("MaintenanceRequest", "reason"),
        ]
    }
    assert set(limits.values()) == {MAX_TEXT_LENGTH}


def test_every_reason_a_pool_claim_is_refused_for_is_documented():
    from jhub_gpubooking.service import claims

    reasons = {claims.NOT_BOOKED, claims.NONE_FREE, claims.IN_USE, claims.UNUSABLE,
               claims.POOL_UNKNOWN, claims.STARTING}
    documented_reasons = OPENAPI["components"]["schemas"]["Error"]["properties"]["reason"]["enum"]
    assert set(documented_reasons) == reasons


def test_the_missing_users_list_is_what_the_schema_documents():
    from jhub_gpubooking.db.removed_users import Belongings
    from jhub_gpubooking.service.removed_users import missing_users_json

    missing = {"zoë": T0, "bob": T0 + timedelta(minutes=30)}
    held = {"bob": Belongings((4, 7), (2,), True), "zoë": Belongings()}
    answer = missing_users_json(missing, held, timedelta(hours=24))
    assert answer == [
        {"user": "bob", "missing_since": "2026-11-23T09:30:00Z",
         "removal_due": "2026-11-24T09:30:00Z", "bookings": [4, 7], "waits": [2],
         "calendar_link": True},
        {"user": "zoë", "missing_since": "2026-11-23T09:00:00Z",
         "removal_due": "2026-11-24T09:00:00Z", "bookings": [], "waits": [],
         "calendar_link": False},
    ]
    check_off = missing_users_json(missing, held, None)
    assert [user["removal_due"] for user in check_off] == [None, None]
    for user in answer + check_off:
        validator("MissingUser").validate(user)
        assert set(user) == documented("MissingUser")
