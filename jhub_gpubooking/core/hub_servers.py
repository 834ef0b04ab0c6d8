"""Hub servers and the bookings they run on, compared: which server to stop, which claim to
record again. Pure: :func:`compare` looks at the Hub's running servers and the bookings they
name; :mod:`jhub_gpubooking.service.hub_servers` asks the Hub and acts.

The database and the Hub disagree after a restore of the booking database (a booking made since
the backup is gone, one claimed since is back unclaimed, one that moved and started since is
back where it was placed before), after a booking database set up anew, or when a claim was
lost. A server running on a booking the database does not count holds GPUs
the database gives to the next booking; a running server whose booking is unclaimed is never
stopped at its end, and its booking is released as a no-show under it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .lifecycle import (
    SERVER_STATE_BOOKING_KEY,
    SERVER_STATE_PLACEMENT_KEY,
    ServerUse,
    placement_from_state,
    server_use,
)
from .model import Booking, BookingState, where_text


class Finding(str, enum.Enum):
    """What is wrong with a running server's booking, and so what to do."""

    UNCLAIMED = "unclaimed"  # active, mine, nobody holds it: record this server's claim
    HOLDER_STOPPED = "holder_stopped"  # held by a server of mine that stopped: take it over
    GONE = "gone"  # no such booking in the database: stop the server
    OTHER_USER = "other_user"  # the id is another user's booking: stop
    NOT_ACTIVE = "not_active"  # cancelled, ended (past the grace) or not started: stop
    HELD_ELSEWHERE = "held_elsewhere"  # another server (or pod) uses it: stop this one
    OTHER_PLACEMENT = "other_placement"  # placed elsewhere than the server's pod: stop
    # placed elsewhere, and the Hub is still checking the server: record its claim, so no
    # other start takes the booking while its pod runs; stopped (other_placement) once it runs
    CHECKING_ELSEWHERE = "checking_elsewhere"

    @property
    def stops(self) -> bool:
        """Whether the server is stopped (else its claim is recorded)."""
        return self not in (Finding.UNCLAIMED, Finding.HOLDER_STOPPED, Finding.CHECKING_ELSEWHERE)

    def describe(self, server: RunningServer, booking: Booking | None, now: datetime) -> str:
        """The log line's reason."""
        if self is Finding.GONE:
            return (f"booking {server.booking_id} is not in the booking database (taken away "
                    "by a restore, or a database set up anew)")
        assert booking is not None
        misplaced = (f"booking {booking.id} is placed on "
                     f"{booking.placement and booking.placement.where()}, the server's pod was "
                     f"made for {where_text(server.node, server.gpus)}")
        return {
            Finding.UNCLAIMED: f"booking {booking.id} had no claim (given back by a restore?)",
            Finding.HOLDER_STOPPED: (f"booking {booking.id} was held by server "
                                     f"{booking.server!r}, which is stopped"),
            Finding.OTHER_USER: f"booking {booking.id} is {booking.user}'s",
            Finding.NOT_ACTIVE: f"booking {booking.id} is {booking.state(now).value}",
            Finding.HELD_ELSEWHERE: f"booking {booking.id} is used by {booking.server!r}",
            Finding.OTHER_PLACEMENT: misplaced,
            Finding.CHECKING_ELSEWHERE: (
                f"{misplaced}; the Hub is still checking the server, which is stopped once it "
                "runs"),
        }[self]


@dataclass(frozen=True)
class RunningServer:
    """A ready Hub server whose state names the booking it runs on."""

    user: str
    server: str  # "" for the default server
    booking_id: int
    # the placement its pod was made for (None: started before 0.2.0)
    node: str | None = None
    gpus: tuple[int, ...] | None = None
    # the Hub, just started, is still checking that it runs (its pod ran on while it was down)
    checking: bool = False


def running_servers(servers_by_user: Mapping[str, Mapping[str, Any]]) -> list[RunningServer]:
    """The servers, of ``{user: the Hub's servers of that user}``, that are ready (not starting
    or stopping: the spawner's own claim and release are under way then), or that the Hub,
    just started, is checking, and name a booking."""
    found = []
    for user, servers in servers_by_user.items():
        for name, model in servers.items():
            state = model.get("state")
            booking_id = state.get(SERVER_STATE_BOOKING_KEY) if isinstance(state, Mapping) else None
            checking = model.get("pending") == "check"
            ready = model.get("ready", True) and not model.get("pending")
            if (ready or checking) and isinstance(booking_id, int) and not isinstance(booking_id, bool):
                made_for = placement_from_state(state.get(SERVER_STATE_PLACEMENT_KEY))
                found.append(RunningServer(user, name, booking_id, *made_for, checking=checking))
    return found


