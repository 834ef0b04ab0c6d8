"""Usage intervals: when a server actually held a booking (claim → release).

The store calls these inside its own locked transaction, so an interval opens and closes
together with the booking's ``server`` column and the two never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..core.accounting import Interval
from .models import BookingRow, UsageIntervalRow


def close_usage(session: Session, row: BookingRow, when: datetime) -> None:
    """End the booking's open interval (if any) at ``when``; the server counts as stopped."""
    open_intervals = session.scalars(
        select(UsageIntervalRow).where(
            UsageIntervalRow.booking_id == row.id, UsageIntervalRow.end.is_(None)
        )
    )
    for interval in open_intervals:
        interval.end = max(when, interval.start)
    row.stopped_at = when


def open_usage(session: Session, row: BookingRow, server: str, when: datetime) -> None:
    """Start an interval for ``server`` (a take-over first closes the previous holder's)."""
    close_usage(session, row, when)
    row.stopped_at = None
    session.add(UsageIntervalRow(booking_id=row.id, server=server, start=when))


def intervals_by_booking(session: Session, booking_ids: list[int]) -> dict[int, list[Interval]]:
    """When each of these bookings' servers ran (open intervals end None), by booking id."""
    found: dict[int, list[Interval]] = defaultdict(list)
    # chunks keep the IN list within every backend's parameter limit
    for first in range(0, len(booking_ids), 500):
        rows = session.scalars(
            select(UsageIntervalRow).where(
                UsageIntervalRow.booking_id.in_(booking_ids[first : first + 500])
            )
        )
        for row in rows:
            found[row.booking_id].append(Interval(row.start, row.end))
    return found
