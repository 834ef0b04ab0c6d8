"""The one wire schema: pools and bookings survive JSON unchanged, and each rule lives once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.errors import InvalidRequest
from jhub_gpubooking.core.model import (
    MAX_TEXT_LENGTH,
    Booking,
    BookingState,
    Placement,
    Pool,
    checked_text,
)
from jhub_gpubooking.core.wire import (
    DERIVED_POOL_KEYS,
    POOL_KEYS,
    booking_from_json,
    booking_state_at,
    booking_to_json,
    pool_from_config,
    pool_from_json,
    pool_service_json,
    pool_to_json,
)

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)

POOLS = [
    Pool(name="t4", nodes={"t4-node": 4}),
    Pool(
        name="a100",
        nodes={"gpu-node-1": 2, "gpu-node-2": 2},
        slices_per_gpu=4,
        display_name="A100 80 GB",
        gpu_model="A100",
        gpu_memory_mib=81920,
        backend="hami",
        gpu_uuids={"gpu-node-1": ("GPU-a0", "GPU-a1"), "gpu-node-2": ("GPU-b0", "GPU-b1")},
        node_selector={"gpu-type": "a100"},
        description="Course pool",
    ),
    Pool(
        name="mig",
        nodes={"m1": 2, "m2": 0},
        slices_per_gpu=7,
        backend="mig",
        resource_name="nvidia.com/mig-1g.10gb",
    ),
]


def through_json(value: dict) -> dict:
    """What the other side reads: the text on the wire, parsed again."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("pool", POOLS, ids=lambda pool: pool.name)
def test_a_pool_survives_its_config_json_and_the_services_json(pool):
    assert pool_from_config(through_json(pool_to_json(pool))) == pool
    assert Pool.from_config(through_json(pool_to_json(pool))) == pool
    assert pool_from_json(through_json(pool_service_json(pool))) == pool


def test_pool_json_keys_are_the_pools_fields_plus_the_derived_ones():
    pool = POOLS[1]
    assert list(pool_to_json(pool)) == list(POOL_KEYS)
    assert set(pool_service_json(pool)) == set(POOL_KEYS) | set(DERIVED_POOL_KEYS)
    assert (pool_service_json(pool)["total_gpus"], pool_service_json(pool)["max_gpus_per_booking"]) == (4, 2)


def test_a_pool_config_may_not_carry_the_derived_keys():
    config = pool_service_json(POOLS[0])
    with pytest.raises(ValueError, match=r"unknown keys: \['max_gpus_per_booking', 'total_gpus'\]"):
        pool_from_config(config)


def test_the_spawner_reads_a_pool_from_an_older_or_newer_service():
    # nulls fall back to the defaults, keys a newer service adds are not the spawner's concern
    answer = {**pool_service_json(POOLS[0]), "description": None, "queue_hint": "short"}
    assert pool_from_json(answer) == POOLS[0]


BOOKINGS = [
    Booking(
        id=7,
        user="ada",
        pool="a100",
        amount=Fraction(1, 4),
        start=T0,
        end=T0 + timedelta(hours=2),
        placement=Placement("gpu-node-2", (1,), 1),
        note="training run ✓",
        created=T0 - timedelta(days=1),
        updated=T0 - timedelta(hours=3),
        server="",
    ),
    Booking(
        id=8,
        user="grace",
        pool="a100",
        amount=Fraction(2),
        start=T0,
        end=T0 + timedelta(minutes=45),
        placement=Placement("gpu-node-1", (0, 1), 4),
        created=T0,
        updated=T0 + timedelta(minutes=45),
        released_end=T0 + timedelta(hours=3),
        release_reason="no_show",
        series_id=3,
    ),
    Booking(
        id=9,
        user="ada",
        pool="a100",
        amount=Fraction(1, 2),
        start=T0 + timedelta(days=2),
        end=T0 + timedelta(days=2, hours=1),
        placement=Placement("gpu-node-1", (0,), 2),
        status="cancelled",
        created=T0,
        updated=T0,
    ),
    Booking(
        id=10,
        user="bob",
        pool="a100",
        amount=Fraction(1),
        start=T0 - timedelta(hours=1),
        end=T0 + timedelta(hours=1),
        placement=Placement("gpu-node-2", (0,), 4),
        opportunistic=True,
        server="lab",
    ),
]


@pytest.mark.parametrize("booking", BOOKINGS, ids=lambda booking: f"booking-{booking.id}")
@pytest.mark.parametrize("now", [T0 - timedelta(days=1), T0 + timedelta(minutes=30), T0 + timedelta(days=5)])
def test_a_booking_survives_the_services_json(booking, now):
    pool = POOLS[1]
    assert booking_from_json(through_json(booking_to_json(booking, pool, now)), pool) == booking


def test_the_amount_read_back_is_exact_even_where_the_number_is_not():
    pool = Pool(name="sevenths", nodes={"n": 1}, slices_per_gpu=7)
    booking = Booking(
        id=1, user="ada", pool="sevenths", amount=Fraction(3, 7), start=T0,
        end=T0 + timedelta(hours=1), placement=Placement("n", (0,), 3),
    )
    answer = through_json(booking_to_json(booking, pool, T0))
    assert answer["gpus"] == pytest.approx(3 / 7)
    assert booking_from_json(answer, pool).amount == Fraction(3, 7)


@pytest.mark.parametrize(
    "now, expected",
    [
        (T0 - timedelta(seconds=1), BookingState.UPCOMING),
        (T0, BookingState.ACTIVE),
        (T0 + timedelta(minutes=119, seconds=59, microseconds=999999), BookingState.ACTIVE),
        (T0 + timedelta(hours=2), BookingState.ENDED),
    ],
)
def test_the_state_of_a_bookings_json_follows_the_one_rule(now, expected):
    booking = BOOKINGS[0]
    answer = booking_to_json(booking, POOLS[1], T0 - timedelta(days=1))  # the service said upcoming
    assert booking_state_at(answer, now) is expected is booking.state(now)


def test_a_cancelled_booking_stays_cancelled_on_the_wire():
    answer = booking_to_json(BOOKINGS[2], POOLS[1], T0)
    assert booking_state_at(answer, T0 + timedelta(days=2, minutes=30)) is BookingState.CANCELLED


def test_text_limit():
    assert checked_text("x" * MAX_TEXT_LENGTH, "note") == "x" * MAX_TEXT_LENGTH
    with pytest.raises(InvalidRequest) as refused:
        checked_text("x" * (MAX_TEXT_LENGTH + 1), "note")
    assert refused.value.message == "'note' must be text of at most 500 characters."
    with pytest.raises(InvalidRequest) as refused:
        checked_text(42, "reason")
    assert refused.value.message == "'reason' must be text of at most 500 characters."
