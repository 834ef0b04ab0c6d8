"""Booking flags (:mod:`jhub_gpubooking.db.flags`) beside the other writers of bookings."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from db_test_times import at
from server_databases import SERVERS, lock_waits
from sqlalchemy import text

from jhub_gpubooking.db.flags import BookingFlags


def test_flags_are_raised_and_cleared(store):
    flags = BookingFlags(store)
    first = store.create("ada", "a100", 1, at(11), at(12))
    second = store.create("bob", "t4", 1, at(11), at(12))
    flags.update({second.id: "GPUs gone", first.id: "node gone"}, {first.id, second.id})
    assert {i: f.message for i, f in flags.current().items()} == {
        first.id: "node gone", second.id: "GPUs gone"}
    flags.update({second.id: "GPUs gone"}, {first.id, second.id})
    assert list(flags.current()) == [second.id]
    assert [e.kind for e in store.history(first.id)] == ["created", "flagged", "unflagged"]
    flags.update({second.id: "GPUs gone"}, {first.id, second.id})  # unchanged: no new event
    assert [e.kind for e in store.history(second.id)] == ["created", "flagged"]


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_flagging_waits_for_a_change_of_the_pool_instead_of_deadlocking(store, engine):
    """A flag is an event row, whose foreign key read-locks its booking's row. Flagging took no
    pool lock, so it held the lock of one booking's row while it waited for another's, held by a
    change of the pool (an end, a move) that wanted the first next: a deadlock on MariaDB (the
    concurrent write walk, CI 2026-12-02). Here that change holds the pool and the lower
    booking, and only then locks the higher one; flagging both must wait, then flag both."""
    lower = store.create("ada", "a100", 1, at(11), at(12))
    higher = store.create("bob", "a100", 1, at(11), at(12))
    flags = BookingFlags(store)
    lock = "SELECT {column} FROM {table} WHERE {column} = :key FOR UPDATE"
    with engine.connect() as change, engine.connect() as watcher, ThreadPoolExecutor(1) as pool:
        change.execute(text(lock.format(table="pools", column="name")), {"key": "a100"})
        change.execute(text(lock.format(table="bookings", column="id")), {"key": lower.id})
        # the higher booking first, as a dict of the inventory may give them
        flagged = pool.submit(flags.update, {higher.id: "GPUs gone", lower.id: "GPUs gone"},
                              {lower.id, higher.id})
        while not flagged.done() and not lock_waits(watcher):
            watcher.rollback()  # a fresh snapshot of the lock tables each time
        change.execute(text(lock.format(table="bookings", column="id")), {"key": higher.id})
        change.commit()
        flagged.result()
    assert sorted(flags.current()) == [lower.id, higher.id]
