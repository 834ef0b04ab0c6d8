"""The JSON shapes of pools and bookings, defined once (``service/openapi.yaml`` documents them).

Every layer speaks through these functions: the service's REST answers
(``service/serialize.py``), the spawner reading those answers back, ``Pool.from_config`` for the
admin's ``pools`` config, and the ``pools.config`` column of the database (``db/convert.py``).

A pool's JSON keys are the fields of :class:`~.model.Pool`; the service adds two derived keys
(``total_gpus``, ``max_gpus_per_booking``) that a reader drops again. A booking's amount travels
twice: ``gpus`` as a number for people and ``slices`` exact, which is what a reader trusts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .model import Booking, BookingState, Placement, Pool, amount_to_json, booking_state
from .replacement import is_movable
from .timegrid import format_time, parse_time

#: The keys of a pool's JSON: exactly the fields of the Pool value type.
POOL_KEYS = tuple(field.name for field in dataclasses.fields(Pool))
#: Keys the service adds to a pool's JSON, derived from the others (never read back).
DERIVED_POOL_KEYS = ("total_gpus", "max_gpus_per_booking")
#: The ``reason`` of a claim's 503 while the service has just started and has not compared
#: the running servers and pods with its database yet: the client asks again after
#: ``Retry-After`` (``service/claims.py`` answers it, ``client.py`` reads it).
SERVICE_STARTING = "service_starting"


def _plain(value: Any) -> Any:
    """Mappings and tuples of the frozen value types as JSON objects and arrays."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def pool_to_json(pool: Pool) -> dict[str, Any]:
    """The pool as its config (what :func:`pool_from_config` reads; stored in ``pools.config``)."""
    return {key: _plain(getattr(pool, key)) for key in POOL_KEYS}


def pool_from_config(config: Mapping[str, Any]) -> Pool:
    """A pool from an admin's config entry; unknown keys are refused with the allowed ones."""
    unknown = set(config) - set(POOL_KEYS)
    if unknown:
        raise ValueError(
            f"Pool config {config.get('name', '?')!r} has unknown keys: {sorted(unknown)}; "
            f"allowed: {sorted(POOL_KEYS)}."
        )
    if "name" not in config or "nodes" not in config:
        raise ValueError("Each pool config needs at least 'name' and 'nodes'.")
    return Pool(**dict(config))


def pool_service_json(pool: Pool) -> dict[str, Any]:
    """What users need to choose a pool, plus what the spawner needs to build the pod (GPU UUIDs
    for pinning, the pool's node selector and backend resource name). Node names are not secret:
    they appear in placements anyway."""
    return {
        **pool_to_json(pool),
        "total_gpus": pool.total_gpus,
        "max_gpus_per_booking": max(pool.nodes.values()),
    }


def pool_from_json(data: Mapping[str, Any]) -> Pool:
    """A pool from the service's ``GET api/pools`` entry (derived keys dropped, nulls left to
    their defaults, keys a newer service may add ignored)."""
    return pool_from_config(
        {key: data[key] for key in POOL_KEYS if data.get(key) is not None}
    )


def placement_to_json(placement: Placement | None) -> dict[str, Any] | None:
    if placement is None:
        return None
    return {"node": placement.node, "gpus": list(placement.gpus), "slices": placement.slices}


def placement_from_json(data: Mapping[str, Any] | None) -> Placement | None:
    if not data:
        return None
    return Placement(node=data["node"], gpus=tuple(data["gpus"]), slices=data["slices"])


def booking_to_json(booking: Booking, pool: Pool | None, now: datetime) -> dict[str, Any]:
    """A booking as the API returns it, with times in UTC ``…Z`` and its state at ``now``."""
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
        "placement": placement_to_json(placement),
        # until its start (and claim) a booking may move to other GPUs of its pool to let
        # another request in; the pod gets the placement read when its server claims it
        "placement_provisional": is_movable(booking, now),
        "server": booking.server,
        # an early release moved "end"; "released_end" is the end that had been booked
        "released_end": format_time(booking.released_end),
        "release_reason": booking.release_reason,
        "opportunistic": booking.opportunistic,
        "series_id": booking.series_id,
    }


def _optional_time(data: Mapping[str, Any], key: str) -> datetime | None:
    text = data.get(key)
    return None if text is None else parse_time(text, key)


def _status(data: Mapping[str, Any]) -> str:
    """The stored status behind a JSON state: a cancelled booking says so, every other one is
    booked and its state follows from its times and the clock."""
    return "cancelled" if data.get("state") == BookingState.CANCELLED.value else "booked"


def booking_state_at(data: Mapping[str, Any], now: datetime) -> BookingState:
    """What a booking in the service's JSON is at ``now`` (the service's ``state`` was true at
    the service's clock), by the one rule :func:`~.model.booking_state`."""
    return booking_state(
        _status(data), parse_time(data["start"], "start"), parse_time(data["end"], "end"), now
    )


def booking_from_json(data: Mapping[str, Any], pool: Pool) -> Booking:
    """A booking from the service's JSON; the amount comes from the exact ``slices`` (the groups
    of its owner are not part of the JSON)."""
    return Booking(
        id=data["id"],
        user=data["user"],
        pool=data["pool"],
        amount=pool.slices_to_amount(data["slices"]),
        start=parse_time(data["start"], "start"),
        end=parse_time(data["end"], "end"),
        placement=placement_from_json(data.get("placement")),
        note=data.get("note", ""),
        status=_status(data),
        created=_optional_time(data, "created"),
        updated=_optional_time(data, "updated"),
        server=data.get("server"),
        released_end=_optional_time(data, "released_end"),
        release_reason=data.get("release_reason"),
        opportunistic=bool(data.get("opportunistic")),
        series_id=data.get("series_id"),
    )
