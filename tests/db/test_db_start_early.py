"""Start early in the database: offers after capacity frees, accepting one, and what refuses
it (capacity taken meanwhile, the user's rules, a booking that is not upcoming), on every
backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from db_test_times import at

from jhub_gpubooking.core.errors import Conflict, PolicyViolation
from jhub_gpubooking.db.start_early import EarlyStarts

EIGHT_HOURS = timedelta(hours=8)


def full_pool_and_a_later_booking(store):
    """a100 (node-a: 2, node-b: 4) full from 10:00 to 14:00; cy holds 1 GPU 14:00-16:00."""
    ada = store.create("ada", "a100", 4, at(10), at(14))
    bob = store.create("bob", "a100", 2, at(10), at(14))
    later = store.create("cy", "a100", 1, at(14), at(16))
    return ada, bob, later


def test_freed_capacity_is_offered_and_the_booking_moves_keeping_its_length(store):
    _, bob, later = full_pool_and_a_later_booking(store)
    early = EarlyStarts(store, EIGHT_HOURS)
    assert early.offers("cy") == []  # nothing is free before 14:00

    store.cancel(bob.id, "bob")  # End now at 10:05: node-a is free, in the running slot too
    [(offered, start, end)] = early.offers("cy")
    assert (offered.id, start, end) == (later.id, at(10), at(12))

    moved = early.start_early(later.id, actor="cy")
    assert (moved.start, moved.end, moved.placement.node) == (at(10), at(12), "node-a")
    assert store.get(later.id) == moved
    [event] = [e for e in store.history(later.id) if e.kind == "started_early"]
    assert (event.actor, event.detail["old_start"], event.detail["new_end"]) == (
        "cy", "2030-01-07T14:00:00Z", "2030-01-07T12:00:00Z")
    # its old time is free again: all six GPUs from 14:00 to 16:00
    assert [i.free_gpus for i in store.availability("a100", at(14), at(16))] == [6]
    # it cannot start any earlier than it now does
    assert early.offers("cy") == []
    with pytest.raises(Conflict):
        early.start_early(later.id, actor="cy")


def test_capacity_taken_before_the_user_accepts_refuses_and_changes_nothing(store):
    _, bob, later = full_pool_and_a_later_booking(store)
    early = EarlyStarts(store, EIGHT_HOURS)
    store.cancel(bob.id, "bob")
    assert len(early.offers("cy")) == 1
    store.create("dan", "a100", 2, at(10), at(11))

    with pytest.raises(Conflict, match="not free"):
        early.start_early(later.id, actor="cy")
    assert store.get(later.id) == later
    assert [e.kind for e in store.history(later.id)] == ["created"]


def test_only_upcoming_bookings_within_the_horizon_start_early(store):
    _, bob, later = full_pool_and_a_later_booking(store)
    store.cancel(bob.id, "bob")
    short = EarlyStarts(store, timedelta(hours=2))  # 14:00 is more than 2 hours away
    assert short.offers("cy") == []
    with pytest.raises(Conflict, match="within 2 hours"):
        short.start_early(later.id, actor="cy")
    store.cancel(later.id, "cy")
    with pytest.raises(Conflict, match="cancelled"):
        EarlyStarts(store, EIGHT_HOURS).start_early(later.id, actor="cy")


def test_the_users_rules_apply_to_the_new_times_but_not_to_an_admin(make_store):
    # cy's two bookings are 90 minutes apart; starting the second now would leave no gap
    store = make_store(default_policy={"cooldown_minutes": 60})
    first = store.create("cy", "t4", 1, at(11), at(11, 30))
    second = store.create("cy", "t4", 1, at(13), at(14))
    early = EarlyStarts(store, EIGHT_HOURS)

    assert [(b.id, start) for b, start, _ in early.offers("cy")] == [(first.id, at(10))]
    with pytest.raises(PolicyViolation):
        early.start_early(second.id, actor="cy")
    assert store.get(second.id).start == at(13)
    moved = early.start_early(second.id, actor="admin", is_admin=True)
    assert (moved.start, moved.end) == (at(10), at(11))


def test_bookings_to_email_are_those_that_fit_now_not_emailed_yet(store):
    _, bob, later = full_pool_and_a_later_booking(store)
    dan = store.create("dan", "t4", 1, at(12), at(13))  # another pool, free now
    early = EarlyStarts(store, EIGHT_HOURS)
    assert early.not_yet_emailed() == {"dan": [dan.id]}  # a100 is full before 14:00

    store.cancel(bob.id, "bob")
    assert early.not_yet_emailed() == {"cy": [later.id], "dan": [dan.id]}
    early.record_emailed(later.id, at(10), at(12))
    assert early.not_yet_emailed() == {"dan": [dan.id]}
    [event] = [e for e in store.history(later.id) if e.kind == "start_early_emailed"]
    assert (event.actor, event.detail) == (
        None, {"new_start": "2030-01-07T10:00:00Z", "new_end": "2030-01-07T12:00:00Z"})
    assert store.get(later.id) == later  # recording the e-mail moves nothing
