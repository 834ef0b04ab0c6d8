"""``api/flagged`` and ``api/admin/flagged``: bookings the cluster can no longer hold.

The flags are raised by the node inventory (:mod:`jhub_gpubooking.cluster.nodes`) and stored by
:mod:`jhub_gpubooking.db.flags`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ..core.model import Booking
from ..core.timegrid import format_time
from ..db.flags import BookingFlags, Flag
from .api import APIHandler


def _flag_json(flag: Flag, booking_model: dict) -> dict:
    return {"booking": booking_model, "message": flag.message, "flagged_at": format_time(flag.at)}


class FlaggedHandler(APIHandler):
    """``api/flagged``: the caller's bookings the cluster can no longer hold, with the reason;
    ``api/admin/flagged``: everyone's (administrators only)."""

    def initialize(self, flags: BookingFlags, everyone: bool, route_template: str = "") -> None:
        super().initialize(route_template)
        self.flags = flags
        self.everyone = everyone

    async def get(self) -> None:
        principal = self.require_admin() if self.everyone else self.require_user()
        flags = await self.run_in_executor(self.flags.current)
        now = self.clock.now()
        bookings = await self.run_in_executor(
            self.store.list, user=None if self.everyone else principal.name, start=now
        )
        models = [
            _flag_json(flags[b.id], self.booking_model(b))
            for b in bookings if b.id in flags and b.not_over(now)
        ]
        self.write_json({"flagged": models})


def flagged_notices(bookings: list[Booking], flags: Mapping[int, Flag], now: datetime) -> list[dict]:
    """One notice per booking of ``bookings`` not over yet that is flagged (``flags``, by
    booking id): on the reservation page, the user learns it before a server fails to start."""
    return [
        {
            "kind": "flagged",
            "booking_id": booking.id,
            "at": format_time(flags[booking.id].at),
            "message": f"{flags[booking.id].message} It stays booked in case its GPUs come back; "
            "end or cancel it to book other GPUs instead.",
        }
        for booking in bookings
        if booking.id in flags and booking.not_over(now)
    ]


def flagged_routes(flags: BookingFlags) -> list[tuple[str, type, dict]]:
    """Route templates (relative to the service prefix), handlers and their arguments."""
    return [
        ("api/flagged", FlaggedHandler, {"flags": flags, "everyone": False}),
        ("api/admin/flagged", FlaggedHandler, {"flags": flags, "everyone": True}),
    ]
