"""A create sent again with its Idempotency-Key answers what it made (a booking, a wait, a series,
a maintenance window), on every backend."""

from __future__ import annotations

import threading
from datetime import timedelta
from fractions import Fraction

import pytest
from db_test_times import at
from sqlalchemy import func, select

from jhub_gpubooking.core.errors import InvalidRequest, KeyReused, NoCapacity
from jhub_gpubooking.core.recurrence import occurrences
from jhub_gpubooking.db import creates, maintenance, series, waitlist
from jhub_gpubooking.db.models import BookingRow
from jhub_gpubooking.db.waitlist import WaitStore

KEY = "0b6f2c7e-1d2a-4c3b-8e9f-5a6b7c8d9e0f"


def bookings(store) -> int:
    with store.read_transaction() as session:
        return session.scalar(select(func.count()).select_from(BookingRow))


def test_the_same_create_sent_again_answers_the_booking_it_made(make_store):
    # a policy of one booking at a time: without the key the second copy would be refused
    store = make_store(default_policy={"max_bookings": 1})
    first = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    again = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    assert again == first
    assert bookings(store) == 1
    assert [e.kind for e in store.history(first.id)] == ["created"]


def test_a_repeat_answers_the_booking_as_it_is_now(store):
    first = store.create("alice", "t4", Fraction(1, 4), at(10), at(11), request_key=KEY)
    store.change_end(first.id, at(12), actor="alice")
    again = store.create("alice", "t4", Fraction(1, 4), at(10), at(11), request_key=KEY)
    assert (again.id, again.end) == (first.id, at(12))
    ended = store.cancel(first.id, actor="alice")  # "End now": it runs at the store's now
    assert store.create("alice", "t4", "0.25", at(10), at(11), request_key=KEY) == ended
    assert bookings(store) == 1


def test_a_key_is_the_user_s_own(store):
    alices = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    bobs = store.create("bob", "a100", 1, at(10), at(11), request_key=KEY)
    assert alices.id != bobs.id
    assert bookings(store) == 2


def test_a_key_sent_with_another_create_is_refused(store):
    first = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    for other in [("a100", 2, at(10), at(11)), ("a100", 1, at(10), at(12)),
                  ("t4", 1, at(10), at(11))]:
        with pytest.raises(KeyReused) as refused:
            store.create("alice", *other, request_key=KEY)
        assert refused.value.status == 422
        assert refused.value.message == (
            f"This Idempotency-Key was used for booking #{first.id}, made for other GPUs or "
            "times; send a new key for a new booking.")
    assert bookings(store) == 1


def test_a_refused_create_keeps_no_key(store):
    whole = [store.create("bob", "a100", n, at(12), at(13)) for n in (2, 4)]  # the whole pool
    with pytest.raises(NoCapacity):
        store.create("alice", "a100", 1, at(12), at(13), request_key=KEY)
    store.cancel(whole[0].id, actor="bob")
    made = store.create("alice", "a100", 1, at(12), at(13), request_key=KEY)
    assert store.create("alice", "a100", 1, at(12), at(13), request_key=KEY) == made


def test_copies_written_together_make_one_booking(store):
    copies = [store.new_booking("alice", "a100", 1, at(10), at(11), request_key=KEY)
              for _ in range(3)]
    outcomes = store.create_all(copies)
    assert len({o.id for o in outcomes}) == 1
    assert bookings(store) == 1


@pytest.mark.parametrize("key", ["", "with space", "x" * 65, "ünïcode", 42])
def test_a_malformed_key_is_refused_before_the_database(store, key):
    with pytest.raises(InvalidRequest, match="Idempotency-Key must be 1 to 64 visible ASCII"):
        store.create("alice", "a100", 1, at(10), at(11), request_key=key)
    assert bookings(store) == 0


def test_sent_again_after_its_start_passed_it_still_answers_the_booking(store, clock):
    first = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    clock.advance(timedelta(minutes=45))  # the slot it started in is over
    assert store.create("alice", "a100", 1, at(10), at(11), request_key=KEY) == first
    with pytest.raises(InvalidRequest, match="is in the past"):
        store.create("alice", "a100", 1, at(10), at(11), request_key="another")
    with pytest.raises(InvalidRequest, match="is in the past"):
        store.create("alice", "a100", 1, at(10), at(11))
    assert bookings(store) == 1


