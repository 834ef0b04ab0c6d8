"""Recurring bookings in the database: a series is booked, and cancelled, all or nothing.

Every occurrence goes through the store's own checks and placement
(:meth:`BookingStore._place`) inside one transaction holding the pool's lock, so occurrences
count against each other (``max_bookings``, budgets, capacity) exactly as separate bookings
would, and a refused series leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import select

from ..core import policy as booking_policy
from ..core.errors import BookingError, Conflict, InvalidRequest, NotFound
from ..core.model import Booking, BookingState, parse_amount
from ..core.recurrence import Occurrence
from ..core.timegrid import as_utc, format_time
from .convert import booking_from_row
from .models import BookingRow, BookingSeriesRow
from .store import MAX_TEXT_LENGTH, BookingStore


@dataclass(frozen=True)
class Refusal:
    """Why one occurrence of a series cannot be booked."""

    occurrence: Occurrence
    status: int
    message: str

    def to_json(self) -> dict:
        return {
            "start": format_time(self.occurrence.start),
            "end": format_time(self.occurrence.end),
            "status": self.status,
            "message": self.message,
        }


class SeriesRefused(Conflict):
    """Some occurrences do not fit: nothing was booked. ``refusals`` lists each one and why."""

    def __init__(self, refusals: list[Refusal], total: int):
        listed = " ".join(
            f"{_span(r.occurrence)}: {r.message}" for r in refusals
        )
        super().__init__(
            f"{len(refusals)} of {total} occurrences cannot be booked, so none was booked. "
            f"{listed}"
        )
        self.refusals = refusals


@dataclass(frozen=True)
class Series:
    id: int
    user: str
    pool: str
    repeat: str
    note: str
    created: datetime
    bookings: tuple[Booking, ...]


def create_series(
    store: BookingStore,
    user: str,
    pool: str,
    gpus: Any,
    occurrences: list[Occurrence],
    repeat: str,
    note: str = "",
    groups: Any = (),
    is_admin: bool = False,
    actor: str | None = None,
) -> Series:
    """Book every occurrence or none; raises :class:`SeriesRefused` (409) listing the misfits."""
    pool_spec = store._pool(pool)
    amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
    pool_spec.amount_to_slices(amount)
    if len(note) > MAX_TEXT_LENGTH:
        raise InvalidRequest(f"The note may be at most {MAX_TEXT_LENGTH} characters long.")
    if not occurrences:
        raise InvalidRequest("This series has no occurrences.")
    now = store._now()
    for occurrence in occurrences:
        store._check_interval(occurrence.start, occurrence.end, now)
    groups = tuple(sorted(groups))
    with store._transaction(write=True) as session:
        store._lock_for_rules(session, pool, groups, is_admin)
        series_row = BookingSeriesRow(
            user=user, pool=pool, repeat=repeat, note=note, created=store._stamp(),
            created_by=actor or user,
        )
        session.add(series_row)
        session.flush()
        refusals, rows = [], []
        for occurrence in occurrences:
            request = Booking(
                user=user, pool=pool, amount=amount, start=occurrence.start,
                end=occurrence.end, note=note, groups=groups, series_id=series_row.id,
            )
            try:
                rows.append(store._place(session, request, groups, is_admin, now, actor or user))
            except BookingError as refused:
                refusals.append(Refusal(occurrence, refused.status, refused.message))
        if refusals:
            # leaving the block with an exception rolls back every occurrence already placed
            raise SeriesRefused(refusals, len(occurrences))
        return _series(series_row, rows)


def get_series(store: BookingStore, series_id: int) -> Series:
    with store._transaction() as session:
        series_row = session.get(BookingSeriesRow, series_id)
        if series_row is None:
            raise NotFound(f"There is no booking series with id {series_id}.")
        return _series(series_row, _occurrence_rows(session, series_id))


def cancel_series(store: BookingStore, series_id: int, actor: str | None) -> Series:
    """Cancel every upcoming occurrence and end an active one at the next grid point; ended
    and already cancelled occurrences stay as they are."""
    now = store._now()
    with store._transaction(write=True) as session:
        series_row = session.get(BookingSeriesRow, series_id)
        if series_row is None:
            raise NotFound(f"There is no booking series with id {series_id}.")
        store._lock_pool(session, series_row.pool)
        rows = _occurrence_rows(session, series_id, lock=True)
        kind = "cancelled" if actor == series_row.user else "force_cancelled"
        for row in rows:
            booking = booking_from_row(row)
            if booking.state(now) not in (BookingState.UPCOMING, BookingState.ACTIVE):
                continue
            outcome = booking_policy.cancel_outcome(booking, now)
            if outcome.status == "cancelled":
                store._record(session, row, actor, kind, series_id=series_id)
                row.status = "cancelled"
            else:
                store._record(
                    session, row, actor, kind, series_id=series_id,
                    old_end=format_time(row.end), new_end=format_time(outcome.end),
                )
                row.end = outcome.end
                row.release_reason = outcome.release_reason
            row.updated = store._stamp()
        return _series(series_row, rows)


def _occurrence_rows(session, series_id: int, lock: bool = False) -> list[BookingRow]:
    statement = (
        select(BookingRow).where(BookingRow.series_id == series_id).order_by(BookingRow.start)
    )
    if lock:
        statement = statement.with_for_update()
    return list(session.scalars(statement))


def _series(row: BookingSeriesRow, bookings: list[BookingRow]) -> Series:
    return Series(
        id=row.id, user=row.user, pool=row.pool, repeat=row.repeat, note=row.note,
        created=row.created, bookings=tuple(booking_from_row(b) for b in bookings),
    )


def _span(occurrence: Occurrence) -> str:
    start, end = as_utc(occurrence.start), as_utc(occurrence.end)
    end_text = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%Y-%m-%d %H:%M}"
    return f"{start:%Y-%m-%d %H:%M} to {end_text} UTC"
