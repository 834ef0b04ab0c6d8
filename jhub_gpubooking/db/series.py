"""Recurring bookings in the database: a series is booked, and cancelled, all or nothing.

Every occurrence goes through the store's own checks and placement
(:meth:`.unit_of_work.UnitOfWork.place`) inside one unit of work holding the pool's lock, so occurrences
count against each other (``max_bookings``, budgets, capacity) exactly as separate bookings
would, and a refused series leaves nothing behind. A series sent again with its
Idempotency-Key answers the series it booked (:mod:`.request_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import select

from ..core.errors import BookingError, Conflict, InvalidRequest, NotFound
from ..core.model import Booking, checked_text, parse_amount
from ..core.recurrence import Occurrence
from ..core.timegrid import format_time, span_text
from .convert import booking_from_row
from .models import BookingRow, BookingSeriesRow
from .request_keys import (
    checked_request_key,
    refusal_unless_made,
    series_with_key,
    tried_again_if_raced,
)
from .store import BookingStore


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
            f"{span_text(r.occurrence.start, r.occurrence.end)}: {r.message}" for r in refusals
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
    request_key: str | None = None,
) -> Series:
    """Book every occurrence or none; raises :class:`SeriesRefused` (409) listing the misfits.
    With ``request_key``, the series this user booked with the same key, if any, as it is now
    (422 when it was for another pool, repeat or occurrences)."""
    pool_spec = store.pool(pool)
    amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
    pool_spec.amount_to_slices(amount)
    checked_text(note, "note")
    if not occurrences:
        raise InvalidRequest("This series has no occurrences.")
    request_key = checked_request_key(request_key)
    now = store.now()

    def check_times() -> None:
        for occurrence in occurrences:
            store.check_interval(occurrence.start, occurrence.end, now)

    started = refusal_unless_made(request_key, check_times)
    groups = tuple(sorted(groups))

    def write() -> Series:
        with store.unit_of_work(store.pools_for_rules(pool, groups, is_admin)) as work:
            if request_key is not None:
                made = series_with_key(work.session, user, request_key, pool, repeat,
                                       amount, occurrences)
                if made is not None:
                    rows = _occurrence_rows(work.session, made.id)
                    return _series(made, [booking_from_row(row) for row in rows])
                if started is not None:
                    raise started
            series_row = BookingSeriesRow(
                user=user, pool=pool, repeat=repeat, note=note, created=store.stamp(),
                created_by=actor or user, request_key=request_key,
            )
            work.session.add(series_row)
            work.session.flush()
            refusals, bookings = [], []
            for occurrence in occurrences:
                request = Booking(
                    user=user, pool=pool, amount=amount, start=occurrence.start,
                    end=occurrence.end, note=note, groups=groups, series_id=series_row.id,
                )
                try:
                    bookings.append(work.place(request, groups, is_admin, now, actor or user))
                except BookingError as refused:
                    refusals.append(Refusal(occurrence, refused.status, refused.message))
            if refusals:
                # leaving the block with an exception rolls back every occurrence placed
                raise SeriesRefused(refusals, len(occurrences))
            return _series(series_row, bookings)

    return tried_again_if_raced(request_key, write)


def get_series(store: BookingStore, series_id: int) -> Series:
    with store.read_transaction() as session:
        series_row = session.get(BookingSeriesRow, series_id)
        if series_row is None:
            raise NotFound(f"There is no booking series with id {series_id}.")
        rows = _occurrence_rows(session, series_id)
        return _series(series_row, [booking_from_row(row) for row in rows])


def cancel_series(store: BookingStore, series_id: int, actor: str | None) -> Series:
    """Cancel every upcoming occurrence and end an active one now (as ``BookingStore.cancel``
    does); ended and already cancelled occurrences stay as they are."""
    with store.unit_of_work() as work:
        series_row = work.session.get(BookingSeriesRow, series_id)
        if series_row is None:
            raise NotFound(f"There is no booking series with id {series_id}.")
        work.lock_pools([series_row.pool])
        rows = _occurrence_rows(work.session, series_id, lock=True)
        now = store.stamp()
        for row in rows:
            if booking_from_row(row).not_over(now):
                work.cancel(row, actor, series_id=series_id)
        return _series(series_row, [booking_from_row(row) for row in rows])


def _occurrence_rows(session, series_id: int, lock: bool = False) -> list[BookingRow]:
    statement = (
        select(BookingRow).where(BookingRow.series_id == series_id).order_by(BookingRow.start)
    )
    if lock:
        statement = statement.with_for_update()
    return list(session.scalars(statement))


def _series(row: BookingSeriesRow, bookings: list[Booking]) -> Series:
    return Series(
        id=row.id, user=row.user, pool=row.pool, repeat=row.repeat, note=row.note,
        created=row.created, bookings=tuple(bookings),
    )


