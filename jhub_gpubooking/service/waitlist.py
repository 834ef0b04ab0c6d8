"""The waitlist component (``c.Waitlist``) and its REST handlers (``api/waits``).

A refused request joins the waitlist; whenever capacity frees (a cancel or "End now", a
cancelled series, a shortened booking, a maintenance window removed: right after the change; no-show and
stopped-server releases, expiries, anything else: on the lifecycle tick) the waiting requests
are booked in fair order (:mod:`jhub_gpubooking.core.waitlist`) through the normal booking
checks (:mod:`jhub_gpubooking.db.waitlist`). The user then finds the booking in "My bookings"
and their calendar feed, a notice on the page and, with EmailWarnings configured, an e-mail.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tornado import web
from traitlets import Any, Bool, Dict, Integer
from traitlets.config import LoggingConfigurable

from ..core.errors import NotFound
from ..core.model import Booking, checked_text, format_amount, parse_amount
from ..core.timegrid import parse_time
from ..core.waitlist import Wait, WaitState, wait_to_json
from ..db.session import unavailable_reason
from ..db.waitlist import WaitStore
from ..executor import in_executor
from .api import APIHandler, row_id
from .base import checked_user, refusal


class Waitlist(LoggingConfigurable):
    """Options and actions of the waitlist."""

    waitlist_enabled = Bool(
        True, help="Let users put a refused request on the waitlist (POST api/waits)."
    ).tag(config=True)
    max_waits_per_user = Integer(
        10, min=1, help="Waiting requests one user may have at a time."
    ).tag(config=True)
    group_priorities = Dict(
        value_trait=Integer(),
        help="Hub group -> waitlist priority (a whole number, higher is served first; a user in "
        "several groups gets the highest, everyone else 0). Within one priority the waitlist "
        "is first come, first served. Set when the request joins.",
    ).tag(config=True)

    store = Any(help="The service's BookingStore.")
    executor = Any(help="Executor for database work.")
    emails = Any(help="EmailWarnings, which tells a user their wait was booked.")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.waits = WaitStore(self.store)

    def priority_for(self, groups: Iterable[str]) -> int:
        return max((self.group_priorities.get(g, 0) for g in groups), default=0)

    async def capacity_freed(
        self, pools: Iterable[str] | None = None, now: datetime | None = None,
        search_longer: bool = False,
    ) -> list[tuple[Wait, Booking]]:
        """Book what waits in ``pools`` (all when None) and tell each user; never raises, so
        the change that freed the capacity is answered whatever happens here (the next
        lifecycle tick tries again). ``search_longer``: a wait refused because the exact
        re-placement ran out of time may get the longer search (``WaitStore.serve``); the
        lifecycle tick asks for it, a user's cancel does not wait for it."""
        try:
            served = await in_executor(self.executor,
                self.waits.serve, None if pools is None else list(pools), now, search_longer
            )
        except Exception as error:
            if unavailable_reason(error):  # an outage: one line, not a traceback a tick
                self.log.warning("Waitlist not served, database unavailable: %s",
                                 str(error).splitlines()[0])
            else:
                self.log.exception("Serving the waitlist failed; the next lifecycle tick retries")
            return []
        for wait, booking in served:
            self.log.info("Booked wait %s of %s as booking %s", wait.id, wait.user, booking.id)
            await self.emails.send_wait_booked(booking, wait)
        return served


def wait_notices(waits: Iterable[Wait]) -> list[dict]:
    """The page's notices about waits booked or expired (``waits`` changed recently)."""
    notices = []
    for wait in waits:
        what = f"Your wait #{wait.id} for {format_amount(wait.amount)} GPU in pool {wait.pool}"
        if wait.state is WaitState.BOOKED:
            notices.append({
                "kind": "wait_booked", "booking_id": wait.booking_id,
                "at": wait_to_json(wait)["updated"],
                "message": f"{what} was booked: booking #{wait.booking_id} (see My bookings).",
            })
        elif wait.state is WaitState.EXPIRED:
            notices.append({
                "kind": "wait_expired", "booking_id": None, "at": wait_to_json(wait)["updated"],
                "message": f"{what} expired: no capacity freed before its latest start.",
            })
    return notices


