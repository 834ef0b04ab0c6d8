"""GPU-hour accounting of bookings over a period (pure; the database layer feeds it).

Every booked GPU-hour lands in exactly one bucket, so a report always adds up::

    booked = used + idle + released + no_show + scheduled

- *booked*: ``[start, booked end)`` where the booked end is the end before any early release
  (or the end itself, if the booking was extended again after the release);
- *used*: time a server held the booking (usage intervals, clipped to what was still held);
- *idle*: held but no server running;
- *released*: handed back early because the server stopped (or was preempted);
- *no_show*: handed back because no server ever claimed the booking;
- *scheduled*: still held but not yet happened (only in reports reaching past "now").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from fractions import Fraction

from .model import Booking

HOUR = timedelta(hours=1)
MICROSECOND = timedelta(microseconds=1)
NO_GROUP = "(no group)"
GROUPINGS = ("user", "group", "pool")


@dataclass
class UsageTotals:
    """GPU-hours (exact fractions) of a set of bookings; ``bookings``/``no_shows`` are counts."""

    bookings: int = 0
    no_shows: int = 0
    booked: Fraction = Fraction(0)
    used: Fraction = Fraction(0)
    idle: Fraction = Fraction(0)
    released: Fraction = Fraction(0)
    no_show: Fraction = Fraction(0)
    scheduled: Fraction = Fraction(0)

    def add(self, other: UsageTotals) -> None:
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))

    def to_json(self) -> dict:
        counts = {"bookings": self.bookings, "no_shows": self.no_shows}
        hours = {
            f"{name}_gpu_hours": round(float(getattr(self, name)), 4)
            for name in ("booked", "used", "idle", "released", "no_show", "scheduled")
        }
        return counts | hours


@dataclass(frozen=True)
class Interval:
    start: datetime
    end: datetime | None  # None: still open


def _hours(start: datetime, end: datetime) -> Fraction:
    # exact to the microsecond: truncating each piece to whole seconds would lose up to a second
    # per piece, and a booking in progress (split at "now") would no longer add up
    if end <= start:
        return Fraction(0)
    return Fraction((end - start) // MICROSECOND, HOUR // MICROSECOND)


def _clip(start: datetime, end: datetime, low: datetime, high: datetime) -> Fraction:
    return _hours(max(start, low), min(end, high))


def booking_totals(
    booking: Booking,
    usage: Iterable[Interval],
    period_start: datetime,
    period_end: datetime,
    now: datetime,
) -> UsageTotals:
    """One booking's share of ``[period_start, period_end)``, as of ``now``."""
    totals = UsageTotals()
    if booking.status == "cancelled":
        return totals
    amount = Fraction(booking.amount)
    # a released booking may be extended again past the end it had before the release
    booked_end = max(booking.released_end or booking.end, booking.end)
    # only what has happened yet can be used, idle or released
    low, high = period_start, min(period_end, max(now, period_start))
    totals.booked = amount * _clip(booking.start, booked_end, period_start, period_end)
    totals.bookings = int(totals.booked > 0)
    held_start, held_end = max(booking.start, low), min(booking.end, high)
    used = Fraction(0)
    for interval in _merged(usage, now):
        used += _clip(interval.start, interval.end, held_start, held_end)
    totals.used = amount * used
    totals.idle = amount * _hours(held_start, held_end) - totals.used
    totals.scheduled = amount * _clip(max(booking.start, high), booking.end, low, period_end)
    given_back = amount * _clip(booking.end, booked_end, period_start, period_end)
    if booking.release_reason == "no_show":
        totals.no_show, totals.no_shows = given_back, int(given_back > 0)
    else:
        totals.released = given_back
    return totals


def _merged(usage: Iterable[Interval], now: datetime) -> list[Interval]:
    """Intervals with open ends closed at ``now`` and overlaps merged (never counted twice)."""
    closed = sorted((i.start, i.end or now) for i in usage)
    merged: list[list[datetime]] = []
    for start, end in closed:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [Interval(start, end) for start, end in merged]


def group_keys(booking: Booking, by: str) -> tuple[str, ...]:
    """The report rows a booking counts in (a booking counts once per group of its user)."""
    if by == "user":
        return (booking.user,)
    if by == "pool":
        return (booking.pool,)
    return tuple(booking.groups) or (NO_GROUP,)


@dataclass
class Report:
    start: datetime
    end: datetime
    by: str
    rows: dict[str, UsageTotals] = field(default_factory=dict)
    total: UsageTotals = field(default_factory=UsageTotals)


def build_report(
    bookings: Iterable[Booking],
    usage: Mapping[int, list[Interval]],
    start: datetime,
    end: datetime,
    by: str,
    now: datetime,
) -> Report:
    """Totals per user, group or pool; ``total`` counts each booking once."""
    if by not in GROUPINGS:
        raise ValueError(f"Reports can be grouped by {', '.join(GROUPINGS)}, not {by!r}.")
    report = Report(start=start, end=end, by=by)
    for booking in bookings:
        totals = booking_totals(booking, usage.get(booking.id, []), start, end, now)
        if not totals.bookings:
            continue
        report.total.add(totals)
        for key in group_keys(booking, by):
            report.rows.setdefault(key, UsageTotals()).add(totals)
    report.rows = dict(sorted(report.rows.items()))
    return report
