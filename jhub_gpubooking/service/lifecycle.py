"""The booking lifecycle in the service: the periodic tick, Hub server stops, e-mail warnings.

:class:`LifecycleService` is mixed into ``GPUBookingService`` (its options are
``c.GPUBookingService.*`` traits). Every ``lifecycle_interval_seconds`` the service calls
:meth:`LifecycleService.lifecycle_tick` with the service clock's "now"; tests call it directly
with a ManualClock's time. The rules themselves live in :mod:`jhub_gpubooking.core.lifecycle`.
"""

from __future__ import annotations

import asyncio
import smtplib
from datetime import datetime, timedelta
from email.message import EmailMessage
from functools import partial

from jupyterhub.utils import url_escape_path, url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Bool, Float, HasTraits, Integer, Unicode

from ..admission.review import holder_pod
from ..core.lifecycle import Action, ActionKind, LifecycleRules
from ..core.model import Booking
from ..db.lifecycle import BookingLifecycle
from ..db.locks import DatabaseLock
from ..db.session import unavailable_reason

#: How long one call to the Hub API may take before the tick moves on (retried next tick).
HUB_STOP_TIMEOUT_SECONDS = 20


def _minutes_or_none(minutes: int) -> timedelta | None:
    return timedelta(minutes=minutes) if minutes > 0 else None


def warning_text(booking: Booking, page_url: str) -> str:
    """The body of the end-of-booking e-mail."""
    end = f"{booking.end:%Y-%m-%d %H:%M} UTC"
    return (
        f"Your GPU booking #{booking.id} ({booking.amount} GPU in pool {booking.pool}) ends at "
        f"{end}. Save your work: the server using it will be stopped then.\n\n"
        f"If the GPUs are still free you can extend the booking on {page_url}\n"
    )


