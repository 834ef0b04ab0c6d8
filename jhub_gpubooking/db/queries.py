"""The booking reads the store and its unit of work share: SQL that selects rows, nothing more.

Each query reads only what can matter (rows overlapping an interval, one user's recent
bookings), so its cost does not grow with a semester of history. The reads every booking
change makes are Core statements built once (SQLAlchemy computes their cache keys once, and
rows come back as plain tuples rather than ORM objects): they are most of a create's work.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    literal_column,
    null,
    or_,
    select,
    type_coerce,
    union_all,
)
from sqlalchemy.orm import Session
from sqlalchemy.types import NullType

from ..core import policy as booking_policy
from ..core.errors import InvalidRequest
from ..core.model import Booking, BookingState, MaintenanceWindow
from ..core.next_free import to_micros
from ..core.placement import Held
from ..core.timegrid import EARLIEST_TIME, as_utc
from .convert import booking_from_row, maintenance_from_row
from .models import BookingRow, MaintenanceWindowRow

_bookings = BookingRow.__table__
_windows = MaintenanceWindowRow.__table__
#: Bookings holding capacity of a pool in [after, end): see :func:`overlapping`.
HOLDING = (
    _bookings.c.pool == bindparam("pool"),
    _bookings.c.end > bindparam("after"),
    _bookings.c.start < bindparam("end"),
    _bookings.c.status == "booked",
)
OVERLAPPING_BOOKINGS = select(_bookings).where(*HOLDING)
#: :data:`OVERLAPPING_BOOKINGS` placed on one node.
NODE_OVERLAPPING_BOOKINGS = OVERLAPPING_BOOKINGS.where(_bookings.c.node == bindparam("node"))
#: Only what a usage table needs of them (:data:`..core.placement.Held`), as the driver gives
#: it (converted by :func:`held_overlapping`), and only those starting at ``starting_from`` or
#: later.
HELD_BOOKINGS = select(
    *(type_coerce(_bookings.c[name], NullType())
      for name in ("start", "end", "node", "gpu_indices", "slices_per_gpu_held"))
).where(*HOLDING, _bookings.c.start >= bindparam("starting_from"))
OVERLAPPING_WINDOWS = select(_windows).where(
    _windows.c.pool == bindparam("pool"),
    _windows.c.end > bindparam("start"),
    _windows.c.start < bindparam("end"),
)
#: :data:`OVERLAPPING_BOOKINGS` but those inside [inner_start, inner_end) (read before).
OVERLAPPING_BESIDES = select(_bookings).where(
    *HOLDING,
    or_(_bookings.c.end <= bindparam("inner_start"), _bookings.c.start >= bindparam("inner_end")),
)
#: A user's booked bookings ending after ``horizon`` (the index on (user, end) finds them).
USER_BOOKINGS_AFTER = select(_bookings).where(
    _bookings.c.user == bindparam("user"),
    _bookings.c.end > bindparam("horizon"),
    _bookings.c.status == "booked",
)
#: :data:`USER_BOOKINGS_AFTER`, :data:`OVERLAPPING_BOOKINGS` and :data:`OVERLAPPING_WINDOWS`
#: in one round trip (each part keeps its own index), every row tagged with its part: 0 the
#: user's bookings, 1 the pool's, 2 the pool's maintenance windows. Every row has the
#: bookings' columns and a window's ``reason`` (columns a part lacks are NULL), so the three
#: parts are one result; a statement less is worth more than the padding on every backend.
USER_PART, POOL_PART, WINDOW_PART = 0, 1, 2
_WINDOW_AS_BOOKING = {"id": _windows.c.id, "pool": _windows.c.pool, "start": _windows.c.start,
                      "end": _windows.c.end, "node": _windows.c.node}
_NO_REASON = type_coerce(null(), _windows.c.reason.type).label("reason")
USER_OVERLAPPING_AND_WINDOWS = union_all(
    select(literal_column(str(USER_PART)).label("part"), *_bookings.c, _NO_REASON).where(
        *USER_BOOKINGS_AFTER.whereclause.clauses),
    select(literal_column(str(POOL_PART)).label("part"), *_bookings.c, _NO_REASON).where(
        *OVERLAPPING_BOOKINGS.whereclause.clauses),
    select(literal_column(str(WINDOW_PART)).label("part"), *(
        _WINDOW_AS_BOOKING.get(column.name, type_coerce(null(), column.type))
        for column in _bookings.c
    ), _windows.c.reason).where(*OVERLAPPING_WINDOWS.whereclause.clauses),
)

def rows_connection(source: Session | Connection) -> Connection:
    """The connection of ``source`` for Core statements: a session's after writing its pending
    ORM changes (a Core statement does not autoflush, and must see them), or ``source`` itself
    when it is a connection already (a unit of work's)."""
    if isinstance(source, Connection):
        return source
    source.flush()
    return source.connection()


def page(statement, row_class, limit: int | None, after: tuple[datetime, int] | None):
    """Keyset paging over (start, id): stable while rows are added, unlike an offset."""
    if after is not None:
        start, row_id = as_utc(after[0]), after[1]
        statement = statement.where(
            or_(row_class.start > start, and_(row_class.start == start, row_class.id > row_id))
        )
    return statement if limit is None else statement.limit(limit)


def state_filter(state: BookingState | str, now: datetime) -> list:
    """WHERE clauses selecting the bookings in ``state`` at ``now`` (400 for an unknown state)."""
    try:
        state = BookingState(state)
    except ValueError:
        allowed = ", ".join(s.value for s in BookingState)
        raise InvalidRequest(f"'state' must be one of: {allowed}.") from None
    if state is BookingState.CANCELLED:
        return [BookingRow.status == "cancelled"]
    booked = BookingRow.status == "booked"
    if state is BookingState.UPCOMING:
        # end > now follows from start > now; said out loud, it lets the (user, end) index skip
        # a user's past bookings instead of reading the whole history
        return [booked, BookingRow.start > now, BookingRow.end > now]
    if state is BookingState.ACTIVE:
        return [booked, BookingRow.start <= now, BookingRow.end > now]
    return [booked, BookingRow.end <= now]


def state_case(now: datetime):
    """A SQL expression for each booking's state at ``now``: :func:`~..core.model.booking_state`
    said in SQL, so a count by state needs no rows loaded."""
    return case(
        (BookingRow.status == "cancelled", BookingState.CANCELLED.value),
        (BookingRow.start > now, BookingState.UPCOMING.value),
        (BookingRow.end > now, BookingState.ACTIVE.value),
        else_=BookingState.ENDED.value,
    )


def overlapping(
    session: Session | Connection, pool: str, start: datetime, end: datetime, now: datetime,
    node: str | None = None,
) -> tuple[list[Booking], list[MaintenanceWindow]]:
    """Bookings holding capacity and maintenance windows of ``pool`` that touch [start, end);
    with ``node``, only the bookings placed there (the windows all the same).

    A booking that has ended holds nothing any more, even inside the running slot: one
    ended early ("End now") frees its GPUs for a booking of the current slot at once.
    """
    connection = rows_connection(session)
    parameters = _overlap_parameters(pool, start, end, now)
    if node is None:
        bookings = connection.execute(OVERLAPPING_BOOKINGS, parameters)
    else:
        bookings = connection.execute(NODE_OVERLAPPING_BOOKINGS, {**parameters, "node": node})
    return [booking_from_row(b) for b in bookings], _windows(connection, pool, start, end)


def _overlap_parameters(pool: str, start: datetime, end: datetime, now: datetime) -> dict:
    return {"pool": pool, "after": max(as_utc(start), now), "end": end}


def _windows(connection: Connection, pool: str, start: datetime,
             end: datetime) -> list[MaintenanceWindow]:
    windows = connection.execute(OVERLAPPING_WINDOWS, {"pool": pool, "start": start, "end": end})
    return [maintenance_from_row(w) for w in windows]


def windows_overlapping(
    session: Session, pool: str, start: datetime, end: datetime
) -> list[MaintenanceWindow]:
    """The maintenance windows of ``pool`` that touch [start, end)."""
    return _windows(rows_connection(session), pool, start, end)


def held_overlapping(
    session: Session, pool: str, start: datetime, end: datetime, now: datetime,
    starting_from: datetime | None = None,
) -> list[Held]:
    """What :func:`overlapping` reads of the bookings (not the windows) that start at
    ``starting_from`` or later (default: any), as :data:`..core.placement.Held` values with
    times in microseconds since the epoch (:func:`..core.next_free.to_micros`).

    For the next-free search, which may read every booking of a busy pool: plain values instead
    of a :class:`Booking` per row, and each column's own conversion run once per distinct value
    the driver returns (thousands of rows hold a few hundred distinct times and GPU lists)."""
    connection = rows_connection(session)
    times = _ConvertedOnce(_bookings.c.start, connection.dialect, to_micros)
    gpus = _ConvertedOnce(_bookings.c.gpu_indices, connection.dialect, tuple)
    rows = connection.execute(HELD_BOOKINGS, {
        "pool": pool, "after": max(as_utc(start), now), "end": end,
        "starting_from": EARLIEST_TIME if starting_from is None else starting_from,
    }).all()
    # (a driver that decodes JSON itself, psycopg, gives lists: those cannot be looked up)
    return [(times[begin], times[finish], node,
             gpus[indices] if indices.__class__ is not list else tuple(indices), slices)
            for begin, finish, node, indices, slices in rows]


class _ConvertedOnce(dict):
    """``column``'s conversion of the values a driver returns, followed by ``then``, done once
    per distinct value (a dictionary look-up for every later row)."""

    def __init__(self, column, dialect, then: Callable[[Any], Any]):
        super().__init__()
        self.convert = column.type.dialect_impl(dialect).result_processor(dialect, None)
        self.then = then

    def __missing__(self, raw: Any) -> Any:
        value = self[raw] = self.then(raw if self.convert is None else self.convert(raw))
        return value


def overlapping_besides(
    session: Session | Connection, pool: str, start: datetime, end: datetime,
    inner: tuple[datetime, datetime], now: datetime,
) -> tuple[list[Booking], list[MaintenanceWindow]]:
    """What :func:`overlapping` reads for [start, end) that it did not read for the ``inner``
    interval already (the maintenance windows are all read again: they are few).

    For a create that moves bookings and reads hundreds of them: plain rows, not ORM objects,
    so the rows it changes are loaded again by the caller."""
    connection = rows_connection(session)
    rows = connection.execute(OVERLAPPING_BESIDES, {
        **_overlap_parameters(pool, start, end, now),
        "inner_start": max(as_utc(inner[0]), now), "inner_end": as_utc(inner[1]),
    })
    return [booking_from_row(b) for b in rows], _windows(connection, pool, start, end)


def policy_context(
    session: Session | Connection, policy: booking_policy.Policy, request: Booking, now: datetime
) -> list[Booking]:
    """The user's bookings that can matter to the policy: all future ones, and past ones
    only as far back as the cooldown and the budget periods reach (not the whole history).
    Opportunistic grants are left out: a best-effort use must not block a real booking."""
    rows = rows_connection(session).execute(
        USER_BOOKINGS_AFTER, _policy_parameters(policy, request, now)
    )
    return [booking_from_row(row) for row in rows if _counts_for_policy(row, request)]


def policy_context_and_overlapping(
    session: Session | Connection, policy: booking_policy.Policy, request: Booking, now: datetime,
    read_at: datetime,
) -> tuple[list[Booking], list[Booking], list[MaintenanceWindow]]:
    """:func:`policy_context` at ``now`` and :func:`overlapping` for ``request``'s interval at
    ``read_at`` (the time of the read), all in one round trip: (the user's bookings for the
    policy, the pool's bookings, the pool's maintenance windows)."""
    rows = rows_connection(session).execute(USER_OVERLAPPING_AND_WINDOWS, {
        **_policy_parameters(policy, request, now),
        **_overlap_parameters(request.pool, request.start, request.end, read_at),
        "start": request.start,
    })
    others, bookings, windows = [], [], []
    for row in rows:
        if row.part == POOL_PART:
            bookings.append(booking_from_row(row))
        elif row.part == WINDOW_PART:
            windows.append(maintenance_from_row(row))
        elif _counts_for_policy(row, request):
            others.append(booking_from_row(row))
    return others, bookings, windows


def _policy_parameters(policy: booking_policy.Policy, request: Booking, now: datetime) -> dict:
    """The user and the horizon of the user's bookings the policy reads (see policy_context)."""
    horizon = min(now, request.start)
    if policy.cooldown_minutes:
        horizon = min(horizon, request.start - timedelta(minutes=policy.cooldown_minutes))
    if policy.budget_gpu_hours is not None:
        for when in (now, request.start):
            period_start, _ = booking_policy.period_bounds(policy.budget_period, when)
            horizon = min(horizon, period_start)
    return {"user": request.user, "horizon": horizon}


def _counts_for_policy(row, request: Booking) -> bool:
    return row.id != request.id and not row.opportunistic
