"""Prometheus metrics of the booking service.

All metrics live on a dedicated :class:`~prometheus_client.CollectorRegistry` owned by one
:class:`ServiceMetrics` object, so several services (or tests) in one process never clash in
prometheus_client's global registry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from fractions import Fraction
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from tornado.log import access_log
from tornado.web import StaticFileHandler

from ..core.model import Booking, BookingState

#: Buckets for the longer re-placement searches (up to ``exact_move_retry_seconds``, 10 s).
SEARCH_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
#: Buckets for request latency: booking requests are small database transactions.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def booked_gpus_now(bookings: Iterable[Booking], pools: Iterable[str], now: datetime) -> dict:
    """GPUs (fractions summed) held by active bookings, per pool (every pool present)."""
    totals = {pool: Fraction(0) for pool in pools}
    for booking in bookings:
        if booking.state(now) is BookingState.ACTIVE and booking.pool in totals:
            totals[booking.pool] += Fraction(booking.amount)
    return {pool: float(amount) for pool, amount in totals.items()}


def access_log_level(status: int, static: bool = False, seconds: float = 0.0) -> int:
    """The level of a request's access-log line, as the Hub's (``jupyterhub.log``): a static
    file served or not modified is debug unless it was slow (1 s or more); errors are server
    errors only. A 503 is no fault of the service's: it says when to come back
    (``Retry-After``: its database or the Hub down, its first check after a start), expected
    in an outage and after every start."""
    if (status == 304 or (static and status < 300)) and seconds < 1:
        return logging.DEBUG
    if status < 400:
        return logging.INFO
    return logging.ERROR if status >= 500 and status != 503 else logging.WARNING


class ServiceMetrics:
    """The service's metrics and the registry they are exposed from."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        #: (route, method, status) -> the request counter's and histogram's children
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.bookings = Gauge(
            "gpubooking_bookings",
            "Bookings by state (upcoming, active, ended, cancelled).",
            ["state"],
            registry=self.registry,
        )
        self.booked_gpus = Gauge(
            "gpubooking_booked_gpus",
            "GPUs held right now by active bookings, per pool (fractions summed).",
            ["pool"],
            registry=self.registry,
        )
        self.pool_gpus = Gauge(
            "gpubooking_pool_gpus",
            "GPUs configured in each pool.",
            ["pool"],
            registry=self.registry,
        )
        self.used_gpus = Gauge(
            "gpubooking_used_gpus",
            "GPUs of active bookings a server is using right now, per pool (the rest of "
            "gpubooking_booked_gpus is booked but idle).",
            ["pool"],
            registry=self.registry,
        )
        self.releases = Counter(
            "gpubooking_releases",
            "Bookings whose remaining time was given back early, by reason (no_show, "
            "server_stopped, preempted).",
            ["reason"],
            registry=self.registry,
        )
        self.warnings = Counter(
            "gpubooking_end_warnings",
            "Users warned that their booking is about to end.",
            registry=self.registry,
        )
        self.server_stops = Counter(
            "gpubooking_server_stops",
            "Servers the service asked the Hub to stop because their booking ended.",
            registry=self.registry,
        )
        self.requests = Counter(
            "gpubooking_requests",
            "HTTP requests handled, by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.request_duration = Histogram(
            "gpubooking_request_duration_seconds",
            "Time to answer HTTP requests, by route template, method and status.",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.users_missing = Gauge(
            "gpubooking_users_missing_from_hub",
            "Users with a booking, wait or calendar link here whom the Hub no longer has, at the "
            "last check of c.RemovedUsers (taken off after its grace_hours; all kept while more "
            "than max_users_at_once are missing).",
            registry=self.registry,
        )
        self.removed_users = Counter(
            "gpubooking_removed_users",
            "Users deleted from the Hub whose bookings, waits and calendar link were taken off.",
            registry=self.registry,
        )
        self.hub_server_mismatches = Counter(
            "gpubooking_hub_server_mismatches",
            "Running Hub servers whose booking the database did not agree with, by what was "
            "wrong, once each round that found it (c.HubServers): unclaimed, holder_stopped and "
            "checking_elsewhere get their claim recorded; gone, other_user, not_active, "
            "held_elsewhere and other_placement are stopped (with stop_servers).",
            ["finding"],
            registry=self.registry,
        )
        self.admitted_pod_mismatches = Counter(
            "gpubooking_admitted_pod_mismatches",
            "Running GPU pods the admission webhook admitted whose booking the database did not "
            "agree with, by what was wrong, once each tick that found it: gone, other_booking "
            "and not_active are deleted; unclaimed gets the pod's claim recorded.",
            ["finding"],
            registry=self.registry,
        )
        self.last_backup = Gauge(
            "gpubooking_last_backup_timestamp_seconds",
            "When the newest scheduled backup of the booking database was taken (c."
            "ScheduledBackups; Unix time; 0 until there is one): alert when it is older "
            "than twice the interval.",
            registry=self.registry,
        )
        self.backup_failures = Counter(
            "gpubooking_backup_failures",
            "Scheduled backups of the booking database that failed (each is logged as an error).",
            registry=self.registry,
        )
        self.longer_searches = Counter(
            "gpubooking_longer_searches",
            "Creates refused after the search for bookings to move ran out of time under the "
            "pool's lock, by what the longer search without the lock came to (admitted, "
            "refused, busy: not searched because another search was running).",
            ["outcome"],
            registry=self.registry,
        )
        self.longer_search_duration = Histogram(
            "gpubooking_longer_search_duration_seconds",
            "Time the longer searches without the pool's lock took.",
            buckets=SEARCH_BUCKETS,
            registry=self.registry,
        )

    def observe_release(self, reason: str) -> None:
        self.releases.labels(reason=reason).inc()

    def observe_longer_search(self, outcome: str, seconds: float | None) -> None:
        self.longer_searches.labels(outcome=outcome).inc()
        if seconds is not None:
            self.longer_search_duration.observe(seconds)

    def observe_warning(self) -> None:
        self.warnings.inc()

    def observe_server_stop(self) -> None:
        self.server_stops.inc()

    def log_request(self, handler: Any) -> None:
        """Tornado's ``log_function``: count every request for /metrics and write one access-log
        line, of the route template rather than the path (secret feed tokens must not reach
        the logs)."""
        status, seconds = handler.get_status(), handler.request.request_time()
        route = getattr(handler, "route_template", "") or type(handler).__name__
        self.observe_request(route, handler.request.method, status, seconds)
        level = access_log_level(status, isinstance(handler, StaticFileHandler), seconds)
        access_log.log(level, "%d %s %s %.1fms", status, handler.request.method, route,
                       seconds * 1e3)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            # labels() checks and looks the children up under a lock on every call; a route,
            # method and status seen once are seen again (there are a few dozen of them)
            labels = {"route": route, "method": method, "status": str(status)}
            children = self._request_children[key] = (
                self.requests.labels(**labels), self.request_duration.labels(**labels))
        children[0].inc()
        children[1].observe(seconds)

    def refresh(
        self,
        state_counts: dict[str, int],
        active: list[Booking],
        pool_sizes: dict[str, int],
        now: datetime,
    ) -> None:
        """Set the gauges before a scrape from the counts per state and the active bookings."""
        for state, count in state_counts.items():
            self.bookings.labels(state=state).set(count)
        for pool, amount in booked_gpus_now(active, pool_sizes, now).items():
            self.booked_gpus.labels(pool=pool).set(amount)
        in_use = [booking for booking in active if booking.server is not None]
        for pool, amount in booked_gpus_now(in_use, pool_sizes, now).items():
            self.used_gpus.labels(pool=pool).set(amount)
        for pool, size in pool_sizes.items():
            self.pool_gpus.labels(pool=pool).set(size)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
