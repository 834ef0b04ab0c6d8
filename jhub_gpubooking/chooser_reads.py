"""What the server chooser reads from the booking service, and how it waits for it.

The chooser (:mod:`jhub_gpubooking.chooser`) shows, per GPU profile, the user's booking; it
needs the pools, the user's active and upcoming bookings and the opportunistic availability.
The Hub renders it when the spawn page opens, and that may be while the service cannot answer
for a few seconds (the Hub starts it with itself and again after a crash; its database
restarts). A start then waits for the service (:mod:`jhub_gpubooking.start_waits`), so the
chooser waits briefly too (``GPUBookingSpawner.booking_chooser_retry_timeout``) and, if the
service still cannot answer, lets the user start a GPU profile anyway and says that the start
will wait, instead of telling them to come back later. A service that cannot answer for a
reason waiting will not mend (no URL, a refused token, a server error) still disables GPU
profiles.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from .client import BookingClient, BookingRefused, BookingServiceUnavailable
from .start_waits import ask_until_answered


@dataclass
class ChooserReads:
    """The service's answers the chooser shows; ``pools`` None: the service did not answer."""

    pools: dict[str, dict] | None = None
    active: list[dict] = field(default_factory=list)
    upcoming: list[dict] = field(default_factory=list)
    opportunistic: dict | None = None
    #: the service did not answer for now, and a GPU start will wait for it
    start_waits: bool = False


async def read_for_chooser(
    client: BookingClient | None,
    user: str,
    *,
    retry_timeout: float,
    start_retry_timeout: float,
    log: logging.Logger,
    log_name: str,
) -> ChooserReads:
    """Read what the chooser shows for ``user``, asking again for up to ``retry_timeout``
    seconds while the service cannot answer for now. ``client`` None: no
    ``booking_api_url``. ``start_retry_timeout`` is how long a GPU start would wait."""
    if client is None:
        log.warning("Chooser for %s without bookings: booking_api_url is not set", log_name)
        return ChooserReads()

    def waiting(error: BookingServiceUnavailable, seconds: float) -> None:
        log.info("Chooser for %s waits %g s for the booking service: %s", log_name, seconds,
                 error)

    try:
        pools, active, upcoming = await ask_until_answered(
            lambda: _pools_and_bookings(client, user, log, log_name), retry_timeout, waiting)
    except BookingServiceUnavailable as error:
        log.warning("Chooser for %s without bookings: %s", log_name, error)
        return ChooserReads(start_waits=error.retry_after is not None and start_retry_timeout > 0)
    return ChooserReads(pools, active, upcoming, await _opportunistic(client, log, log_name))


async def _pools_and_bookings(client: BookingClient, user: str, log: logging.Logger,
                              log_name: str) -> tuple[dict[str, dict], list[dict], list[dict]]:
    try:
        pools, active, upcoming = await asyncio.gather(
            client.pools(), client.active_bookings(user), _upcoming(client, user, log, log_name))
    except BookingRefused as refused:
        # a refused read means a wrong token or URL: an operator problem, not the user's
        raise BookingServiceUnavailable(f"booking service refused: {refused}") from refused
    return {pool["name"]: pool for pool in pools}, active, upcoming


async def _upcoming(client: BookingClient, user: str, log: logging.Logger,
                    log_name: str) -> list[dict]:
    # only a hint in the chooser ("Next: …"), so its failure must not hide the rest
    try:
        return await client.upcoming_bookings(user)
    except (BookingRefused, BookingServiceUnavailable) as error:
        log.warning("Chooser for %s without upcoming bookings: %s", log_name, error)
        return []


async def _opportunistic(client: BookingClient, log: logging.Logger,
                         log_name: str) -> dict | None:
    # only a hint in the chooser: the grant at start decides
    try:
        return await client.opportunistic_availability()
    except (BookingRefused, BookingServiceUnavailable) as error:
        log.warning("Chooser for %s without opportunistic use: %s", log_name, error)
        return None
