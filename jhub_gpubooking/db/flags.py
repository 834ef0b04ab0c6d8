"""Flags on bookings the cluster can no longer hold, stored as ``booking_events`` rows.

The node inventory (:mod:`jhub_gpubooking.cluster.nodes`) raises and clears them; owners see
theirs at ``api/flagged``, admins all at ``api/admin/flagged`` (:mod:`jhub_gpubooking.service.flagged`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from .events import NewEvent
from .models import BookingEventRow

if TYPE_CHECKING:
    from .store import BookingStore

log = logging.getLogger(__name__)

FLAGGED = "flagged"
UNFLAGGED = "unflagged"
#: Actor recorded on flag events, so the history tells who raised them.
INVENTORY_ACTOR = "cluster-inventory"


@dataclass(frozen=True)
class Flag:
    booking_id: int
    message: str
    at: datetime


class BookingFlags:
    """Flags as ``booking_events`` rows: the newest flagged/unflagged event of a booking wins.

    Events need no schema change and keep the full story in the booking's history.
    """

    def __init__(self, store: BookingStore):
        self.store = store

    @staticmethod
    def _current(session: Session, booking_ids: Collection[int] | None = None) -> dict[int, Flag]:
        statement = (
            select(BookingEventRow)
            .where(BookingEventRow.kind.in_((FLAGGED, UNFLAGGED)))
            .order_by(BookingEventRow.id)
        )
        if booking_ids is not None:
            statement = statement.where(BookingEventRow.booking_id.in_(sorted(booking_ids)))
        rows = session.scalars(statement)
        flags: dict[int, Flag] = {}
        for row in rows:
            if row.kind == FLAGGED:
                flags[row.booking_id] = Flag(row.booking_id, row.detail.get("message", ""), row.at)
            else:
                flags.pop(row.booking_id, None)
        return flags

    def current(self, booking_ids: Collection[int] | None = None) -> dict[int, Flag]:
        """The flags up now (of ``booking_ids`` only, when given: a user's notices read theirs
        alone), by booking id."""
        if booking_ids is not None and not booking_ids:
            return {}
        with self.store.read_transaction() as session:
            return self._current(session, booking_ids)

    def update(self, reasons: Mapping[int, str], live_ids: set[int]) -> None:
        """Flag ``reasons`` (id → message); unflag live bookings that are no longer in it."""
        # a write transaction, as every change of bookings is: on SQLite a plain one read the
        # flags, then failed to write ("database is locked") when a booking was made meanwhile
        with self.store.unit_of_work() as work:
            session = work.session
            current = self._current(session)
            raised = {booking_id: message for booking_id, message in sorted(reasons.items())
                      if booking_id not in current or current[booking_id].message != message}
            cleared = sorted((set(current) & live_ids) - set(reasons))
            if not raised and not cleared:
                return
            # An event is a change of its booking, so its pool is locked first, as for every
            # change of a booking (see .events: without it, flagging deadlocked with an end)
            pools = work.pools_of({*raised, *cleared})
            work.lock_pools(pools.values())
            for booking_id, message in raised.items():
                log.warning("Flagging booking %s: %s", booking_id, message)
            work.record_events([
                *(NewEvent(booking_id, pools[booking_id], INVENTORY_ACTOR, FLAGGED,
                           {"message": message}) for booking_id, message in raised.items()),
                *(NewEvent(booking_id, pools[booking_id], INVENTORY_ACTOR, UNFLAGGED,
                           {"message": "The GPUs of this booking are available again."})
                  for booking_id in cleared),
            ])