def test_a_join_of_the_waitlist_sent_again_answers_the_wait_it_added(store, clock):
    waits = WaitStore(store)
    store.create("bob", "a100", 2, at(12), at(13))
    store.create("bob", "a100", 4, at(12), at(13))  # the whole pool: the wait waits
    first = waits.join("alice", "a100", 1, at(12), at(13), window_end=at(15),
                       request_key=KEY, max_waiting=1)
    # one wait at a time: without the key the copy would be refused
    assert waits.join("alice", "a100", 1, at(12), at(13), window_end=at(15),
                      request_key=KEY, max_waiting=1) == first
    with pytest.raises(KeyReused, match=f"used for wait #{first.id}, made for other GPUs"):
        waits.join("alice", "a100", 1, at(12), at(13), request_key=KEY)  # no window
    assert waits.join("bob", "a100", 1, at(12), at(13), request_key=KEY).id != first.id
    clock.advance(timedelta(hours=5))  # its start has passed
    assert waits.join("alice", "a100", 1, at(12), at(13), window_end=at(15),
                      request_key=KEY).id == first.id
    with pytest.raises(InvalidRequest, match="is in the past"):
        waits.join("alice", "a100", 1, at(12), at(13), window_end=at(15), request_key="new")


def first_look_misses(module, name: str, monkeypatch) -> list:
    """``module.name`` (a look-up by key) finding nothing the first time, as when a copy sent
    at once to another pool committed between this create's look-up and its insert."""
    real, looks = getattr(module, name), []

    def raced(*args):
        looks.append(args)
        return None if len(looks) == 1 else real(*args)

    monkeypatch.setattr(module, name, raced)
    return looks


def test_a_copy_sent_at_once_to_another_pool_is_refused_not_an_error(store, monkeypatch):
    first = store.create("alice", "a100", 1, at(10), at(11), request_key=KEY)
    looks = first_look_misses(creates, "made_with_key", monkeypatch)
    # its insert meets the unique index; tried again, the look-up finds the first
    with pytest.raises(KeyReused, match=f"used for booking #{first.id}, made for other GPUs"):
        store.create("alice", "t4", 1, at(10), at(11), request_key=KEY)
    assert len(looks) == 2
    assert bookings(store) == 1


def test_a_join_sent_at_once_to_another_pool_is_refused_not_an_error(store, monkeypatch):
    waits = WaitStore(store)
    first = waits.join("alice", "a100", 1, at(12), at(13), request_key=KEY)
    looks = first_look_misses(waitlist, "wait_with_key", monkeypatch)
    with pytest.raises(KeyReused, match=f"used for wait #{first.id}, made for other GPUs"):
        waits.join("alice", "t4", 1, at(12), at(13), request_key=KEY)
    assert len(looks) == 2
    assert [w.id for w in waits.list(user="alice")] == [first.id]


