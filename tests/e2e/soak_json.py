"""What the lifecycle soak's invariants (soak_invariants.py) read off the JSON of one snapshot:
the simulated cluster's pods and the booking service's bookings."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction

from jhub_gpubooking.admission.review import USERNAME_KEY
from jhub_gpubooking.admission.rules import format_resources, is_gpu_resource, pod_gpu_demand
from jhub_gpubooking.core.timegrid import parse_time
from jhub_gpubooking.core.wire import placement_from_json, pool_from_json
from jhub_gpubooking.gpu import BOOKING_ID_KEY, gpu_request, pod_placement


def pod_is_live(pod: dict) -> bool:
    """Pending or running, and not being deleted: a pod that holds (or will hold) its GPUs."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase", "Pending") in ("Pending", "Running")


def pod_booking_id(pod: dict) -> int | None:
    metadata = pod["metadata"]
    value = (metadata.get("annotations") or {}).get(BOOKING_ID_KEY) or (
        metadata.get("labels") or {}
    ).get(BOOKING_ID_KEY)
    return int(value) if value else None


def not_covered(pod: dict, booking_id: int | None, booking: dict | None,
                pools: dict[str, dict]) -> str | None:
    """Why ``booking`` cannot be what the GPU pod runs on, whatever the time (None: it can):
    none, not started, placed elsewhere, or not the booked share (``pools``: the service's
    pools JSON, by name)."""
    if booking is None:
        return f"runs without a booking ({booking_id})"
    if booking["state"] == "upcoming":
        return f"runs on booking {booking_id}, which has not started"
    placed, made_for = placed_at(booking), pod_placement(pod)
    if placed is not None and made_for != placed:
        return (f"was made for {made_for[0]} GPU {made_for[1]}, its booking {booking_id} is "
                f"placed on {placed[0]} GPU {placed[1]}")
    return not_the_share(pod, booking_id, booking, pools)


def booked_resources(booking: dict, pools: dict[str, dict]) -> dict[str, int]:
    """The resources a pod running on ``booking`` asks for: the spawner's own translation."""
    pool = pool_from_json(pools[booking["pool"]])
    return dict(gpu_request(pool, Fraction(str(booking["gpus"])),
                            placement_from_json(booking["placement"])).resources)


def not_the_share(pod: dict, booking_id: int | None, booking: dict,
                  pools: dict[str, dict]) -> str | None:
    """Why the pod's GPU resources are not its booking's share: a Hub server's pod gets exactly
    the share; a pod made outside the Hub asks for the same resources, none of them more."""
    if not booking.get("placement"):
        return None  # not placed (an old booking): nothing to translate
    given = booked_resources(booking, pools)
    asked = pod_gpu_demand(pod, given)  # as the webhook and the scheduler count it
    hub_pod = USERNAME_KEY in ((pod["metadata"].get("annotations")) or {})
    if asked == given or (not hub_pod and asked.keys() == given.keys() and all(
            asked[name] <= given[name] for name in given)):
        return None
    return (f"asks for {format_resources(asked)}, its booking {booking_id} of "
            f"{booking['gpus']} GPU(s) gives {format_resources(given)}")


def placed_at(booking: dict) -> tuple[str, tuple[int, ...]] | None:
    """The booking's node and GPU indices, as gpu.pod_placement reads a pod's."""
    placement = booking.get("placement")
    return (placement["node"], tuple(placement["gpus"])) if placement else None


def pod_wants_gpus(pod: dict) -> bool:
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(
        is_gpu_resource(name)
        for container in containers
        for kind in ("limits", "requests")
        for name in ((container.get("resources") or {}).get(kind) or {})
    )


def pod_name(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def booking_over(booking: dict, now: datetime) -> datetime | None:
    """When the booking stopped covering a server (None: it still does at ``now``)."""
    if booking["state"] == "cancelled":
        return parse_time(booking["updated"])
    end = parse_time(booking["end"])
    if booking.get("release_reason") == "preempted":
        # a grant is cut back to where the preempting booking starts, which may have passed
        # already: its server could not stop before the preemption itself
        end = max(end, parse_time(booking["updated"]))
    return end if booking["state"] == "ended" or end <= now else None


def booked_hours(booking: dict, start: datetime, end: datetime) -> Fraction:
    """GPU-hours the booking was booked for within [start, end): from its start to the end it
    had before any early release (an end-now or a release counts the time given back)."""
    if booking["state"] == "cancelled":
        return Fraction(0)
    booked_end = parse_time(booking["end"])
    if booking.get("released_end"):
        booked_end = max(booked_end, parse_time(booking["released_end"]))
    low, high = max(parse_time(booking["start"]), start), min(booked_end, end)
    if high <= low:
        return Fraction(0)
    seconds = Fraction((high - low) // timedelta(microseconds=1), 10**6)
    return Fraction(str(booking["gpus"])) * seconds / 3600
