"""The database schema, as SQLAlchemy 2 declarative models.

Times are stored as naive UTC (portable across SQLite, PostgreSQL and MySQL) and come back
timezone-aware; :class:`UTCDateTime` does that conversion at the edge so no other code has to.
Any change here needs a new Alembic migration in ``db/migrations/versions``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Same convention as jupyterhub's orm.py, so constraints get stable names on every
# backend and future migrations can drop or alter them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: How many distinct stored times each dialect's :class:`UTCDateTime` conversion remembers.
RESULT_CACHE_SIZE = 8192
#: Longest user / server name we store (JupyterHub names are far shorter in practice).
NAME_LENGTH = 255
POOL_NAME_LENGTH = 63
#: The longest Idempotency-Key a create may carry (a UUID has 36 characters).
REQUEST_KEY_LENGTH = 64


class UTCDateTime(TypeDecorator):
    """Aware datetimes in, naive UTC in the column, aware UTC out."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            # a naive time here is a programming error: its zone is unknown
            raise ValueError(f"Refusing to store naive datetime {value!r}; pass UTC-aware times.")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc)

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        """The conversion :meth:`process_result_value` completes, remembered for the most
        recent distinct values: SQLite returns text that SQLAlchemy parses with a regular
        expression (microseconds a value), and the bookings of a busy pool that a create reads,
        hundreds of rows, hold far fewer distinct times (datetimes are immutable: sharing one
        is safe)."""
        return lru_cache(maxsize=RESULT_CACHE_SIZE)(super().result_processor(dialect, coltype))


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PoolRow(Base):
    """A configured pool; its row is locked to serialise placements in that pool."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(POOL_NAME_LENGTH), primary_key=True)
    config: Mapped[dict] = mapped_column(JSON)
    synced_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BookingRow(Base):
    """One booking; the amount is an exact fraction ``amount_num / amount_den`` GPUs."""

    __tablename__ = "bookings"
    __table_args__ = (
        # placement reads only the bookings overlapping an interval: pool = ? AND end > ? ...
        Index("ix_bookings_pool_end_start", "pool", "end", "start"),
        # policy reads a user's recent and future bookings
        Index("ix_bookings_user_end", "user", "end"),
        # a create sent again after its answer was lost finds the booking it made (0007)
        Index("ix_bookings_user_request_key", "user", "request_key", unique=True),
        CheckConstraint("status IN ('booked', 'cancelled')", name="status"),
        # SQLite never gives an id twice, not even after a restore (0010)
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(NAME_LENGTH))
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    slices: Mapped[int] = mapped_column(Integer)
    amount_num: Mapped[int] = mapped_column(Integer)
    amount_den: Mapped[int] = mapped_column(Integer)
    start: Mapped[datetime] = mapped_column(UTCDateTime)
    end: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16), default="booked")
    note: Mapped[str] = mapped_column(Text, default="")
    node: Mapped[str] = mapped_column(String(NAME_LENGTH))
    gpu_indices: Mapped[list] = mapped_column(JSON)
    slices_per_gpu_held: Mapped[int] = mapped_column(Integer)
    # name of the Hub server using the booking ("" = default server), None = unused
    server: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    updated: Mapped[datetime] = mapped_column(UTCDateTime)
    # --- lifecycle (migration 0002); NULL on rows written before it
    # the booker's Hub groups when booking (group budgets and reports; None = not known)
    groups: Mapped[list | None] = mapped_column(JSON)
    # a booking released early keeps the end it had, so reports can tell booked from released
    released_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    release_reason: Mapped[str | None] = mapped_column(String(32))
    # when the last server holding the booking stopped (reclaim of stopped bookings)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # the end the user was last warned about (an extension re-arms the warning)
    warned_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    stop_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # a short grant on capacity free right now, preempted when a booking needs it
    opportunistic: Mapped[bool | None] = mapped_column(Boolean, default=False)
    # --- recurring bookings (migration 0003): the series this booking is one occurrence of
    series_id: Mapped[int | None] = mapped_column(ForeignKey("booking_series.id"), index=True)
    # --- (migration 0007) the Idempotency-Key its create was sent with, unique per user
    request_key: Mapped[str | None] = mapped_column(String(REQUEST_KEY_LENGTH))


class BookingSeriesRow(Base):
    """A daily or weekly series of bookings, created and cancelled together."""

    __tablename__ = "booking_series"
    __table_args__ = (
        # a series sent again after its answer was lost finds the series it made (0008)
        Index("ix_booking_series_user_request_key", "user", "request_key", unique=True),
        {"sqlite_autoincrement": True},  # 0010
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(NAME_LENGTH))
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    repeat: Mapped[str] = mapped_column(String(16))
    note: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    # --- (migration 0008) the Idempotency-Key its create was sent with, unique per user
    request_key: Mapped[str | None] = mapped_column(String(REQUEST_KEY_LENGTH))


class UsageIntervalRow(Base):
    """When a server actually used a booking: opened at claim, closed at release."""

    __tablename__ = "usage_intervals"
    __table_args__ = ({"sqlite_autoincrement": True},)  # 0010

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    booking_id: Mapped[int] = mapped_column(ForeignKey("bookings.id"), index=True)
    server: Mapped[str] = mapped_column(String(NAME_LENGTH))
    start: Mapped[datetime] = mapped_column(UTCDateTime)
    # None while the server still runs
    end: Mapped[datetime | None] = mapped_column(UTCDateTime)


class BookingEventRow(Base):
    """Append-only history of a booking (created, cancelled, end_changed, claimed, ...)."""

    __tablename__ = "booking_events"
    __table_args__ = ({"sqlite_autoincrement": True},)  # 0010

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    booking_id: Mapped[int] = mapped_column(ForeignKey("bookings.id"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict] = mapped_column(JSON)


class MaintenanceWindowRow(Base):
    """An admin block of a whole pool (``node`` NULL) or one node."""

    __tablename__ = "maintenance_windows"
    # windows are deleted, not kept: on SQLite, AUTOINCREMENT keeps a deleted window's id from
    # being given to the next one, so a retried DELETE cannot remove a newer window (migration 0005)
    __table_args__ = (
        Index("ix_maintenance_windows_pool_end_start", "pool", "end", "start"),
        Index("ix_maintenance_windows_created_by_request_key", "created_by", "request_key",
              unique=True),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    node: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    start: Mapped[datetime] = mapped_column(UTCDateTime)
    end: Mapped[datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    # the Idempotency-Key it was added with, unique per admin (migration 0009; db/request_keys.py)
    request_key: Mapped[str | None] = mapped_column(String(REQUEST_KEY_LENGTH))


class FeedTokenRow(Base):
    """A user's calendar-feed token; only its SHA-256 is stored."""

    __tablename__ = "feed_tokens"

    user: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created: Mapped[datetime] = mapped_column(UTCDateTime)


