"""REST API handlers of the booking service (JSON under the service prefix).

Every body is read through an explicit allow-list (:meth:`BaseHandler.json_body`) and every
identity comes from the Hub (:attr:`BaseHandler.principal`), never from the request itself,
except the ``user`` field an *admin* may set when booking for someone else.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from datetime import datetime, timedelta, timezone
from typing import Any

from tornado import web

from ..core.errors import NotFound
from ..core.model import Booking, BookingState, checked_text, parse_amount
from ..core.timegrid import ceil_to_grid, floor_to_grid, parse_time
from ..db.next_free import next_free
from .base import AUTHENTICATION_REQUIRED, BaseHandler, Principal, checked_user, refusal
from .claims import (
    IN_USE,
    POOL_UNKNOWN,
    PoolClaimRefused,
    after_first_check,
    claim_in_pool,
    holder_check,
)
from .serialize import (
    availability_json,
    booking_json,
    extension_json,
    maintenance_json,
    next_free_json,
    pool_json,
)

#: Largest id any backend stores (32-bit signed integer columns); larger ids cannot exist.
MAX_ROW_ID = 2**31 - 1


def row_id(text: str) -> int | None:
    """The id in a path (digits only, by the route), or None when no row can have it.

    The length is checked first: Python refuses to convert thousands of digits at all.
    """
    if len(text) > len(str(MAX_ROW_ID)) or int(text) > MAX_ROW_ID:
        return None
    return int(text)


#: Items one list request answers at most, and when it names no ``limit``.
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100


def encode_cursor(start: datetime, item_id: int) -> str:
    """An opaque cursor naming the last item of a page: its (start, id), the list's order."""
    return base64.urlsafe_b64encode(f"{start.isoformat()}|{item_id}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        start_text, id_text = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        start, item_id = datetime.fromisoformat(start_text), row_id(id_text)
        if start.tzinfo is None or item_id is None:
            raise ValueError(cursor)
        return start.astimezone(timezone.utc), item_id
    except (ValueError, UnicodeError, binascii.Error, OverflowError):
        raise refusal(400, "'cursor' must be the next_cursor of a previous answer.") from None


#: Longest availability window one request may ask for (keeps responses small).
MAX_AVAILABILITY_DAYS = 62


class APIHandler(BaseHandler):
    """JSON endpoints: never redirect to a login page, answer 403 instead."""

    def get_login_url(self) -> str:
        raise web.HTTPError(403, AUTHENTICATION_REQUIRED)

    def require_spawner_or_admin(self, what: str) -> Principal:
        """The caller, if it is the Hub's spawner or an administrator; else 403 saying that
        only they may do ``what`` ("claim bookings")."""
        principal = self.require_principal()
        if not (principal.is_spawner or principal.is_admin):
            raise refusal(403, f"Only the Hub's spawner or an administrator may {what}.")
        return principal

    def request_key(self) -> str | None:
        """The create's ``Idempotency-Key`` header: sent again after a lost answer, the create
        answers what it made, as it is now (201); see :mod:`..db.request_keys`."""
        return self.request.headers.get("Idempotency-Key")

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def write_json(self, model: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(model))

    def booking_model(self, booking) -> dict:
        pool = self.service.pool_objects.get(booking.pool)
        return booking_json(booking, pool, self.clock.now())

    def time_argument(self, name: str, default=None):
        text = self.get_argument(name, None)
        if text is None or text == "":
            return default
        return parse_time(text, name)

    def page_arguments(self) -> tuple[int, tuple[datetime, int] | None]:
        """``limit`` (1 to MAX_PAGE_SIZE) and the decoded ``cursor`` of a list request."""
        text = self.get_argument("limit", "") or str(DEFAULT_PAGE_SIZE)
        if not (text.isascii() and text.isdigit() and len(text) <= 4) or not (
            1 <= int(text) <= MAX_PAGE_SIZE
        ):
            raise refusal(400, f"'limit' must be a whole number from 1 to {MAX_PAGE_SIZE}.")
        cursor = self.get_argument("cursor", "") or None
        return int(text), decode_cursor(cursor) if cursor else None

    async def list_page(self, list_function, **filters) -> tuple[list, str | None]:
        """One page of ``list_function`` (a store method taking limit and after) and the cursor
        of the next page, None on the last one."""
        limit, after = self.page_arguments()
        items = await self.run_in_executor(list_function, limit=limit + 1, after=after, **filters)
        if len(items) <= limit:
            return items, None
        last = items[limit - 1]
        return items[:limit], encode_cursor(last.start, last.id)

    def pool_or_404(self, name: str):
        pool = self.service.pool_objects.get(name)
        if pool is None:
            raise refusal(404, f"There is no GPU pool named {name!r}.")
        return pool

    async def readable_booking(self, booking_id: str):
        """The booking if the caller may see it; 404 otherwise (others' bookings stay hidden)."""
        principal = self.require_principal()
        booking = None
        if row_id(booking_id) is not None:
            try:
                booking = await self.run_in_executor(self.store.get, row_id(booking_id))
            except NotFound:
                pass
        return visible_booking(principal, booking_id, booking)


def visible_booking(principal: Principal, booking_id: str, booking: Booking | None) -> Booking:
    """``booking`` if ``principal`` may see it; the 404 of a booking that does not exist
    otherwise (others' bookings stay hidden)."""
    if booking is None or not (principal.may_act_for(booking.user) or principal.is_spawner):
        raise refusal(404, f"There is no booking {booking_id} you can see.")
    return booking


class PoolsHandler(APIHandler):
    async def get(self) -> None:
        self.require_principal()
        self.write_json([pool_json(pool) for pool in self.service.pool_objects.values()])


class AvailabilityHandler(APIHandler):
    async def get(self, pool_name: str) -> None:
        self.require_principal()
        pool = self.pool_or_404(pool_name)
        slot = self.service.slot_minutes
        now = self.clock.now()
        start = floor_to_grid(self.time_argument("start", now), slot)
        end = ceil_to_grid(
            self.time_argument("end", start + timedelta(days=self.service.page.page_days)), slot
        )
        if end <= start:
            raise refusal(400, "'end' must be after 'start'.")
        if end - start > timedelta(days=MAX_AVAILABILITY_DAYS):
            raise refusal(
                400, f"Availability can be asked for at most {MAX_AVAILABILITY_DAYS} days at once."
            )
        intervals = await self.run_in_executor(self.store.availability, pool.name, start, end)
        self.write_json(availability_json(pool, start, end, slot, intervals))


class NextFreeHandler(APIHandler):
    """The earliest interval of ``minutes`` from ``after`` in which ``gpus`` are free now."""

    async def get(self, pool_name: str) -> None:
        principal = self.require_principal()
        pool = self.pool_or_404(pool_name)
        minutes = self.get_argument("minutes", "")
        if not (minutes.isascii() and minutes.isdigit() and len(minutes) <= 6):
            raise refusal(400, "'minutes' must be a whole number of minutes.")
        gpus = parse_amount(self.get_argument("gpus", ""))
        found = await self.run_in_executor(
            next_free, self.store, pool.name, gpus, int(minutes), self.time_argument("after"),
            groups=principal.groups if principal.is_user else (), is_admin=principal.is_admin,
        )
        self.write_json(next_free_json(pool, gpus, int(minutes), found))


class BookingsHandler(APIHandler):
    async def get(self) -> None:
        principal = self.require_principal()
        user = self.get_argument("user", None) or None
        if principal.is_spawner and not principal.is_admin:
            # the chooser shows a user's next booking, so the Hub's spawner reads one user at a time
            if user is None:
                raise refusal(400, "The Hub's spawner must name the user whose bookings it lists.")
        else:
            user = self.listed_user(principal, user, "bookings")
        state = self.get_argument("state", None) or None
        if state is not None and state not in {s.value for s in BookingState}:
            allowed = ", ".join(s.value for s in BookingState)
            raise refusal(400, f"'state' must be one of: {allowed}.")
        bookings, next_cursor = await self.list_page(
            self.store.list,
            user=user,
            state=BookingState(state) if state else None,
            start=self.time_argument("start"),
            end=self.time_argument("end"),
        )
        self.write_json(
            {"bookings": [self.booking_model(b) for b in bookings], "next_cursor": next_cursor}
        )

    async def post(self) -> None:
        principal = self.require_principal()
        body = self.json_body(
            {"pool", "gpus", "start", "end", "note", "user"}, ("pool", "gpus", "start", "end")
        )
        user = checked_user(body.get("user", principal.name if principal.is_user else None))
        if not principal.may_act_for(user):
            raise refusal(403, "Only booking administrators may book for another user.")
        note = checked_text(body.get("note", ""), "note")
        if not isinstance(body["pool"], str):
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        self.pool_or_404(body["pool"])
        if user != principal.name:
            await self.service.lifecycle.removed_users.refuse_unknown(user)
        # groups are only known for the caller; an admin booking for someone else is exempt anyway
        groups = principal.groups if user == principal.name else ()
        # opportunistic grants in the booking's way are preempted (service/opportunistic.py)
        booking = await self.service.opportunistic.create_booking(
            user,
            body["pool"],
            parse_amount(body["gpus"]),
            parse_time(body["start"], "start"),
            parse_time(body["end"], "end"),
            note=note,
            groups=groups,
            is_admin=principal.is_admin,
            actor=principal.name,
            request_key=self.request_key(),
        )
        self.set_header("Location", self.service_url("api/bookings", str(booking.id)))
        self.write_json(self.booking_model(booking), status=201)


class BookingHandler(APIHandler):
    async def get(self, booking_id: str) -> None:
        self.write_json(self.booking_model(await self.readable_booking(booking_id)))

    async def patch(self, booking_id: str) -> None:
        principal = self.require_principal()
        body = self.json_body({"end"}, ("end",))
        booking = await self.readable_booking(booking_id)
        if not principal.may_act_for(booking.user):
            raise refusal(403, "Only the booking's owner or an administrator may change it.")
        changed = await self.run_in_executor(
            self.store.change_end,
            booking.id,
            parse_time(body["end"], "end"),
            actor=principal.name,
            groups=principal.groups if booking.user == principal.name else (),
            is_admin=principal.is_admin,
        )
        if changed.end < booking.end:  # a shorter booking frees capacity for the waitlist
            await self.service.waitlist.capacity_freed([changed.pool])
        self.write_json(self.booking_model(changed))

    async def delete(self, booking_id: str) -> None:
        principal = self.require_principal()

        def may_cancel(booking: Booking) -> None:
            # checked on the locked row: the read and the cancel are one transaction
            if not principal.may_act_for(visible_booking(principal, booking_id, booking).user):
                raise refusal(403, "Only the booking's owner or an administrator may cancel it.")

        cancelled = None
        if row_id(booking_id) is not None:
            try:
                cancelled = await self.run_in_executor(
                    self.store.cancel, row_id(booking_id), actor=principal.name, check=may_cancel)
            except NotFound:
                pass
        cancelled = visible_booking(principal, booking_id, cancelled)  # 404 without one
        await self.service.lifecycle.stop_ended_booking_server(cancelled)
        await self.service.waitlist.capacity_freed([cancelled.pool])
        self.write_json(self.booking_model(cancelled))


class ExtensionHandler(APIHandler):
    """The largest extension PATCH would accept right now, for the owner's JupyterLab."""

    async def get(self, booking_id: str) -> None:
        principal = self.require_principal()
        booking = await self.readable_booking(booking_id)
        if not principal.may_act_for(booking.user):
            raise refusal(403, "Only the booking's owner or an administrator may extend it.")
        # no policy bounds an admin's extension: look as far ahead as the reservation page does
        booking, max_end, reason = await self.run_in_executor(
            self.store.largest_extension,
            booking.id,
            timedelta(days=self.service.page.page_days),
            groups=principal.groups if booking.user == principal.name else (),
            is_admin=principal.is_admin,
        )
        self.write_json(
            extension_json(self.booking_model(booking), booking.end, max_end, reason,
                           self.clock.now())
        )


def checked_server(value: Any) -> str:
    """The Hub server name of a claim or release body ("" is the default server)."""
    if not isinstance(value, str):
        raise refusal(400, "'server' must be a server name (\"\" for the default server).")
    return value


class ClaimHandler(APIHandler):
    """``claim`` / ``release`` one booking: only the Hub's spawner (or an admin) binds bookings
    to servers. Spawners claim through ``PoolClaimHandler`` in one round trip; this ``claim``
    stays for older spawners and for admins, ``release`` is how every spawner gives one back."""

    action = "claim"

    def server_name(self) -> str:
        self.require_spawner_or_admin(f"{self.action} bookings")
        return checked_server(self.json_body({"server"}, ("server",))["server"])

    async def post(self, booking_id: str) -> None:
        server = self.server_name()
        booking = await self.readable_booking(booking_id)
        try:
            await after_first_check(self.service)
        except PoolClaimRefused as starting:
            raise refusal(starting.status, starting.message, starting.retry_after) from None
        is_running = holder_check(self.service, booking, asyncio.get_running_loop())
        claimed = await self.run_in_executor(
            self.store.claim, booking.id, server, is_running=is_running
        )
        self.write_json(self.booking_model(claimed))


class PoolClaimHandler(APIHandler):
    """The spawn gate in one round trip (:func:`.claims.claim_in_pool`): the user's booking in
    the pool claimed for a server, with the pool, or why not (``reason``) — Hub spawner and
    admins only."""

    async def post(self, pool_name: str) -> None:
        principal = self.require_spawner_or_admin("claim bookings")
        body = self.json_body({"user", "server", "booking"}, ("user", "server"))
        user, server = checked_user(body["user"]), checked_server(body["server"])
        chosen = body.get("booking")
        if chosen is not None and not (
            type(chosen) is int and 0 <= chosen <= MAX_ROW_ID  # a bool is no id
        ):
            raise refusal(400, "'booking' must be the id of one of the user's bookings, or null.")
        pool = self.service.pool_objects.get(pool_name)
        if pool is None:
            self.write_json({"status": 404, "reason": POOL_UNKNOWN,
                             "message": f"There is no GPU pool named {pool_name!r}."}, 404)
            return
        try:
            claimed = await claim_in_pool(self.service, user, pool, server, chosen,
                                          actor=principal.name)
        except PoolClaimRefused as refused:
            answer = {"status": refused.status, "message": refused.message,
                      "reason": refused.reason, "pool": pool_json(pool)}
            if refused.reason == IN_USE:
                answer["server"] = refused.holder
            if refused.retry_after is not None:
                self.set_header("Retry-After", str(refused.retry_after))
            self.write_json(answer, refused.status)
            return
        self.write_json({"pool": pool_json(pool), "booking": self.booking_model(claimed)})


class ReleaseHandler(ClaimHandler):
    """A server gives its booking back. The body names the server's user too: the server name
    alone ("" for every user's default server) would let a spawner whose stored booking id now
    belongs to someone else (a database put back from a backup by hand, rather than by
    ``db restore``, hands out the lost bookings' ids again) unbind that other user's server.
    Older spawners send the server only."""

    action = "release"

    async def post(self, booking_id: str) -> None:
        self.require_spawner_or_admin(f"{self.action} bookings")
        body = self.json_body({"server", "user"}, ("server",))
        server = checked_server(body["server"])
        user = checked_user(body["user"]) if "user" in body else None
        booking = await self.readable_booking(booking_id)
        released = await self.run_in_executor(self.store.release, booking.id, server, user)
        self.write_json(self.booking_model(released))


class ActiveBookingsHandler(APIHandler):
    async def get(self, user: str) -> None:
        principal = self.require_principal()
        if not (principal.may_act_for(user) or principal.is_spawner):
            raise refusal(
                403,
                "Only the user themself, an administrator or the Hub's spawner may see these bookings.",
            )
        bookings = await self.run_in_executor(self.store.active_for_user, user)
        self.write_json({"bookings": [self.booking_model(b) for b in bookings]})


class MaintenanceListHandler(APIHandler):
    async def get(self) -> None:
        self.require_principal()
        pool = self.get_argument("pool", None) or None
        windows, next_cursor = await self.list_page(
            self.store.list_maintenance,
            pool=pool,
            start=self.time_argument("start"),
            end=self.time_argument("end"),
        )
        self.write_json(
            {"windows": [maintenance_json(w) for w in windows], "next_cursor": next_cursor}
        )

    async def post(self) -> None:
        principal = self.require_admin()
        body = self.json_body({"pool", "start", "end", "node", "reason"}, ("pool", "start", "end"))
        pool = self.pool_or_404(body["pool"]) if isinstance(body["pool"], str) else None
        if pool is None:
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        node = body.get("node")
        if node is not None and not isinstance(node, str):
            raise refusal(400, "'node' must be the name of one node of the pool, or null.")
        reason = checked_text(body.get("reason", ""), "reason")
        window, colliding = await self.run_in_executor(
            self.store.add_maintenance,
            pool.name,
            parse_time(body["start"], "start"),
            parse_time(body["end"], "end"),
            node=node,
            reason=reason,
            actor=principal.name,
            request_key=self.request_key(),
        )
        self.set_header("Location", self.service_url("api/maintenance", str(window.id)))
        model = maintenance_json(window)
        model["colliding_bookings"] = [self.booking_model(b) for b in colliding]
        self.write_json(model, status=201)


class MaintenanceHandler(APIHandler):
    async def delete(self, window_id: str) -> None:
        self.require_admin()
        try:
            if row_id(window_id) is None:
                raise NotFound("no such window")
            await self.run_in_executor(self.store.delete_maintenance, row_id(window_id))
        except NotFound:
            raise refusal(404, f"There is no maintenance window {window_id}.") from None
        await self.service.waitlist.capacity_freed()
        self.set_status(204)
        self.finish()


def api_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    """REST routes as OpenAPI path templates relative to the service prefix."""
    return [
        ("api/pools", PoolsHandler),
        ("api/pools/{pool}/availability", AvailabilityHandler),
        ("api/pools/{pool}/next-free", NextFreeHandler),
        ("api/pools/{pool}/claim", PoolClaimHandler),
        ("api/bookings", BookingsHandler),
        ("api/bookings/{booking_id}", BookingHandler),
        ("api/bookings/{booking_id}/extension", ExtensionHandler),
        ("api/bookings/{booking_id}/claim", ClaimHandler),
        ("api/bookings/{booking_id}/release", ReleaseHandler),
        ("api/users/{user}/bookings/active", ActiveBookingsHandler),
        ("api/maintenance", MaintenanceListHandler),
        ("api/maintenance/{window_id}", MaintenanceHandler),
    ]
