"""What a user the Hub no longer has left in the service: found, and taken off; and since when
each such user has been missing (the ``missing_users`` table).

The rule of when is :mod:`jhub_gpubooking.core.removed_users`; the component asking the Hub is
:mod:`jhub_gpubooking.service.removed_users`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import delete, select

from ..core.errors import Conflict
from ..core.model import Booking
from ..core.waitlist import Wait, WaitState
from .feed_tokens import feed_token_users, has_feed_token, revoke_feed_token
from .models import MissingUserRow

if TYPE_CHECKING:
    from .store import BookingStore
    from .waitlist import WaitStore

#: Actor recorded on what is taken off, so a booking's history tells why it was cancelled.
REMOVED_USERS_ACTOR = "removed-users"


@dataclass(frozen=True)
class Belongings:
    """A user's bookings not over yet, waiting requests and calendar link: what a removal takes
    off (bookings cancelled or, running, ended now; waits withdrawn; the link revoked)."""

    bookings: tuple[int, ...] = ()
    waits: tuple[int, ...] = ()
    feed_link: bool = False

    def describe_removed(self) -> str:
        return (f"{len(self.bookings)} booking(s) cancelled or ended, {len(self.waits)} wait(s) "
                f"withdrawn, calendar link {'revoked' if self.feed_link else 'none'}")


def _bookings_not_over(store: BookingStore, now: datetime, user: str | None = None) -> list[Booking]:
    """Bookings (of ``user``; everyone's without) not over at ``now``: what a removal cancels
    or, running, ends."""
    return [booking for booking in store.list(user=user, start=now) if booking.not_over(now)]


def _waiting(waits: WaitStore, user: str | None = None) -> list[Wait]:
    """Waiting requests (of ``user``; everyone's without): what a removal withdraws."""
    return waits.list(user=user, state=WaitState.WAITING)


def users_with_belongings(store: BookingStore, waits: WaitStore, now: datetime) -> set[str]:
    """Users with a booking not over yet, a waiting request or a calendar link: those worth
    asking the Hub about (the history of everyone else stays as it is)."""
    users = {booking.user for booking in _bookings_not_over(store, now)}
    users |= {wait.user for wait in _waiting(waits)}
    return users | feed_token_users(store)


def belongings(store: BookingStore, waits: WaitStore, user: str, now: datetime) -> Belongings:
    """What ``user`` holds here now: what a removal would take off."""
    return Belongings(
        tuple(booking.id for booking in _bookings_not_over(store, now, user)),
        tuple(wait.id for wait in _waiting(waits, user)),
        has_feed_token(store, user),
    )


def remove_belongings(store: BookingStore, waits: WaitStore, user: str,
                      now: datetime) -> Belongings:
    """Cancel ``user``'s upcoming bookings and end their running ones now (the Hub stopped
    their servers when it deleted them), withdraw their waits and revoke their calendar link.

    Each booking and wait is its own transaction, as an admin's *Force cancel* is: a removal
    cut short leaves the rest for the next round, and what was done stays done. Nothing is
    deleted: the bookings keep their history, with this service as the actor and the reason.
    """
    # waits first: one booked meanwhile would be a booking the cancels below never saw
    withdrawn = []
    for wait in _waiting(waits, user):
        try:
            waits.withdraw(wait.id)
        except Conflict:
            continue  # booked or expired meanwhile
        withdrawn.append(wait.id)
    reason = f"The Hub no longer has user {user}."
    cancelled = []
    for booking in _bookings_not_over(store, now, user):
        try:
            store.cancel(booking.id, REMOVED_USERS_ACTOR, reason=reason)
        except Conflict:
            continue  # over meanwhile
        cancelled.append(booking.id)
    return Belongings(tuple(cancelled), tuple(withdrawn), revoke_feed_token(store, user))


def missing_users(store: BookingStore) -> dict[str, datetime]:
    """Each user the Hub no longer has, with when a round first found them missing."""
    with store.read_transaction() as session:
        return {row.user: row.since for row in session.scalars(select(MissingUserRow))}


def record_missing_users(store: BookingStore, missing_since: Mapping[str, datetime]) -> None:
    """Store the state a round leaves (``UsersCheck.missing_since``) in one transaction: users
    not in it are forgotten, new ones added, times kept to whole seconds as every backend
    stores them."""
    wanted = {user: since.replace(microsecond=0) for user, since in missing_since.items()}
    with store.unit_of_work() as work:
        session = work.session
        rows = {row.user: row for row in session.scalars(select(MissingUserRow))}
        for user, row in rows.items():
            if user not in wanted:
                session.delete(row)
            elif row.since != wanted[user]:
                row.since = wanted[user]
        session.add_all(MissingUserRow(user=user, since=since)
                        for user, since in wanted.items() if user not in rows)


def forget_missing_user(store: BookingStore, user: str) -> None:
    """``user`` is no longer followed: their belongings were taken off, or they were renamed."""
    with store.unit_of_work() as work:
        work.session.execute(delete(MissingUserRow).where(MissingUserRow.user == user))
