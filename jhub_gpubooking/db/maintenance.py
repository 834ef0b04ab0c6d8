"""Maintenance windows in the database: adding one (with the bookings it collides with), listing
and deleting them.

A window takes the pool's lock like a booking, so a booking placed at the same moment either
sees the window or is among the collisions reported. Colliding bookings are not cancelled here:
the admin decides (the store's ``cancel``); the service serves the waitlist after a delete.
A window added with an Idempotency-Key and sent again answers the window it added
(:mod:`.request_keys`), looked up under the same lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import select

from ..core import placement as placing
from ..core.errors import InvalidRequest, NotFound
from ..core.model import Booking, MaintenanceWindow, checked_text
from ..core.timegrid import as_utc, clock_text
from .convert import maintenance_from_row
from .models import MaintenanceWindowRow
from .queries import page
from .request_keys import checked_request_key, tried_again_if_raced, window_with_key

if TYPE_CHECKING:  # the store imports this module
    from .store import BookingStore


def add_window(store: BookingStore, pool: str, start: datetime, end: datetime, node: str | None,
               reason: str, actor: str | None, request_key: str | None = None
               ) -> tuple[MaintenanceWindow, list[Booking]]:
    """Block ``pool`` (or its ``node``) from ``start`` to ``end``; returns the window and the
    bookings it collides with. With ``request_key``, the window ``actor`` added with it, if
    any, and the bookings it collides with now."""
    pool_spec = store.pool(pool)
    start, end = as_utc(start), as_utc(end)
    if end <= start:
        raise InvalidRequest("The end time must be after the start time.")
    if node is not None and node not in pool_spec.nodes:
        raise InvalidRequest(f"Pool {pool} has no node named {node!r}.")
    checked_text(reason, "reason")
    request_key = checked_request_key(request_key)

    def write() -> tuple[MaintenanceWindow, list[Booking]]:
        with store.unit_of_work([pool]) as work:
            row = None if request_key is None else window_with_key(
                work.session, actor, request_key, (pool, node, start, end, reason))
            if row is None:
                # checked here, after the key's look-up: a window sent again once it ended
                # answers the window it added, not this refusal
                if end <= store.now():
                    raise InvalidRequest(
                        f"This maintenance window ends at {clock_text(end)}, which has "
                        "already passed: a window must end in the future.")
                row = MaintenanceWindowRow(pool=pool, node=node, start=start, end=end,
                                           reason=reason, created=store.stamp(),
                                           created_by=actor, request_key=request_key)
                work.session.add(row)
                work.session.flush()
            window = maintenance_from_row(row)
            bookings, _ = work.overlapping(pool, start, end)
            return window, placing.maintenance_collisions(window, bookings)

    return tried_again_if_raced(request_key, write)


def list_windows(store: BookingStore, pool: str | None, start: datetime | None, end: datetime | None,
                 limit: int | None, after: tuple[datetime, int] | None) -> list[MaintenanceWindow]:
    """Windows by (start, id), of one pool or all, overlapping ``start``..``end`` when given."""
    statement = page(
        select(MaintenanceWindowRow).order_by(MaintenanceWindowRow.start, MaintenanceWindowRow.id),
        MaintenanceWindowRow, limit, after)
    if pool is not None:
        statement = statement.where(MaintenanceWindowRow.pool == pool)
    if start is not None:
        statement = statement.where(MaintenanceWindowRow.end > as_utc(start))
    if end is not None:
        statement = statement.where(MaintenanceWindowRow.start < as_utc(end))
    with store.read_transaction() as session:
        return [maintenance_from_row(row) for row in session.scalars(statement)]


def delete_window(store: BookingStore, window_id: int) -> None:
    with store.unit_of_work() as work:
        row = work.session.get(MaintenanceWindowRow, window_id)
        if row is None:
            raise NotFound(f"There is no maintenance window with id {window_id}.")
        work.session.delete(row)
