"""What happens to a booking as time passes: warn, stop at the end, reclaim unused time.

Pure decisions, no I/O: :func:`decide` looks at one booking's facts and "now" and says what
the service should do; the database layer applies releases and the service talks to the Hub
and the mail server. Keeping the rules here lets tests replay a day of bookings in seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from .model import Booking, BookingState, Placement, Pool
from .timegrid import ceil_to_grid


class ReleaseReason(str, enum.Enum):
    """Why a booking gave its remaining time back to the pool."""

    NO_SHOW = "no_show"  # no server claimed it soon enough after its start
    SERVER_STOPPED = "server_stopped"  # its server stopped and stayed stopped
    PREEMPTED = "preempted"  # an opportunistic grant made way for a booking


class ActionKind(str, enum.Enum):
    WARN = "warn"  # the end is near: tell the user
    STOP_SERVER = "stop_server"  # the end (plus grace) has passed: stop the server
    RELEASE = "release"  # give the rest of the booking back


def minutes_or_none(minutes: int) -> timedelta | None:
    """A rule's wait from its setting in minutes (0 switches the rule off)."""
    return timedelta(minutes=minutes) if minutes > 0 else None


@dataclass(frozen=True)
class LifecycleRules:
    """The timing settings (``None`` switches a rule off).

    ``no_show_after`` holds for every pool not named in ``pool_no_show_after`` (the pools that
    set their own ``no_show_minutes``, see :meth:`for_pools`).
    """

    slot_minutes: int = 15
    end_grace: timedelta = timedelta(0)
    warn_before: timedelta | None = None
    no_show_after: timedelta | None = None
    stopped_release_after: timedelta | None = None
    pool_no_show_after: Mapping[str, timedelta | None] = field(default_factory=dict)

    def no_show_after_for(self, pool: str) -> timedelta | None:
        """How long a booking of ``pool`` may stay unclaimed after its start (None: forever)."""
        return self.pool_no_show_after.get(pool, self.no_show_after)

    def for_pools(self, pools: Iterable[Pool]) -> LifecycleRules:
        """These rules with the no-show time of every pool that sets ``no_show_minutes``."""
        own = {
            pool.name: minutes_or_none(pool.no_show_minutes)
            for pool in pools
            if pool.no_show_minutes is not None
        }
        return replace(self, pool_no_show_after=own)


@dataclass(frozen=True)
class BookingFacts:
    """What the rules need to know about one booking besides the booking itself."""

    booking: Booking
    ever_claimed: bool = False
    stopped_at: datetime | None = None
    warned_end: datetime | None = None
    stop_requested_at: datetime | None = None


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    booking_id: int
    new_end: datetime | None = None
    reason: ReleaseReason | None = None


def release_end(booking: Booking, now: datetime, slot_minutes: int) -> datetime | None:
    """The end a booking released at ``now`` gets (the next grid point), or None when
    releasing would free nothing."""
    new_end = max(ceil_to_grid(now, slot_minutes), booking.start)
    return new_end if new_end < booking.end else None


def decide(rules: LifecycleRules, facts: BookingFacts, now: datetime) -> Action | None:
    """The one thing the service should do about this booking now, if any."""
    booking = facts.booking
    if booking.status == "cancelled" or booking.id is None:
        return None
    held = booking.server is not None
    if held and facts.stop_requested_at is None and now >= booking.end + rules.end_grace:
        return Action(ActionKind.STOP_SERVER, booking.id)
    if booking.state(now) is not BookingState.ACTIVE:
        return None
    if held:
        warn = rules.warn_before
        if warn is not None and now >= booking.end - warn and facts.warned_end != booking.end:
            return Action(ActionKind.WARN, booking.id)
        return None
    reason = _release_reason(rules, facts, now)
    if reason is None:
        return None
    new_end = release_end(booking, now, rules.slot_minutes)
    if new_end is None:
        return None
    return Action(ActionKind.RELEASE, booking.id, new_end=new_end, reason=reason)


