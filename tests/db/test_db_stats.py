"""The metrics snapshot counts states in SQL and loads only what is active now."""

from __future__ import annotations

from db_test_times import at

from jhub_gpubooking.db.stats import metrics_snapshot


def test_states_are_counted_and_only_active_bookings_are_loaded(store, clock):
    ended = store.create("alice", "a100", 1, at(10), at(11))  # NOW is 10:05
    active = store.create("bob", "t4", "1/2", at(10), at(12))
    store.create("carol", "a100", 2, at(13), at(14))
    cancelled = store.create("dave", "a100", 1, at(15), at(16))
    store.cancel(cancelled.id, actor="dave")
    clock.set(at(11, 30))  # the first booking has ended, the second still runs

    counts, current = metrics_snapshot(store, clock.now())

    assert counts == {"upcoming": 1, "active": 1, "ended": 1, "cancelled": 1}
    assert [booking.id for booking in current] == [active.id]
    assert ended.id not in {booking.id for booking in current}


def test_an_empty_database_reports_every_state_as_zero(store, clock):
    assert metrics_snapshot(store, clock.now()) == (
        {"upcoming": 0, "active": 0, "ended": 0, "cancelled": 0},
        [],
    )
