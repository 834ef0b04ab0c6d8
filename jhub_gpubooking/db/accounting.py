"""Reads for the accounting report: bookings of a period and their usage intervals."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select

from ..core.accounting import Interval, Report, build_report
from ..core.timegrid import as_utc
from .convert import booking_from_row
from .models import BookingRow, UsageIntervalRow
from .store import BookingStore
from .usage import intervals_by_booking


def usage_report(store: BookingStore, start: datetime, end: datetime, by: str) -> Report:
    """GPU-hours booked, used, idle, released and lost to no-shows in ``[start, end)``."""
    start, end = as_utc(start), as_utc(end)
    statement = select(BookingRow).where(
        BookingRow.status == "booked",
        BookingRow.start < end,
        # the booked end is the later of the end and the end before an early release
        or_(BookingRow.end > start, BookingRow.released_end > start),
    )
    with store.read_transaction() as session:
        bookings = [booking_from_row(row) for row in session.scalars(statement)]
        usage = intervals_by_booking(session, [booking.id for booking in bookings])
    return build_report(bookings, usage, start, end, by, store.now())


def running_usage(store: BookingStore) -> dict[int, Interval]:
    """The open usage interval of every booking a server holds right now."""
    with store.read_transaction() as session:
        rows = session.scalars(select(UsageIntervalRow).where(UsageIntervalRow.end.is_(None)))
        return {row.booking_id: Interval(row.start, row.end) for row in rows}
