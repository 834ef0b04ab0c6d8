"""Opportunistic GPU use (``c.Opportunistic``): grants for the Hub's spawner, preemption.

Every booking the API creates goes through :meth:`Opportunistic.create_booking`, which ends
grants standing in a booking's way and stops their servers through the Hub API (with the
lifecycle's stop); the user sees why in their notices. Its creates queue for the database
together (:mod:`.create_queue`).
"""

from __future__ import annotations

from typing import Any

from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Bool, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..core.model import Booking, format_amount, parse_amount
from ..core.timegrid import format_time
from ..db.opportunistic import OpportunisticBookings
from ..executor import in_executor
from .api import APIHandler
from .base import checked_user, refusal
from .create_queue import CreateQueue


class Opportunistic(LoggingConfigurable):
    """Options and actions of opportunistic GPU use (off by default)."""

    opportunistic_enabled = Bool(
        False,
        help="Let users without an active booking (or out of budget) start a GPU server on "
        "capacity nobody booked, until opportunistic_horizon_minutes from now. Such servers "
        "are stopped as soon as a booking needs their GPU.",
    ).tag(config=True)
    opportunistic_horizon_minutes = Integer(
        60,
        help="Minutes ahead an opportunistic grant covers; the GPUs must be unbooked for all "
        "of it. The server is stopped when the grant ends, like at the end of a booking.",
    ).tag(config=True)
    opportunistic_gpus = Unicode(
        "1",
        help="GPUs an opportunistic grant holds when the spawner does not ask for an amount "
        "(a number or a fraction such as '1/4').",
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore.")
    lifecycle = AnyTrait(help="The Lifecycle component: releases grants, stops their servers.")
    executor = AnyTrait(help="Executor for database work.")
    metrics = AnyTrait(help="The service's ServiceMetrics (preemptions).")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bookings = OpportunisticBookings(self.store, self.lifecycle.bookings)
        self.creates = CreateQueue(self.executor, self.store.create_all, self.store.search_longer)

    async def grant(
        self, user: str, pool: str, gpus: Any = None, *, groups: Any = (), actor: str | None = None,
        server: str | None = None,
    ) -> Booking:
        """A grant of ``gpus`` (default ``opportunistic_gpus``) for ``user`` in ``pool`` from now
        through the horizon, or the store's refusal (403 policy, 409 nothing free); with
        ``server``, claimed for that Hub server in the same transaction."""
        amount = parse_amount(self.opportunistic_gpus if gpus is None else gpus)
        return await in_executor(
            self.executor, self.bookings.grant, user, pool, amount,
            self.opportunistic_horizon_minutes, groups=groups, actor=actor, server=server,
        )

    async def create_booking(self, user: str, pool: str, gpus, start, end, **options) -> Booking:
        """Create a booking, preempting opportunistic grants that stand in its way; written
        with the creates that queued beside it (:class:`.create_queue.CreateQueue`)."""
        # checked here, without the database: a refusal of the request itself goes at once
        new = self.bookings.new_preempting(user, pool, gpus, start, end, **options)
        booking = await self.creates.create(new)
        preempted = list(new.freed)
        for grant in preempted:
            self.metrics.observe_release("preempted")
            self.log.info(
                "Preempted opportunistic grant %s of %s for booking %s",
                grant.id,
                grant.user,
                booking.id,
            )
            # a failed stop is retried by the lifecycle tick: the grant has ended. What holds it
            # may be a pod the admission webhook admitted: that pod is deleted, its claim kept
            # until the pod is gone (a Hub server check would expire the claim and let a second
            # pod onto the grant while the first still runs)
            if grant.server is not None:
                await self.lifecycle.stop_holder(grant)
        return booking


class OpportunisticHandler(APIHandler):
    """``GET``: what could be granted now, per pool; ``POST``: a grant for a user."""

    async def get(self) -> None:
        self.require_principal()
        service, opportunistic = self.service, self.service.opportunistic
        horizon = opportunistic.opportunistic_horizon_minutes
        amount = parse_amount(opportunistic.opportunistic_gpus)
        pools = []
        if opportunistic.opportunistic_enabled:
            for name in service.pool_objects:
                largest = await self.run_in_executor(
                    opportunistic.bookings.largest_grantable, name, horizon
                )
                pools.append({"pool": name, "available": largest >= amount})
        _, until = opportunistic.bookings.interval(horizon)
        self.write_json(
            {
                "enabled": opportunistic.opportunistic_enabled,
                "gpus": format_amount(amount),
                "until": format_time(until),
                "pools": pools,
            }
        )

    async def post(self) -> None:
        principal = self.require_spawner_or_admin("ask for opportunistic GPUs")
        service, opportunistic = self.service, self.service.opportunistic
        if not opportunistic.opportunistic_enabled:
            raise refusal(403, "GPUs cannot be used without a booking on this hub.")
        body = self.json_body({"user", "pool", "gpus"}, ("user", "pool"))
        user, pool = body["user"], body["pool"]
        checked_user(user)
        if not isinstance(pool, str):
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        self.pool_or_404(pool)
        groups = await service.hub_user_groups(user)
        grant = await opportunistic.grant(
            user, pool, body.get("gpus"), groups=groups, actor=principal.name
        )
        self.set_header("Location", self.service_url("api/bookings", str(grant.id)))
        self.write_json(self.booking_model(grant), status=201)


def opportunistic_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [("api/opportunistic", OpportunisticHandler)]
