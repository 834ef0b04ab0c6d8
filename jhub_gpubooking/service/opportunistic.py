"""Opportunistic GPU use in the service: grants for the Hub's spawner, preemption on booking.

:class:`OpportunisticService` is mixed into ``GPUBookingService`` (options are
``c.GPUBookingService.*``). Every booking the API creates goes through
:meth:`OpportunisticService.create_booking`, which ends grants standing in a booking's way and
stops their servers through the Hub API; the user sees why in their notices.
"""

from __future__ import annotations

from typing import Any

from tornado import web
from traitlets import Bool, HasTraits, Integer, Unicode

from ..core.model import Booking, format_amount, parse_amount
from ..core.timegrid import format_time
from ..db.opportunistic import OpportunisticBookings
from .api import APIHandler
from .base import hub_user_model, refusal


class OpportunisticService(HasTraits):
    """Traits and actions of opportunistic GPU use."""

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

    @property
    def opportunistic(self) -> OpportunisticBookings:
        return OpportunisticBookings(self.store, self.lifecycle)

    async def create_booking(self, user: str, pool: str, gpus, start, end, **options) -> Booking:
        """Create a booking, preempting opportunistic grants that stand in its way."""
        booking, preempted = await self._in_executor(
            self.opportunistic.create_preempting, user, pool, gpus, start, end, **options
        )
        for grant in preempted:
            self.metrics.observe_release("preempted")
            self.log.info(
                "Preempted opportunistic grant %s of %s for booking %s",
                grant.id,
                grant.user,
                booking.id,
            )
            # a failed stop is retried by the lifecycle tick: the grant has ended
            if grant.server is not None and await self.stop_hub_server(grant.user, grant.server):
                await self._in_executor(self.lifecycle.mark_stop_requested, grant.id, grant.server)
        return booking

    async def hub_user_groups(self, user: str) -> tuple[str, ...]:
        """The user's Hub groups (group policies decide which pools they may use)."""
        model = await hub_user_model(self.hub_api_url, self.api_token, user)
        if model is None:
            raise refusal(404, f"The Hub has no user named {user!r}.")
        return tuple(model.get("groups") or ())


class OpportunisticHandler(APIHandler):
    """``GET``: what could be granted now, per pool; ``POST``: a grant for a user."""

    async def get(self) -> None:
        self.require_principal()
        service = self.service
        horizon = service.opportunistic_horizon_minutes
        amount = parse_amount(service.opportunistic_gpus)
        pools = []
        if service.opportunistic_enabled:
            for name in service.pool_objects:
                largest = await self.run_in_executor(
                    service.opportunistic.largest_grantable, name, horizon
                )
                pools.append({"pool": name, "available": largest >= amount})
        _, until = service.opportunistic.interval(horizon)
        self.write_json(
            {
                "enabled": service.opportunistic_enabled,
                "gpus": format_amount(amount),
                "until": format_time(until),
                "pools": pools,
            }
        )

    async def post(self) -> None:
        principal = self.require_principal()
        if not (principal.is_spawner or principal.is_admin):
            raise refusal(
                403, "Only the Hub's spawner or an administrator may ask for opportunistic GPUs."
            )
        service = self.service
        if not service.opportunistic_enabled:
            raise refusal(403, "GPUs cannot be used without a booking on this hub.")
        body = self.json_body({"user", "pool", "gpus"}, ("user", "pool"))
        user, pool = body["user"], body["pool"]
        if not isinstance(user, str) or not user:
            raise refusal(400, "'user' must be a Hub user name.")
        if not isinstance(pool, str):
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        self.pool_or_404(pool)
        gpus: Any = body.get("gpus", service.opportunistic_gpus)
        groups = await service.hub_user_groups(user)
        grant = await self.run_in_executor(
            service.opportunistic.grant,
            user,
            pool,
            parse_amount(gpus),
            service.opportunistic_horizon_minutes,
            groups=groups,
            actor=principal.name,
        )
        self.set_header("Location", self.service_url("api/bookings", str(grant.id)))
        self.write_json(self.booking_model(grant), status=201)


def opportunistic_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [("api/opportunistic", OpportunisticHandler)]
