"""Secret calendar-feed tokens: the capability behind ``feeds/{token}.ics``.

Only a token's SHA-256 is stored, so a leaked database does not leak working links, and a
token can be shown only once, when it is made.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select

from ..core.errors import Conflict
from .models import FeedTokenRow
from .store import BookingStore


def hash_feed_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_feed_token(store: BookingStore, user: str, reset: bool = False) -> str:
    """A new secret calendar-feed token for ``user``.

    Without ``reset`` this only works while the user has no token yet, because a stored
    hash cannot give the token back; with it, the older link stops working.
    """
    token = secrets.token_urlsafe(32)
    with store.unit_of_work() as work:
        row = work.session.get(FeedTokenRow, user)
        if row is not None and not reset:
            raise Conflict(
                "You already have a calendar link and it cannot be shown again; reset it "
                "to get a new one (the old link then stops working)."
            )
        if row is None:
            work.session.add(
                FeedTokenRow(user=user, token_hash=hash_feed_token(token), created=store.stamp())
            )
        else:
            row.token_hash = hash_feed_token(token)
            row.created = store.stamp()
    return token


def has_feed_token(store: BookingStore, user: str) -> bool:
    with store.read_transaction() as session:
        return session.get(FeedTokenRow, user) is not None


def user_for_feed_token(store: BookingStore, token: str) -> str | None:
    with store.read_transaction() as session:
        return session.execute(
            select(FeedTokenRow.user).where(FeedTokenRow.token_hash == hash_feed_token(token))
        ).scalar_one_or_none()


def feed_token_users(store: BookingStore) -> set[str]:
    """The users who have a calendar link."""
    with store.read_transaction() as session:
        return set(session.scalars(select(FeedTokenRow.user)))


def revoke_feed_token(store: BookingStore, user: str) -> bool:
    """Make ``user``'s calendar link stop working; False when they had none."""
    with store.unit_of_work() as work:
        row = work.session.get(FeedTokenRow, user)
        if row is None:
            return False
        work.session.delete(row)
        return True
