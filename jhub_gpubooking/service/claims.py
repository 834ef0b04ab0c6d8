"""The spawn gate in one round trip: claim a user's booking in a pool for a Hub server.

``POST api/pools/{pool}/claim`` (``PoolClaimHandler`` in :mod:`.api`) calls
:func:`claim_in_pool`, which does here what the spawner used to do over three requests: read the
user's active bookings, pick the candidates by the one rule of :mod:`..core.choice` (the user's
choice, else the booking this server holds, then unused ones running longest, then the largest),
fall back to an opportunistic grant when there is none (created already claimed, in one
transaction), and claim the first one that is free.

The common start — a booking nobody holds, or the one this server already holds — is one write
transaction (:func:`..db.claims.claim_first`: the read, the choice and the claim under the
pool's lock) and no Hub round trip. The Hub is asked whether a holder still runs only when the
first candidate has a holder other than this server (:func:`holder_check`), outside any lock;
the candidates are then claimed one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tornado import web

from ..admission.review import holder_pod
from ..core.choice import claim_order, current_bookings
from ..core.errors import BookingError, Conflict
from ..core.hub_servers import holder_in_use as server_in_use
from ..core.model import Booking, Pool
from ..core.wire import SERVICE_STARTING, booking_to_json
from ..db.claims import claim_first
from ..executor import in_executor
from ..inventory import unplaceable_bookings

#: How long a claim may wait for the Hub to say whether another server still runs.
HUB_CHECK_TIMEOUT_SECONDS = 10

#: Why a pool claim was refused, for the spawner to pick its sentence (``reason`` in the answer).
NOT_BOOKED = "not_booked"  # no active booking, and no opportunistic grant for this user
NONE_FREE = "none_free"  # no active booking, and nothing free for an opportunistic grant
IN_USE = "in_use"  # every active booking is held by another server that runs (or may run)
POOL_UNKNOWN = "pool_unknown"
UNUSABLE = "unusable"  # every active booking is on GPUs the pool no longer has (flagged)
#: the service has just started and has not compared the running servers and pods with the
#: database yet (503 with ``Retry-After``: ask again)
STARTING = SERVICE_STARTING

#: How long a claim waits for that first check before it is answered :data:`STARTING`: well
#: under the spawner's request timeout (``booking_request_timeout``, 5 s by default), which
#: would otherwise give up on an answer that is still coming and call the service down.
CLAIM_FIRST_CHECK_SECONDS = 1.0
#: ``Retry-After`` of a :data:`STARTING` answer, in seconds.
STARTING_RETRY_AFTER_SECONDS = 2
STARTING_MESSAGE = ("The GPU booking service has just started and is still checking the "
                    "servers and pods that run on bookings; ask again in a few seconds.")


class PoolClaimRefused(Exception):
    """A refused pool claim: HTTP ``status``, ``reason`` (one of the constants above), the
    service's sentence, for :data:`IN_USE` the server that holds the booking, and for
    :data:`STARTING` the seconds to wait before asking again (``Retry-After``)."""

    def __init__(self, status: int, reason: str, message: str, holder: str | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.holder = holder
        self.retry_after = retry_after


async def holder_in_use(service: Any, booking: Booking, holder: str) -> bool | None:
    """Whether ``holder`` still uses ``booking``: True while its Hub server runs (or starts) on
    it, False once the Hub shows it stopped or running without it, None when the Hub cannot say
    (then the claim is refused: missing means unknown). A webhook ``pod:`` holder is the
    webhook's to release, so it counts as in use."""
    if holder_pod(holder):
        return True
    servers = await service.lifecycle.hub_user_servers(booking.user)
    return server_in_use(servers, holder, booking.id)


async def after_first_check(service: Any) -> None:
    """Hold a claim made just after the service started until its first tick has compared the
    running servers and pods with the database (:meth:`.lifecycle.Lifecycle.after_first_check`):
    after a restore, a booking one of them runs on is unclaimed until then, and a claim would
    put a second server on its GPUs.

    The wait is short (:data:`CLAIM_FIRST_CHECK_SECONDS`); a check still running then (the
    Kubernetes client loads for seconds on a busy hub) raises :class:`PoolClaimRefused` with
    :data:`STARTING`, which the spawner answers by asking again. The lifecycle stops making
    claims wait once the check has failed for ``FIRST_CHECK_WAIT_SECONDS``."""
    if not await service.lifecycle.after_first_check(CLAIM_FIRST_CHECK_SECONDS):
        raise PoolClaimRefused(503, STARTING, STARTING_MESSAGE,
                               retry_after=STARTING_RETRY_AFTER_SECONDS)


