"""What a refused GPU start tells the user: one sentence per reason the booking service gives.

The spawner raises these from ``load_user_options``; the Hub shows the sentence on the
spawn-pending page, in the progress stream and in its REST API's error, on JupyterHub 5.5 and
6.x alike (:func:`booking_refusal`).
"""

from __future__ import annotations

import logging

from tornado import web

from .chooser import SERVICE_UNAVAILABLE_MESSAGE, gpu_label, server_text
from .client import BookingRefused

try:  # JupyterHub >= 6 has a dedicated exception for refused spawns
    from jupyterhub.spawner import SpawnException
except ImportError:  # JupyterHub 5.x
    SpawnException = None

#: A start that waited ``booking_request_retry_timeout`` for a service that had just started.
SERVICE_STARTING_MESSAGE = (
    "The GPU booking service has just started and is still checking which servers run on "
    "bookings, so GPU servers cannot start yet; start again in a minute. CPU profiles still work."
)


def booking_refusal(message: str, *, reason: str, status_code: int = 403) -> web.HTTPError:
    """The exception that shows ``message`` to the user on JupyterHub 5.5 and 6.x alike.

    Both versions show ``jupyterhub_message`` on the spawn-pending page, in the progress
    stream ("Spawn failed: …") and in the REST API error; 6.x also reads ``message`` and
    counts a SpawnException as a refusal rather than a Hub error.
    """
    if SpawnException is not None:
        error = SpawnException(message, reason=reason, status_code=status_code)
    else:
        # without args, HTTPError escapes the % in log_message itself
        error = web.HTTPError(status_code, message)
    error.jupyterhub_message = message
    return error


def unavailable_refusal() -> web.HTTPError:
    """The refusal of a GPU start while the booking service cannot be asked."""
    return booking_refusal(
        SERVICE_UNAVAILABLE_MESSAGE, reason="gpu_booking_unavailable", status_code=503
    )


def claim_refusal(pool_name: str, refused: BookingRefused, booking_page_url: str,
                  log: logging.Logger, log_name: str) -> web.HTTPError:
    """The sentence for a refused pool claim, by the service's ``reason``; ``log_name`` names
    the server in the Hub's log."""
    reason = refused.details.get("reason")
    if reason is None and refused.status in (401, 403, 404):
        # a refused token, a wrong URL or a service without this route: an operator
        # problem, not the user's
        log.error("GPU start of %s refused by the service: %s", log_name, refused)
        return unavailable_refusal()
    if reason == "pool_unknown":
        return booking_refusal(
            f"The GPU pool '{pool_name}' of this server option is not offered by the "
            "booking service; please tell your JupyterHub administrator.",
            reason="gpu_pool_unknown",
        )
    pool = refused.details.get("pool")
    label = gpu_label(pool) if isinstance(pool, dict) else pool_name
    if reason in ("not_booked", "none_free"):
        log.info("No booking or grant for %s: %s", log_name, refused)
        # none_free: opportunistic use is on, but nothing is free for it now
        none_free = " and none is free to use without one" if reason == "none_free" else ""
        return booking_refusal(
            f"You have no active {label} booking right now{none_free}; book one at "
            f"{booking_page_url} and start again.",
            reason="gpu_not_booked",
        )
    if reason == "in_use":
        holder = refused.details.get("server")
        return booking_refusal(
            f"Your {label} booking is already used by {server_text(holder)}."
            if isinstance(holder, str)
            else refused.message,
            reason="gpu_booking_in_use",
            status_code=409,
        )
    return booking_refusal(refused.message, reason="gpu_claim_refused")
