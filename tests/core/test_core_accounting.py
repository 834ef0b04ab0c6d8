"""The accounting identity holds exactly, also for a booking in progress at an odd instant."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jhub_gpubooking.core.accounting import Interval, booking_totals
from jhub_gpubooking.core.model import Booking

START = datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc)


def test_a_booking_in_progress_adds_up_to_the_microsecond():
    booking = Booking(id=1, user="ada", pool="a100", amount=Fraction(2), start=START,
                      end=START + timedelta(minutes=30))
    now = START + timedelta(minutes=7, seconds=12, microseconds=700_000)
    used = [Interval(START + timedelta(seconds=30, microseconds=400_000), None)]
    totals = booking_totals(booking, used, START - timedelta(days=1), START + timedelta(days=1),
                            now)
    assert totals.booked == Fraction(1)  # 2 GPUs x 30 minutes
    assert totals.booked == (totals.used + totals.idle + totals.released + totals.no_show
                             + totals.scheduled)
    assert totals.idle == 2 * Fraction(30_400_000, 3_600_000_000)
    assert totals.used == 2 * Fraction(
        (now - START - timedelta(seconds=30, microseconds=400_000)) // timedelta(microseconds=1),
        3_600_000_000,
    )


def test_a_released_booking_extended_again_still_adds_up():
    # released at 10:10 (its end moved there, 10:30 kept as released_end), then the user
    # extended it to 10:45 while it was still active
    booking = Booking(id=1, user="ada", pool="a100", amount=Fraction(1), start=START,
                      end=START + timedelta(minutes=45),
                      released_end=START + timedelta(minutes=30), release_reason="no_show")
    totals = booking_totals(booking, [], START, START + timedelta(days=1),
                            START + timedelta(hours=2))
    assert totals.booked == Fraction(3, 4)
    assert (totals.idle, totals.released, totals.no_show) == (Fraction(3, 4), 0, 0)
    assert totals.no_shows == 0  # the user came back for it
    assert totals.booked == (totals.used + totals.idle + totals.released + totals.no_show
                             + totals.scheduled)
