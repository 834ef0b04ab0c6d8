"""The store applies the booking policy with the user's relevant bookings read from the database."""

from __future__ import annotations

import pytest
from db_test_times import NOW, at

from jhub_gpubooking.core.errors import PolicyViolation

POLICY = {"max_minutes": 120, "max_bookings": 2}
GROUP_POLICIES = {"long-jobs": {"max_minutes": 480}}


@pytest.fixture
def store(make_store):
    return make_store(default_policy=POLICY, group_policies=GROUP_POLICIES)


def test_policy_refuses_with_403_and_admins_are_exempt(store):
    with pytest.raises(PolicyViolation) as refused:
        store.create("alice", "a100", 1, at(11), at(14))
    assert (refused.value.status, refused.value.rule) == (403, "max_minutes")
    assert refused.value.message == "Bookings can be at most 2 hours long; this one is 3 hours."
    assert store.create("alice", "a100", 1, at(11), at(14), is_admin=True).end == at(14)


def test_group_policies_apply_to_members(store):
    assert store.create("alice", "a100", 1, at(11), at(17), groups=("long-jobs",)).end == at(17)


def test_change_end_rechecks_the_policy(store):
    booking = store.create("alice", "a100", 1, at(11), at(12))
    with pytest.raises(PolicyViolation, match="at most 2 hours long; this one is 4 hours"):
        store.change_end(booking.id, at(15), actor="alice")
    assert store.change_end(booking.id, at(15), actor="admin", is_admin=True).end == at(15)


def test_max_bookings_counts_the_users_stored_bookings(store):
    store.create("alice", "a100", 1, at(11), at(12))
    cancelled = store.create("alice", "a100", 1, at(13), at(14))
    store.cancel(cancelled.id, actor="alice")
    store.create("alice", "t4", "1/4", at(15), at(16))
    with pytest.raises(PolicyViolation) as refused:
        store.create("alice", "t4", "1/4", at(17), at(18))
    assert refused.value.rule == "max_bookings"
    assert store.create("bob", "t4", "1/4", at(17), at(18)).user == "bob"


def test_budget_counts_bookings_that_already_ended_this_week(make_store, clock):
    store = make_store(default_policy={"budget_gpu_hours": 4})
    clock.set(at(0))  # Monday 00:00, the start of the budget week
    store.create("alice", "a100", 2, at(0), at(1, 30))
    clock.set(NOW)
    with pytest.raises(PolicyViolation) as refused:
        store.create("alice", "a100", 1, at(11), at(13))
    assert refused.value.rule == "budget_gpu_hours"
    assert "3.0 of 4 GPU-hours booked, 2.0 needed" in refused.value.message
    assert store.create("alice", "a100", 1, at(11), at(12)).end == at(12)


def test_cooldown_sees_the_booking_that_just_ended(make_store, clock):
    store = make_store(default_policy={"cooldown_minutes": 60})
    clock.set(at(9))
    store.create("alice", "a100", 1, at(9), at(9, 30))
    clock.set(NOW)
    with pytest.raises(PolicyViolation) as refused:
        store.create("alice", "a100", 1, at(10), at(11))
    assert refused.value.rule == "cooldown_minutes"
    assert store.create("alice", "t4", 1, at(10), at(11)).pool == "t4"
