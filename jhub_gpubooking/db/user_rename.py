"""A Hub user renamed: everything of theirs here moves to the new name, in one transaction.

JupyterHub's admin page can rename a user; bookings, series, waits and the calendar link are
kept by name here, so without this they would stay with a name the Hub no longer has (and,
after the grace of :mod:`jhub_gpubooking.service.removed_users`, be taken off). The command is
``jhub-gpubooking users rename OLD NEW``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update

from ..core.errors import InvalidRequest
from .events import NewEvent
from .models import (
    NAME_LENGTH,
    BookingRow,
    BookingSeriesRow,
    FeedTokenRow,
    MissingUserRow,
    PoolRow,
    WaitRow,
)

if TYPE_CHECKING:
    from .store import BookingStore

#: Actor of the ``user_renamed`` event each moved booking gets in its history.
RENAME_ACTOR = "jhub-gpubooking users rename"


@dataclass(frozen=True)
class Renamed:
    """What moved: bookings (each with a ``user_renamed`` event), series, waits, and what
    became of the calendar link (``moved``, ``kept`` the new name's own, or ``none``)."""

    bookings: int
    series: int
    waits: int
    feed_link: str

    def describe(self) -> str:
        link = {"moved": "the calendar link moved",
                "kept": "the new name's own calendar link kept (the old one stops working)",
                "none": "no calendar link"}[self.feed_link]
        return (f"{self.bookings} booking(s), {self.series} series and {self.waits} wait(s) "
                f"moved; {link}")


def rename_user(store: BookingStore, old: str, new: str) -> Renamed:
    """Move ``old``'s bookings (past ones too: the usage reports follow the person), series,
    waits and calendar link to ``new``, all or nothing. ``new`` may already have bookings here
    (the user booked under the new name before the rename was run): they are merged; a
    calendar link of ``new`` wins over ``old``'s. Limits and budgets are not checked again."""
    if not isinstance(new, str) or not new.strip() or len(new) > NAME_LENGTH:
        raise InvalidRequest(f"The new name must be 1 to {NAME_LENGTH} characters.")
    if new == old:
        raise InvalidRequest(f"{old!r} and the new name are the same.")
    at = store.stamp()
    with store.unit_of_work() as work:
        session = work.session
        # pools first, then rows, as every change of bookings and waits goes (see .events):
        # the UPDATEs below lock the rows of the old name's bookings and waits, and their
        # events read-lock the bookings' rows. Every pool, as a rename is rare and brief: the
        # old name's pools read before their locks could miss one booked in meanwhile
        work.lock_pools(session.scalars(select(PoolRow.name)))
        pools = {booking_id: pool for booking_id, pool in session.execute(
            select(BookingRow.id, BookingRow.pool).where(BookingRow.user == old))}
        # their (and their series' and waits') Idempotency-Keys go: no create is sent again
        # under the old name, and one of ``new``'s own may carry the same key (unique per user)
        session.execute(update(BookingRow).where(BookingRow.id.in_(sorted(pools)))
                        .values(user=new, updated=at, request_key=None))
        work.record_events([
            NewEvent(booking_id, pool, RENAME_ACTOR, "user_renamed", {"from": old, "to": new})
            for booking_id, pool in sorted(pools.items())
        ])
        # an UPDATE's rowcount is the rows it matched, on every backend SQLAlchemy supports
        series = session.execute(update(BookingSeriesRow).where(BookingSeriesRow.user == old)
                                 .values(user=new, request_key=None)).rowcount
        # by id, the row before its index entries, as a withdraw locks the row and then, in
        # changing its state, the (user, state) entry: an UPDATE by the user's index took the
        # entry first and waited for the row, and the two deadlocked on MariaDB (the walk)
        wait_ids = sorted(session.scalars(select(WaitRow.id).where(WaitRow.user == old)))
        waits = session.execute(update(WaitRow).where(WaitRow.id.in_(wait_ids))
                                .values(user=new, updated=at, request_key=None)
                                ).rowcount if wait_ids else 0
        old_link, new_link = session.get(FeedTokenRow, old), session.get(FeedTokenRow, new)
        feed_link = "none" if old_link is None else "kept" if new_link is not None else "moved"
        if old_link is not None:
            token_hash, created = old_link.token_hash, old_link.created
            session.delete(old_link)
            session.flush()  # the token's hash is unique: the old row goes first
            if new_link is None:
                session.add(FeedTokenRow(user=new, token_hash=token_hash, created=created))
        # the old name is missing from the Hub because it was renamed: nothing is due any more
        session.execute(delete(MissingUserRow).where(MissingUserRow.user == old))
        renamed = Renamed(len(pools), series, waits, feed_link)
        if renamed == Renamed(0, 0, 0, "none"):
            # most likely a misspelt name: say so rather than report a rename of nothing
            raise InvalidRequest(f"There is nothing of user {old!r} here (no booking, series, "
                                 "wait or calendar link); check the name.")
        return renamed