class LifecycleService(HasTraits):
    """Traits and the periodic tick of the booking lifecycle."""

    lifecycle_interval_seconds = Float(
        30.0,
        help="Seconds between two lifecycle ticks (warnings, stops at the end, reclaims). "
        "0 turns the periodic tick off.",
    ).tag(config=True)
    stop_servers_at_end = Bool(
        True,
        help="Stop a server through the Hub API (DELETE users/{user}/servers/{name}; the "
        "service's token needs delete:servers) when its booking has ended plus "
        "end_grace_seconds. The pod deadline set by the spawner is the backstop.",
    ).tag(config=True)
    end_grace_seconds = Integer(
        60, help="Seconds a server may run past its booking's end before it is stopped."
    ).tag(config=True)
    warn_before_minutes = Integer(
        15,
        help="Minutes before a booking's end its user is warned (reservation page notice and, "
        "if smtp_host is set, an e-mail). 0 turns warnings off.",
    ).tag(config=True)
    no_show_minutes = Integer(
        30,
        help="A booking no server has used this many minutes after its start is released "
        "(no-show): its end moves to the next grid point. 0 turns this off.",
    ).tag(config=True)
    stopped_release_minutes = Integer(
        30,
        help="A booking whose server stopped and stayed stopped this many minutes gives the "
        "rest of its time back to the pool. 0 turns this off.",
    ).tag(config=True)
    smtp_host = Unicode(
        "", help="SMTP server for end-of-booking e-mails; empty sends no e-mail."
    ).tag(config=True)
    smtp_port = Integer(25, help="Port of the SMTP server (587 with STARTTLS, usually).").tag(
        config=True
    )
    smtp_starttls = Bool(False, help="Upgrade the SMTP connection with STARTTLS.").tag(config=True)
    smtp_username = Unicode("", help="SMTP login name (empty: no login).").tag(config=True)
    smtp_password = Unicode("", help="SMTP password for smtp_username.").tag(config=True)
    smtp_from = Unicode(
        "gpu-booking@localhost", help="Sender address of the e-mails the service sends."
    ).tag(config=True)
    email_address_template = Unicode(
        "",
        help="E-mail address of a Hub user, with {user} replaced by the user name, e.g. "
        "'{user}@example.org'. Empty sends no e-mail.",
    ).tag(config=True)

    _lifecycle_task: asyncio.Task | None = None

    def lifecycle_rules(self) -> LifecycleRules:
        return LifecycleRules(
            slot_minutes=self.slot_minutes,
            end_grace=timedelta(seconds=self.end_grace_seconds),
            warn_before=_minutes_or_none(self.warn_before_minutes),
            no_show_after=_minutes_or_none(self.no_show_minutes),
            stopped_release_after=_minutes_or_none(self.stopped_release_minutes),
        )

    def setup_lifecycle(self) -> None:
        self.lifecycle = BookingLifecycle(self.store, self.lifecycle_rules())
        # several service processes may share a PostgreSQL/MariaDB database: one ticks at a time
        self.lifecycle_lock = DatabaseLock(self.db_engine, "jhub_gpubooking.lifecycle")

    async def _in_executor(self, func, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, partial(func, *args, **kwargs))

    async def lifecycle_tick(self, now: datetime | None = None) -> list[Action]:
        """Do what the lifecycle rules ask for at ``now``; returns the actions attempted."""
        now = now or self.clock.now()
        actions = await self._in_executor(self.lifecycle.due, now)
        for action in actions:
            try:
                await self._apply(action, now)
            except Exception:
                # one bad booking must not stop the others; it is retried next tick
                self.log.exception(
                    "Lifecycle %s of booking %s failed", action.kind.value, action.booking_id
                )
        # bookings the admission webhook claimed for pods (admission/claims.py)
        await self.reconcile_pod_claims(now)
        return actions

    async def _apply(self, action: Action, now: datetime) -> None:
        if action.kind is ActionKind.RELEASE:
            released = await self._in_executor(self.lifecycle.release, action, now)
            if released is not None:
                self.metrics.observe_release(action.reason.value)
                self.log.info(
                    "Released booking %s of %s (%s); it now ends at %s",
                    released.id,
                    released.user,
                    action.reason.value,
                    released.end,
                )
        elif action.kind is ActionKind.WARN:
            booking = await self._in_executor(self.lifecycle.mark_warned, action.booking_id)
            self.metrics.observe_warning()
            await self.send_warning_email(booking)
        elif action.kind is ActionKind.STOP_SERVER and self.stop_servers_at_end:
            booking = await self._in_executor(self.store.get, action.booking_id)
            pods = self.pod_claims if holder_pod(booking.server) else None
            if await (pods.stop_pod(booking) if pods else
                      self.stop_hub_server(booking.user, booking.server)):
                await self._in_executor(
                    self.lifecycle.mark_stop_requested, booking.id, booking.server
                )
                self.metrics.observe_server_stop()

    async def stop_hub_server(self, user: str, server: str) -> bool:
        """Ask the Hub to stop ``user``'s ``server``; True once the Hub took it (or it is gone)."""
        url = url_path_join(self.hub_api_url, "users", url_escape_path(user), "servers")
        url += "/" + url_escape_path(server)
        try:
            await AsyncHTTPClient().fetch(
                url,
                method="DELETE",
                headers={"Authorization": f"token {self.api_token}"},
                request_timeout=HUB_STOP_TIMEOUT_SECONDS,
            )
        except HTTPClientError as error:
            if error.code in (400, 404):
                # no such user or server: nothing left to stop
                self.log.info("Hub has no server %r of %s to stop: %s", server, user, error)
                return True
            self.log.warning("Hub refused to stop server %r of %s: %s", server, user, error)
            return False
        except OSError as error:
            self.log.warning("Hub unreachable to stop server %r of %s: %s", server, user, error)
            return False
        self.log.info("Asked the Hub to stop server %r of %s: its booking ended", server, user)
        return True

    async def send_warning_email(self, booking: Booking) -> None:
        if not (self.smtp_host and self.email_address_template):
            return
        message = EmailMessage()
        message["From"] = self.smtp_from
        message["To"] = self.email_address_template.format(user=booking.user)
        message["Subject"] = f"Your GPU booking ends at {booking.end:%H:%M} UTC"
        page_url = (
            self.public_url.rstrip("/") + self.service_prefix
            if self.public_url
            else (self.service_prefix)
        )
        message.set_content(warning_text(booking, page_url))
        try:
            await self._in_executor(self._send_email, message)
        except (OSError, smtplib.SMTPException) as error:
            self.log.warning(
                "Could not e-mail %s about booking %s: %s", booking.user, booking.id, error
            )

    def _send_email(self, message: EmailMessage) -> None:
        with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=HUB_STOP_TIMEOUT_SECONDS) as smtp:
            if self.smtp_starttls:
                smtp.starttls()
            if self.smtp_username:
                smtp.login(self.smtp_username, self.smtp_password)
            smtp.send_message(message)

    def start_lifecycle(self) -> None:
        if self.lifecycle_interval_seconds > 0:
            self._lifecycle_task = asyncio.ensure_future(self._lifecycle_loop())

    def stop_lifecycle(self) -> None:
        if self._lifecycle_task is not None:
            self._lifecycle_task.cancel()

    async def run_lifecycle_tick(self) -> list[Action] | None:
        """One periodic tick, in one service process at a time across the database.

        Every process runs this loop; the one that holds the database lock does the tick, the
        others skip it (None). What a tick did is stored before the lock is released, so the
        next holder never warns, stops or releases the same booking again.
        """
        if not await self._in_executor(self.lifecycle_lock.acquire):
            self.log.debug("Another service process is running the lifecycle tick")
            return None
        try:
            return await self.lifecycle_tick()
        finally:
            await self._in_executor(self.lifecycle_lock.release)

    async def _lifecycle_loop(self) -> None:
        while True:
            try:
                await self.run_lifecycle_tick()
            except Exception as error:
                if unavailable_reason(error):
                    # an outage: one line a tick, not a traceback a second
                    self.log.warning(
                        "Lifecycle tick skipped, database unavailable: %s",
                        str(error).splitlines()[0],
                    )
                else:
                    self.log.exception("Lifecycle tick failed; trying again next interval")
            await asyncio.sleep(self.lifecycle_interval_seconds)
