"""The next free slot: the earliest interval of a given length in which an amount fits a pool.

Only the ends of bookings and maintenance windows (rounded up to the booking grid) need to be
tried as starts, besides the earliest allowed one: between two such ends, moving the start
later only lets more bookings into the interval's far side and none leave its near side, so
every GPU's peak use can only grow. The first candidate that :func:`.placement.fit` accepts
is therefore the earliest start of all, and the answer is exactly what booking it would get.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from fractions import Fraction

from .errors import NoCapacity
from .model import Booking, MaintenanceWindow, Pool
from .placement import UsageTable
from .timegrid import as_utc, ceil_to_grid


def earliest_fit(
    pool: Pool,
    existing: Iterable[Booking],
    amount: Fraction,
    length: timedelta,
    earliest: datetime,
    latest: datetime,
    slot_minutes: int,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> tuple[datetime, datetime] | None:
    """The earliest [start, start + length) with ``earliest <= start <= latest`` (``earliest``
    on the grid) in which ``amount`` can be placed; None when no start up to ``latest`` fits.

    ``existing`` and ``maintenance`` must hold everything of ``pool`` that touches
    [earliest, latest + length).
    """
    earliest, latest = as_utc(earliest), as_utc(latest)
    if latest < earliest:
        return None
    existing, maintenance = list(existing), list(maintenance)
    # one table over the whole search: each start tried then costs a look-up per GPU, not a
    # table of its own (a busy pool tries hundreds of starts)
    fits = UsageTable(pool, existing, earliest, latest + length, maintenance).fits_during(amount)
    ends = (ceil_to_grid(as_utc(item.end), slot_minutes) for item in [*existing, *maintenance])
    for start in sorted({earliest, *(end for end in ends if earliest < end <= latest)}):
        if fits(start, start + length):
            return start, start + length
    return None


def naming_next_free(refused: NoCapacity, found: tuple[datetime, datetime] | None) -> NoCapacity:
    """``refused`` with the earliest free interval of the same length and amount added to its
    message and as ``next_free`` (unchanged when nothing was found)."""
    if found is None:
        return refused
    start, end = found
    end_format = "%H:%M" if end.date() == start.date() else "%Y-%m-%d %H:%M"
    message = (
        f"{refused.message} The earliest free time of the same length is "
        f"{start:%Y-%m-%d %H:%M} to {end.strftime(end_format)} UTC."
    )
    return NoCapacity(message, refused.full_start, refused.full_end, refused.largest_bookable,
                      next_free=found)