def no_show_deadline(booking: Booking, no_show_after: timedelta) -> datetime:
    """When ``booking``, if no server has used it, is released as a no-show: ``no_show_after``
    past its start, or past the moment it was made or last changed when that is later. A
    booking made "now", or started early, begins in the running slot, up to a slot ago; counted
    from its start, its user would get a minute or none to start a server."""
    counted_from = booking.start
    if booking.updated is not None and booking.updated > counted_from:
        counted_from = booking.updated
    return counted_from + no_show_after


def _release_reason(
    rules: LifecycleRules, facts: BookingFacts, now: datetime
) -> ReleaseReason | None:
    booking = facts.booking
    if not facts.ever_claimed:
        no_show_after = rules.no_show_after_for(booking.pool)
        if no_show_after is not None and now >= no_show_deadline(booking, no_show_after):
            return ReleaseReason.NO_SHOW
        return None
    if (
        rules.stopped_release_after is not None
        and facts.stopped_at is not None
        and now >= facts.stopped_at + rules.stopped_release_after
    ):
        return ReleaseReason.SERVER_STOPPED
    return None


#: Key of a Hub server's state under which GPUBookingSpawner keeps the booking it claimed.
SERVER_STATE_BOOKING_KEY = "gpu_booking_id"
#: ... and the placement the server's pod was made for (:func:`placement_state`).
SERVER_STATE_PLACEMENT_KEY = "gpu_booking_placement"


def placement_state(placement: Placement) -> dict[str, Any]:
    """The JSON a server's state keeps of the placement its pod was made for."""
    return made_for_state(placement.node, placement.gpus)


def made_for_state(node: str, gpus: tuple[int, ...]) -> dict[str, Any]:
    """The JSON a server's state keeps of the node and GPU indices its pod was made for."""
    return {"node": node, "gpus": list(gpus)}


def placement_from_state(value: Any) -> tuple[str | None, tuple[int, ...] | None]:
    """The node and GPU indices of :func:`placement_state`'s JSON (None for what is not
    there, as in the state of a server started before 0.2.0)."""
    if not isinstance(value, Mapping):
        return None, None
    node, gpus = value.get("node"), value.get("gpus")
    valid_gpus = isinstance(gpus, list) and all(
        isinstance(gpu, int) and not isinstance(gpu, bool) for gpu in gpus)
    return (node if isinstance(node, str) else None), (tuple(gpus) if valid_gpus else None)


class ServerUse(str, enum.Enum):
    """What the Hub says about the server holding a booking."""

    ON_BOOKING = "on_booking"  # running (ready) on this booking
    STARTING_ON_BOOKING = "starting_on_booking"  # its start claimed this booking, still pending
    BUSY = "busy"  # starting or stopping: look again later, and count it as in use
    NOT_ON_BOOKING = "not_on_booking"  # stopped, or running without this booking
    UNKNOWN = "unknown"  # the Hub did not say (unreachable, or the service lacks scopes)

    @property
    def on_booking(self) -> bool:
        """Running or starting on this booking: the server to stop when the booking ends."""
        return self in (ServerUse.ON_BOOKING, ServerUse.STARTING_ON_BOOKING)


def server_use(servers: Mapping[str, Any] | None, server: str, booking_id: int) -> ServerUse:
    """How ``server`` uses booking ``booking_id``, from the Hub's ``servers`` of its user
    (None: unknown). A server's state names its booking (needs ``admin:server_state``)."""
    if servers is None:
        return ServerUse.UNKNOWN
    model = servers.get(server)
    if model is None:
        return ServerUse.NOT_ON_BOOKING
    state = model.get("state")
    names_booking = isinstance(state, Mapping) and state.get(SERVER_STATE_BOOKING_KEY) == booking_id
    if model.get("pending") == "spawn" and names_booking:
        # the Hub shows a pending start's live state: its spawner already claimed this booking,
        # so at the booking's end the start is stopped (the Hub interrupts it) rather than
        # left to come up on an ended booking
        return ServerUse.STARTING_ON_BOOKING
    if model.get("pending") or not model.get("ready", True):
        return ServerUse.BUSY
    if not isinstance(state, Mapping):
        return ServerUse.UNKNOWN
    if names_booking:
        return ServerUse.ON_BOOKING
    return ServerUse.NOT_ON_BOOKING
