"""Accounting: a scripted day of bookings, ticked with a ManualClock, whose report adds up."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from db_test_times import NOW, at

from jhub_gpubooking.core.lifecycle import ActionKind, LifecycleRules
from jhub_gpubooking.db.accounting import running_usage, usage_report
from jhub_gpubooking.db.lifecycle import BookingLifecycle

RULES = LifecycleRules(
    no_show_after=timedelta(minutes=15), stopped_release_after=timedelta(minutes=30)
)
BUCKETS = ("used", "idle", "released", "no_show", "scheduled")


def run_until(clock, lifecycle, until, script):
    """Advance in 5-minute steps; at each step run the scripted user actions, then tick."""
    while clock.now() < until:
        clock.advance(timedelta(minutes=5))
        for step in script.pop(clock.now(), []):
            step()
        for action in lifecycle.due(clock.now()):
            if action.kind is ActionKind.RELEASE:
                lifecycle.release(action, clock.now())


def hours(totals):
    return {name: getattr(totals, name) for name in ("booked", *BUCKETS)}


@pytest.fixture
def day(store, clock):
    """ada uses most of her booking, bob never shows up, carol stops early."""
    lifecycle = BookingLifecycle(store, RULES)
    clock.set(at(9))  # booked the hour before: bob's no-show time counts from 10:00
    ada = store.create("ada", "a100", "1", at(10), at(12), groups=["students"])
    bob = store.create("bob", "a100", "2", at(10), at(11), groups=["students"])
    carol = store.create("carol", "t4", "0.5", at(13), at(15), groups=["staff", "students"])
    clock.set(NOW)
    store.claim(ada.id, "")  # 10:05
    script = {
        at(11): [lambda: store.release(ada.id, "")],
        at(11, 10): [lambda: store.claim(ada.id, "")],
        at(12, 5): [lambda: store.release(ada.id, "")],  # stopped 5 minutes late
        at(13): [lambda: store.claim(carol.id, "lab")],
        at(13, 30): [lambda: store.release(carol.id, "lab")],
    }
    run_until(clock, lifecycle, at(18), script)
    return ada, bob, carol


def test_releases_happen_as_scripted(store, day):
    ada, bob, carol = (store.get(b.id) for b in day)
    assert (ada.end, ada.release_reason) == (at(12), None)
    # released at the first tick 15 minutes after the start
    assert (bob.end, bob.released_end, bob.release_reason) == (at(10, 15), at(11), "no_show")
    assert (carol.end, carol.released_end, carol.release_reason) == (
        at(14),
        at(15),
        "server_stopped",
    )


def test_report_by_user_adds_up(store, day):
    report = usage_report(store, at(0), at(0, days=1), "user")
    assert {user: hours(totals) for user, totals in report.rows.items()} == {
        # 10:05-11:00 and 11:10-12:00 used; the 5 minutes after the end are not booked time
        "ada": {
            "booked": 2,
            "used": Fraction(7, 4),
            "idle": Fraction(1, 4),
            "released": 0,
            "no_show": 0,
            "scheduled": 0,
        },
        "bob": {
            "booked": 2,
            "used": 0,
            "idle": Fraction(1, 2),
            "released": 0,
            "no_show": Fraction(3, 2),
            "scheduled": 0,
        },
        "carol": {
            "booked": 1,
            "used": Fraction(1, 4),
            "idle": Fraction(1, 4),
            "released": Fraction(1, 2),
            "no_show": 0,
            "scheduled": 0,
        },
    }
    total = report.total
    assert total.booked == sum(getattr(total, name) for name in BUCKETS) == 5
    assert (total.bookings, total.no_shows) == (3, 1)


def test_report_by_group_counts_a_booking_in_each_of_its_groups(store, day):
    report = usage_report(store, at(0), at(0, days=1), "group")
    assert {group: totals.booked for group, totals in report.rows.items()} == {
        "staff": 1,
        "students": 5,
    }
    assert report.total.booked == 5


def test_report_by_pool_and_json(store, day):
    report = usage_report(store, at(0), at(0, days=1), "pool")
    assert {pool: totals.to_json() for pool, totals in report.rows.items()} == {
        "a100": {
            "bookings": 2,
            "no_shows": 1,
            "booked_gpu_hours": 4.0,
            "used_gpu_hours": 1.75,
            "idle_gpu_hours": 0.75,
            "released_gpu_hours": 0.0,
            "no_show_gpu_hours": 1.5,
            "scheduled_gpu_hours": 0.0,
        },
        "t4": {
            "bookings": 1,
            "no_shows": 0,
            "booked_gpu_hours": 1.0,
            "used_gpu_hours": 0.25,
            "idle_gpu_hours": 0.25,
            "released_gpu_hours": 0.5,
            "no_show_gpu_hours": 0.0,
            "scheduled_gpu_hours": 0.0,
        },
    }


def test_report_clips_to_the_period(store, day):
    report = usage_report(store, at(10, 30), at(11, 30), "user")
    assert hours(report.rows["ada"]) == {
        "booked": 1,
        "used": Fraction(5, 6),
        "idle": Fraction(1, 6),
        "released": 0,
        "no_show": 0,
        "scheduled": 0,
    }
    assert hours(report.rows["bob"]) == {
        "booked": 1,
        "used": 0,
        "idle": 0,
        "released": 0,
        "no_show": 1,
        "scheduled": 0,
    }
    assert "carol" not in report.rows


def test_running_server_counts_as_used_until_now_and_the_rest_is_scheduled(store, clock):
    booking = store.create("ada", "a100", "2", at(10), at(12))
    store.claim(booking.id, "")  # 10:05
    clock.set(at(11, 5))
    assert running_usage(store) == {booking.id: running_usage(store)[booking.id]}
    report = usage_report(store, at(10), at(12), "user")
    assert hours(report.total) == {
        "booked": 4,
        "used": 2,
        "idle": Fraction(1, 6),
        "released": 0,
        "no_show": 0,
        "scheduled": Fraction(11, 6),
    }


def test_unknown_grouping_is_refused(store):
    with pytest.raises(ValueError, match="grouped by user, group, pool"):
        usage_report(store, at(0), at(1), "node")
