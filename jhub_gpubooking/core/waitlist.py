"""The waitlist's rules, without I/O: who is served first, what a wait may be booked as, and
when it expires.

A *wait* is a refused request kept for later: ``amount`` GPUs of a pool for ``length``, starting
anywhere from ``start`` to ``latest_start`` (both on the booking grid). A wait for the very
interval that was refused has ``start == latest_start``; a wait with a window the user gave has
``latest_start = window_end - length``.

Fair order: higher ``priority`` first, then first come, first served (``created``, then ``id``:
the order of joining). Every waiting request is tried in that order whenever capacity frees; a
wait that does not fit (or that its user's limits refuse then) keeps its place and does not
hold up the waits behind it, which may take capacity it cannot use.

Expiry: a wait expires once its latest start is past, i.e. when the slot starting at
``latest_start`` has ended; until then that slot is still bookable from its beginning, like a
"book now" (see ``BookingStore.check_interval``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from .model import Booking, MaintenanceWindow, Pool, amount_to_json
from .next_free import earliest_fit
from .placement import availability
from .timegrid import as_utc, floor_to_grid, format_time


class WaitState(str, enum.Enum):
    WAITING = "waiting"
    BOOKED = "booked"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


@dataclass(frozen=True)
class Wait:
    """One request on the waitlist (``id`` None until stored)."""

    user: str
    pool: str
    amount: Fraction
    start: datetime
    length: timedelta
    latest_start: datetime
    priority: int = 0
    created: datetime | None = None
    id: int | None = None
    state: WaitState = WaitState.WAITING
    booking_id: int | None = None
    groups: tuple[str, ...] = ()
    note: str = ""
    updated: datetime | None = None

    @property
    def end(self) -> datetime:
        """The end of the earliest interval the wait may get."""
        return self.start + self.length

    @property
    def window_end(self) -> datetime:
        """The latest end: every interval the wait may get lies in [start, window_end)."""
        return self.latest_start + self.length

    def with_changes(self, **changes: Any) -> Wait:
        return replace(self, **changes)


def fair_order(waits: Iterable[Wait]) -> list[Wait]:
    """``waits`` in the order they are served: priority (higher first), then joined first."""
    return sorted(waits, key=lambda w: (-w.priority, as_utc(w.created) if w.created else
                                        as_utc(w.start), w.id or 0))


def expires_at(wait: Wait, slot_minutes: int) -> datetime:
    """When the wait expires: the end of the slot starting at its latest start."""
    return as_utc(wait.latest_start) + timedelta(minutes=slot_minutes)


def is_expired(wait: Wait, now: datetime, slot_minutes: int) -> bool:
    return as_utc(now) >= expires_at(wait, slot_minutes)


def search_bounds(wait: Wait, now: datetime, slot_minutes: int) -> tuple[datetime, datetime] | None:
    """The earliest and latest start a booking for ``wait`` may have at ``now``: from its
    start, but not before the running slot; None once it has expired."""
    if is_expired(wait, now, slot_minutes):
        return None
    earliest = max(as_utc(wait.start), floor_to_grid(as_utc(now), slot_minutes))
    return earliest, as_utc(wait.latest_start)


def fitting_interval(
    wait: Wait,
    pool: Pool,
    existing: Iterable[Booking],
    maintenance: Iterable[MaintenanceWindow],
    now: datetime,
    slot_minutes: int,
) -> tuple[datetime, datetime] | None:
    """The interval a booking for ``wait`` gets now: the earliest of its length, within its
    window, in which its amount fits beside ``existing`` and ``maintenance`` (which must hold
    everything of the pool touching the window); None when none fits or it has expired."""
    bounds = search_bounds(wait, now, slot_minutes)
    if bounds is None:
        return None
    earliest, latest = bounds
    return earliest_fit(pool, existing, wait.amount, wait.length, earliest, latest,
                        slot_minutes, maintenance)


def interval_to_try(
    wait: Wait,
    pool: Pool,
    existing: Iterable[Booking],
    maintenance: Iterable[MaintenanceWindow],
    now: datetime,
    slot_minutes: int,
) -> tuple[datetime, datetime] | None:
    """The interval worth a booking attempt for ``wait`` now: the one :func:`fitting_interval`
    finds, else its earliest interval when the pool has enough free GPUs through it in total,
    so that only the spread of the bookings over the GPUs stands in the way, which the store's
    placement may resolve by moving upcoming bookings; None when no attempt can succeed."""
    existing, maintenance = list(existing), list(maintenance)
    found = fitting_interval(wait, pool, existing, maintenance, now, slot_minutes)
    bounds = search_bounds(wait, now, slot_minutes)
    if found is not None or bounds is None:
        return found
    start = bounds[0]
    end = start + wait.length
    free = min(piece.free_gpus for piece in availability(pool, existing, start, end, maintenance))
    return (start, end) if free >= wait.amount else None


def booked_note(wait: Wait) -> str:
    """The note of the booking made for ``wait``: the user's own note, else where it came from."""
    return wait.note or f"Booked from the waitlist (wait #{wait.id})."


def wait_to_json(wait: Wait) -> dict:
    """A wait as the API shows it (the ``Wait`` schema of openapi.yaml)."""
    return {
        "id": wait.id,
        "user": wait.user,
        "pool": wait.pool,
        "gpus": amount_to_json(wait.amount),
        "start": format_time(wait.start),
        "end": format_time(wait.end),
        "window_end": format_time(wait.window_end),
        "latest_start": format_time(wait.latest_start),
        "minutes": wait.length // timedelta(minutes=1),
        "priority": wait.priority,
        "state": wait.state.value,
        "booking_id": wait.booking_id,
        "note": wait.note,
        "created": format_time(wait.created) if wait.created else None,
        "updated": format_time(wait.updated) if wait.updated else None,
    }
