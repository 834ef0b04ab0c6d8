"""The booking lifecycle component (``c.Lifecycle``): the periodic tick, Hub server stops.

Every ``lifecycle_interval_seconds`` the service calls :meth:`Lifecycle.tick` with the service
clock's "now"; tests call it directly with a ManualClock's time. The rules themselves live in
:mod:`jhub_gpubooking.core.lifecycle`, the e-mails in :mod:`.email`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from tornado import web
from traitlets import Any, Bool, Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..admission.review import POD_HOLDER_PREFIX, holder_pod
from ..core.lifecycle import (
    Action,
    ActionKind,
    LifecycleRules,
    ServerUse,
    minutes_or_none,
    server_use,
)
from ..core.model import Booking, BookingState
from ..db.lifecycle import BookingLifecycle
from ..db.locks import DatabaseLock
from ..db.session import unavailable_reason
from ..db.start_early import EarlyStarts
from ..executor import in_executor
from .base import hub_user_model
from .hub_servers import stop_hub_server, user_servers

#: How long a claim made just after the service started waits for the first tick's checks of
#: the running servers and admitted pods (:meth:`Lifecycle.after_first_check`).
FIRST_CHECK_WAIT_SECONDS = 30.0


class Lifecycle(LoggingConfigurable):
    """Warnings before the end, stops at the end, no-show and stopped-server releases."""

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
        60,
        min=0,
        help="Seconds anything running on a booking may outlive the booking's end, the one "
        "grace of the service: a Hub server is stopped at the end plus this (with "
        "stop_servers_at_end), and a pod the admission webhook admitted gets "
        "activeDeadlineSeconds at the end plus this and is deleted then. Replaces "
        "webhook_deadline_grace_seconds.",
    ).tag(config=True)
    warn_before_minutes = Integer(
        15,
        help="Minutes before a booking's end its user is warned (reservation page notice and, "
        "if EmailWarnings.smtp_host is set, an e-mail). 0 turns warnings off.",
    ).tag(config=True)
    no_show_minutes = Integer(
        15,
        min=0,
        help="A booking no server has used this many minutes after its start is released "
        "(no-show): its end moves to the next grid point. For a booking made or changed after "
        "its start (a 'book now' in the running slot, an early start, an extension) the minutes "
        "count from that moment. 0 turns this off. This is the "
        "default for pools without their own 'no_show_minutes' key (a pool's key wins; the "
        "default was 30 before per-pool times).",
    ).tag(config=True)
    stopped_release_minutes = Integer(
        30,
        help="A booking whose server stopped and stayed stopped this many minutes gives the "
        "rest of its time back to the pool. 0 turns this off.",
    ).tag(config=True)

    start_early_hours = Integer(
        8,
        min=0,
        help="Offer the user of a booking starting within this many hours to start it now "
        "(same length, so it ends earlier) whenever the GPUs it needs are free from now: after "
        "a no-show release, an early stop, a cancel. The offer is a notice on the reservation "
        "page with a one-click 'Start now' (POST api/bookings/{id}/start-early) and, with "
        "EmailWarnings configured, one e-mail per booking from the next tick; the time the "
        "booking leaves is free for others at once. 0 turns the offers off.",
    ).tag(config=True)

    store = Any(help="The service's BookingStore.")
    db_engine = Any(help="The service's engine: a database lock lets one process tick at a time.")
    executor = Any(help="Executor for database work, so the event loop never waits on it.")
    clock = Any(help="Source of the current time.")
    metrics = Any(help="The service's ServiceMetrics (releases, warnings, stops).")
    emails = Any(help="EmailWarnings sending the end-of-booking warning and start-early offers.")
    waitlist = Any(
        None,
        help="The Waitlist: each tick, after its releases, books waiting requests capacity now "
        "fits and expires past ones. Set by the service after this component.",
    )
    webhook = Any(
        None,
        help="The AdmissionWebhook: after the HubServers check (at the first tick after a "
        "start, also before it: it releases the claims of pods that are gone) checks the pods "
        "it admitted against their bookings, and after the stop rule deletes pods whose "
        "booking is over. Set by the service after this component (the webhook takes "
        "end_grace_seconds from it).",
    )
    orphan_pods = Any(
        None,
        help="The OrphanPods sweep, after the HubServers check: deletes the pods of Hub "
        "servers the Hub forgot (a start pending while it restarted), and Hub servers' pods "
        "that outlive their booking. Set by the service after this component.",
    )
    hub_servers = Any(
        None,
        help="The HubServers check: stops Hub servers running without a booking of theirs and "
        "records lost claims, early in the tick (before the no-show rule). Set by the service.",
    )
    removed_users = Any(
        None,
        help="The RemovedUsers check: frees what users deleted from the Hub left, before the "
        "waitlist is served. Set by the service after this component.",
    )
    slot_minutes = Integer(15, help="The service's booking grid (releases end on it).")
    hub_api_url = Unicode(help="The Hub's REST API URL.")
    api_token = Unicode(help="The service's Hub API token (needs delete:servers to stop).")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.bookings = BookingLifecycle(self.store, self.rules)
        # several service processes may share a PostgreSQL/MariaDB database: one ticks at a time
        self.lock = DatabaseLock(self.db_engine, "jhub_gpubooking.lifecycle")
        self._task: asyncio.Task | None = None
        # unset from start() until the first tick has compared the running servers and pods
        # with the database (see after_first_check); None: no periodic tick, nothing to wait for
        self._first_check: asyncio.Event | None = None
        # when start() ran: pod claims older than this process name pods stored long since
        self._started_at: datetime | None = None

    @property
    def early_starts(self) -> EarlyStarts:
        """Start-early offers and their acceptance, with ``start_early_hours``."""
        return EarlyStarts(self.store, timedelta(hours=self.start_early_hours))

    @property
    def rules(self) -> LifecycleRules:
        return LifecycleRules(
            slot_minutes=self.slot_minutes,
            end_grace=timedelta(seconds=self.end_grace_seconds),
            warn_before=minutes_or_none(self.warn_before_minutes),
            no_show_after=minutes_or_none(self.no_show_minutes),
            stopped_release_after=minutes_or_none(self.stopped_release_minutes),
        )

    async def tick(self, now: datetime | None = None) -> list[Action]:
        """Do what the lifecycle rules ask for at ``now``; returns the actions attempted."""
        now = now or self.clock.now()
        if (self.webhook is not None and self.hub_servers is not None
                and not self.hub_servers.compared):
            # until the Hub check has run once since the start (so after a restore), the claims
            # of pods that are gone are released before it: a restore may give a booking back
            # held by a pod that ended since while a Hub server runs on it, and the check would
            # stop that server for a booking "in use by a pod". Later the state cannot arise (a
            # server cannot claim a booking a pod holds). Pods whose booking is over are ended
            # at the end of the tick, after the stop rule asked them to go.
            await self.webhook.reconcile_pod_claims(now, delete_pods=False,
                                                    settled_before=self._started_at)
        if self.hub_servers is not None:
            await self.hub_servers.check(now)
        # pods of servers the Hub forgot before claims are taken (one may run on a booking a
        # restore gave back unclaimed), and pods of bookings over for longer than its stop takes
        if self.orphan_pods is not None:
            await self.orphan_pods.sweep(now)
        # claims of servers that stopped, before the admitted pods are looked at: a restore may
        # give a pod's booking back held by a server that has stopped since, and the pod's
        # claim is recorded only on a booking nobody holds (else the claims wait no longer
        # once the first check is done, and the webhook could admit a second pod on it)
        await self.expire_stale_claims(now)
        # pods the webhook admitted, from the cluster's side, before the no-show rule too
        if self.webhook is not None:
            await self.webhook.check_admitted_pods(now)
        if self._checks_compared():
            self._first_check_done()
        actions = await in_executor(self.executor, self.bookings.due, now)
        for action in actions:
            try:
                await self._apply(action, now)
            except Exception:
                # one bad booking must not stop the others; it is retried next tick
                self.log.exception(
                    "Lifecycle %s of booking %s failed", action.kind.value, action.booking_id
                )
        # bookings the admission webhook claimed for pods (admission/claims.py)
        if self.webhook is not None:
            await self.webhook.reconcile_pod_claims(now)
        if self.removed_users is not None:
            await self.removed_users.check(now)
        if self.waitlist is not None:
            await self.waitlist.capacity_freed(now=now, search_longer=True)
        await self.email_start_early_offers()
        return actions

    async def email_start_early_offers(self) -> None:
        """E-mail each user whose booking could start now, once per booking (the page shows the
        offer whenever it holds). The last step of a tick: the waitlist has the first claim on
        freed time, and a database outage here ends only this step (the loop logs it)."""
        if not (self.start_early_hours and self.emails.enabled):
            return
        early = self.early_starts
        candidates = await in_executor(self.executor, early.not_yet_emailed)
        for user, booking_ids in candidates.items():
            # the user's rules depend on their groups; a booking they refuse is looked at
            # again next tick (one Hub call per such user), as the rules may allow it later
            try:
                model = await hub_user_model(self.hub_api_url, self.api_token, user)
            except web.HTTPError as error:
                self.log.warning("Start-early offers not e-mailed: %s", error)
                return
            if model is None:
                continue  # no longer a Hub user
            offers = await in_executor(self.executor, early.offers, user, model.get("groups") or ())
            for booking, start, end in offers:
                if booking.id in booking_ids:
                    await in_executor(self.executor, early.record_emailed, booking.id, start, end)
                    await self.emails.send_start_early_offer(booking, start, end)

    async def _apply(self, action: Action, now: datetime) -> None:
        if action.kind is ActionKind.RELEASE:
            released = await in_executor(self.executor, self.bookings.release, action, now)
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
            booking = await in_executor(self.executor, self.bookings.mark_warned, action.booking_id)
            self.metrics.observe_warning()
            await self.emails.send_warning(booking)
        elif action.kind is ActionKind.STOP_SERVER and self.stop_servers_at_end:
            # read again: the user may have extended the booking since the tick listed it
            booking = await in_executor(self.executor, self.bookings.still_to_stop,
                                        action.booking_id, now)
            if booking is not None:
                await self.stop_holder(booking, now)

    async def stop_holder(self, booking: Booking, now: datetime | None = None) -> None:
        """Stop what holds ``booking``: the webhook's pod, or the Hub server (only when the Hub
        says it runs on this booking, see :meth:`stop_booking_server`)."""
        if not holder_pod(booking.server):
            await self.stop_booking_server(booking, now)
        elif await self.webhook.pod_claims.stop_pod(booking):
            await in_executor(self.executor, self.bookings.mark_stop_requested, booking.id, booking.server)
            self.metrics.observe_server_stop()

    async def stop_ended_booking_server(self, booking: Booking) -> None:
        """"End now": stop the server of a booking that was just ended, at once (not after
        end_grace_seconds); the user's notices say why. A failed stop is retried by the tick."""
        ended = booking.state(self.clock.now()) is BookingState.ENDED
        if ended and booking.server is not None and self.stop_servers_at_end:
            await self.stop_holder(booking)

    async def hub_user_servers(self, user: str) -> dict | None:
        """``user``'s active servers as the Hub reports them (:func:`.hub_servers.user_servers`)."""
        return await user_servers(self.hub_api_url, self.api_token, user)

    async def stop_booking_server(self, booking: Booking, now: datetime | None = None) -> bool:
        """Stop the Hub server holding ``booking`` only if the Hub says it runs on this booking,
        or that its start, still pending, claimed this booking (the Hub interrupts the start:
        it must not come up on an ended booking).

        A claim whose server stopped, or runs without this booking (another booking, a CPU
        profile), expires instead: that server is not stopped. A server stopping, a start not
        known to be on this booking, or a Hub that cannot say, is looked at again next tick.
        True once the Hub took a stop.
        """
        checked_at = now or self.clock.now()
        servers = await self.hub_user_servers(booking.user)
        use = server_use(servers, booking.server, booking.id)
        if use.on_booking:
            if not await stop_hub_server(self.hub_api_url, self.api_token, booking.user,
                                         booking.server, "its booking ended"):
                return False
            await in_executor(self.executor, self.bookings.mark_stop_requested, booking.id, booking.server)
            self.metrics.observe_server_stop()
            return True
        if use is ServerUse.NOT_ON_BOOKING:
            await self._expire_claim(booking, checked_at)
        elif use is ServerUse.UNKNOWN:
            self.log.warning(
                "Not stopping server %r of %s: the Hub does not say whether it runs on booking "
                "%s (the service's role needs read:servers and admin:server_state)",
                booking.server, booking.user, booking.id,
            )
        return False

    async def expire_stale_claims(self, now: datetime | None = None) -> None:
        """Expire claims of Hub servers that stopped or run without their booking (a failed
        release, a claim that completed after its start gave up, a pod gone without stop()).
        The webhook's ``pod:`` claims are its own (admission/claims.py)."""
        held = await in_executor(self.executor, self.store.held_except_prefix, POD_HOLDER_PREFIX)
        by_user: dict[str, list[Booking]] = {}
        for booking, _claimed_at in held:
            by_user.setdefault(booking.user, []).append(booking)
        for user, bookings in by_user.items():
            checked_at = now or self.clock.now()
            servers = await self.hub_user_servers(user)
            for booking in bookings:
                if server_use(servers, booking.server, booking.id) is ServerUse.NOT_ON_BOOKING:
                    await self._expire_claim(booking, checked_at)

    async def _expire_claim(self, booking: Booking, checked_at: datetime) -> None:
        expired = await in_executor(self.executor,
            self.store.expire_claim, booking.id, booking.server, checked_at
        )
        if expired is not None:
            self.log.info(
                "Claim of booking %s by server %r of %s expired: the Hub reports that server "
                "stopped or running without this booking", booking.id, booking.server,
                booking.user,
            )

    def start(self) -> None:
        self._started_at = self.clock.now()
        if self.lifecycle_interval_seconds > 0:
            self._first_check = asyncio.Event()
            self._task = asyncio.ensure_future(self._loop())

    async def after_first_check(self, timeout: float = FIRST_CHECK_WAIT_SECONDS) -> bool:
        """Wait, up to ``timeout`` seconds, until the first tick since the service started
        has compared the Hub's running servers (and the pods of those it forgot) and the
        admitted pods with the database; True
        once it has (or there is no periodic tick), False if it is still running.

        Claims wait for it: after a restore of the booking database, a booking a server or pod
        still runs on is back unclaimed until that check records its claim (or deletes the
        pod of a start the Hub forgot), and in the meantime another server or pod could claim
        it too and run a second time on its GPUs.
        """
        if self._first_check is None or self._first_check.is_set():
            return True
        try:
            await asyncio.wait_for(self._first_check.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def _checks_compared(self) -> bool:
        """Whether the Hub's servers, the pods of Hub servers and the admitted pods have been
        compared with the database and the Hub since this process started (a check that could
        not reach the Hub or the cluster has not: a claim meanwhile could take a booking one of
        them runs on)."""
        return ((self.hub_servers is None or self.hub_servers.compared)
                and (self.orphan_pods is None or self.orphan_pods.compared)
                and (self.webhook is None or self.webhook.pods_compared))

    def _give_up_first_check(self) -> None:
        if self._first_check is not None and not self._first_check.is_set():
            self.log.warning("Claims no longer wait for the first comparison of the running "
                             "servers and pods with the database, which has not succeeded "
                             "yet; the next one puts right what a claim gets wrong")
            self._first_check.set()

    def _first_check_done(self) -> None:
        if self._first_check is not None:
            self._first_check.set()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def run_tick(self) -> list[Action] | None:
        """One periodic tick, in one service process at a time across the database.

        Every process runs this loop; the one that holds the database lock does the tick, the
        others skip it (None). What a tick did is stored before the lock is released, so the
        next holder never warns, stops or releases the same booking again.
        """
        if not await in_executor(self.executor, self.lock.acquire):
            self.log.debug("Another service process is running the lifecycle tick")
            return None
        try:
            return await self.tick()
        finally:
            await in_executor(self.executor, self.lock.release)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        wait_until = loop.time() + FIRST_CHECK_WAIT_SECONDS
        while True:
            ticked = True
            try:
                ticked = await self.run_tick() is not None
            except Exception as error:
                if unavailable_reason(error):
                    # an outage: one line a tick, not a traceback a second
                    self.log.warning(
                        "Lifecycle tick skipped, database unavailable: %s",
                        str(error).splitlines()[0],
                    )
                else:
                    self.log.exception("Lifecycle tick failed; trying again next interval")
            # a skipped tick: the process holding the lock checks. A failed one (the database
            # down, the Hub or the cluster unreachable) holds claims no longer than
            # FIRST_CHECK_WAIT_SECONDS, so a lasting failure cannot hold them all for good
            if not ticked:
                self._first_check_done()
            elif loop.time() >= wait_until:
                self._give_up_first_check()
            await asyncio.sleep(self.lifecycle_interval_seconds)
