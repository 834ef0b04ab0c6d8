"""REST handlers of the booking lifecycle: a user's notices, the admin usage report and the
admin view of who holds which GPU right now."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from datetime import datetime, timedelta

from tornado import web

from ..admission.review import holder_pod
from ..core.accounting import GROUPINGS, Report
from ..core.model import Booking, BookingState, MaintenanceWindow, format_amount
from ..core.placement import maintenance_collisions
from ..core.policy import ENDED_EARLY
from ..core.timegrid import ceil_to_grid, clock_text, floor_to_grid, format_time, span_text
from ..db.accounting import running_usage, usage_report
from ..db.endings import Ending, endings
from .api import APIHandler
from .base import refusal
from .flagged import flagged_notices
from .waitlist import recent_wait_notices

#: How long a released booking stays in its user's notices.
RELEASE_NOTICE_HOURS = 12
#: Longest period one report may cover.
MAX_REPORT_DAYS = 400

RELEASE_MESSAGES = {
    "no_show": "no server used it within {minutes} minutes of its start",
    "server_stopped": "its server stopped and stayed stopped for {minutes} minutes",
    "preempted": "a booking needed the GPU it was using",
}


def _held_by(holder: str, article: str = "its") -> str:
    """What held a booking, as a notice names it: its server, or a webhook's pod."""
    pod = holder_pod(holder)
    return f"{article} pod {pod[0]}/{pod[1]}" if pod else f"{article} server"


def ending_soon_message(booking: Booking) -> str:
    message = f"Your booking #{booking.id} in pool {booking.pool} ends at {clock_text(booking.end)}"
    if booking.server is None:  # nothing to stop: no word of a server
        return message + "."
    return f"{message}; save your work, {_held_by(booking.server, 'the')} will be stopped then."


def ended_message(booking: Booking, ending: Ending | None) -> str:
    """An early end, by its owner ("End now") or an administrator, and what it stopped (the
    holder at that moment, from the history; the booking's own when the history is not read)."""
    by_owner = ending is None or ending.by_owner
    holder = booking.server if ending is None else ending.holder
    who = "(End now)" if by_owner else "by an administrator"
    stopped = "" if holder is None else f"{_held_by(holder)} was stopped and "
    return (
        f"Your booking #{booking.id} in pool {booking.pool} was ended at {clock_text(booking.end)} "
        f"{who}; {stopped}the rest of its time is free for others."
    )


def notices_json(
    bookings: list[Booking],
    now: datetime,
    warn_before: timedelta | None,
    minutes: dict,
    pool_no_show_minutes: Mapping[str, int] | None = None,
    ended: Mapping[int, Ending] | None = None,
) -> list[dict]:
    """What the reservation page shows in its banner for these bookings of one user.

    ``minutes`` maps a release reason to the configured wait, for the explanation;
    ``pool_no_show_minutes`` the no-show wait of the pools that set their own; ``ended`` how
    the bookings ended early came to end (:func:`..db.endings.endings`).
    """
    pool_no_show_minutes = pool_no_show_minutes or {}
    ended = ended or {}
    notices = []
    for booking in bookings:
        state = booking.state(now)
        if (
            state is BookingState.ACTIVE
            and warn_before is not None
            and booking.end - now <= warn_before
        ):
            notices.append(
                {
                    "kind": "ending_soon",
                    "booking_id": booking.id,
                    "at": format_time(booking.end),
                    "message": ending_soon_message(booking),
                }
            )
        reason = booking.release_reason
        recent = booking.end > now - timedelta(hours=RELEASE_NOTICE_HOURS)
        if reason == ENDED_EARLY and recent:
            notices.append(
                {
                    "kind": "ended",
                    "booking_id": booking.id,
                    "at": format_time(booking.end),
                    "message": ended_message(booking, ended.get(booking.id)),
                }
            )
        elif reason and recent:
            wait = minutes.get(reason, 0)
            if reason == "no_show":
                wait = pool_no_show_minutes.get(booking.pool, wait)
            why = RELEASE_MESSAGES.get(reason, reason).format(minutes=wait)
            notices.append(
                {
                    "kind": "released",
                    "booking_id": booking.id,
                    "at": format_time(booking.end),
                    "message": f"Your booking #{booking.id} in pool {booking.pool} was released "
                    f"at {clock_text(booking.end)} because {why}.",
                }
            )
    return notices


