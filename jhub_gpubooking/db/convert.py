"""Translation between database rows and the core's value types (the 'edge' of the store)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from ..core.model import Booking, MaintenanceWindow, Placement, Pool
from ..core.timegrid import format_time
from ..core.wire import pool_to_json
from .models import BookingEventRow, BookingRow, MaintenanceWindowRow


@dataclass(frozen=True)
class BookingEvent:
    """One entry of a booking's history."""

    booking_id: int
    at: datetime
    actor: str | None
    kind: str
    detail: dict

    def to_json(self) -> dict:
        return {
            "booking_id": self.booking_id,
            "at": format_time(self.at),
            "actor": self.actor,
            "kind": self.kind,
            "detail": self.detail,
        }


def booking_from_row(row: BookingRow) -> Booking:
    return Booking(
        user=row.user,
        pool=row.pool,
        amount=Fraction(row.amount_num, row.amount_den),
        start=row.start,
        end=row.end,
        placement=Placement(row.node, tuple(row.gpu_indices), row.slices_per_gpu_held),
        id=row.id,
        note=row.note,
        status=row.status,
        created=row.created,
        updated=row.updated,
        server=row.server,
        groups=tuple(row.groups or ()),
        released_end=row.released_end,
        release_reason=row.release_reason,
        opportunistic=bool(row.opportunistic),
        series_id=row.series_id,
    )


def booking_row(booking: Booking, pool: Pool, now: datetime) -> dict[str, Any]:
    """The column values of a new row for a placed booking (``booking.placement`` must be set),
    for an INSERT of the bookings table."""
    assert booking.placement is not None, "only placed bookings are stored"
    amount = Fraction(booking.amount)
    return dict(
        user=booking.user,
        pool=booking.pool,
        slices=pool.amount_to_slices(amount),
        amount_num=amount.numerator,
        amount_den=amount.denominator,
        start=booking.start,
        end=booking.end,
        status="booked",
        note=booking.note,
        node=booking.placement.node,
        gpu_indices=list(booking.placement.gpus),
        slices_per_gpu_held=booking.placement.slices,
        server=None,
        claimed_at=None,
        groups=list(booking.groups),
        opportunistic=booking.opportunistic,
        series_id=booking.series_id,
        created=now,
        updated=now,
    )


class _NewRow:
    """Attribute access to the values of a row just inserted (its other columns are NULL)."""

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> None:
        return None


def booking_from_new_row(booking_id: int, values: dict[str, Any]) -> Booking:
    """The booking as :func:`booking_from_row` reads it back, from the values of its INSERT
    (from :func:`booking_row`) and its new id: no second round trip to read it."""
    return booking_from_row(_NewRow({**values, "id": booking_id}))


def maintenance_from_row(row: MaintenanceWindowRow) -> MaintenanceWindow:
    return MaintenanceWindow(
        pool=row.pool, start=row.start, end=row.end, node=row.node, reason=row.reason, id=row.id
    )


def event_from_row(row: BookingEventRow) -> BookingEvent:
    return BookingEvent(
        booking_id=row.booking_id, at=row.at, actor=row.actor, kind=row.kind, detail=row.detail
    )


def pool_config(pool: Pool) -> dict[str, Any]:
    """The pool as JSON (what ``Pool.from_config`` accepts), stored in ``pools.config``."""
    return pool_to_json(pool)
