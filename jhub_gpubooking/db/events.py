"""A booking's history, written: each event is a change of its booking, so its pool is locked.

Every change of a booking takes its pool's lock first (:meth:`.unit_of_work.UnitOfWork.lock_pools`,
in name order), and only then the booking's row: one order for every writer, so lock waits
never form a cycle. An event's row takes a lock of its own on its booking's row (its foreign
key: a shared lock on MariaDB, ``FOR KEY SHARE`` on PostgreSQL), so a writer of events without
the pool's lock broke that order. Node discovery's flags did, and deadlocked with an end in the
pool on MariaDB (CI, 2026-12-02). Every change of a booking records an event, so the events'
writer is where the rule is checked, for every writer at once: :func:`insert_events` refuses an
event whose booking's pool the transaction does not hold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, insert, select

from .models import BookingEventRow, BookingRow

INSERT_EVENT = insert(BookingEventRow.__table__)
#: What a booking's "created" event is given besides its booking's id (see
#: :func:`insert_booking_and_event`).
EVENT_PARAMETERS = ("event_at", "event_actor", "event_kind", "event_detail")


class NewEvent(NamedTuple):
    """An event to add to the history of booking ``booking_id``, of pool ``pool``."""

    booking_id: int
    pool: str
    actor: str | None  # None: the service itself
    kind: str
    detail: dict[str, Any]


def check_locked(locked: Collection[str], pools: Iterable[str]) -> None:
    """Refuse (RuntimeError: a caller's mistake, never the user's) a change of bookings of
    ``pools`` in a transaction that holds only the pools ``locked``."""
    missing = sorted(set(pools) - set(locked))
    if missing:
        raise RuntimeError(
            f"Bookings of pool(s) {', '.join(map(repr, missing))} changed without their pool's "
            "lock: lock every pool whose bookings a unit of work changes when it starts."
        )


def insert_events(connection: Connection, locked: Collection[str], at, events: list[NewEvent]
                  ) -> None:
    """Insert ``events``, all stamped ``at``, in one statement (executemany), once
    :func:`check_locked` found each booking's pool among ``locked``."""
    if not events:
        return
    check_locked(locked, (event.pool for event in events))
    connection.execute(INSERT_EVENT, [
        {"booking_id": event.booking_id, "at": at, "actor": event.actor, "kind": event.kind,
         "detail": event.detail}
        for event in events
    ])


@cache
def insert_booking_and_event(columns: tuple[str, ...]):
    """PostgreSQL only: the booking's INSERT (of ``columns``, each given as the parameter of
    its name) and its first event's, in one statement (a data-modifying ``WITH``), returning
    the new booking's id. A round trip less on the service's most frequent write; SQLite and
    MariaDB have no INSERT inside a ``WITH``, so they send the two inserts."""
    bookings, events = BookingRow.__table__, BookingEventRow.__table__
    new_booking = (
        insert(bookings)
        .values({name: bindparam(name, type_=bookings.c[name].type) for name in columns})
        .returning(bookings.c.id)
        .cte("new_booking")
    )
    event = select(new_booking.c.id, *(
        bindparam(parameter, type_=events.c[parameter.removeprefix("event_")].type)
        for parameter in EVENT_PARAMETERS
    ))
    return (
        insert(events)
        .from_select(["booking_id", "at", "actor", "kind", "detail"], event)
        .returning(events.c.booking_id)
        .add_cte(new_booking)
    )
