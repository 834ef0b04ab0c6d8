"""The waitlist in the database: joining, fair serving through the normal booking checks,
expiry and withdrawal, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from db_test_times import at
from server_databases import SERVERS, lock_waits
from sqlalchemy import event, text

from jhub_gpubooking.core.errors import Conflict, InvalidRequest, NoCapacity, PolicyViolation
from jhub_gpubooking.core.model import BookingState
from jhub_gpubooking.core.waitlist import WaitState
from jhub_gpubooking.db.waitlist import WaitStore as Waitlist


def fill_a100(store, start, end):
    """Book all six GPUs of pool a100 (node-a: 2, node-b: 4)."""
    return store.create("ada", "a100", 4, start, end), store.create("bob", "a100", 2, start, end)


def test_a_cancel_books_the_waits_in_fair_order(store, clock):
    big, small = fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    with pytest.raises(NoCapacity):
        store.create("cy", "a100", 2, at(11), at(12))
    first = waitlist.join("cy", "a100", 2, at(11), at(12))
    clock.advance(timedelta(minutes=1))
    second = waitlist.join("dan", "a100", 2, at(11), at(12))
    clock.advance(timedelta(minutes=1))
    urgent = waitlist.join("eve", "a100", 1, at(11), at(12), priority=5)
    assert waitlist.serve() == []  # nothing freed yet
    store.cancel(small.id, "bob")  # two GPUs of node-a free from 11:00
    served = waitlist.serve()
    # eve's priority comes first and takes one GPU; cy then no longer fits, dan neither
    assert [(w.id, b.user, b.amount) for w, b in served] == [(urgent.id, "eve", 1)]
    store.cancel(big.id, "ada")
    served = waitlist.serve()
    assert [w.id for w, _ in served] == [first.id, second.id]
    states = {w.id: (w.state, w.booking_id) for w in waitlist.list()}
    assert all(state is WaitState.BOOKED for state, _ in states.values())
    booking = store.get(states[first.id][1])
    assert (booking.user, booking.start, booking.end) == ("cy", at(11), at(12))
    assert booking.note == f"Booked from the waitlist (wait #{first.id})."
    kinds = [event.kind for event in store.history(booking.id)]
    assert kinds == ["created", "waitlist_booked"]


def test_serving_with_nothing_waiting_writes_nothing(store, engine):
    """Every cancel serves the waitlist, mostly to find nothing: one read says so, no write
    transaction (no expiry UPDATE, on SQLite no BEGIN IMMEDIATE)."""
    waitlist = Waitlist(store)
    withdrawn = waitlist.join("cy", "a100", 2, at(11), at(12))
    waitlist.withdraw(withdrawn.id)  # a wait that is not waiting does not count
    statements = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        statements.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        assert waitlist.serve() == []
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert [s for s in statements if "FROM waits" in s]
    assert not [s for s in statements if s.startswith(("UPDATE", "INSERT", "BEGIN IMMEDIATE"))]


def test_a_window_wait_gets_the_first_interval_that_fits(store):
    fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    wait = waitlist.join("cy", "a100", 1, at(11), at(12), window_end=at(15))
    # joining does not book; serving finds 13:00-14:00 within the window at once
    assert waitlist.get(wait.id).state is WaitState.WAITING
    [(served, booking)] = waitlist.serve(["a100"])
    assert (booking.start, booking.end, served.id) == (at(13), at(14), wait.id)


def test_the_users_limits_apply_when_a_wait_is_booked(make_store, clock):
    store = make_store(default_policy={"max_bookings": 1})
    _, small = fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    wait = waitlist.join("cy", "a100", 1, at(11), at(12))
    store.create("cy", "t4", 1, at(14), at(15))  # cy's one booking, made after joining
    store.cancel(small.id, "bob")
    assert waitlist.serve() == []
    assert waitlist.get(wait.id).state is WaitState.WAITING  # still waiting, nothing booked
    assert [b.user for b in store.list(user="cy")] == ["cy"]


def test_join_refuses_what_the_policy_refuses_and_bad_windows(make_store):
    store = make_store(default_policy={"max_minutes": 60})
    waitlist = Waitlist(store)
    with pytest.raises(PolicyViolation):
        waitlist.join("cy", "a100", 1, at(11), at(13))
    with pytest.raises(InvalidRequest):
        waitlist.join("cy", "a100", 1, at(11), at(12), window_end=at(11, 30))
    with pytest.raises(InvalidRequest):
        waitlist.join("cy", "a100", 1, at(11), at(12), window_end=at(13, 10))
    with pytest.raises(InvalidRequest):
        waitlist.join("cy", "a100", 1, at(8), at(9))  # in the past
    waitlist.join("cy", "a100", 1, at(11), at(12), max_waiting=1)
    with pytest.raises(Conflict, match="already have 1"):
        waitlist.join("cy", "a100", 1, at(12), at(13), max_waiting=1)


def test_waits_expire_after_their_latest_start_and_can_be_withdrawn(store, clock):
    fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    exact = waitlist.join("cy", "a100", 1, at(11), at(12))
    window = waitlist.join("dan", "a100", 1, at(11), at(12), window_end=at(12, 30))
    gone = waitlist.join("eve", "a100", 1, at(11), at(12))
    assert waitlist.withdraw(gone.id).state is WaitState.WITHDRAWN
    with pytest.raises(Conflict, match="withdrawn"):
        waitlist.withdraw(gone.id)
    clock.set(at(11, 14))  # the 11:00 slot still runs: nothing expires
    assert waitlist.expire() == 0
    clock.set(at(11, 15))
    assert waitlist.expire() == 1
    assert waitlist.get(exact.id).state is WaitState.EXPIRED
    assert waitlist.get(window.id).state is WaitState.WAITING  # may still start at 11:30
    clock.set(at(11, 45))
    assert waitlist.serve() == []
    assert waitlist.get(window.id).state is WaitState.EXPIRED


def test_a_running_slot_is_booked_from_its_beginning(store, clock):
    running = store.create("ada", "t4", 2, at(10), at(12))
    waitlist = Waitlist(store)
    wait = waitlist.join("cy", "t4", 2, at(10), at(11))
    clock.set(at(10, 10))
    store.cancel(running.id, "ada")  # ends now: the rest of the slot is free
    [(_, booking)] = waitlist.serve()
    assert (booking.id, booking.start, booking.end) == (
        waitlist.get(wait.id).booking_id, at(10), at(11)
    )
    assert booking.state(clock.now()) is BookingState.ACTIVE


def test_concurrent_serving_books_each_wait_once(make_store):
    from concurrent.futures import ThreadPoolExecutor

    store = make_store()
    _, small = fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    waits = [waitlist.join(user, "a100", 1, at(11), at(12)) for user in ("cy", "dan", "eve")]
    store.cancel(small.id, "bob")  # room for two of the three
    with ThreadPoolExecutor(4) as pool:
        served = [pair for result in pool.map(lambda _: waitlist.serve(), range(4))
                  for pair in result]
    assert sorted(w.id for w, _ in served) == [waits[0].id, waits[1].id]
    assert sorted(b.user for b in store.list(start=at(11), end=at(12))
                  if b.status == "booked") == ["ada", "cy", "dan"]
    assert waitlist.get(waits[2].id).state is WaitState.WAITING


@pytest.mark.parametrize("db_url", SERVERS,
                         indirect=True)
def test_expiring_waits_does_not_deadlock_with_a_wait_being_booked(make_store, engine, clock):
    """Every serve first expires what is past; another serve may be booking a wait meanwhile,
    holding its row (``_book``) and then changing its state. On MariaDB the expiry's UPDATE,
    which found its rows through the (state, pool) index, held the index entry and waited for
    the row, and the booking waited for the entry: a deadlock (CI, 2026-11-27). Here the
    booking side holds the row while the expiry runs; both must finish."""
    from concurrent.futures import ThreadPoolExecutor

    store = make_store()
    fill_a100(store, at(11), at(13))
    waitlist = Waitlist(store)
    wait = waitlist.join("cy", "a100", 1, at(11), at(12))  # not due: it may start until 12:00
    with engine.connect() as booking_side, engine.connect() as watcher, \
            ThreadPoolExecutor(1) as pool:
        booking_side.execute(text("SELECT id FROM waits WHERE id = :id FOR UPDATE"),
                             {"id": wait.id})
        expired = pool.submit(waitlist.expire, clock.now())
        # the expiry has finished, or waits for the row the booking side holds
        while not expired.done() and not lock_waits(watcher):
            watcher.rollback()  # a fresh snapshot of the lock tables each time
        booking_side.execute(text("UPDATE waits SET state = 'booked' WHERE id = :id"),
                             {"id": wait.id})
        booking_side.commit()
        assert expired.result() == 0
    assert waitlist.get(wait.id).state is WaitState.BOOKED


def test_a_wait_kept_out_by_the_spread_of_bookings_is_booked_by_moving_one(store):
    from jhub_gpubooking.core.model import Placement

    first = store.create("bob", "t4", "1/4", at(11), at(12))
    second = store.create("dan", "t4", "1/4", at(11), at(12))
    with store.unit_of_work(["t4"]) as work:  # spread out: one quarter on each GPU
        work.move_all([(second, Placement("node-c", (1 - first.placement.gpus[0],), 1))])
    waitlist = Waitlist(store)
    wait = waitlist.join("cy", "t4", 1, at(11), at(12))
    [(served, booking)] = waitlist.serve()
    assert (served.id, booking.user, booking.amount) == (wait.id, "cy", 1)
    quarters = [store.get(b.id).placement for b in (first, second)]
    assert quarters[0] == quarters[1]  # one quarter moved next to the other
    assert booking.placement.gpus != quarters[0].gpus
