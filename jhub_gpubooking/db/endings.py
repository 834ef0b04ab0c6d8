"""How bookings that ended early ("End now", or an administrator's force end) came to end, read
from their histories: who ended each, and what held it at that moment.

A user's notices tell the booking's owner about it: an end by someone else is an
administrator's, and "its server was stopped" is true only when a server (or a webhook's pod)
held the booking when it ended. The booking's row no longer says so: its holder is released once
the server stopped.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from .models import BookingEventRow

if TYPE_CHECKING:
    from .store import BookingStore

#: The events that end an active booking early (``cancelled`` by its owner, ``force_cancelled``
#: by anyone else); an end carries the ``new_end`` in its detail, a plain cancel does not.
END_KINDS = ("cancelled", "force_cancelled")
#: The events that give a booking a holder, or take it away.
HOLDER_KINDS = ("claimed", "released", "claim_expired")


@dataclass(frozen=True)
class Ending:
    """How a booking was ended early: by its owner or not, and its holder then (a Hub server's
    name, "" the default server, a ``pod:`` holder; None: nothing held it)."""

    by_owner: bool
    holder: str | None


def endings(store: BookingStore, booking_ids: Collection[int]) -> dict[int, Ending]:
    """The ending of each booking of ``booking_ids`` that was ended early, by booking id."""
    if not booking_ids:
        return {}
    statement = (
        select(BookingEventRow)
        .where(BookingEventRow.booking_id.in_(sorted(booking_ids)),
               BookingEventRow.kind.in_((*END_KINDS, *HOLDER_KINDS)))
        .order_by(BookingEventRow.id)
    )
    holders: dict[int, str | None] = {}
    found: dict[int, Ending] = {}
    with store.read_transaction() as session:
        for event in session.scalars(statement):
            detail = event.detail or {}
            if event.kind == "claimed":
                holders[event.booking_id] = detail.get("server")
            elif event.kind in HOLDER_KINDS:
                holders[event.booking_id] = None
            elif "new_end" in detail:
                found[event.booking_id] = Ending(event.kind == "cancelled",
                                                 holders.get(event.booking_id))
    return found
