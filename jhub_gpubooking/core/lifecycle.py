"""What happens to a booking as time passes: warn, stop at the end, reclaim unused time.

Pure decisions, no I/O: :func:`decide` looks at one booking's facts and "now" and says what
the service should do; the database layer applies releases and the service talks to the Hub
and the mail server. Keeping the rules here lets tests replay a day of bookings in seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .model import Booking, BookingState
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


@dataclass(frozen=True)
class LifecycleRules:
    """The timing settings (``None`` switches a rule off)."""

    slot_minutes: int = 15
    end_grace: timedelta = timedelta(0)
    warn_before: timedelta | None = None
    no_show_after: timedelta | None = None
    stopped_release_after: timedelta | None = None


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


def _release_reason(
    rules: LifecycleRules, facts: BookingFacts, now: datetime
) -> ReleaseReason | None:
    booking = facts.booking
    if not facts.ever_claimed:
        if rules.no_show_after is not None and now >= booking.start + rules.no_show_after:
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


class ServerUse(str, enum.Enum):
    """What the Hub says about the server holding a booking."""

    ON_BOOKING = "on_booking"  # running (ready) on this booking
    BUSY = "busy"  # starting or stopping: look again later, and count it as in use
    NOT_ON_BOOKING = "not_on_booking"  # stopped, or running without this booking
    UNKNOWN = "unknown"  # the Hub did not say (unreachable, or the service lacks scopes)


def server_use(servers: Mapping[str, Any] | None, server: str, booking_id: int) -> ServerUse:
    """How ``server`` uses booking ``booking_id``, from the Hub's ``servers`` of its user
    (None: unknown). A server's state names its booking (needs ``admin:server_state``)."""
    if servers is None:
        return ServerUse.UNKNOWN
    model = servers.get(server)
    if model is None:
        return ServerUse.NOT_ON_BOOKING
    if model.get("pending") or not model.get("ready", True):
        return ServerUse.BUSY
    state = model.get("state")
    if not isinstance(state, Mapping):
        return ServerUse.UNKNOWN
    if state.get(SERVER_STATE_BOOKING_KEY) == booking_id:
        return ServerUse.ON_BOOKING
    return ServerUse.NOT_ON_BOOKING
