"""Start early in the database: a user's offers, and moving a booking to start now.

The rules are :mod:`..core.start_early`'s. Offers are read without locks (the user's notices
show them); accepting one checks it again in one unit of work holding the pools a booking's
rules lock, moves the booking (start, end and GPUs) and records a "started_early" event keeping
the old times, so of two users taking the same capacity the second gets a 409.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from ..core import policy as booking_policy
from ..core.errors import BookingError, Conflict
from ..core.model import Booking, BookingState, Placement
from ..core.start_early import may_start_early, start_early_interval
from ..core.timegrid import ceil_to_grid, floor_to_grid, format_time
from .convert import booking_from_row
from .models import BookingEventRow
from .store import BookingStore
from .unit_of_work import BookingChecks

#: The event recording that a booking's user was e-mailed an offer to start it early (once).
OFFER_EMAILED = "start_early_emailed"


class EarlyStarts:
    """Start-early offers and their acceptance for the bookings of a :class:`BookingStore`."""

    def __init__(self, store: BookingStore, horizon: timedelta):
        self.store = store
        #: bookings starting within this of now are offered an early start
        self.horizon = horizon

    def offers(self, user: str, groups: Any = ()) -> list[tuple[Booking, datetime, datetime]]:
        """``user``'s bookings that could start now: (booking, new start, new end), soonest
        booking first, each one :meth:`start_early` would accept now (``groups``: the user's,
        for their rules). Read without locks, so accepting checks again."""
        store = self.store
        now = store.now()
        found = []
        upcoming = [b for b in store.upcoming_for_user(user)
                    if b.pool in store.pools and may_start_early(b, now, self.horizon)]
        with store.read_transaction() as session:
            checks = BookingChecks(store, session)
            for booking in upcoming:
                try:
                    start, end, _ = self.checked_interval(checks, booking, groups, False, now)
                except BookingError:
                    continue
                found.append((booking, start, end))
        return found

    def not_yet_emailed(self) -> dict[str, list[int]]:
        """Ids of the bookings that could start early now as far as the GPUs go and whose users
        were not e-mailed about them yet, by user. Their rules need the user's Hub groups, so
        the caller checks each user's :meth:`offers` before e-mailing."""
        store = self.store
        now = store.now()
        upcoming = [b for b in store.list(state=BookingState.UPCOMING, end=now + self.horizon)
                    if b.pool in store.pools and may_start_early(b, now, self.horizon)]
        if not upcoming:
            return {}
        found: dict[str, list[int]] = {}
        with store.read_transaction() as session:
            emailed = set(session.scalars(
                select(BookingEventRow.booking_id).where(
                    BookingEventRow.booking_id.in_([b.id for b in upcoming]),
                    BookingEventRow.kind == OFFER_EMAILED,
                )
            ))
            checks = BookingChecks(store, session)
            for booking in upcoming:
                if booking.id in emailed:
                    continue
                try:  # as an admin: the GPUs only
                    self.checked_interval(checks, booking, (), True, now)
                except BookingError:
                    continue
                found.setdefault(booking.user, []).append(booking.id)
        return found

    def record_emailed(self, booking_id: int, start: datetime, end: datetime) -> None:
        """Remember that the booking's user is e-mailed the offer to start it at [start, end),
        so no tick mails it again."""
        with self.store.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            work.record(row, None, OFFER_EMAILED, new_start=format_time(start),
                        new_end=format_time(end))

    def checked_interval(self, checks: BookingChecks, booking: Booking, groups: Any,
                         is_admin: bool, now: datetime) -> tuple[datetime, datetime, Placement]:
        """Where ``booking`` goes if it starts now; the refusal (409, or its user's rules)
        when it cannot."""
        store = self.store
        if booking.pool not in store.pools:
            raise Conflict(f"Pool {booking.pool!r} is no longer configured.")
        if not may_start_early(booking, now, self.horizon):
            state = booking.state(now)
            why = (f"it is {state.value}" if state is not BookingState.UPCOMING else
                   "only an ordinary booking starting within "
                   f"{self.horizon // timedelta(hours=1)} hours can")
            raise Conflict(f"This booking cannot start early: {why}.")
        slot = store.slot_minutes
        # from the running slot for its length, starting at the next grid point at the latest
        span = (floor_to_grid(now, slot), ceil_to_grid(now, slot) + (booking.end - booking.start))
        bookings, windows = checks.overlapping(booking.pool, *span)
        interval = start_early_interval(store.pools[booking.pool], booking, bookings, now, slot,
                                        windows)
        if interval is None:
            raise Conflict("The GPUs are not free for this booking's length from now; it keeps "
                           "its time.")
        if not is_admin:
            changed = booking.with_changes(start=interval[0], end=interval[1])
            checks.check_rules(changed, groups, now, booking_policy.check_end_change)
        return interval

    def start_early(self, booking_id: int, actor: str | None, groups: Any = (),
                    is_admin: bool = False) -> Booking:
        """Move the upcoming booking to start now, keeping its length, if it still fits and its
        user's rules (length, gap to their other bookings, budget) allow it; 409 otherwise."""
        store = self.store
        now = store.now()
        with store.unit_of_work() as work:
            work.lock_pools(store.pools_for_rules(work.pool_of(booking_id), groups, is_admin))
            row = work.lock_booking(booking_id)
            start, end, placement = self.checked_interval(work, booking_from_row(row), groups,
                                                           is_admin, now)
            work.record(row, actor, "started_early", old_start=format_time(row.start),
                        old_end=format_time(row.end), new_start=format_time(start),
                        new_end=format_time(end), node=placement.node,
                        gpu_indices=list(placement.gpus))
            row.start, row.end = start, end
            row.node, row.gpu_indices = placement.node, list(placement.gpus)
            row.updated = store.stamp()
            return booking_from_row(row)
