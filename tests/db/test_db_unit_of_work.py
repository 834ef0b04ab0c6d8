"""The store's public unit of work, on every backend: all or nothing, locks in name order."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest
from db_test_times import at
from sqlalchemy import event, func, select

from jhub_gpubooking.core.errors import NoCapacity, NotFound
from jhub_gpubooking.core.model import Booking, Placement
from jhub_gpubooking.db.events import NewEvent
from jhub_gpubooking.db.models import BookingEventRow, BookingRow


class Interrupted(Exception):
    """Raised inside a unit of work to abandon it."""


def request(user: str, pool: str, gpus: int | Fraction, start_hour: int, end_hour: int) -> Booking:
    return Booking(user=user, pool=pool, amount=Fraction(gpus), start=at(start_hour),
                   end=at(end_hour))


def counts(store) -> tuple[int, int]:
    with store.read_transaction() as session:
        bookings = session.scalar(select(func.count()).select_from(BookingRow))
        events = session.scalar(select(func.count()).select_from(BookingEventRow))
    return bookings, events


def test_placement_and_events_commit_together(store):
    with store.unit_of_work(["t4"]) as work:
        row = work.place(request("ada", "t4", 1, 11, 12), (), False, store.now(), "ada")
        work.record(row, "admin", "note_checked", reason="audit")
    booking = store.get(row.id)
    assert (booking.user, booking.pool, booking.amount) == ("ada", "t4", Fraction(1))
    assert [(e.kind, e.actor) for e in store.history(booking.id)] == [
        ("created", "ada"), ("note_checked", "admin")
    ]
    assert store.history(booking.id)[1].detail == {"reason": "audit"}


def test_an_exception_inside_rolls_back_placement_and_events(store):
    before = counts(store)
    with pytest.raises(Interrupted), store.unit_of_work(["t4"]) as work:
        row = work.place(request("ada", "t4", 2, 11, 12), (), False, store.now(), "ada")
        work.record(row, "ada", "claimed", server="ada/")
        raise Interrupted
    assert counts(store) == before
    # the capacity it had taken is free: the whole pool can be booked for the same hour
    assert store.create("bob", "t4", 2, at(11), at(12)).amount == Fraction(2)


def test_a_refused_placement_inside_rolls_back_what_came_before(store):
    before = counts(store)
    with pytest.raises(NoCapacity), store.unit_of_work(["t4"]) as work:
        work.place(request("ada", "t4", 1, 11, 12), (), False, store.now(), "ada")
        work.place(request("bob", "t4", 2, 11, 12), (), False, store.now(), "bob")
    assert counts(store) == before


def test_placements_see_the_unit_of_works_own_earlier_ones(store):
    with store.unit_of_work(["t4"]) as work:
        first = work.place(request("ada", "t4", 1, 11, 12), (), False, store.now(), "ada")
        second = work.place(request("bob", "t4", 1, 11, 12), (), False, store.now(), "bob")
        bookings, windows = work.overlapping("t4", at(11), at(12))
        assert sorted(b.id for b in bookings) == sorted([first.id, second.id])
        assert windows == []
        with pytest.raises(NoCapacity):
            work.place(request("cy", "t4", Fraction(1, 4), 11, 12), (), False, store.now(), "cy")
    assert {first.placement.gpus[0], second.placement.gpus[0]} == {0, 1}


def test_pools_are_locked_in_name_order(store, engine):
    locked = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "FROM pools" in statement:
            locked.append((" ".join(statement.split()), parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with store.unit_of_work(["t4", "a100", "t4"]) as work:
            assert work.locked_pools == ("a100", "t4")
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    if engine.dialect.name == "sqlite":
        # no row locks: BEGIN IMMEDIATE holds the database, and synced pools' rows exist
        assert locked == []
        return
    # one statement locks both rows, read (and so locked) in the order the names sort in
    [(statement, parameters)] = locked
    assert statement.endswith("ORDER BY pools.name FOR UPDATE")
    assert "a100" in str(parameters) and "t4" in str(parameters)


def test_a_pool_sorting_before_a_held_one_is_refused_before_it_waits(store):
    booking = store.create("ada", "t4", 1, at(11), at(12))
    with store.unit_of_work(["t4"]) as work:
        with pytest.raises(RuntimeError, match="out of name order"):
            work.lock_pools(["a100"])
        work.lock_pools(["t4"])  # held already: nothing to take
        assert work.lock_booking(booking.id).id == booking.id
        assert work.locked_pools == ("t4",)


def test_lock_booking_locks_the_bookings_pool_first(store):
    booking = store.create("ada", "t4", 1, at(11), at(12))
    with store.unit_of_work() as work:
        row = work.lock_booking(booking.id)
        assert (row.id, work.locked_pools) == (booking.id, ("t4",))
        with pytest.raises(NotFound):
            work.lock_booking(booking.id + 1000)


def test_lock_booking_given_its_pool_does_not_read_it(store):
    """The spawn's claim knows the booking's pool from its read: no ``pool_of`` statement."""
    booking = store.create("ada", "t4", 1, at(11), at(12))
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    with store.unit_of_work() as work:
        engine = work.session.get_bind()
        event.listen(engine, "before_cursor_execute", listener)
        try:
            row = work.lock_booking(booking.id, "t4")
        finally:
            event.remove(engine, "before_cursor_execute", listener)
        assert (row.id, work.locked_pools) == (booking.id, ("t4",))
        assert not [s for s in statements if "SELECT bookings.pool" in s]
        with pytest.raises(NotFound):
            work.lock_booking(booking.id + 1000, "t4")
    with pytest.raises(RuntimeError, match="not 'a100'"), store.unit_of_work() as work:
        work.lock_booking(booking.id, "a100")


def test_a_bookings_change_without_its_pools_lock_is_refused(store):
    """Every change of a booking takes its pool's lock before the booking's row (one order for
    every writer), and records an event, whose row read-locks the booking's. So each writer of
    events refuses a booking whose pool the unit of work does not hold (db/events.py): flagging
    held no pool and deadlocked with an end in the pool (CI, 2026-12-02)."""
    booking = store.create("ada", "t4", 1, at(11), at(12))
    elsewhere = Placement("node-c", (1,), booking.placement.slices)
    before = counts(store)
    changes = {
        "record": lambda work: work.record(booking, "admin", "note_checked"),
        "record_events": lambda work: work.record_events(
            [NewEvent(booking.id, "t4", "admin", "note_checked", {})]),
        "move_all": lambda work: work.move_all([(booking, elsewhere)]),
        "bind_booking": lambda work: work.bind_booking(booking, "ada/"),
        "add_placed": lambda work: work.add_placed(booking.with_changes(id=None), "ada"),
    }
    unlocked = r"pool\(s\) 't4' changed without their pool's lock"
    for name, change in changes.items():
        with pytest.raises(RuntimeError, match=unlocked), store.unit_of_work(["a100"]) as work:
            change(work)
        assert counts(store) == before, name
    assert store.get(booking.id) == booking
    with store.unit_of_work(["a100", "t4"]) as work:
        work.record_events([NewEvent(booking.id, "t4", "admin", "note_checked", {})])
    assert [e.kind for e in store.history(booking.id)] == ["created", "note_checked"]


def test_pools_of_reads_each_bookings_pool_and_locks_none(store):
    first = store.create("ada", "t4", 1, at(11), at(12))
    second = store.create("bob", "a100", 1, at(11), at(12))
    with store.unit_of_work() as work:
        assert work.pools_of([second.id, first.id, second.id + 1000]) == {
            first.id: "t4", second.id: "a100"}
        assert work.locked_pools == ()


def test_an_unknown_pool_is_not_found(store):
    with pytest.raises(NotFound, match="no GPU pool named 'h100'"), store.unit_of_work(["h100"]):
        pass


def test_the_creates_one_read_finds_what_the_two_reads_find(store, clock):
    """``place`` reads the user's bookings (for the policy) and the pool's (for capacity) in
    one statement: the same bookings as the two reads, each in its part."""
    from datetime import timedelta

    from jhub_gpubooking.db.queries import overlapping, policy_context, policy_context_and_overlapping

    store.create("ada", "t4", 1, at(10), at(11))  # ada's, in the request's pool and interval
    store.create("ada", "a100", 1, at(13), at(14))  # ada's, elsewhere
    store.create("bob", "t4", 1, at(11), at(13))  # the pool's, not ada's
    store.create("bob", "t4", 1, at(14), at(15))  # neither
    clock.advance(timedelta(hours=-1))
    store.create("ada", "a100", 1, at(9, 15), at(9, 30))  # ada's, before the policy's horizon
    clock.advance(timedelta(hours=1))
    store.add_maintenance("t4", at(11), at(12), reason="firmware")  # the pool's, in the interval
    store.add_maintenance("t4", at(12), at(13))  # the pool's, after the interval
    store.add_maintenance("a100", at(10), at(12))  # another pool's
    policy = store.policy_for(())
    asked = request("ada", "t4", 1, 10, 12)
    now = store.now()
    with store.read_transaction() as session:
        others, bookings, windows = policy_context_and_overlapping(session, policy, asked, now, now)
        apart = (policy_context(session, policy, asked, now),
                 *overlapping(session, "t4", asked.start, asked.end, now))
    assert (others, bookings, windows) == apart
    assert sorted((b.user, b.start.hour) for b in others) == [("ada", 10), ("ada", 13)]
    assert sorted((b.user, b.start.hour) for b in bookings) == [("ada", 10), ("bob", 11)]
    assert [(w.pool, w.start.hour, w.reason) for w in windows] == [("t4", 11, "firmware")]


#: The package's modules that may begin a transaction themselves, and why. Everything else
#: writes through ``BookingStore.unit_of_work`` and reads through ``read_transaction``.
OWN_TRANSACTIONS = {
    "db/session.py": "defines the write transaction and the migrations' transaction",
    "db/store.py": "defines unit_of_work and read_transaction",
    "db/copy.py": "copies into a new database no service uses yet",
    "db/restore.py": "reads backups; replaces every row in one write transaction, hub stopped",
    "db/undone.py": "reads the two backup files a restore compares, never a live database",
    "db/locks.py": "the advisory locks, on a connection of their own",
}
BEGINS_A_TRANSACTION = re.compile(r"\.begin\(\)|engine\.connect\(\)|\bSession\(|session_factory\(\)")


def test_every_database_write_goes_through_the_unit_of_work():
    """A write in a plain (deferred) transaction fails on SQLite whenever another write commits
    between its first read and its first write ("database is locked"): booking flags did, found
    by the concurrent write walk. The unit of work begins SQLite's write at once (``BEGIN
    IMMEDIATE``) and holds the pools' locks on the servers."""
    package = Path(__file__).parents[2] / "jhub_gpubooking"
    found = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "migrations" not in path.parts and BEGINS_A_TRANSACTION.search(path.read_text())
    }
    assert found <= set(OWN_TRANSACTIONS), sorted(found - set(OWN_TRANSACTIONS))


#: The modules that may name the events' table in a write; every other writer of a booking's
#: history goes through UnitOfWork.record / record_events, which check the pools' locks
EVENT_WRITERS = {"db/events.py"}
WRITES_EVENTS = re.compile(r"insert\(\s*(BookingEventRow|_events)\b|(?<!class )\bBookingEventRow\(")


def test_every_event_is_written_where_its_pools_lock_is_checked():
    package = Path(__file__).parents[2] / "jhub_gpubooking"
    found = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "migrations" not in path.parts and WRITES_EVENTS.search(path.read_text())
    }
    assert found == EVENT_WRITERS
