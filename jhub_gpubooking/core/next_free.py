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
from .placement import Held, UsageTable, held
from .timegrid import EPOCH, as_utc, span_text

#: The search's unit of time: whole microseconds since the epoch are exact for every stored
#: time, and far cheaper than datetimes to compare, hash and round to the grid.
MICROSECOND = timedelta(microseconds=1)


def to_micros(when: datetime) -> int:
    """``when`` (aware) as whole microseconds since the epoch."""
    return (when - EPOCH) // MICROSECOND


def from_micros(micros: int) -> datetime:
    return EPOCH + micros * MICROSECOND


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
    return earliest_fit_held(pool, held_in_micros(pool, existing, maintenance), amount, length,
                             as_utc(earliest), as_utc(latest), slot_minutes)


def held_in_micros(
    pool: Pool, existing: Iterable[Booking], maintenance: Iterable[MaintenanceWindow] = ()
) -> list[Held]:
    """:func:`.placement.held` with its times in microseconds since the epoch, as
    :func:`earliest_fit_held` takes them."""
    return [(to_micros(begin), to_micros(end), node, indices, slices)
            for begin, end, node, indices, slices in held(pool, existing, maintenance)]


def earliest_fit_held(
    pool: Pool,
    holding: list[Held],
    amount: Fraction,
    length: timedelta,
    earliest: datetime,
    latest: datetime,
    slot_minutes: int,
) -> tuple[datetime, datetime] | None:
    """:func:`earliest_fit` of what ``holding`` holds (times in microseconds since the epoch,
    see :func:`to_micros`): for a caller that reads thousands of bookings as plain values."""
    first, last = to_micros(earliest), to_micros(latest)
    span, slot = length // MICROSECOND, timedelta(minutes=slot_minutes) // MICROSECOND
    if last < first:
        return None
    # one table over the whole search: each start tried then costs a look-up per GPU, not a
    # table of its own (a busy pool tries hundreds of starts)
    fits = UsageTable.of_held(pool, holding, first, last + span).fits_during(amount)
    # the ends rounded up to the grid (the grid starts at the epoch)
    ends = {-(-end // slot) * slot for end in {item[1] for item in holding}}
    for start in sorted({first, *(end for end in ends if first < end <= last)}):
        if fits(start, start + span):
            return from_micros(start), from_micros(start + span)
    return None


def naming_next_free(refused: NoCapacity, found: tuple[datetime, datetime] | None) -> NoCapacity:
    """``refused`` with the earliest free interval of the same length and amount added to its
    message and as ``next_free`` (unchanged when nothing was found)."""
    if found is None:
        return refused
    start, end = found
    message = (f"{refused.message} The earliest free time of the same length is "
               f"{span_text(start, end)}.")
    return NoCapacity(message, refused.full_start, refused.full_end, refused.largest_bookable,
                      next_free=found, search_ran_out=refused.search_ran_out)
