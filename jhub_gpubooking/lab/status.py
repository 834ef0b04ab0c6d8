"""The status JSON the labextension polls (``GET gpu-booking/status``), built from the
service's answer or, when the service cannot be reached, from the server's environment.

The shape is the contract with the labextension (issue 19); every builder here is pure.
"""

from __future__ import annotations

import re
from datetime import datetime
from fractions import Fraction

from ..core.model import format_amount
from ..core.timegrid import format_time, parse_time
from .environment import LabSettings

NOT_BOOKED = {"booked": False}

#: Short enough for one JupyterLab notification (it cuts messages at 140 characters).
UNAVAILABLE_MESSAGE = (
    "The GPU booking service cannot be reached: the time left is as of this server's start, "
    "and extending waits until it is back."
)

_FRACTION_GLYPHS = {
    Fraction(1, 2): "½", Fraction(1, 3): "⅓", Fraction(2, 3): "⅔", Fraction(1, 4): "¼",
    Fraction(3, 4): "¾", Fraction(1, 8): "⅛", Fraction(3, 8): "⅜", Fraction(5, 8): "⅝",
    Fraction(7, 8): "⅞",
}
# vendor words and the board/memory suffix of a GPU model name: "NVIDIA A100-SXM4-40GB" is an A100
_VENDOR_WORDS = re.compile(r"^(?:(?:NVIDIA|AMD|Intel|Tesla|GeForce|Radeon)\s+)+", re.IGNORECASE)


def short_gpu_name(pool: dict) -> str:
    """The GPU's everyday name for a status bar: "A100" for "NVIDIA A100-SXM4-40GB"."""
    model = _VENDOR_WORDS.sub("", (pool.get("gpu_model") or "").strip())
    short = re.split(r"[\s-]", model, maxsplit=1)[0]
    return short or pool.get("display_name") or pool["name"]


def short_share(amount: Fraction, gpu: str) -> str:
    """ "¼ A100", "1 A100", "2 × A100"; fractions without a glyph as decimals ("0.2 A100")."""
    if amount > 1:
        return f"{format_amount(amount)} × {gpu}"
    return f"{_FRACTION_GLYPHS.get(amount, format_amount(amount))} {gpu}"


def _env_share(settings: LabSettings) -> str:
    try:
        amount = Fraction(settings.gpus or "")
    except (ValueError, ZeroDivisionError):
        return f"{settings.gpus or '?'} × {settings.pool or 'GPU'}"
    return short_share(amount, settings.pool or "GPU")

#: Why a booking is over, by the service's ``release_reason`` (None: it reached its end).
_ENDED_MESSAGES = {
    None: "Your GPU booking has ended, so this server is being stopped.",
    "ended": "Your GPU booking was ended early (\"End now\"), so this server is being stopped.",
    "preempted": "Your GPU booking was taken back for a booked user, so this server is being "
                 "stopped.",
    "no_show": "Your GPU booking was released because no server used it, so this server is "
               "being stopped.",
    "server_stopped": "Your GPU booking was released after its server stopped, so this server "
                      "is being stopped.",
}
_CANCELLED_MESSAGE = "Your GPU booking was cancelled, so this server is being stopped."


def _seconds_left(end: str | None, now: datetime) -> float:
    if not end:
        return 0.0
    return max(0.0, (parse_time(end, "end") - now).total_seconds())


def ended_message(booking: dict) -> str | None:
    """The sentence telling the user why the server is stopping, or None while it may run."""
    if booking.get("state") == "cancelled":
        return _CANCELLED_MESSAGE
    if booking.get("state") == "ended":
        return _ENDED_MESSAGES.get(booking.get("release_reason"), _ENDED_MESSAGES[None])
    return None


def _common(settings: LabSettings) -> dict:
    return {
        "booked": True,
        "warn_minutes": list(settings.warn_minutes),
        "poll_seconds": settings.poll_seconds,
        "bookings_url": settings.page_url,
    }


def booked_status(settings: LabSettings, extension: dict, pool: dict | None) -> dict:
    """Status from the service's ``GET api/bookings/{id}/extension`` answer and the pool's
    entry of ``GET api/pools`` (None if the pool is unknown to it)."""
    booking = extension["booking"]
    now = parse_time(extension["now"], "now")
    message = ended_message(booking)
    if pool is not None and booking.get("slices"):
        amount = Fraction(booking["slices"], pool.get("slices_per_gpu") or 1)
        share = short_share(amount, short_gpu_name(pool))
    else:
        share = _env_share(settings)
    return {
        **_common(settings),
        "service": "ok",
        "message": message,
        "booking": {key: booking[key] for key in ("id", "pool", "state", "start", "end")},
        "share": share,
        "now": extension["now"],
        "seconds_left": 0.0 if message else _seconds_left(booking["end"], now),
        "extension": {
            "minutes": extension["minutes"],
            "max_end": extension["max_end"],
            "reason": extension["reason"],
        },
    }


def unavailable_status(settings: LabSettings, now: datetime, message: str) -> dict:
    """Status from the environment alone (the service did not answer); ``now`` is the server's
    own clock, the only one left."""
    seconds_left = _seconds_left(settings.end, now)
    return {
        **_common(settings),
        "service": "unavailable",
        "message": message,
        "booking": {
            "id": settings.booking_id,
            "pool": settings.pool,
            # a guess from the end the server started with: nobody else can say now
            "state": "active" if seconds_left > 0 else "ended",
            "start": None,
            "end": settings.end,
        },
        "share": _env_share(settings),
        "now": format_time(now),
        "seconds_left": seconds_left,
        "extension": {"minutes": 0, "max_end": None, "reason": message},
    }