def maintenance_notices(bookings: list[Booking], windows: list[MaintenanceWindow],
                        now: datetime) -> list[dict]:
    """One notice per booking of ``bookings`` not over yet and maintenance window it collides
    with (the rule the admin's answer lists it by): its user learns that an administrator
    blocked its GPUs before the booking is cancelled or its server finds them gone."""
    current = [booking for booking in bookings if booking.not_over(now)]
    return [
        {
            "kind": "maintenance",
            "booking_id": booking.id,
            "at": format_time(window.start),
            "message": f"{window.describe()}, which overlaps your booking #{booking.id} in pool "
            f"{booking.pool} ({span_text(booking.start, booking.end)}). An administrator may "
            "cancel it; change or cancel it yourself to book other times or GPUs.",
        }
        for window in windows if window.end > now
        for booking in maintenance_collisions(window, current)
    ]


def report_json(report: Report) -> dict:
    return {
        "start": format_time(report.start),
        "end": format_time(report.end),
        "by": report.by,
        "rows": [{"key": key, **totals.to_json()} for key, totals in report.rows.items()],
        "total": report.total.to_json(),
    }


def report_csv(report: Report) -> str:
    """The report's rows (and a final ``total`` row) as CSV with a header line."""
    model = report_json(report)
    rows = [*model["rows"], {"key": "total", **model["total"]}]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[report.by, *model["total"]], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({report.by: row["key"], **{k: v for k, v in row.items() if k != "key"}})
    return buffer.getvalue()


def holders_json(bookings: list[Booking], since: dict, now: datetime) -> list[dict]:
    """Who holds which GPU slice right now: one entry per active booking."""
    return [
        {
            "booking_id": booking.id,
            "user": booking.user,
            "pool": booking.pool,
            "gpus": format_amount(booking.amount),
            "node": booking.placement.node if booking.placement else None,
            "gpu_indices": list(booking.placement.gpus) if booking.placement else [],
            "server": booking.server,
            "server_since": format_time(since[booking.id].start) if booking.id in since else None,
            "start": format_time(booking.start),
            "end": format_time(booking.end),
            "opportunistic": booking.opportunistic,
        }
        for booking in bookings
        if booking.state(now) is BookingState.ACTIVE
    ]


class NoticesHandler(APIHandler):
    async def get(self, user: str) -> None:
        principal = self.require_principal()
        if not principal.may_act_for(user):
            raise refusal(403, "Only the user themself or an administrator may read these notices.")
        now = self.clock.now()
        service = self.service
        bookings = await self.run_in_executor(
            self.store.list, user=user, start=now - timedelta(hours=RELEASE_NOTICE_HOURS)
        )
        lifecycle = service.lifecycle
        rules = lifecycle.rules
        minutes = {
            "no_show": lifecycle.no_show_minutes,
            "server_stopped": lifecycle.stopped_release_minutes,
        }
        own = {
            pool.name: pool.no_show_minutes
            for pool in self.store.pools.values()
            if pool.no_show_minutes is not None
        }
        ended_ids = [b.id for b in bookings if b.release_reason == ENDED_EARLY]
        ended = await self.run_in_executor(endings, self.store, ended_ids)
        notices = notices_json(bookings, now, rules.warn_before, minutes, own, ended)
        current = [b for b in bookings if b.not_over(now)]
        flags = await self.run_in_executor(service.booking_flags.current, [b.id for b in current])
        notices += flagged_notices(bookings, flags, now)
        # maintenance_collisions matches each window's pool; no read when nothing is current
        windows = await self.run_in_executor(self.store.list_maintenance, None, now) if current else []
        notices += maintenance_notices(bookings, windows, now)
        notices += await recent_wait_notices(self, user, now - timedelta(hours=RELEASE_NOTICE_HOURS))
        if lifecycle.start_early_hours:
            # an admin reading another user's notices sees the offers by the default rules (no
            # Hub look-up per read); accepting checks the user's own
            groups = principal.groups if user == principal.name else ()
            offers = await self.run_in_executor(lifecycle.early_starts.offers, user, groups)
            notices += start_early_notices(offers)
        self.write_json({"notices": notices})


