"""Applying the lifecycle rules (:mod:`jhub_gpubooking.core.lifecycle`) to stored bookings.

:meth:`BookingLifecycle.due` reads the bookings a rule may apply to and returns the actions;
releases are applied here (each in its own unit of work, re-checked under the pool lock),
warnings and server stops are done by the service, which then records them with
:meth:`mark_warned` / :meth:`mark_stop_requested` so they happen once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select

from ..core.lifecycle import (
    Action,
    ActionKind,
    BookingFacts,
    LifecycleRules,
    decide,
    release_end,
)
from ..core.model import Booking
from ..core.timegrid import as_utc, format_time
from .convert import booking_from_row
from .models import BookingRow
from .store import BookingStore
from .unit_of_work import UnitOfWork


def facts_from_row(row: BookingRow) -> BookingFacts:
    return BookingFacts(
        booking=booking_from_row(row),
        ever_claimed=row.server is not None or row.stopped_at is not None,
        stopped_at=row.stopped_at,
        warned_end=row.warned_end,
        stop_requested_at=row.stop_requested_at,
    )


class BookingLifecycle:
    """The lifecycle side of a :class:`BookingStore` (same database, same locks).

    ``rules`` are the service-wide ones; each pool's own ``no_show_minutes`` is added from the
    store's pools when the rules are applied (node discovery may replace those pools).
    """

    def __init__(self, store: BookingStore, rules: LifecycleRules):
        self.store = store
        self.rules = rules

    def pool_rules(self) -> LifecycleRules:
        """The rules as they hold for the store's current pools."""
        return self.rules.for_pools(self.store.pools.values())

    def due(self, now: datetime) -> list[Action]:
        """Every action the rules ask for at ``now`` (nothing is changed)."""
        now = as_utc(now)
        statement = select(BookingRow).where(
            BookingRow.status == "booked",
            BookingRow.start <= now,
            # running bookings, and ended ones whose server was never stopped by us
            or_(
                BookingRow.end > now,
                BookingRow.server.is_not(None) & BookingRow.stop_requested_at.is_(None),
            ),
        )
        with self.store.read_transaction() as session:
            facts = [facts_from_row(row) for row in session.scalars(statement)]
        rules = self.pool_rules()
        actions = (decide(rules, fact, now) for fact in facts)
        return [action for action in actions if action is not None]

    def release(self, action: Action, now: datetime, actor: str | None = None) -> Booking | None:
        """Apply a release if it still holds under the pool lock (a claim may have come in)."""
        with self.store.unit_of_work() as work:
            row = work.lock_booking(action.booking_id)
            again = decide(self.pool_rules(), facts_from_row(row), as_utc(now))
            if again is None or again.kind is not ActionKind.RELEASE:
                return None
            self.release_row(work, row, again.new_end, again.reason.value, actor)
            return booking_from_row(row)

    def still_to_stop(self, booking_id: int, now: datetime) -> Booking | None:
        """The booking, if the rules still ask at ``now`` for the stop of what holds it: an
        extension (or a release, or another stop) may have come in since :meth:`due` listed
        it, and a server on an extended booking must run on."""
        with self.store.read_transaction() as session:
            row = session.get(BookingRow, booking_id)
            if row is None:
                return None
            again = decide(self.pool_rules(), facts_from_row(row), as_utc(now))
            if again is None or again.kind is not ActionKind.STOP_SERVER:
                return None
            return booking_from_row(row)

    def release_now(self, booking_id: int, reason: str, actor: str | None) -> Booking | None:
        """Release a booking's remainder for ``reason`` regardless of the timing rules
        (preemption of an opportunistic grant). None when nothing is left to release."""
        with self.store.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            booking = booking_from_row(row)
            new_end = release_end(booking, self.store.now(), self.rules.slot_minutes)
            if row.status != "booked" or new_end is None:
                return None
            self.release_row(work, row, new_end, reason, actor)
            return booking_from_row(row)

    def release_row(
        self, work: UnitOfWork, row: BookingRow, new_end: datetime, reason: str, actor: str | None
    ) -> None:
        """End the locked booking ``row`` early at ``new_end`` for ``reason``, in ``work``."""
        work.record(
            row, actor, "reclaimed", reason=reason, old_end=format_time(row.end),
            new_end=format_time(new_end),
        )
        # a second release keeps the end that was booked originally
        row.released_end = row.released_end or row.end
        row.release_reason = reason
        row.end = new_end
        row.updated = self.store.stamp()

    def mark_warned(self, booking_id: int) -> Booking:
        """Remember that the user was warned about the booking's current end."""
        with self.store.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            row.warned_end = row.end
            work.record(row, None, "end_warned", end=format_time(row.end))
            return booking_from_row(row)

    def mark_stop_requested(self, booking_id: int, server: str) -> None:
        """Remember that the Hub was asked to stop the booking's server."""
        with self.store.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            row.stop_requested_at = self.store.stamp()
            work.record(row, None, "server_stop_requested", server=server)
