"""The next free slot of a pool, read from the store (the search itself is
:func:`jhub_gpubooking.core.next_free.earliest_fit_held`).

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
from ..core.next_free import earliest_fit_held, held_in_micros, to_micros
from ..core.placement import Held
from ..core.timegrid import as_utc, ceil_to_grid, floor_to_grid
from .queries import held_overlapping, windows_overlapping

if TYPE_CHECKING:
    from .store import BookingStore

#: How far after its earliest start the next free slot is looked for (the availability API's
#: longest window), unless the user's policy lets them book less far ahead.
NEXT_FREE_SEARCH_DAYS = 62
#: The search reads the pool a stretch at a time and stops at the first fit: first this far
#: after the earliest start (most answers lie within hours), then stretches twice as long each
#: time, each read once (a pool booked out for weeks holds thousands of bookings).
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
    now = store.now()
    latest = earliest + timedelta(days=NEXT_FREE_SEARCH_DAYS)
    days_ahead = None if is_admin else store.policy_for(groups).max_days_ahead
    if days_ahead is not None:
        # a later start would be refused by the policy's max_days_ahead
        latest = min(latest, floor_to_grid(now + timedelta(days=days_ahead), store.slot_minutes))
    with store.read_transaction() as session:
        windows = windows_overlapping(session, pool.name, earliest, latest + length)
        in_windows = held_in_micros(pool, (), windows)
        holding: list[Held] = []
        first, read_until, stretch = earliest, None, SEARCH_FIRST
        while first <= latest:
            reach = min(earliest + stretch, latest)
            # what touches [first, reach + length): what was read and ends after first, and
            # what starts after the last read's end
            after = to_micros(first)
            holding = [item for item in holding if item[1] > after]
            holding += held_overlapping(session, pool.name, first, reach + length, now,
                                        starting_from=read_until)
            found = earliest_fit_held(pool, holding + in_windows, amount, length, first, reach,
                                      store.slot_minutes)
            if found is not None:
                return found
            first = floor_to_grid(reach, store.slot_minutes) + timedelta(minutes=store.slot_minutes)
            read_until, stretch = reach + length, stretch * 2
    return None
