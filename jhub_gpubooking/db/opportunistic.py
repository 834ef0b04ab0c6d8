"""Opportunistic grants and their preemption, in the store's unit of work (same locks).

A grant is an ordinary booking row marked ``opportunistic``: claims, releases, the lifecycle
(stop at its end) and reports treat it like any other. Policy limits other than the pools a
user may use do not apply, because a grant only takes capacity nobody booked.
"""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import select

from ..core import placement as placing
from ..core.errors import Conflict, NoCapacity, PolicyViolation
from ..core.model import Booking, format_amount, parse_amount
from ..core.opportunistic import PREEMPTED, grant_interval, preemption_plan
from ..core.timegrid import clock_text
from .convert import booking_from_row
from .creates import NewBooking, created
from .lifecycle import BookingLifecycle
from .models import BookingRow
from .store import BookingStore
from .unit_of_work import UnitOfWork


def _amount(gpus: Any) -> Fraction:
    return gpus if isinstance(gpus, Fraction) else parse_amount(gpus)


class OpportunisticBookings:
    """Grant free capacity without a booking; make room for bookings by preempting grants."""

    def __init__(self, store: BookingStore, lifecycle: BookingLifecycle):
        self.store = store
        self.lifecycle = lifecycle

    def interval(self, horizon_minutes: int) -> tuple[datetime, datetime]:
        return grant_interval(self.store.now(), horizon_minutes, self.store.slot_minutes)

    def largest_grantable(self, pool: str, horizon_minutes: int) -> Fraction:
        """The most GPUs of ``pool`` a grant asked for now could get."""
        pool_spec = self.store.pool(pool)
        start, end = self.interval(horizon_minutes)
        bookings, windows = self.store.overlapping(pool, start, end)
        return placing.largest_bookable(pool_spec, bookings, start, end, windows)

    def grant(
        self,
        user: str,
        pool: str,
        gpus: Any,
        horizon_minutes: int,
        groups: Any = (),
        actor: str | None = None,
        server: str | None = None,
    ) -> Booking:
        """A grant of ``gpus`` for ``user`` from now to the horizon, or the refusal to show.

        A user who already holds a running grant in the pool gets that one back, so a retried
        start never stacks grants. With ``server`` (a Hub server name) the grant is claimed for
        it in the same transaction that creates it, so nothing (a pod the admission webhook
        admits, another start) can take it in between; a running grant nobody holds is claimed
        the same way, one held by another server comes back as it is (its holder is the
        caller's to check, as for any claim).
        """
        pool_spec = self.store.pool(pool)
        amount = _amount(gpus)
        pool_spec.amount_to_slices(amount)
        allowed = self.store.policy_for(groups).allowed_pools
        if allowed is not None and pool not in allowed:
            raise PolicyViolation(
                "allowed_pools", f"You may not use the GPU pool {pool}, not even when it is free."
            )
        now = self.store.now()
        start, end = grant_interval(now, horizon_minutes, self.store.slot_minutes)
        with self.store.unit_of_work([pool]) as work:
            running = work.session.scalars(
                select(BookingRow).where(
                    BookingRow.user == user,
                    BookingRow.pool == pool,
                    BookingRow.opportunistic.is_(True),
                    BookingRow.status == "booked",
                    BookingRow.start <= now,
                    BookingRow.end > now,
                )
            ).first()
            if running is not None:
                if server is not None and running.server is None:
                    work.bind(running, server)
                return booking_from_row(running)
            bookings, windows = work.overlapping(pool, start, end)
            try:
                placed = placing.place(pool_spec, bookings, start, end, amount, windows)
            except NoCapacity:
                raise Conflict(
                    f"No {format_amount(amount)} GPU of pool {pool} is free from now until "
                    f"{clock_text(end)}, so it cannot be used without a booking."
                ) from None
            request = Booking(
                user=user,
                pool=pool,
                amount=amount,
                start=start,
                end=end,
                placement=placed,
                groups=tuple(sorted(groups)),
                opportunistic=True,
            )
            granted = work.add_placed(request, actor or user, opportunistic=True)
            if server is None:
                return granted
            # the new row, not yet visible to any other transaction, bound before the commit
            return booking_from_row(work.bind(work.session.get(BookingRow, granted.id), server))

    def create_preempting(
        self, user: str, pool: str, gpus: Any, start: datetime, end: datetime, **options: Any
    ) -> tuple[Booking, list[Booking]]:
        """``store.create``; when only grants stand in the way, end them and book, all in one
        transaction (a booking that still does not fit cuts no grant short).

        Returns the booking and the preempted grants (as they are after their release), whose
        servers the caller stops. Policy is checked before capacity, so a booking the policy
        refuses never preempts anything.
        """
        new = self.new_preempting(user, pool, gpus, start, end, **options)
        return created(self.store.create_one(new)), list(new.freed)

    def new_preempting(
        self, user: str, pool: str, gpus: Any, start: datetime, end: datetime, **options: Any
    ) -> NewBooking:
        """The create of :meth:`create_preempting`, checked, for ``store.create_all``; once it
        is created, its ``freed`` holds the grants it preempted."""
        def make_room(work: UnitOfWork, request: Booking, now: datetime) -> list[Booking]:
            return self.preempt(work, request, now, options.get("actor"))

        return self.store.new_booking(user, pool, _amount(gpus), start, end,
                                      make_room=make_room, **options)

    def preempt(
        self, work: UnitOfWork, request: Booking, now: datetime, actor: str | None
    ) -> list[Booking]:
        """Release, in ``work``, the grants that keep ``request`` from fitting (its pool is
        locked); returns them as they are after their release."""
        bookings, windows = work.overlapping(request.pool, request.start, request.end)
        plan = preemption_plan(
            self.store.pools[request.pool],
            bookings,
            request.start,
            request.end,
            request.amount,
            windows,
            now=now,
            slot_minutes=self.store.slot_minutes,
        )
        released = []
        for preemption in plan:
            row = work.session.get(BookingRow, preemption.booking.id, with_for_update=True)
            self.lifecycle.release_row(work, row, preemption.new_end, PREEMPTED, actor)
            released.append(booking_from_row(row))
        return released
