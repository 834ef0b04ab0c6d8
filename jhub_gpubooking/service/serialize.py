"""JSON shapes of the REST API (pure builders; see ``openapi.yaml`` for the schemas)."""

from __future__ import annotations

from datetime import datetime

from ..core.model import Booking, MaintenanceWindow, Pool, amount_to_json
from ..core.timegrid import format_time


def booking_json(booking: Booking, pool: Pool | None, now: datetime) -> dict:
    """A booking as the API returns it, with times in UTC ``…Z``."""
    placement = booking.placement
    if placement is not None:
        slices = placement.slices * len(placement.gpus)
    elif pool is not None:
        slices = pool.amount_to_slices(booking.amount)
    else:
        slices = None
    return {
        "id": booking.id,
        "user": booking.user,
        "pool": booking.pool,
        "gpus": amount_to_json(booking.amount),
        "slices": slices,
        "start": format_time(booking.start),
        "end": format_time(booking.end),
        "state": booking.state(now).value,
        "note": booking.note,
        "created": format_time(booking.created),
        "updated": format_time(booking.updated),
        "placement": placement.to_json() if placement is not None else None,
        "server": booking.server,
        # an early release moved "end"; "released_end" is the end that had been booked
        "released_end": format_time(booking.released_end),
        "release_reason": booking.release_reason,
        "opportunistic": booking.opportunistic,
        "series_id": booking.series_id,
    }


def pool_json(pool: Pool) -> dict:
    """What users need to choose a pool, plus what the spawner needs to build the pod (GPU UUIDs
    for pinning, the pool's node selector and backend resource name). Node names are not secret:
    they appear in placements anyway."""
    return {
        "name": pool.name,
        "display_name": pool.display_name,
        "description": pool.description,
        "gpu_model": pool.gpu_model,
        "gpu_memory_mib": pool.gpu_memory_mib,
        "backend": pool.backend,
        "slices_per_gpu": pool.slices_per_gpu,
        "total_gpus": pool.total_gpus,
        "max_gpus_per_booking": max(pool.nodes.values()),
        "nodes": dict(pool.nodes),
        "gpu_uuids": {node: list(uuids) for node, uuids in pool.gpu_uuids.items()},
        "node_selector": dict(pool.node_selector),
        "resource_name": pool.resource_name,
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