def holder_check(
    service: Any, booking: Booking, loop: asyncio.AbstractEventLoop
) -> Callable[[str], bool | None]:
    """``is_running`` for :meth:`BookingStore.claim`, which calls it in an executor thread (and
    only when another server holds the booking): it hops onto the event loop for the Hub."""

    def is_running(other_server: str) -> bool | None:
        check = holder_in_use(service, booking, other_server)
        return asyncio.run_coroutine_threadsafe(check, loop).result(
            timeout=HUB_CHECK_TIMEOUT_SECONDS
        )

    return is_running


async def claim_in_pool(
    service: Any,
    user: str,
    pool: Pool,
    server: str,
    chosen: int | None = None,
    actor: str | None = None,
) -> Booking:
    """Claim ``user``'s booking in ``pool`` for ``server`` (the Hub server name), or raise
    :class:`PoolClaimRefused`. ``chosen`` is the booking the user picked in the chooser; when
    it is not active in the pool the default order applies, as for a start without a choice."""
    await after_first_check(service)
    loop = asyncio.get_running_loop()
    now = service.clock.now()

    def choose(active: list[Booking]) -> list[Booking]:
        # a booking on a node or GPUs the pool no longer has would start a pod that never
        # runs: passed over, and refused with the reason when it is all the user has
        unusable = unplaceable_bookings(active, {pool.name: pool}, now)
        active = [booking for booking in active if booking.id not in unusable]
        if unusable and not active:
            reason = unusable[min(unusable)]
            raise PoolClaimRefused(409, UNUSABLE, f"{reason} End or cancel it on the booking "
                                   "page and book other GPUs.")
        by_id = {booking.id: booking for booking in active}
        wire = [booking_to_json(booking, pool, now) for booking in active]
        return [by_id[b["id"]] for b in claim_order(current_bookings(wire, pool.name, now),
                                                    server, chosen)]

    # the common start (the first candidate unheld, or held by this server) in one transaction
    claimed, candidates = await in_executor(service.executor, claim_first, service.store, user,
                                            pool.name, server, choose)
    if claimed is not None:
        return claimed
    if not candidates:
        grant = await _opportunistic_grant(service, user, pool, server, actor)
        if grant.server == server:
            return grant  # created (or found unheld) and claimed in one transaction
        candidates = [grant]  # a running grant another server holds: checked like any claim
    first_conflict: tuple[Booking, Conflict] | None = None
    for booking in candidates:
        try:
            return await in_executor(
                service.executor, service.store.claim, booking.id, server,
                is_running=holder_check(service, booking, loop), read=booking,
            )
        except Conflict as conflict:
            # held by a running server, or ended since the read: the next candidate may be free
            first_conflict = first_conflict or (booking, conflict)
    booking, conflict = first_conflict
    raise PoolClaimRefused(409, IN_USE, conflict.message, holder=booking.server)


async def _opportunistic_grant(
    service: Any, user: str, pool: Pool, server: str, actor: str | None
) -> Booking:
    """Without an active booking, a grant on GPUs nobody booked, when the service allows it,
    claimed for ``server`` as it is created."""
    opportunistic = service.opportunistic
    not_booked = f"{user} has no active booking in the GPU pool {pool.name} right now."
    if not opportunistic.opportunistic_enabled:
        raise PoolClaimRefused(403, NOT_BOOKED, not_booked)
    try:
        groups = await service.hub_user_groups(user)
    except web.HTTPError:
        # without the user's groups no grant can be checked: the user simply has no booking
        raise PoolClaimRefused(403, NOT_BOOKED, not_booked) from None
    try:
        return await opportunistic.grant(user, pool.name, groups=groups, actor=actor,
                                         server=server)
    except BookingError as refused:
        if refused.status == 409:
            raise PoolClaimRefused(409, NONE_FREE, refused.message) from None
        if refused.status == 403:
            raise PoolClaimRefused(403, NOT_BOOKED, refused.message) from None
        raise
