"""Reads for the Prometheus gauges: counted in SQL, so a scrape costs the same after years of
history (only the bookings active right now are loaded)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from ..core.model import Booking, BookingState
from .convert import booking_from_row
from .models import BookingRow
from .queries import state_case, state_filter
from .store import BookingStore


def metrics_snapshot(store: BookingStore, now: datetime) -> tuple[dict[str, int], list[Booking]]:
    """Bookings per state (every state present) and the bookings active at ``now``."""
    state = state_case(now)
    counts = {member.value: 0 for member in BookingState}
    active = select(BookingRow).where(*state_filter(BookingState.ACTIVE, now))
    with store.read_transaction() as session:
        for name, count in session.execute(select(state, func.count()).group_by(state)):
            counts[name] = count
        return counts, [booking_from_row(row) for row in session.scalars(active)]
