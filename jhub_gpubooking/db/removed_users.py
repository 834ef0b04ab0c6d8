"""What a user the Hub no longer has left in the service: found, and taken off.

The rule of when is :mod:`jhub_gpubooking.core.removed_users`; the component asking the Hub is
:mod:`jhub_gpubooking.service.removed_users`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..core.errors import Conflict
from ..core.waitlist import WaitState
from .feed_tokens import feed_token_users, revoke_feed_token

if TYPE_CHECKING:
    from .store import BookingStore
    from .waitlist import WaitStore

#: Actor recorded on what is taken off, so a booking's history tells why it was cancelled.
REMOVED_USERS_ACTOR = "removed-users"


@dataclass(frozen=True)
class Removed:
    """What was taken off: bookings cancelled (or, running, ended now), waits withdrawn, and
    whether a calendar link was revoked."""

    bookings: tuple[int, ...] = ()
    waits: tuple[int, ...] = ()
    feed_link: bool = False

    def describe(self) -> str:
        return (f"{len(self.bookings)} booking(s) cancelled or ended, {len(self.waits)} wait(s) "
                f"withdrawn, calendar link {'revoked' if self.feed_link else 'none'}")


def users_with_belongings(store: BookingStore, waits: WaitStore, now: datetime) -> set[str]:
    """Users with a booking not over yet, a waiting request or a calendar link: those worth
    asking the Hub about (the history of everyone else stays as it is)."""
    users = {booking.user for booking in store.list(start=now) if booking.not_over(now)}
    users |= {wait.user for wait in waits.list(state=WaitState.WAITING)}
    return users | feed_token_users(store)


def remove_belongings(store: BookingStore, waits: WaitStore, user: str,
                      now: datetime) -> Removed:
    """Cancel ``user``'s upcoming bookings and end their running ones now (the Hub stopped
    their servers when it deleted them), withdraw their waits and revoke their calendar link.

    Each booking and wait is its own transaction, as an admin's *Force cancel* is: a removal
    cut short leaves the rest for the next round, and what was done stays done. Nothing is
    deleted: the bookings keep their history, with this service as the actor and the reason.
    """
    # waits first: one booked meanwhile would be a booking the cancels below never saw
    withdrawn = []
    for wait in waits.list(user=user, state=WaitState.WAITING):
        try:
            waits.withdraw(wait.id)
        except Conflict:
            continue  # booked or expired meanwhile
        withdrawn.append(wait.id)
    reason = f"The Hub no longer has user {user}."
    cancelled = []
    for booking in store.list(user=user, start=now):
        if not booking.not_over(now):
            continue
        try:
            store.cancel(booking.id, REMOVED_USERS_ACTOR, reason=reason)
        except Conflict:
            continue  # over meanwhile
        cancelled.append(booking.id)
    return Removed(tuple(cancelled), tuple(withdrawn), revoke_feed_token(store, user))
