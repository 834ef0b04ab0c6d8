"""The ``c.HubServers`` check: the Hub's running servers against the bookings they run on.

Every few minutes, and at the service's first lifecycle tick (so right after a restore of the
booking database, which runs with the hub stopped), the service lists the Hub's active servers
and compares each one's booking with the database (the rule: :mod:`..core.hub_servers`). A
server on a booking the database lacks, or cannot give it, is stopped through the Hub; a server
on its own active booking with no claim gets its claim recorded again. It runs early in the
tick, so the claim is back before the no-show rule looks at the booking (at the first tick after
a start, after the release of the claims of pods that are gone: a booking a restore gave back
held by such a pod is the server's, not "in use" by the pod).

Also :func:`stop_hub_server`, the one way the service stops a Hub server.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from jupyterhub.utils import url_escape_path, url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Any as AnyTrait
from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..admission.review import holder_pod
from ..core.errors import Conflict
from ..core.hub_servers import Finding, RunningServer, compare, running_servers
from ..executor import in_executor
from .base import hub_user_model

log = logging.getLogger(__name__)

HUB_STOP_TIMEOUT_SECONDS = 20
HUB_LIST_TIMEOUT_SECONDS = 30
#: The Hub's answer as pages (``items`` and ``_pagination``) instead of one truncated list.
PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"


async def stop_hub_server(api_url: str, token: str, user: str, server: str, why: str) -> bool:
    """Ask the Hub to stop ``user``'s ``server`` (``why`` goes in the log); True once the Hub
    took it (or it is gone)."""
    url = url_path_join(api_url, "users", url_escape_path(user), "servers")
    url += "/" + url_escape_path(server)
    try:
        await AsyncHTTPClient().fetch(
            url, method="DELETE", headers={"Authorization": f"token {token}"},
            request_timeout=HUB_STOP_TIMEOUT_SECONDS,
        )
    except HTTPClientError as error:
        if error.code in (400, 404):
            # no such user or server: nothing left to stop
            log.info("Hub has no server %r of %s to stop: %s", server, user, error)
            return True
        log.warning("Hub refused to stop server %r of %s: %s", server, user, error)
        return False
    except OSError as error:
        log.warning("Hub unreachable to stop server %r of %s: %s", server, user, error)
        return False
    log.info("Asked the Hub to stop server %r of %s: %s", server, user, why)
    return True


async def user_servers(api_url: str, token: str, user: str) -> dict | None:
    """``user``'s active servers as the Hub reports them ({} when the Hub has no such user).

    None when the Hub cannot say: unreachable, or an answer without ``servers`` (the Hub
    omits them when the token lacks read:servers). Missing means unknown, never stopped.
    """
    try:
        model = await hub_user_model(api_url, token, user)
    except web.HTTPError as error:
        log.warning("The Hub did not show the servers of %s: %s", user, error)
        return None
    if model is None:
        return {}
    servers = model.get("servers")
    return servers if isinstance(servers, dict) else None


async def active_servers(api_url: str, token: str) -> dict[str, dict[str, Any]]:
    """``{user: their servers}`` of every Hub user with an active server, page by page.

    Raises OSError, HTTPClientError or ValueError when the Hub cannot answer."""
    found: dict[str, dict[str, Any]] = {}
    offset = 0
    while True:
        url = url_path_join(api_url, "users") + f"?state=active&sort=id&offset={offset}"
        response = await AsyncHTTPClient().fetch(
            url, headers={"Authorization": f"token {token}", "Accept": PAGINATION_MEDIA_TYPE},
            request_timeout=HUB_LIST_TIMEOUT_SECONDS,
        )
        page = json.loads(response.body)
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise ValueError("the Hub's user list is not a page of users")
        for model in page["items"]:
            servers = model.get("servers")
            # no servers in the answer: the token lacks read:servers, and missing is unknown
            if not isinstance(servers, dict):
                raise ValueError("the Hub's user list shows no servers (scope read:servers)")
            found[model["name"]] = servers
        offset += len(page["items"])
        if not page["items"] or not (page.get("_pagination") or {}).get("next"):
            return found


class HubServers(LoggingConfigurable):
    """Stops Hub servers running without a booking of theirs; records lost claims again."""

    check_interval_minutes = Float(
        5.0, min=0,
        help="Minutes between two comparisons of the Hub's running servers with the bookings "
        "they run on (one GET users?state=active a round, page by page). The first round is "
        "the service's first lifecycle tick, so a restore of the booking database is put "
        "right as soon as the hub runs again. A server on a booking the database does not "
        "have, another user's, one cancelled, ended (past Lifecycle.end_grace_seconds) or not "
        "started yet, one placed elsewhere than the server's pod was made for, or one another "
        "server or pod uses, is stopped (see stop_servers); a "
        "server on its own active booking that has no claim, or whose holder stopped, gets "
        "its claim recorded again, so the booking is neither released as a no-show nor left "
        "running past its end. A server the Hub is still checking after its own restart is "
        "stopped only once it runs, but gets its claim recorded meanwhile, also on a booking "
        "placed elsewhere, so no other start takes the booking its pod runs on. 0 turns the "
        "check off.",
    ).tag(config=True)
    stop_servers = Bool(
        True,
        help="Stop the servers the check finds without a booking they may use. False only "
        "logs them and counts them (gpubooking_hub_server_mismatches_total), e.g. while you "
        "find out why the booking database lacks their bookings; lost claims are recorded "
        "again either way.",
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore.")
    executor = AnyTrait(help="Executor for database work.")
    hub_api_url = Unicode(help="The Hub's REST API URL.")
    api_token = Unicode(help="The service's Hub API token (list:users, read:servers, "
                        "admin:server_state, delete:servers).")
    metrics = AnyTrait(None, help="The service's ServiceMetrics.")
    grace_seconds = Integer(0, help="Lifecycle.end_grace_seconds.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_round: datetime | None = None
        self._hub_failure_logged = False

    @property
    def compared(self) -> bool:
        """Whether a round has compared the Hub's servers with the database since this process
        started (True when the check is off): until then a restored booking a server runs on
        may look unclaimed."""
        return not self.check_interval_minutes or self._last_round is not None

    async def active(self) -> dict[str, dict[str, Any]] | None:
        """Every Hub user's active servers (starting and stopping ones too), by user; None when
        the Hub cannot say (logged once until it can again). For the OrphanPods sweep."""
        try:
            listing = await active_servers(self.hub_api_url, self.api_token)
        except (OSError, HTTPClientError, ValueError) as error:
            self._log_hub_failure(error)
            return None
        self._hub_failure_logged = False
        return listing

    async def of_user(self, user: str) -> dict | None:
        """``user``'s active servers ({} when the Hub has no such user); None when the Hub
        cannot say."""
        return await user_servers(self.hub_api_url, self.api_token, user)

    def _log_hub_failure(self, error: Exception) -> None:
        if not self._hub_failure_logged:
            self.log.warning("The Hub's running servers not compared with their bookings "
                             "and pods (tried again every tick): %s", error)
            self._hub_failure_logged = True

    def _round_due(self, now: datetime) -> bool:
        if not self.check_interval_minutes:
            return False
        interval = timedelta(minutes=self.check_interval_minutes)
        return self._last_round is None or now - self._last_round >= interval

    async def check(self, now: datetime) -> list[tuple[RunningServer, Finding]]:
        """One round, when one is due at ``now``: what was found and acted on."""
        if not self._round_due(now):
            return []
        listing = await self.active()
        if listing is None:
            return []
        acted = []
        for server, _finding, _booking in await self._compare(listing, now):
            # the Hub and the database once more for this server: it may have stopped, or its
            # spawner claimed or released since the list (found rarely, so cheap)
            confirmed = await self._confirm(server, now)
            if confirmed is not None and await self._act(server, *confirmed, now):
                acted.append((server, confirmed[0]))
        self._last_round = now
        return acted

    async def _compare(self, listing: dict[str, dict[str, Any]], now: datetime) -> list:
        ids = {server.booking_id for server in running_servers(listing)}
        bookings = await in_executor(self.executor, self.store.get_many, ids)
        grace = timedelta(seconds=self.grace_seconds)
        return [(server, finding, bookings.get(server.booking_id))
                for server, finding in compare(listing, bookings, now, grace, _pod_holder)]

    async def _confirm(self, server: RunningServer, now: datetime) -> tuple | None:
        servers = await self.of_user(server.user)
        if servers is None:
            return None  # the Hub cannot say: the next round looks again
        for again, finding, booking in await self._compare({server.user: servers}, now):
            if again == server:
                return finding, booking
        return None

    async def _hub_has(self, user: str) -> bool:
        """Whether the Hub has ``user`` (False also when it cannot say: nothing is stopped)."""
        try:
            return await hub_user_model(self.hub_api_url, self.api_token, user) is not None
        except web.HTTPError:
            return False

    async def _act(self, server: RunningServer, finding: Finding, booking: Any,
                   now: datetime) -> bool:
        why = finding.describe(server, booking, now)
        if finding is Finding.OTHER_USER and not await self._hub_has(booking.user):
            # the Hub renamed the user (or deleted the booking's one): the booking is theirs in
            # all but name, so the server runs on until `users rename` moves the bookings
            self.log.warning("Not stopping server %r of %s on booking %s of %s, whom the Hub "
                             "no longer has (renamed in the Hub? `jhub-gpubooking users rename "
                             "%s %s` moves their bookings)", server.server, server.user,
                             booking.id, booking.user, booking.user, server.user)
            return False
        if self.metrics is not None:
            self.metrics.hub_server_mismatches.labels(finding.value).inc()
        if finding.stops:
            if not self.stop_servers:
                self.log.warning("Server %r of %s runs without a booking it may use (%s); not "
                                 "stopped: c.HubServers.stop_servers is False",
                                 server.server, server.user, why)
                return True
            self.log.warning("Stopping server %r of %s: %s", server.server, server.user, why)
            return await stop_hub_server(self.hub_api_url, self.api_token, server.user,
                                         server.server, why)
        # the holder found stopped is the one the claim may take the booking from
        def stopped(holder: str) -> bool | None:
            return False if holder == booking.server else None

        try:
            await in_executor(self.executor, self.store.claim, booking.id, server.server,
                              stopped, booking)
        except Conflict as error:
            self.log.info("Claim of booking %s for server %r of %s not recorded: %s",
                          booking.id, server.server, server.user, error)
            return False
        self.log.warning("Recorded the claim of booking %s by server %r of %s, which runs on "
                         "it: %s", booking.id, server.server, server.user, why)
        return True


def _pod_holder(holder: str) -> bool:
    return holder_pod(holder) is not None
