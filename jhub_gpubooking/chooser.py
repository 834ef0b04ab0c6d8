"""What the server chooser shows for GPU profiles (the booking a start claims: core.choice).

Pure functions of the service's JSON (pools, bookings, opportunistic availability) and "now",
tested by dict equality; :mod:`jhub_gpubooking.spawner` renders and acts on them.
"""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction

from .core.choice import claim_order, current_bookings
from .core.model import BookingState, format_amount
from .core.timegrid import parse_time
from .core.wire import booking_state_at

SERVICE_UNAVAILABLE_MESSAGE = (
    "The GPU booking service cannot be reached, so GPU servers cannot start right now; "
    "CPU profiles still work."
)

#: a GPU profile's note while the service cannot answer for now: a start waits for it
SERVICE_NOT_ANSWERING_NOTE = (
    "The GPU booking service cannot show your bookings right now (it may be restarting, or "
    "waiting for its database). You can still start: the start waits for the service and "
    "then runs on your active booking."
)

OPPORTUNISTIC_NOTE = "Available now (opportunistic, may be stopped when a booking needs the GPU)."


def gpu_label(pool: dict) -> str:
    """What users call the pool's GPU: its model ("A100") or else the pool's name."""
    return pool.get("gpu_model") or pool.get("display_name") or pool["name"]


def share_text(booking: dict, pool: dict) -> str:
    """'0.5 × A100' for a booking, from its exact slice count."""
    amount = Fraction(booking["slices"], pool.get("slices_per_gpu") or 1)
    return f"{format_amount(amount)} × {gpu_label(pool)}"


def server_text(server: str) -> str:
    return "your default server" if server == "" else f"server '{server}'"


#: ``user_options`` key of the booking the user chose (when several are active in a pool), and
#: the prefix of its form field (one radio group per GPU profile: ``gpu-booking-<slug>``).
BOOKING_OPTION = "gpu_booking"
BOOKING_FIELD_PREFIX = "gpu-booking-"


def chooser_profiles(
    profiles: list[dict],
    *,
    pools: dict[str, dict] | None,
    active: list[dict],
    upcoming: list[dict],
    booking_page_url: str,
    now: datetime,
    opportunistic: dict | None = None,
    server: str = "",
    start_waits: bool = False,
) -> dict[str, dict]:
    """Per GPU profile slug, what the chooser shows; ``pools`` None means the service did not
    answer: GPU profiles are disabled, unless ``start_waits`` (it cannot answer for now, and a
    start waits for it) offers them with a note saying so.

    CPU profiles get no entry, so the template leaves them exactly as KubeSpawner shows them.
    ``opportunistic`` is the service's ``GET api/opportunistic`` answer: a pool free right now
    makes its profile startable without a booking.
    """
    free_now = {
        entry["pool"]
        for entry in (opportunistic or {}).get("pools", [])
        if (opportunistic or {}).get("enabled") and entry.get("available")
    }
    shown = {}
    for profile in profiles:
        pool_name = profile.get("gpu_pool")
        if not pool_name:
            continue
        entry = {
            "pool": pool_name,
            "label": pool_name,
            "enabled": False,
            "booking": None,
            "choices": [],
            "upcoming": None,
            "note": SERVICE_UNAVAILABLE_MESSAGE,
            "booking_page_url": booking_page_url,
        }
        shown[profile["slug"]] = entry
        if pools is None:
            if start_waits:
                entry.update(enabled=True, note=SERVICE_NOT_ANSWERING_NOTE)
            continue
        pool = pools.get(pool_name)
        if pool is None:
            entry["note"] = f"The GPU pool '{pool_name}' is not offered by the booking service."
            continue
        entry["label"] = gpu_label(pool)
        booked = claim_order(current_bookings(active, pool_name, now), server)
        if booked:
            choices = [
                {
                    "id": booking["id"],
                    "share": share_text(booking, pool),
                    "end": booking["end"],
                    "server": booking.get("server"),
                }
                for booking in booked
            ]
            # several active bookings: the user picks one (the first is what a start takes)
            entry.update(
                enabled=True,
                note="",
                booking={"share": choices[0]["share"], "end": choices[0]["end"]},
                choices=choices if len(choices) > 1 else [],
            )
            continue
        entry["note"] = f"You have no active {entry['label']} booking right now."
        if pool_name in free_now:
            entry.update(enabled=True, note=OPPORTUNISTIC_NOTE)
        later = sorted(
            (
                b
                for b in upcoming
                if b.get("pool") == pool_name
                and booking_state_at(b, now) is BookingState.UPCOMING
            ),
            key=lambda b: parse_time(b["start"], "start"),
        )
        if later:
            entry["upcoming"] = {"share": share_text(later[0], pool), "start": later[0]["start"]}
    return shown


def checked_profile(profiles: list[dict], gpu: dict[str, dict], saved: str | None) -> str | None:
    """The radio button to pre-select: the saved or default profile, if it can start."""

    def startable(profile: dict) -> bool:
        return gpu.get(profile["slug"], {"enabled": True})["enabled"]

    for wanted in (
        [p for p in profiles if p["slug"] == saved],
        [p for p in profiles if p.get("default")],
        profiles,
    ):
        for profile in wanted:
            if startable(profile):
                return profile["slug"]
    return None
