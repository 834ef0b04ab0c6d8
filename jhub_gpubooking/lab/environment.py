"""The variables a booked GPU server's JupyterLab reads, written by the spawner: one place for
their names, their text form and their defaults.

``GPU_BOOKING_ID/END/POOL/GPUS`` describe the booking (:func:`jhub_gpubooking.gpu.
booking_pod_settings`); the ones here tell the server extension how to reach the service and
how the labextension should warn. All start with ``GPU_BOOKING_``, so a later start without a
booking drops them with the rest (:meth:`jhub_gpubooking.gpu.PodSettings.merged_into`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SERVICE_URL = "GPU_BOOKING_SERVICE_URL"
PAGE_URL = "GPU_BOOKING_PAGE_URL"
WARN_MINUTES = "GPU_BOOKING_WARN_MINUTES"
POLL_SECONDS = "GPU_BOOKING_POLL_SECONDS"
BOOKING_ID = "GPU_BOOKING_ID"
BOOKING_END = "GPU_BOOKING_END"
BOOKING_POOL = "GPU_BOOKING_POOL"
BOOKING_GPUS = "GPU_BOOKING_GPUS"

DEFAULT_WARN_MINUTES = (10, 2)
DEFAULT_POLL_SECONDS = 30.0


def lab_environment(
    service_url: str, page_url: str, warn_minutes: Iterable[int], poll_seconds: float
) -> dict[str, str]:
    """The variables of a booked GPU server's JupyterLab (pure)."""
    return {
        SERVICE_URL: service_url,
        PAGE_URL: page_url,
        WARN_MINUTES: ",".join(str(int(minutes)) for minutes in warn_minutes),
        POLL_SECONDS: f"{float(poll_seconds):g}",
    }


def _warn_minutes(text: str | None) -> tuple[int, ...]:
    try:
        minutes = tuple(sorted({int(part) for part in (text or "").split(",") if part.strip()},
                               reverse=True))
    except ValueError:
        return DEFAULT_WARN_MINUTES
    return minutes if minutes and all(m > 0 for m in minutes) else DEFAULT_WARN_MINUTES


def _poll_seconds(text: str | None) -> float:
    try:
        seconds = float(text) if text else DEFAULT_POLL_SECONDS
    except ValueError:
        return DEFAULT_POLL_SECONDS
    return seconds if seconds > 0 else DEFAULT_POLL_SECONDS


@dataclass(frozen=True)
class LabSettings:
    """What a single-user server knows about its booking from its environment alone.

    ``booking_id`` None means no booking: a CPU server (or one started without this spawner).
    A malformed warning list or poll interval falls back to the default instead of failing:
    the labextension must never break JupyterLab.
    """

    booking_id: int | None
    end: str | None = None
    pool: str | None = None
    gpus: str | None = None
    service_url: str | None = None
    page_url: str | None = None
    warn_minutes: tuple[int, ...] = DEFAULT_WARN_MINUTES
    poll_seconds: float = DEFAULT_POLL_SECONDS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LabSettings:
        text = environ.get(BOOKING_ID, "")
        if not text.isdigit():
            return cls(booking_id=None)
        service_url = environ.get(SERVICE_URL) or None
        if service_url and not service_url.endswith("/"):
            service_url += "/"
        return cls(
            booking_id=int(text),
            end=environ.get(BOOKING_END) or None,
            pool=environ.get(BOOKING_POOL) or None,
            gpus=environ.get(BOOKING_GPUS) or None,
            service_url=service_url,
            page_url=environ.get(PAGE_URL) or None,
            warn_minutes=_warn_minutes(environ.get(WARN_MINUTES)),
            poll_seconds=_poll_seconds(environ.get(POLL_SECONDS)),
        )