def test_two_copies_racing_in_two_pools_make_one_booking_and_one_refusal(store, engine,
                                                                         monkeypatch):
    """Two threads, two pools (two locks), one key: on PostgreSQL and MariaDB both look up
    before either inserts, the database's unique index lets one in, and the other is refused
    as a reused key, not a 500. SQLite writes one transaction at a time (BEGIN IMMEDIATE): the
    second looks up after the first committed, with the same outcome."""
    racing = engine.dialect.name != "sqlite"
    both_looked = threading.Barrier(2, timeout=60)
    real, calls, lock = creates.made_with_key, [], threading.Lock()

    def look_then_wait(*args):
        found = real(*args)
        with lock:
            calls.append(found)
            first_round = len(calls) <= 2
        if racing and first_round:
            both_looked.wait()
        return found

    monkeypatch.setattr(creates, "made_with_key", look_then_wait)
    outcomes: dict[str, object] = {}

    def create(pool: str) -> None:
        try:
            outcomes[pool] = store.create("alice", pool, 1, at(10), at(11), request_key=KEY)
        except Exception as error:  # noqa: BLE001 (the outcome under test)
            outcomes[pool] = error

    threads = [threading.Thread(target=create, args=(pool,)) for pool in ("a100", "t4")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    made = [o for o in outcomes.values() if not isinstance(o, Exception)]
    refused = [o for o in outcomes.values() if isinstance(o, Exception)]
    assert len(made) == 1 and len(refused) == 1, outcomes
    assert isinstance(refused[0], KeyReused), repr(refused[0])
    assert f"used for booking #{made[0].id}" in refused[0].message
    # the loser's second look-up raised the 422; on SQLite its first one did
    assert calls == ([None, None] if racing else [None])
    assert bookings(store) == 1


def weekly(count: int, hour: int = 10) -> list:
    return occurrences(at(hour), at(hour + 1), "weekly", count=count, max_occurrences=26)


def test_a_series_sent_again_answers_the_series_it_booked(make_store, clock):
    # one booking at a time per week would refuse every occurrence of a second copy
    store = make_store(default_policy={"max_bookings": 3})
    first = series.create_series(store, "alice", "t4", "0.25", weekly(3), "weekly",
                                 request_key=KEY)
    store.change_end(first.bookings[0].id, at(12), actor="alice")
    again = series.create_series(store, "alice", "t4", "0.25", weekly(3), "weekly",
                                 request_key=KEY)
    assert again.id == first.id
    assert [b.id for b in again.bookings] == [b.id for b in first.bookings]
    assert again.bookings[0].end == at(12)  # as it is now
    assert bookings(store) == 3
    clock.advance(timedelta(hours=1, minutes=30))  # the first occurrence has started
    assert series.create_series(store, "alice", "t4", "0.25", weekly(3), "weekly",
                                request_key=KEY).id == first.id
    with pytest.raises(InvalidRequest, match="is in the past"):
        series.create_series(store, "alice", "t4", "0.25", weekly(3), "weekly",
                             request_key="another")


@pytest.mark.parametrize("other", [
    ("a100", 1, weekly(3), "weekly"),     # another pool
    ("t4", "0.5", weekly(3), "weekly"),   # another amount
    ("t4", "0.25", weekly(2), "weekly"),  # other occurrences
    ("t4", "0.25", weekly(3, hour=12), "weekly"),
])
def test_a_series_key_sent_with_another_series_is_refused(store, other):
    first = series.create_series(store, "alice", "t4", "0.25", weekly(3), "weekly",
                                 request_key=KEY)
    with pytest.raises(KeyReused, match=f"used for series #{first.id}, made for other GPUs"):
        series.create_series(store, "alice", *other, request_key=KEY)
    assert bookings(store) == 3


def test_a_refused_series_keeps_no_key_and_a_race_is_a_refusal(store, monkeypatch):
    blocker = store.create("bob", "t4", 2, at(10, days=7), at(11, days=7))  # the 2nd week
    with pytest.raises(series.SeriesRefused):
        series.create_series(store, "alice", "t4", 1, weekly(3), "weekly", request_key=KEY)
    store.cancel(blocker.id, actor="bob")
    made = series.create_series(store, "alice", "t4", 1, weekly(3), "weekly", request_key=KEY)
    looks = first_look_misses(series, "series_with_key", monkeypatch)
    with pytest.raises(KeyReused, match=f"used for series #{made.id}"):
        series.create_series(store, "alice", "a100", 1, weekly(3), "weekly", request_key=KEY)
    assert len(looks) == 2
    assert bookings(store) == 4


def windows(store) -> list:
    return [(w.id, w.pool, w.node, w.reason) for w in store.list_maintenance()]


def test_a_maintenance_window_sent_again_answers_the_window_it_added(store):
    booked = store.create("alice", "a100", 1, at(10), at(11))
    first, colliding = store.add_maintenance("a100", at(9), at(12), reason="driver",
                                             actor="admin", request_key=KEY)
    assert [b.id for b in colliding] == [booked.id]
    store.cancel(booked.id, actor="admin")  # the admin cancelled it in between
    again, colliding_now = store.add_maintenance("a100", at(9), at(12), reason="driver",
                                                 actor="admin", request_key=KEY)
    assert again == first
    assert colliding_now == []  # what it collides with now
    assert windows(store) == [(first.id, "a100", None, "driver")]
    # another admin's key is not looked at; without a key a second window is added
    other, _ = store.add_maintenance("a100", at(9), at(12), reason="driver", actor="root",
                                     request_key=KEY)
    unkeyed, _ = store.add_maintenance("a100", at(9), at(12), reason="driver", actor="admin")
    assert len({first.id, other.id, unkeyed.id}) == 3


@pytest.mark.parametrize("other", [
    {"pool": "t4"},
    {"node": "node-b"},
    {"end": at(13)},
    {"reason": "another reason"},
])
def test_a_maintenance_key_sent_with_another_window_is_refused(store, other):
    asked = {"pool": "a100", "start": at(9), "end": at(12), "node": None, "reason": "driver"}
    first, _ = store.add_maintenance(**asked, actor="admin", request_key=KEY)
    with pytest.raises(KeyReused) as refused:
        store.add_maintenance(**{**asked, **other}, actor="admin", request_key=KEY)
    assert refused.value.message == (
        f"This Idempotency-Key was used for maintenance window #{first.id}, made for other GPUs "
        "or times; send a new key for a new maintenance window.")
    assert [w[0] for w in windows(store)] == [first.id]


def test_a_maintenance_window_sent_at_once_to_another_pool_is_refused_not_an_error(
        store, monkeypatch):
    first, _ = store.add_maintenance("a100", at(9), at(12), actor="admin", request_key=KEY)
    looks = first_look_misses(maintenance, "window_with_key", monkeypatch)
    # its insert meets the unique (created_by, key) index; tried again, the look-up finds it
    with pytest.raises(KeyReused, match=f"used for maintenance window #{first.id}"):
        store.add_maintenance("t4", at(9), at(12), actor="admin", request_key=KEY)
    assert len(looks) == 2
    assert [w[0] for w in windows(store)] == [first.id]
    with pytest.raises(InvalidRequest, match="Idempotency-Key must be 1 to 64"):
        store.add_maintenance("t4", at(9), at(12), actor="admin", request_key="with space")
