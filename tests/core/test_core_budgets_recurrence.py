"""Pure rules of budgets (config, charge modes) and of series occurrences."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.accounting import Interval
from jhub_gpubooking.core.budgets import Budget, charge, parse_group_budgets
from jhub_gpubooking.core.errors import InvalidRequest
from jhub_gpubooking.core.model import Booking
from jhub_gpubooking.core.recurrence import Occurrence, occurrences

TUESDAY_14 = datetime(2026, 12, 1, 14, tzinfo=timezone.utc)


def test_group_budgets_parse_exactly_and_refuse_unknown_keys():
    assert parse_group_budgets({"course-x": {"gpu_hours": 2.5, "period": "month"}}) == {
        "course-x": Budget(gpu_hours=Fraction(5, 2), period="month")
    }
    with pytest.raises(ValueError, match="Unknown budget keys for group course-x: hours"):
        parse_group_budgets({"course-x": {"hours": 3}})


def test_used_mode_charges_the_run_hours_and_what_is_still_ahead():
    booking = Booking(user="ada", pool="a100", amount=Fraction(2), start=TUESDAY_14,
                      end=TUESDAY_14 + timedelta(hours=4), id=1)
    ran = [Interval(TUESDAY_14, TUESDAY_14 + timedelta(minutes=30))]
    now = TUESDAY_14 + timedelta(hours=3)
    assert charge(booking, ran, "booked", now) == 8
    # 2 GPUs x (0.5 h run + 1 h still ahead)
    assert charge(booking, ran, "used", now) == 3


def test_weekly_series_until_includes_the_last_start():
    series = occurrences(TUESDAY_14, TUESDAY_14 + timedelta(hours=2), "weekly",
                         until=TUESDAY_14 + timedelta(weeks=2), max_occurrences=5)
    assert series == [
        Occurrence(TUESDAY_14 + timedelta(weeks=n), TUESDAY_14 + timedelta(weeks=n, hours=2))
        for n in range(3)
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"count": 6}, "A series can have at most 5 occurrences; shorten it with 'until' or 'count'."),
        ({"until": TUESDAY_14 + timedelta(weeks=9)}, "A series can have at most 5 occurrences"),
        ({}, "A series needs exactly one of 'until' or 'count'."),
        ({"count": 0}, "'count' must be a whole number of occurrences, at least 1."),
    ],
)
def test_series_refusals(options, message):
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(")):
        occurrences(TUESDAY_14, TUESDAY_14 + timedelta(hours=2), "weekly", max_occurrences=5,
                    **options)


def test_daily_occurrences_longer_than_a_day_are_refused():
    with pytest.raises(InvalidRequest, match="longer than a day; they would overlap each other"):
        occurrences(TUESDAY_14, TUESDAY_14 + timedelta(hours=25), "daily", count=2,
                    max_occurrences=5)


def test_a_weekly_lab_keeps_its_local_time_across_daylight_saving():
    # Tuesdays 14:00-16:00 in Berlin, from 20 October to 3 November 2026 (summer time ends 25 Oct)
    first_start = datetime(2026, 10, 20, 12, 0, tzinfo=timezone.utc)  # 14:00 CEST
    found = occurrences(
        first_start, first_start + timedelta(hours=2), "weekly", count=3,
        max_occurrences=26, time_zone="Europe/Berlin",
    )
    assert [o.start.strftime("%m-%d %H:%M") for o in found] == [
        "10-20 12:00", "10-27 13:00", "11-03 13:00",  # 14:00 Berlin each time, in UTC
    ]
    assert all(o.end - o.start == timedelta(hours=2) for o in found)
    assert all(o.start.tzinfo == timezone.utc for o in found)
    in_utc = occurrences(
        first_start, first_start + timedelta(hours=2), "weekly", count=3, max_occurrences=26
    )
    assert [o.start.hour for o in in_utc] == [12, 12, 12]  # the default stays UTC


def test_an_unknown_time_zone_is_refused_in_one_sentence():
    with pytest.raises(InvalidRequest, match="'time_zone' must be a time zone name"):
        occurrences(TUESDAY_14, TUESDAY_14 + timedelta(hours=1), "daily", count=2,
                    max_occurrences=5, time_zone="Mars/Olympus")
