"""iCalendar feeds of a user's bookings.

Two ways in: ``api/users/{user}/bookings.ics`` for a logged-in caller, and the secret feed
``feeds/{token}.ics`` for calendar apps that cannot log in: the token is the capability, so
that handler skips Hub authentication entirely. Only POST ``feed-token`` mints a token
(behind HubOAuth's XSRF check for cookie logins) and revokes any older link; GET only says
whether a link exists, so a cross-site link or a page visit never burns the shown-once link.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from icalendar import Calendar, Event

from ..core.model import Booking, Pool, format_amount
from ..core.replacement import is_movable
from ..core.timegrid import as_utc
from ..db import feed_tokens
from .api import APIHandler
from .base import BaseHandler, refusal

ICS_CONTENT_TYPE = "text/calendar; charset=utf-8"
#: How far back a calendar reaches: calendar apps cannot page, and years of history would make
#: every refresh heavier; bookings that ended earlier stay in the API and the reports.
FEED_HISTORY_DAYS = 180


def booking_event(
    booking: Booking, pool: Pool | None, uid_domain: str, page_url: str, now: datetime
) -> Event:
    """One VEVENT for a booking; cancelled bookings stay in the feed as CANCELLED. Before its
    start a booking's GPUs may still move (to let another request in), so the feed says so
    rather than promise a node and GPUs that may change."""
    pool_label = pool.display_name if pool else booking.pool
    event = Event()
    event.add("uid", f"booking-{booking.id}@{uid_domain}")
    event.add("summary", f"{format_amount(booking.amount)} GPU on {pool_label}")
    event.add("dtstart", as_utc(booking.start))
    event.add("dtend", as_utc(booking.end))
    event.add("dtstamp", as_utc(booking.updated or booking.created or booking.start))
    event.add("status", "CANCELLED" if booking.status == "cancelled" else "CONFIRMED")
    description = [
        f"Booking {booking.id}: {format_amount(booking.amount)} GPU in pool {booking.pool}."
    ]
    if booking.placement is not None:
        where = f"Node {booking.placement.node}, GPU(s) {list(booking.placement.gpus)}"
        if is_movable(booking, now):
            where += " for now: the GPU is assigned at start and may still change"
        description.append(f"{where}.")
    if booking.note:
        description.append(booking.note)
    event.add("description", "\n".join(description))
    if page_url:
        event.add("url", page_url)
    return event


def bookings_calendar(
    user: str,
    bookings: Iterable[Booking],
    pools: dict[str, Pool],
    uid_domain: str,
    now: datetime,
    page_url: str = "",
) -> bytes:
    """The whole calendar of ``user``'s bookings at ``now`` as iCalendar bytes."""
    calendar = Calendar()
    calendar.add("prodid", "-//jhub-gpubooking//GPU bookings//EN")
    calendar.add("version", "2.0")
    # a name property is one line; an admin may ask for any user name, newlines included
    calendar.add("x-wr-calname", " ".join(f"GPU bookings of {user}".split()))
    for booking in sorted(bookings, key=lambda b: (b.start, b.id or 0)):
        calendar.add_component(
            booking_event(booking, pools.get(booking.pool), uid_domain, page_url, now)
        )
    return calendar.to_ical()


class CalendarMixin:
    async def write_calendar(self, user: str) -> None:
        now = self.clock.now()
        since = now - timedelta(days=FEED_HISTORY_DAYS)
        bookings = await self.run_in_executor(self.store.list, user=user, start=since)
        body = bookings_calendar(
            user,
            bookings,
            self.service.pool_objects,
            uid_domain=self.service.service_name,
            now=now,
            page_url=self.public_service_url(""),
        )
        self.set_header("Content-Type", ICS_CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


class UserCalendarHandler(CalendarMixin, APIHandler):
    async def get(self, user: str) -> None:
        self.require_acting_for(user)
        await self.write_calendar(user)


class SecretFeedHandler(CalendarMixin, BaseHandler):
    """No login: whoever holds the token may read that user's calendar."""

    async def prepare(self) -> None:
        # the token in the path is the only credential; never consult the Hub here
        self._principal = None

    async def get(self, token: str) -> None:
        user = await self.run_in_executor(feed_tokens.user_for_feed_token, self.store, token)
        if user is None:
            raise refusal(
                404,
                "This calendar link is unknown or was reset; get a new one from the booking page.",
            )
        await self.write_calendar(user)


class FeedTokenHandler(APIHandler):
    async def get(self, user: str) -> None:
        """Whether ``user`` has a calendar link; the link itself exists only as a hash."""
        self.require_acting_for(user)
        exists = await self.run_in_executor(feed_tokens.has_feed_token, self.store, user)
        self.write_json({"user": user, "exists": exists})

    async def post(self, user: str) -> None:
        """A new secret link, shown this once; an older link stops working."""
        if self.request.body:
            self.json_body(allowed=())  # minting takes no fields; refuse any sent
        self.require_acting_for(user)
        token = await self.run_in_executor(
            feed_tokens.new_feed_token, self.store, user, reset=True
        )
        self.write_json(
            {"user": user, "token": token, "url": self.public_service_url("feeds", f"{token}.ics")}
        )


def feed_routes() -> list[tuple[str, type]]:
    return [
        ("api/users/{user}/bookings.ics", UserCalendarHandler),
        ("api/users/{user}/feed-token", FeedTokenHandler),
        ("feeds/{token}.ics", SecretFeedHandler),
    ]
