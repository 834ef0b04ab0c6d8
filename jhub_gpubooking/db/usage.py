"""Usage intervals: when a server actually held a booking (claim → release).

The store calls these inside its own locked transaction, so an interval opens and closes
together with the booking's ``server`` column and the two never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import bindparam, case, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from ..core.accounting import Interval
from .models import BookingRow, UsageIntervalRow
from .queries import rows_connection

_usage = UsageIntervalRow.__table__
_when = bindparam("when", type_=_usage.c.end.type)
#: The booking's open interval ended at ``when`` (never before it began): Core statements built
#: once, as a claim is on every server start (no interval is read into the session for them).
CLOSE_USAGE = (
    update(_usage)
    .where(_usage.c.booking_id == bindparam("booking"), _usage.c.end.is_(None))
    .values(end=case((_usage.c.start > _when, _usage.c.start), else_=_when))
)
OPEN_USAGE = insert(_usage)


def close_usage(session: Session, row: BookingRow, when: datetime) -> None:
    """End the booking's open interval (if any) at ``when``; the server counts as stopped."""
    row.stopped_at = when  # before the flush below, which then writes the row once
    close_usage_of(rows_connection(session), row.id, when)


def close_usage_of(connection: Connection, booking_id: int, when: datetime) -> None:
    """:func:`close_usage` on the connection, for a booking whose row is not in the session."""
    connection.execute(CLOSE_USAGE, {"booking": booking_id, "when": when})


def open_usage(connection: Connection, booking_id: int, server: str, when: datetime,
               held: bool) -> None:
    """Start an interval for ``server``; ``held``: the booking had a holder, whose interval is
    closed first (an unheld booking has none open: they open and close with its holder)."""
    if held:
        close_usage_of(connection, booking_id, when)
    connection.execute(OPEN_USAGE, {"booking_id": booking_id, "server": server, "start": when})


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
