"""Each pool's own no-show release time (issue 17 item 4), and when the time starts, as pure
rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.lifecycle import (
    ActionKind,
    BookingFacts,
    LifecycleRules,
    ReleaseReason,
    decide,
    minutes_or_none,
    no_show_deadline,
)
from jhub_gpubooking.core.model import Booking, Pool
from jhub_gpubooking.core.wire import pool_from_config, pool_from_json, pool_service_json

START = datetime(2030, 1, 7, 10, 0, tzinfo=timezone.utc)
SERVICE_WIDE = LifecycleRules(no_show_after=timedelta(minutes=15))
BUSY = Pool(name="busy", nodes={"n": 1}, no_show_minutes=10)
SLOW = Pool(name="slow", nodes={"n": 1}, no_show_minutes=30)
NEVER = Pool(name="never", nodes={"n": 1}, no_show_minutes=0)
PLAIN = Pool(name="plain", nodes={"n": 1})


def unclaimed(pool: Pool) -> BookingFacts:
    return BookingFacts(Booking(user="ada", pool=pool.name, amount=Fraction(1), start=START,
                                end=START + timedelta(hours=2), id=1))


def released_after(rules: LifecycleRules, pool: Pool) -> int | None:
    """The first whole minute after the start at which the unclaimed booking is released."""
    for minute in range(0, 120):
        action = decide(rules, unclaimed(pool), START + timedelta(minutes=minute))
        if action is not None:
            assert (action.kind, action.reason) == (ActionKind.RELEASE, ReleaseReason.NO_SHOW)
            return minute
    return None


def test_a_pool_without_its_own_time_uses_the_service_wide_one():
    rules = SERVICE_WIDE.for_pools([PLAIN])

    assert rules.pool_no_show_after == {}
    assert rules.no_show_after_for("plain") == timedelta(minutes=15)
    assert released_after(rules, PLAIN) == 15


def test_each_pool_releases_its_no_shows_after_its_own_time():
    rules = SERVICE_WIDE.for_pools([BUSY, SLOW, NEVER, PLAIN])

    assert rules.pool_no_show_after == {
        "busy": timedelta(minutes=10), "slow": timedelta(minutes=30), "never": None,
    }
    assert [released_after(rules, pool) for pool in (BUSY, SLOW, NEVER, PLAIN)] == [
        10, 30, None, 15,
    ]
    # the service-wide switch off does not switch off a pool that sets its own time
    off = replace(SERVICE_WIDE, no_show_after=None).for_pools([BUSY, PLAIN])
    assert [released_after(off, pool) for pool in (BUSY, PLAIN)] == [10, None]


def test_for_pools_replaces_the_previous_pools_times():
    first = SERVICE_WIDE.for_pools([BUSY])
    again = first.for_pools([PLAIN])

    assert again.pool_no_show_after == {}
    assert again.no_show_after_for("busy") == timedelta(minutes=15)


def test_minutes_or_none_switches_a_rule_off_at_zero():
    assert (minutes_or_none(0), minutes_or_none(10)) == (None, timedelta(minutes=10))


def test_the_pool_config_and_json_carry_the_no_show_time():
    config = {"name": "a100", "nodes": {"n": 2}, "no_show_minutes": 10}

    pool = pool_from_config(config)
    assert pool.no_show_minutes == 10
    assert pool_service_json(pool)["no_show_minutes"] == 10
    assert pool_from_json(pool_service_json(pool)) == pool
    # null in the service's JSON is the service-wide default
    assert pool_from_json(pool_service_json(PLAIN)).no_show_minutes is None


@pytest.mark.parametrize("minutes", [-1, 1.5, "10", True])
def test_a_pool_refuses_a_no_show_time_that_is_not_whole_minutes(minutes):
    with pytest.raises(ValueError, match="no_show_minutes"):
        Pool(name="a100", nodes={"n": 1}, no_show_minutes=minutes)


def test_the_no_show_time_counts_from_a_booking_made_after_its_start():
    """Book now at 10:14 books the running slot from 10:00: released at 10:29, not 10:15; a
    booking made before its start counts from its start."""
    rules = SERVICE_WIDE.for_pools([PLAIN])
    late = unclaimed(PLAIN).booking.with_changes(created=at_minute(14), updated=at_minute(14))
    early = unclaimed(PLAIN).booking.with_changes(created=START - timedelta(days=1),
                                                  updated=START - timedelta(days=1))
    assert no_show_deadline(late, timedelta(minutes=15)) == at_minute(29)
    assert no_show_deadline(early, timedelta(minutes=15)) == at_minute(15)
    assert decide(rules, BookingFacts(late), at_minute(28)) is None
    action = decide(rules, BookingFacts(late), at_minute(29))
    assert (action.kind, action.reason, action.new_end) == (
        ActionKind.RELEASE, ReleaseReason.NO_SHOW, at_minute(30))


def at_minute(minute: int) -> datetime:
    return START + timedelta(minutes=minute)
