"""How a GPU start waits out a booking service that cannot answer for a few seconds.

A claim can fail although asking again seconds later would succeed:

- no answer: nothing listens (the Hub starts the service with itself, and again after it
  crashed), or none came within the spawner's timeouts (a service busy starting, or waiting
  on its database: the client's :class:`~jhub_gpubooking.client.BookingServiceUnreachable`);
- the service has just started and is still comparing the running servers and pods with its
  bookings (503 ``service_starting`` with ``Retry-After``);
- its database or the Hub cannot answer (503 with ``Retry-After``: a database restart or
  failover).

Like KubeSpawner, which sends a failed Kubernetes API request again until
``k8s_api_request_retry_timeout``, the spawner asks again after the wait each failure names,
until ``GPUBookingSpawner.booking_request_retry_timeout`` is up, and the spawn page shows each
wait. A failure without a wait is refused at once: a server error or an answer that is not
JSON (a wrong URL) will not mend itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .client import BookingServiceStarting, BookingServiceUnavailable, BookingServiceUnreachable

T = TypeVar("T")


def wait_message(error: BookingServiceUnavailable, seconds: float) -> str:
    """The spawn page's line for one wait (a progress event's message)."""
    if isinstance(error, BookingServiceStarting):
        why = ("The GPU booking service has just started and is checking which servers run on "
               "bookings")
    elif isinstance(error, BookingServiceUnreachable):
        why = "The GPU booking service is not answering (it may be restarting)"
    else:
        why = "The GPU booking service cannot reach its database or the Hub right now"
    return f"{why}; asking again in {seconds:g} s."


async def ask_until_answered(
    ask: Callable[[], Awaitable[T]],
    retry_timeout: float,
    on_wait: Callable[[BookingServiceUnavailable, float], None],
) -> T:
    """``ask()``'s answer, asking again after each failure's ``retry_after`` while the next
    attempt starts within ``retry_timeout`` seconds of the first; then its last failure is
    raised. ``on_wait(error, seconds)`` is called before each wait."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + retry_timeout
    while True:
        try:
            return await ask()
        except BookingServiceUnavailable as error:
            seconds = error.retry_after
            if seconds is None or loop.time() + seconds > give_up:
                raise
            on_wait(error, seconds)
            await asyncio.sleep(seconds)


class StartWaits:
    """One start's waits for the booking service: added by its claim, streamed by the
    spawner's ``progress()`` to the spawn page."""

    def __init__(self) -> None:
        self._events: list[dict] = []
        #: set when the start's claim is settled (made, refused, or not needed)
        self.settled = asyncio.Event()

    def add(self, error: BookingServiceUnavailable, seconds: float) -> None:
        # no "progress" key: the Hub's page keeps its bar and shows the line
        self._events.append({"message": wait_message(error, seconds)})

    async def events(self, start_future: asyncio.Future | None):
        """The waits as they happen, until the claim is settled or the start is over. The
        page asks for progress after the Hub's ``slow_spawn_timeout``: it gets the earlier
        waits too."""
        sent = 0
        while True:
            for event in self._events[sent:]:
                yield event
            sent = len(self._events)
            if self.settled.is_set() or start_future is None or start_future.done():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.settled.wait(), 0.5)
