"""Usage intervals: when a server actually held a booking (claim → release).

The store calls these inside its own locked transaction, so an interval opens and closes
together with the booking's ``server`` column and the two never disagree.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

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
