"""Start early: offer capacity that is free now to a user whose booking starts later.

When a no-show is released, a server stops early or a booking ends, the GPUs are often free
for hours that nobody asked for. Users with a booking later the same day are the ones most
likely to use them: the service offers to move such a booking to start now, keeping its
length (so it ends earlier by as much), and the user accepts with one click. The time it
leaves behind becomes free for others (the waitlist is served at once).

Pure rules, no I/O: which bookings are offered (:func:`start_early_candidates`) and where an
early start would go (:func:`start_early_interval`). An offer is not stored: it is worked out
whenever the user's notices are read, and checked again, under the pool's lock, when accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from .model import Booking, BookingState, MaintenanceWindow, Placement, Pool
from .next_free import earliest_fit
from .placement import fit
from .timegrid import ceil_to_grid, floor_to_grid


def may_start_early(booking: Booking, now: datetime, horizon: timedelta) -> bool:
    """Whether ``booking`` may be offered an early start at ``now``: upcoming, starting within
    ``horizon``, an ordinary booking (not an opportunistic grant, nor one occurrence of a
    recurring series, whose time is the series' own)."""
    return (
        booking.state(now) is BookingState.UPCOMING
        and booking.start <= now + horizon
        and not booking.opportunistic
        and booking.series_id is None
    )


def start_early_candidates(
    bookings: Iterable[Booking], pool: str, now: datetime, horizon: timedelta
) -> list[Booking]:
    """The bookings of ``pool`` that may be offered an early start, soonest start first (then
    the older booking): the user about to start anyway is the likeliest to be ready."""
    found = [b for b in bookings if b.pool == pool and may_start_early(b, now, horizon)]
    return sorted(found, key=lambda b: (b.start, b.id or 0))


def start_early_interval(
    pool: Pool,
    booking: Booking,
    others: Iterable[Booking],
    now: datetime,
    slot_minutes: int,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> tuple[datetime, datetime, Placement] | None:
    """Where ``booking`` would go if it started now: (start, end, placement) with the same
    length, starting in the running slot (like a "book now") or at the next grid point, and
    before its own start; None when its amount does not fit there.

    ``others`` and ``maintenance`` must hold everything of the pool touching the new interval
    (``booking`` itself, if listed, is left out: it gives its own time up).
    """
    length = booking.end - booking.start
    earliest = floor_to_grid(now, slot_minutes)
    latest = min(ceil_to_grid(now, slot_minutes),
                 booking.start - timedelta(minutes=slot_minutes))
    if latest < earliest:
        return None
    rest = [b for b in others if b.id is None or b.id != booking.id]
    maintenance = list(maintenance)
    found = earliest_fit(pool, rest, booking.amount, length, earliest, latest, slot_minutes,
                         maintenance)
    if found is None:
        return None
    start, end = found
    placement = fit(pool, rest, start, end, booking.amount, maintenance)
    return None if placement is None else (start, end, placement)