class WaitRow(Base):
    """A refused request on the waitlist (migration 0004); see :mod:`jhub_gpubooking.core.waitlist`.

    ``start`` .. ``latest_start`` are the starts a booking of ``minutes`` may get (equal for a
    wait on the very interval that was refused); ``booking_id`` is the booking it got.
    """

    __tablename__ = "waits"
    __table_args__ = (
        # serving reads a pool's waiting requests; the page reads one user's
        Index("ix_waits_state_pool", "state", "pool"),
        Index("ix_waits_user_state", "user", "state"),
        # a join sent again after its answer was lost finds the wait it made (0007)
        Index("ix_waits_user_request_key", "user", "request_key", unique=True),
        CheckConstraint("state IN ('waiting', 'booked', 'expired', 'withdrawn')", name="state"),
        {"sqlite_autoincrement": True},  # 0010
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(NAME_LENGTH))
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    amount_num: Mapped[int] = mapped_column(Integer)
    amount_den: Mapped[int] = mapped_column(Integer)
    start: Mapped[datetime] = mapped_column(UTCDateTime)
    latest_start: Mapped[datetime] = mapped_column(UTCDateTime)
    minutes: Mapped[int] = mapped_column(Integer)
    # served higher first, then in the order joined (Waitlist.group_priorities)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # the user's Hub groups when joining: the policy the booking is checked against
    groups: Mapped[list] = mapped_column(JSON)
    note: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16), default="waiting")
    booking_id: Mapped[int | None] = mapped_column(ForeignKey("bookings.id"))
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    updated: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    # the Idempotency-Key its join was sent with, unique per user (migration 0007)
    request_key: Mapped[str | None] = mapped_column(String(REQUEST_KEY_LENGTH))


class MissingUserRow(Base):
    """A user the Hub no longer has, and since when (migration 0006); see
    :mod:`jhub_gpubooking.core.removed_users`.

    Kept in the database, not in the service's memory, so a restart of the service (every
    ``helm upgrade`` restarts the hub pod) does not start the grace again, every service
    process sharing the database sees the same times, and admins can list the users whose
    bookings are about to be taken off.
    """

    __tablename__ = "missing_users"

    user: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    since: Mapped[datetime] = mapped_column(UTCDateTime)
