"""GPU-hour budgets (``c.Budgets``) and recurring series (``c.RecurringSeries``) in the
service: their options, REST handlers and routes.

The rules live in :mod:`jhub_gpubooking.core.budgets` / :mod:`~.core.recurrence`, the
transactions in :mod:`jhub_gpubooking.db.budgets` / :mod:`~.db.series`.
"""

from __future__ import annotations

from tornado import web
from traitlets import Dict, Integer, List, Unicode, validate
from traitlets.config import LoggingConfigurable

from ..core.budgets import CHARGE_MODES, parse_group_budgets
from ..core.errors import NotFound
from ..core.model import checked_text, parse_amount
from ..core.recurrence import REPEATS, occurrences
from ..core.timegrid import parse_time
from ..db.budgets import BudgetBook, budgets_of_user
from ..db.series import SeriesRefused, cancel_series, create_series, get_series
from .api import APIHandler, row_id
from .base import checked_user, refusal


class Budgets(LoggingConfigurable):
    """GPU-hour budgets per Hub group, and what budgets are charged."""

    group_budgets = Dict(
        help="GPU-hour budgets shared by all members of a Hub group, e.g. "
        "{'course-x': {'gpu_hours': 100, 'period': 'week'}} (period: week, refilled Monday "
        "00:00 UTC, or month, refilled on the 1st). A booking is charged to every budgeted "
        "group its user is in, in the period it starts in. Administrators are exempt."
    ).tag(config=True)
    budget_charge = Unicode(
        "booked",
        help="What budgets (per user and per group) are charged: 'booked' = GPUs x booked "
        "hours; 'used' = GPU-hours a server actually ran plus the booked hours still ahead, "
        "so booked time nobody used is refunded once it has passed.",
    ).tag(config=True)

    @validate("budget_charge")
    def _known_charge_mode(self, proposal) -> str:
        if proposal["value"] not in CHARGE_MODES:
            raise ValueError(f"budget_charge must be one of {', '.join(CHARGE_MODES)}.")
        return proposal["value"]

    @validate("group_budgets")
    def _valid_group_budgets(self, proposal) -> dict:
        parse_group_budgets(proposal["value"])  # refuses bad entries at start
        return proposal["value"]

    def budget_book(self) -> BudgetBook:
        return BudgetBook(parse_group_budgets(self.group_budgets), self.budget_charge)


class RecurringSeries(LoggingConfigurable):
    """Who may book recurring series (weekly labs), and how long one may be."""

    series_max_occurrences = Integer(
        26,
        help="Most occurrences one recurring series may have (26 = half a year of weekly "
        "labs); longer series are refused, not cut short.",
    ).tag(config=True)
    series_groups = List(
        Unicode(),
        help="Hub groups whose members may book recurring series (administrators always may). "
        "Empty: every user may.",
    ).tag(config=True)


def series_model(handler: APIHandler, series) -> dict:
    return {
        "id": series.id,
        "user": series.user,
        "pool": series.pool,
        "repeat": series.repeat,
        "note": series.note,
        "bookings": [handler.booking_model(b) for b in series.bookings],
    }


class BudgetHandler(APIHandler):
    async def get(self, user: str) -> None:
        principal = self.require_principal()
        if not principal.may_act_for(user):
            raise refusal(403, "Only the user themself or an administrator may see this budget.")
        if principal.is_user and principal.name == user:
            groups = principal.groups
        else:
            groups = await self.hub_groups(user)
        statuses = await self.run_in_executor(budgets_of_user, self.store, user, groups)
        self.write_json(
            {
                "user": user,
                "charge": self.service.budgets.budget_charge,
                "budgets": [status.to_json() for status in statuses],
            }
        )

    async def hub_groups(self, user: str) -> tuple[str, ...]:
        """The groups the Hub knows ``user`` in (the service token needs read:users:groups)."""
        return await self.service.hub_user_groups(user)


class SeriesListHandler(APIHandler):
    async def post(self) -> None:
        principal = self.require_principal()
        body = self.json_body(
            {"pool", "gpus", "start", "end", "repeat", "until", "count", "note", "user",
             "time_zone"},
            ("pool", "gpus", "start", "end", "repeat"),
        )
        user = checked_user(body.get("user", principal.name if principal.is_user else None))
        if not principal.may_act_for(user):
            raise refusal(403, "Only booking administrators may book for another user.")
        allowed = self.service.series.series_groups
        if allowed and not principal.is_admin and not set(principal.groups) & set(allowed):
            raise refusal(
                403,
                f"Only members of {', '.join(sorted(allowed))} or administrators may book "
                "recurring series.",
            )
        note = checked_text(body.get("note", ""), "note")
        if not isinstance(body["pool"], str):
            raise refusal(400, "'pool' must be the name of a GPU pool.")
        self.pool_or_404(body["pool"])
        if user != principal.name:
            await self.service.lifecycle.removed_users.refuse_unknown(user)
        if body["repeat"] not in REPEATS:
            raise refusal(400, f"'repeat' must be one of: {', '.join(REPEATS)}.")
        count = body.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise refusal(400, "'count' must be a whole number of occurrences.")
        until = body.get("until")
        if until is not None and not isinstance(until, str):
            raise refusal(400, "'until' must be a date-time.")
        time_zone = body.get("time_zone", "UTC")
        if not isinstance(time_zone, str):
            raise refusal(400, "'time_zone' must be a time zone name such as Europe/Berlin.")
        schedule = occurrences(
            parse_time(body["start"], "start"),
            parse_time(body["end"], "end"),
            body["repeat"],
            until=parse_time(until, "until") if until is not None else None,
            count=count,
            max_occurrences=self.service.series.series_max_occurrences,
            time_zone=time_zone,
        )
        try:
            series = await self.run_in_executor(
                create_series,
                self.store,
                user,
                body["pool"],
                parse_amount(body["gpus"]),
                schedule,
                body["repeat"],
                note=note,
                # groups are only known for the caller; an admin booking for others is exempt
                groups=principal.groups if user == principal.name else (),
                is_admin=principal.is_admin,
                actor=principal.name,
                request_key=self.request_key(),
            )
        except SeriesRefused as refused:
            self.write_json(
                {
                    "status": refused.status,
                    "message": refused.message,
                    "occurrences": [r.to_json() for r in refused.refusals],
                },
                status=refused.status,
            )
            return
        self.set_header("Location", self.service_url("api/series", str(series.id)))
        self.write_json(series_model(self, series), status=201)


class SeriesHandler(APIHandler):
    async def readable_series(self, series_id: str):
        """The series if the caller may see it; 404 otherwise (others' series stay hidden)."""
        principal = self.require_principal()
        series = None
        if row_id(series_id) is not None:
            try:
                series = await self.run_in_executor(get_series, self.store, row_id(series_id))
            except NotFound:
                pass
        if series is None or not principal.may_act_for(series.user):
            raise refusal(404, f"There is no booking series {series_id} you can see.")
        return series

    async def get(self, series_id: str) -> None:
        self.write_json(series_model(self, await self.readable_series(series_id)))

    async def delete(self, series_id: str) -> None:
        principal = self.require_principal()
        series = await self.readable_series(series_id)
        cancelled = await self.run_in_executor(
            cancel_series, self.store, series.id, actor=principal.name
        )
        await self.service.waitlist.capacity_freed([cancelled.pool])
        self.write_json(series_model(self, cancelled))


def planning_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    """REST routes as OpenAPI path templates relative to the service prefix."""
    return [
        ("api/users/{user}/budget", BudgetHandler),
        ("api/series", SeriesListHandler),
        ("api/series/{series_id}", SeriesHandler),
    ]
