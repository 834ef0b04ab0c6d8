"""Which booking a server start takes (issue 13), decided once for the spawner and the service.

Pure functions of bookings in the wire JSON (:mod:`.wire`) and "now": the service's
``POST api/pools/{pool}/claim`` runs them on the user's active bookings, the spawner's server
chooser (:mod:`jhub_gpubooking.chooser`) on the service's answer, so the booking the form shows
first is the one a start claims.
"""

from __future__ import annotations

from datetime import datetime

from .model import BookingState
from .timegrid import parse_time
from .wire import booking_state_at


def current_bookings(bookings: list[dict], pool_name: str, now: datetime) -> list[dict]:
    """Bookings of ``pool_name`` that are active at ``now``: the service called them active, and
    they still are by this clock (a list may lag behind an end). Ended and cancelled bookings
    never count."""
    return [
        booking
        for booking in bookings
        if booking.get("pool") == pool_name
        and booking.get("state", BookingState.ACTIVE.value) == BookingState.ACTIVE.value
        and booking_state_at(booking, now) is BookingState.ACTIVE
    ]


def claim_order(bookings: list[dict], server: str, chosen: int | None = None) -> list[dict]:
    """The bookings a start tries, in order: only the chosen one if it is among them; else the
    one this server already holds, then unused ones — the one that runs longest first, then the
    largest — then ones held elsewhere."""
    picked = [booking for booking in bookings if booking["id"] == chosen]
    if picked:
        return picked

    def preference(booking: dict) -> tuple:
        holder = booking.get("server")
        rank = 0 if holder == server else 1 if holder is None else 2
        end = parse_time(booking["end"], "end").timestamp()
        return (rank, -end, -booking["slices"], booking["id"])

    return sorted(bookings, key=preference)