def start_early_notices(offers: list[tuple[Booking, datetime, datetime]]) -> list[dict]:
    """One notice per booking that could start now, with the times it would get."""
    return [
        {
            "kind": "start_early",
            "booking_id": booking.id,
            "at": format_time(start),
            "end": format_time(end),
            "message": f"GPUs are free now: your booking #{booking.id} in pool {booking.pool} "
            f"({span_text(booking.start, booking.end)}) can start at {clock_text(start)} and "
            f"end at {clock_text(end)} instead, keeping its length.",
        }
        for booking, start, end in offers
    ]


class StartEarlyHandler(APIHandler):
    """``POST``: move an upcoming booking to start now, keeping its length (its owner or an
    admin); the time it leaves goes to the waitlist at once."""

    async def post(self, booking_id: str) -> None:
        principal = self.require_principal()
        booking = await self.readable_booking(booking_id)
        if not principal.may_act_for(booking.user):
            raise refusal(403, "Only the booking's owner or an administrator may move it.")
        lifecycle = self.service.lifecycle
        if not lifecycle.start_early_hours:
            raise refusal(403, "This hub does not offer early starts.")
        groups = (principal.groups if booking.user == principal.name else
                  await self.service.hub_user_groups(booking.user))
        moved = await self.run_in_executor(
            lifecycle.early_starts.start_early, booking.id, principal.name, groups=groups,
            is_admin=principal.is_admin,
        )
        await self.service.waitlist.capacity_freed([moved.pool])
        self.write_json(self.booking_model(moved))


class ReportHandler(APIHandler):
    async def get(self) -> None:
        self.require_admin()
        slot = self.service.slot_minutes
        now = self.clock.now()
        end = ceil_to_grid(self.time_argument("end", now), slot)
        start = floor_to_grid(self.time_argument("start", end - timedelta(days=7)), slot)
        if end <= start:
            raise refusal(400, "'end' must be after 'start'.")
        if end - start > timedelta(days=MAX_REPORT_DAYS):
            raise refusal(400, f"A report may cover at most {MAX_REPORT_DAYS} days.")
        by = self.get_argument("by", "user")
        if by not in GROUPINGS:
            raise refusal(400, f"'by' must be one of: {', '.join(GROUPINGS)}.")
        output = self.get_argument("format", "json")
        if output not in ("json", "csv"):
            raise refusal(400, "'format' must be json or csv.")
        report = await self.run_in_executor(usage_report, self.store, start, end, by)
        if output == "json":
            self.write_json(report_json(report))
            return
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        filename = f"gpu-usage-{start:%Y%m%d}-{end:%Y%m%d}-by-{by}.csv"
        self.set_header("Content-Disposition", f'attachment; filename="{filename}"')
        self.finish(report_csv(report))


class HoldersHandler(APIHandler):
    async def get(self) -> None:
        self.require_admin()
        now = self.clock.now()
        bookings = await self.run_in_executor(self.store.list, state=BookingState.ACTIVE)
        since = await self.run_in_executor(running_usage, self.store)
        holders = holders_json(bookings, since, now)
        # GPU utilisation from Prometheus when configured (service/monitoring.py)
        monitoring = await self.service.monitoring.add_gpu_utilisation(holders)
        self.write_json({"holders": holders, "monitoring": monitoring})


def lifecycle_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [
        ("api/users/{user}/notices", NoticesHandler),
        ("api/bookings/{booking_id}/start-early", StartEarlyHandler),
        ("api/admin/report", ReportHandler),
        ("api/admin/holders", HoldersHandler),
    ]
