"""The core's value types and time grid: amounts, pools, booking states, UTC parsing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import InvalidRequest
from jhub_gpubooking.core.model import (
    Booking,
    BookingState,
    MaintenanceWindow,
    Pool,
    format_amount,
    parse_amount,
)
from jhub_gpubooking.core.timegrid import (
    ceil_to_grid,
    floor_to_grid,
    format_time,
    is_on_grid,
    parse_time,
)


@pytest.mark.parametrize(
    "value, amount",
    [(2, 2), (0.25, Fraction(1, 4)), ("0.5", Fraction(1, 2)), (" 1/4 ", Fraction(1, 4)),
     (0.1 + 0.2, Fraction(3, 10)), (1 / 3, Fraction(1, 3)), ("0.3333333333333333", Fraction(1, 3)),
     (1 / 7, Fraction(1, 7)), ("1e2", 100),
     # a real difference is kept, never rounded onto a simple fraction (the pool refuses it)
     ("0.3333", Fraction(3333, 10000)), (0.2501, Fraction(2501, 10000))],
)
def test_parse_amount_reads_numbers_people_write(value, amount):
    assert parse_amount(value) == amount


@pytest.mark.parametrize(
    "value", [True, None, "", "half", "1/0", "inf", float("inf"), float("nan"), "-Infinity",
              "1e-999999999", [1]],
)
def test_parse_amount_refuses_everything_else_with_a_sentence(value):
    with pytest.raises(InvalidRequest) as refused:
        parse_amount(value)
    assert refused.value.message.startswith("'gpus' must be a number such as 1, 0.5 or 1/4")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 7, 8, 64]), st.integers(1, 64))
def test_formatted_amounts_parse_back_exactly(slices_per_gpu, slices):
    amount = Fraction(slices, slices_per_gpu)
    assert parse_amount(format_amount(amount)) == amount


def test_format_amount():
    assert [format_amount(Fraction(a)) for a in ("2", "1/2", "1/4", "1/7", "3/8")] == [
        "2", "0.5", "0.25", "1/7", "0.375",
    ]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"name": "A100", "nodes": {"n": 1}}, "Pool name 'A100' must be lowercase letters"),
        ({"name": "a", "nodes": {"n": 1}, "slices_per_gpu": True},
         "Pool a: slices_per_gpu must be an integer from 1 to 64."),
        ({"name": "a", "nodes": {}}, "Pool a: 'nodes' must name at least one node."),
        ({"name": "a", "nodes": {"n": 2}, "gpu_uuids": {"n": ["GPU-1"]}},
         "Pool a: node 'n' has 2 GPUs but 1 UUIDs."),
        ({"name": "a", "nodes": {"n": 1}, "colour": "red"}, "Pool config 'a' has unknown keys"),
    ],
)
def test_pool_config_mistakes_are_named(config, message):
    with pytest.raises(ValueError) as refused:
        Pool.from_config(config)
    assert str(refused.value).startswith(message)


def test_pool_counts_slices():
    pool = Pool.from_config({"name": "a100", "nodes": {"a": 2, "b": 4}, "slices_per_gpu": 4})
    assert (pool.total_gpus, pool.total_slices) == (6, 24)
    assert pool.amount_to_slices(Fraction(3, 4)) == 3
    assert pool.amount_to_slices(Fraction(4)) == 16
    assert pool.slices_to_amount(2) == Fraction(1, 2)
    # the one numbering of its GPUs: node by node in config order
    assert pool.gpu_keys == (("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3))


def test_bookings_and_maintenance_windows_overlap_by_one_rule():
    """Half-open intervals: touching ends do not overlap, for bookings and windows alike."""
    start = datetime(2026, 11, 22, 14, tzinfo=timezone.utc)
    hour = timedelta(hours=1)
    booking = Booking("alice", "a100", Fraction(1), start, start + hour)
    window = MaintenanceWindow("a100", start, start + hour)
    for interval in (booking, window):
        assert interval.overlaps(start + hour / 2, start + 2 * hour)
        assert not interval.overlaps(start + hour, start + 2 * hour)
        assert not interval.overlaps(start - hour, start)


def test_booking_state_follows_the_clock():
    start = datetime(2026, 11, 22, 14, tzinfo=timezone.utc)
    booking = Booking("alice", "a100", Fraction(1), start, start + timedelta(hours=1))
    clock = ManualClock(start - timedelta(minutes=1))
    assert booking.state(clock.now()) is BookingState.UPCOMING
    assert booking.state(clock.advance(timedelta(minutes=1))) is BookingState.ACTIVE
    assert booking.state(clock.advance(timedelta(hours=1))) is BookingState.ENDED
    assert booking.with_changes(status="cancelled").state(start) is BookingState.CANCELLED


def test_parse_time_converts_offsets_to_utc():
    in_berlin = parse_time("2026-11-22T15:00:00+01:00")
    assert in_berlin == datetime(2026, 11, 22, 14, tzinfo=timezone.utc)
    assert format_time(parse_time("2026-11-22T14:00:00z")) == "2026-11-22T14:00:00Z"


@pytest.mark.parametrize(
    "text, message",
    [
        ("2026-11-22T14:00:00", ("'start' must include a time zone (Z or an offset such as "
                                "+01:00): '2026-11-22T14:00:00'.")),
        ("tomorrow", ("'start' is not a valid ISO 8601 time: 'tomorrow' "
                     "(expected e.g. 2026-11-22T14:00:00Z).")),
        ("0001-01-01T00:00:00+01:00", ("'start' must be a time in the years 2000 to 2199 "
                                      "(UTC), not '0001-01-01T00:00:00+01:00'.")),
        ("9999-12-31T23:59:59Z", ("'start' must be a time in the years 2000 to 2199 (UTC), "
                                 "not '9999-12-31T23:59:59Z'.")),
        ("2200-01-01T00:00:00+00:00", ("'start' must be a time in the years 2000 to 2199 "
                                      "(UTC), not '2200-01-01T00:00:00+00:00'.")),
    ],
)
def test_parse_time_refusals(text, message):
    with pytest.raises(InvalidRequest) as refused:
        parse_time(text, "start")
    assert refused.value.message == message


def test_grid_rounding():
    when = datetime(2026, 11, 22, 14, 7, 30, tzinfo=timezone.utc)
    assert floor_to_grid(when, 15) == when.replace(minute=0, second=0)
    assert ceil_to_grid(when, 15) == when.replace(minute=15, second=0)
    assert ceil_to_grid(when.replace(minute=15, second=0), 15) == when.replace(minute=15, second=0)
    assert not is_on_grid(when, 15) and is_on_grid(when.replace(minute=45, second=0), 15)
    # an offset zone is compared in UTC, where the grid lives
    berlin = timezone(timedelta(hours=1))
    assert floor_to_grid(datetime(2026, 11, 22, 15, 20, tzinfo=berlin), 15) == when.replace(
        minute=15, second=0
    )