async def recent_wait_notices(handler: APIHandler, user: str, since: datetime) -> list[dict]:
    """Notices of ``user``'s waits booked or expired since ``since`` (for NoticesHandler)."""
    waits = await handler.run_in_executor(
        handler.service.waitlist.waits.list, user=user, changed_since=since
    )
    return wait_notices(w for w in waits if w.updated is not None and w.updated >= since)


class WaitsHandler(APIHandler):
    """``GET``: waits (the caller's; an admin's: anyone's); ``POST``: join the waitlist."""

    async def get(self) -> None:
        principal = self.require_principal()
        user = self.listed_user(principal, self.get_argument("user", None) or None, "waits")
        state = self.get_argument("state", None) or None
        if state is not None and state not in {s.value for s in WaitState}:
            raise refusal(400, f"'state' must be one of: {', '.join(s.value for s in WaitState)}.")
        waits, next_cursor = await self.list_page(
            self.service.waitlist.waits.list, user=user, state=state
        )
        self.write_json({"waits": [wait_to_json(w) for w in waits], "next_cursor": next_cursor})

    async def post(self) -> None:
        principal = self.require_principal()
        waitlist = self.service.waitlist
        if not waitlist.waitlist_enabled:
            raise refusal(403, "This hub has no waitlist.")
        body = self.json_body({"pool", "gpus", "start", "end", "window_end", "note", "user"},
                              ("pool", "gpus", "start", "end"))
        user = checked_user(body.get("user", principal.name if principal.is_user else None))
        if not principal.may_act_for(user):
            raise refusal(403, "Only booking administrators may add another user's request.")
        if not isinstance(body["pool"], str):
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        self.pool_or_404(body["pool"])
        note = checked_text(body.get("note", ""), "note")
        window_end = body.get("window_end")
        # the booking is later made as this user: their own groups decide its policy
        groups = principal.groups if user == principal.name else (
            await self.service.hub_user_groups(user))
        wait = await self.run_in_executor(
            waitlist.waits.join,
            user,
            body["pool"],
            parse_amount(body["gpus"]),
            parse_time(body["start"], "start"),
            parse_time(body["end"], "end"),
            window_end=None if window_end is None else parse_time(window_end, "window_end"),
            note=note,
            groups=groups,
            priority=waitlist.priority_for(groups),
            actor=principal.name,
            max_waiting=waitlist.max_waits_per_user,
            request_key=self.request_key(),
        )
        # capacity may already be free somewhere in the window: book it at once if so
        await waitlist.capacity_freed([wait.pool])
        wait = await self.run_in_executor(waitlist.waits.get, wait.id)
        self.set_header("Location", self.service_url("api/waits", str(wait.id)))
        self.write_json(wait_to_json(wait), status=201)


class WaitHandler(APIHandler):
    """``GET`` one wait; ``DELETE``: withdraw it."""

    async def readable_wait(self, wait_id: str) -> Wait:
        principal = self.require_principal()
        wait = None
        if row_id(wait_id) is not None:
            try:
                wait = await self.run_in_executor(self.service.waitlist.waits.get, row_id(wait_id))
            except NotFound:
                pass
        if wait is None or not principal.may_act_for(wait.user):
            raise refusal(404, f"There is no wait {wait_id} you can see.")
        return wait

    async def get(self, wait_id: str) -> None:
        self.write_json(wait_to_json(await self.readable_wait(wait_id)))

    async def delete(self, wait_id: str) -> None:
        wait = await self.readable_wait(wait_id)
        withdrawn = await self.run_in_executor(self.service.waitlist.waits.withdraw, wait.id)
        self.write_json(wait_to_json(withdrawn))


def waitlist_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [("api/waits", WaitsHandler), ("api/waits/{wait_id}", WaitHandler)]
