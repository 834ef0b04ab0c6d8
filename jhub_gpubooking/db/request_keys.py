"""Creates sent again: the ``Idempotency-Key`` a create or a join of the waitlist may carry
(migration 0007).

The reservation page, or any client, may lose the answer to a create (the network dropped it,
the proxy timed out, the page was reloaded) after the booking was made. Sent again with the
same key, the create answers the booking it made instead of booking a second time (or being
refused by the user's own first booking). The key is kept with the booking, unique per user;
another user's key is never looked at. A key names one create: sent with a different pool,
amount, start or end it is refused (422), as the IETF Idempotency-Key draft says. A join of
the waitlist keeps its key with the wait in the same way, a recurring series with the series
(migration 0008), and an admin's maintenance window with the window, unique per admin (0009).

The look-up runs in the create's unit of work, under its pool's lock, so two copies of one
create sent at once are written one after the other and the second finds the first. Copies
sent at once to two pools take two locks: the second to write meets the unique index instead,
and is tried once more (:func:`tried_again_if_raced`), when its look-up finds the first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..core.errors import InvalidRequest, KeyReused
from ..core.model import Booking
from ..core.recurrence import Occurrence
from ..core.timegrid import as_utc, format_time
from .convert import booking_from_row
from .models import (
    REQUEST_KEY_LENGTH,
    BookingEventRow,
    BookingRow,
    BookingSeriesRow,
    MaintenanceWindowRow,
    WaitRow,
)

if TYPE_CHECKING:
    from .unit_of_work import UnitOfWork

_bookings = BookingRow.__table__
_events = BookingEventRow.__table__
_KEY = re.compile(rf"[!-~]{{1,{REQUEST_KEY_LENGTH}}}")  # visible ASCII: a header's safe part
_T = TypeVar("_T")
_Keyed = TypeVar("_Keyed", WaitRow, BookingSeriesRow, MaintenanceWindowRow)


def checked_request_key(value: Any) -> str | None:
    """``value`` if it is a usable key (None: the create has none), else refused (400)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        raise InvalidRequest(
            f"The Idempotency-Key must be 1 to {REQUEST_KEY_LENGTH} visible ASCII characters "
            "without spaces (a UUID, say)."
        )
    return value


def refusal_unless_made(request_key: str | None, check: Callable[[], None]
                        ) -> InvalidRequest | None:
    """Run ``check`` (the grid, a start not yet passed); its refusal is raised, or with a key
    returned: sent again after its start passed, a create still answers what it made, so it is
    refused only once the look-up in its transaction finds nothing."""
    try:
        check()
    except InvalidRequest as refused:
        if request_key is None:
            raise
        return refused
    return None


def tried_again_if_raced(request_key: str | None, write: Callable[[], _T]) -> _T:
    """``write()`` (a keyed create's or join's whole transaction), once more when it met the
    unique (user, key) index: a copy with the same key, sent at once to another pool (another
    lock), was committed between this one's look-up and its insert. The second try's look-up
    finds it and answers as for any repeat (here always the 422: its pool differs)."""
    try:
        return write()
    except IntegrityError:
        if request_key is None:
            raise
        return write()  # rolled back: nothing of the first try is left


def made_with_key(work: UnitOfWork, request: Booking, key: str) -> Booking | None:
    """The booking ``request.user`` made with ``key``, as it is now; None if there is none.
    Refuses (422) when that booking was made for another pool, amount or time."""
    connection = work.rows()  # Core only: a create needs no ORM session
    row = connection.execute(select(_bookings).where(
        _bookings.c.user == request.user, _bookings.c.request_key == key)).one_or_none()
    if row is None:
        return None
    created = connection.execute(select(_events.c.detail).where(
        _events.c.booking_id == row.id, _events.c.kind == "created")).scalars().first() or {}
    # as it was made: its end may have been changed since, and its start moved earlier
    made = (row.pool, _as_created(created))
    asked = (request.pool, _as_asked(request.amount, request.start, request.end))
    if made != asked:
        raise _reused("booking", row.id)
    return booking_from_row(row)


def wait_with_key(session: Session, user: str, key: str, asked: tuple) -> WaitRow | None:
    """The wait ``user`` added with ``key``; None if there is none. Refuses (422) when it was
    for another (pool, amount, start, latest start, minutes) than ``asked``."""
    row = _row_with_key(session, WaitRow, user, key)
    if row is None:
        return None
    made = (row.pool, Fraction(row.amount_num, row.amount_den), as_utc(row.start),
            as_utc(row.latest_start), row.minutes)
    if made != asked:
        raise _reused("wait", row.id)
    return row


def series_with_key(session: Session, user: str, key: str, pool: str, repeat: str,
                    amount: Fraction, occurrences: list[Occurrence]) -> BookingSeriesRow | None:
    """The series ``user`` booked with ``key``; None if there is none. Refuses (422) when it
    was for another pool, repeat, amount or occurrences, each compared as it was made."""
    row = _row_with_key(session, BookingSeriesRow, user, key)
    if row is None:
        return None
    details = session.scalars(
        select(BookingEventRow.detail).join(BookingRow, BookingRow.id == BookingEventRow.booking_id)
        .where(BookingRow.series_id == row.id, BookingEventRow.kind == "created")
        .order_by(BookingRow.start, BookingRow.id))
    made = (row.pool, row.repeat, [_as_created(detail) for detail in details])
    asked = (pool, repeat, [_as_asked(amount, o.start, o.end)
                            for o in sorted(occurrences, key=lambda o: o.start)])
    if made != asked:
        raise _reused("series", row.id)
    return row


def window_with_key(session: Session, actor: str | None, key: str, asked: tuple
                    ) -> MaintenanceWindowRow | None:
    """The maintenance window ``actor`` added with ``key``; None if there is none. Refuses
    (422) when it was for another (pool, node, start, end, reason) than ``asked``."""
    row = _row_with_key(session, MaintenanceWindowRow, actor, key, owner="created_by")
    if row is None:
        return None
    if (row.pool, row.node, as_utc(row.start), as_utc(row.end), row.reason) != asked:
        raise _reused("maintenance window", row.id)
    return row


def _row_with_key(session: Session, model: type[_Keyed], user: str | None, key: str,
                  owner: str = "user") -> _Keyed | None:
    """The row of ``model`` whose ``owner`` column is ``user`` and whose key is ``key``."""
    return session.scalars(select(model).where(
        getattr(model, owner) == user, model.request_key == key)).one_or_none()


def _as_created(detail: dict) -> tuple:
    """A booking's (amount, start, end) as its "created" event recorded them."""
    return detail.get("gpus"), detail.get("start"), detail.get("end")


def _as_asked(amount: Fraction, start: datetime, end: datetime) -> tuple:
    """A requested (amount, start, end) as :func:`_as_created` reads them back."""
    return str(amount), format_time(start), format_time(end)


def _reused(what: str, row_id: int) -> KeyReused:
    return KeyReused(
        f"This Idempotency-Key was used for {what} #{row_id}, made for other GPUs or times; "
        f"send a new key for a new {what}."
    )

