"""JSON shapes of the REST API (pure builders; see ``openapi.yaml`` for the schemas)."""

from __future__ import annotations

from datetime import datetime

from ..core.model import MaintenanceWindow, Pool, amount_to_json
from ..core.timegrid import format_time
from ..core.wire import booking_to_json, pool_service_json

#: A booking and a pool as the API returns them: the one wire schema of :mod:`..core.wire`.
booking_json = booking_to_json
pool_json = pool_service_json


def extension_json(
    booking: dict, current_end: datetime, max_end: datetime | None, reason: str | None,
    now: datetime,
) -> dict:
    """The largest extension of ``booking`` (its JSON) allowed right now, or why there is none;
    ``now`` is the service's clock, which clients count the time left by."""
    minutes = 0 if max_end is None else int((max_end - current_end).total_seconds() // 60)
    return {
        "booking": booking,
        "minutes": minutes,
        "max_end": format_time(max_end),
        "reason": reason,
        "now": format_time(now),
    }


def availability_json(
    pool: Pool, start: datetime, end: datetime, slot_minutes: int, intervals
) -> dict:
    return {
        "pool": pool.name,
        "start": format_time(start),
        "end": format_time(end),
        "slot_minutes": slot_minutes,
        "intervals": [
            {
                "start": format_time(interval.start),
                "end": format_time(interval.end),
                "free_gpus": amount_to_json(interval.free_gpus),
                "largest_bookable": amount_to_json(interval.largest_bookable),
            }
            for interval in intervals
        ],
    }


def maintenance_json(window: MaintenanceWindow) -> dict:
    return {
        "id": window.id,
        "pool": window.pool,
        "node": window.node,
        "start": format_time(window.start),
        "end": format_time(window.end),
        "reason": window.reason,
    }


def next_free_json(pool: Pool, gpus, minutes: int, found: tuple[datetime, datetime] | None) -> dict:
    """The next free slot of ``pool`` for ``gpus`` over ``minutes``; null times when none."""
    start, end = found if found is not None else (None, None)
    return {"pool": pool.name, "gpus": amount_to_json(gpus), "minutes": minutes,
            "start": format_time(start), "end": format_time(end)}
