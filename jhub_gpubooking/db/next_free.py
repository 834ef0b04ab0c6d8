"""The next free slot of a pool, read from the store (the search itself is
:func:`jhub_gpubooking.core.next_free.earliest_fit`).

It answers ``GET api/pools/{name}/next-free`` and names the earliest free interval in a
capacity refusal. It reads without locking: the answer is what is free right now, and booking
it is checked again like any booking.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidRequest
from ..core.model import Pool, parse_amount
from ..core.next_free import earliest_fit
from ..core.timegrid import as_utc, ceil_to_grid, floor_to_grid

if TYPE_CHECKING:
    from .store import BookingStore

#: How far after its earliest start the next free slot is looked for (the availability API's
#: longest window), unless the user's policy lets them book less far ahead.
NEXT_FREE_SEARCH_DAYS = 62
#: How far the search looks before it reads everything up to its reach.
SEARCH_FIRST = timedelta(days=1)
#: Longest interval asked for: as long as the search reaches.
MAX_NEXT_FREE_MINUTES = NEXT_FREE_SEARCH_DAYS * 24 * 60


def next_free(
    store: BookingStore, pool: str, gpus: Any, minutes: int, after: datetime | None = None,
    groups: Any = (), is_admin: bool = False,
) -> tuple[datetime, datetime] | None:
    """The earliest interval of ``minutes`` starting at ``after`` (default: the current slot)
    or later in which ``gpus`` of ``pool`` are free right now; None when none starts within
    how far ahead the member of ``groups`` may book (NEXT_FREE_SEARCH_DAYS without a limit).
    Capacity only: the user's other limits (count, budget) apply when it is booked."""
    pool_spec = store.pool(pool)
    amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
    pool_spec.amount_to_slices(amount)
    slot = store.slot_minutes
    if not 0 < minutes <= MAX_NEXT_FREE_MINUTES or minutes % slot:
        raise InvalidRequest(
            f"'minutes' must be a multiple of {slot} from {slot} to {MAX_NEXT_FREE_MINUTES}."
        )
    # "book now": the running slot is bookable from its beginning, as in BookingStore.create
    current_slot = floor_to_grid(store.now(), slot)
    earliest = current_slot if after is None else max(ceil_to_grid(as_utc(after), slot), current_slot)
    return earliest_free(store, pool_spec, amount, timedelta(minutes=minutes), earliest, groups,
                         is_admin)


def earliest_free(
    store: BookingStore, pool: Pool, amount: Fraction, length: timedelta, earliest: datetime,
    groups: Any, is_admin: bool,
) -> tuple[datetime, datetime] | None:
    """:func:`next_free` for a checked request starting at the grid point ``earliest``."""
    latest = earliest + timedelta(days=NEXT_FREE_SEARCH_DAYS)
    days_ahead = None if is_admin else store.policy_for(groups).max_days_ahead
    if days_ahead is not None:
        # a later start would be refused by the policy's max_days_ahead
        latest = min(latest, floor_to_grid(store.now() + timedelta(days=days_ahead),
                                           store.slot_minutes))
    # the next day first: most answers lie within hours, while a busy pool holds thousands of
    # bookings over the whole reach (read and converted row by row: the search's main cost)
    for reach in (min(earliest + SEARCH_FIRST, latest), latest):
        bookings, windows = store.overlapping(pool.name, earliest, reach + length)
        found = earliest_fit(pool, bookings, amount, length, earliest, reach, store.slot_minutes,
                             windows)
        if found is not None or reach == latest:
            return found
    return None
