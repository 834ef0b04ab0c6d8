"""Translation between database rows and the core's value types (the 'edge' of the store)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from ..core.model import Booking, MaintenanceWindow, Placement, Pool
from ..core.timegrid import format_time
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


def booking_row(booking: Booking, pool: Pool, now: datetime) -> BookingRow:
    """A new row for a placed booking (``booking.placement`` must be set)."""
    assert booking.placement is not None, "only placed bookings are stored"
    amount = Fraction(booking.amount)
    return BookingRow(
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
    return {
        "name": pool.name,
        "nodes": dict(pool.nodes),
        "slices_per_gpu": pool.slices_per_gpu,
        "display_name": pool.display_name,
        "gpu_model": pool.gpu_model,
        "gpu_memory_mib": pool.gpu_memory_mib,
        "backend": pool.backend,
        "gpu_uuids": {node: list(uuids) for node, uuids in pool.gpu_uuids.items()},
        "node_selector": dict(pool.node_selector),
        "resource_name": pool.resource_name,
        "description": pool.description,
    }