def holder_in_use(servers: Mapping[str, Any] | None, holder: str, booking_id: int) -> bool | None:
    """Whether the Hub server ``holder`` still uses the booking, from the Hub's servers of its
    user (None: unknown), by the rule every claim follows (:func:`.lifecycle.server_use`):
    starting, stopping or running on it is in use, stopped or running without it is not, and
    None is "the Hub cannot say"."""
    use = server_use(servers, holder, booking_id)
    return {ServerUse.ON_BOOKING: True, ServerUse.STARTING_ON_BOOKING: True,
            ServerUse.BUSY: True, ServerUse.NOT_ON_BOOKING: False}.get(use)


def compare(
    servers_by_user: Mapping[str, Mapping[str, Any]],
    bookings: Mapping[int, Booking],
    now: datetime,
    end_grace: timedelta,
    pod_holder: Callable[[str], bool],
) -> list[tuple[RunningServer, Finding]]:
    """Each running server whose booking (in ``bookings``, by id) disagrees with the Hub, and
    what is wrong. A booking held by this very server is the lifecycle's (stopped at its end);
    a holder that is a pod (``pod_holder``) always counts as in use; a holder the Hub cannot
    say about is looked at again next time. A server the Hub is still checking gets its claim
    recorded (another claim must not take the booking it may run on), but is stopped only
    once the Hub has it running (its check may still find it gone)."""
    found = []
    for server in running_servers(servers_by_user):
        booking = bookings.get(server.booking_id)
        finding = _finding(server, booking, servers_by_user[server.user], now, end_grace,
                           pod_holder)
        if finding is not None and not (server.checking and finding.stops):
            found.append((server, finding))
    return found


def _finding(server: RunningServer, booking: Booking | None, servers: Mapping[str, Any],
             now: datetime, end_grace: timedelta,
             pod_holder: Callable[[str], bool]) -> Finding | None:
    if booking is None:
        return Finding.GONE
    if booking.user != server.user:
        return Finding.OTHER_USER
    state = booking.state(now)
    # a restore gave back the placement from before the booking moved and started: the
    # database counts the GPUs of the server's pod as free
    misplaced = booking.placement is not None and not booking.placement.holds(server.node,
                                                                              server.gpus)
    if booking.server == server.server:
        # its own claim: the lifecycle stops it at the end; placed elsewhere only when a claim
        # was recorded while the Hub checked the server (CHECKING_ELSEWHERE)
        return Finding.OTHER_PLACEMENT if misplaced and state is BookingState.ACTIVE else None
    ended_in_grace = state is BookingState.ENDED and now < booking.end + end_grace
    if state is not BookingState.ACTIVE:
        return None if ended_in_grace else Finding.NOT_ACTIVE
    holder = _holder_finding(booking, servers, pod_holder)
    if not misplaced:
        return holder
    if server.checking and holder in (Finding.UNCLAIMED, Finding.HOLDER_STOPPED):
        # its pod runs on the booking: a start of another server must not take it meanwhile
        # (a second pod on one booking), so the claim is recorded now, and the server is
        # stopped once the Hub has it running (its check may still find it gone)
        return Finding.CHECKING_ELSEWHERE
    return Finding.OTHER_PLACEMENT


def _holder_finding(booking: Booking, servers: Mapping[str, Any],
                    pod_holder: Callable[[str], bool]) -> Finding | None:
    """What the claim of an active booking of the user's, held by no server or another one, is
    to the server running on it (None: the Hub cannot say about the holder)."""
    if booking.server is None:
        return Finding.UNCLAIMED
    if pod_holder(booking.server):
        return Finding.HELD_ELSEWHERE
    in_use = holder_in_use(servers, booking.server, booking.id)
    if in_use is None:
        return None
    return Finding.HELD_ELSEWHERE if in_use else Finding.HOLDER_STOPPED
