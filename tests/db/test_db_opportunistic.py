"""Opportunistic grants and their preemption against a real store (ManualClock at 10:05)."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from db_test_times import at

from jhub_gpubooking.core.errors import Conflict, NoCapacity, PolicyViolation
from jhub_gpubooking.core.lifecycle import LifecycleRules
from jhub_gpubooking.core.model import BookingState
from jhub_gpubooking.db.accounting import running_usage
from jhub_gpubooking.db.lifecycle import BookingLifecycle
from jhub_gpubooking.db.opportunistic import OpportunisticBookings

HORIZON = 60  # minutes: grants asked for at 10:05 run 10:00-11:15


def opportunistic(store) -> OpportunisticBookings:
    return OpportunisticBookings(store, BookingLifecycle(store, LifecycleRules()))


def test_a_grant_runs_from_the_current_slot_to_the_horizon(store):
    grant = opportunistic(store).grant("ada", "a100", 1, HORIZON)
    assert (grant.start, grant.end, grant.opportunistic) == (at(10), at(11, 15), True)
    assert grant.state(at(10, 5)) is BookingState.ACTIVE
    assert [b.id for b in store.active_for_user("ada")] == [grant.id]
    assert store.history(grant.id)[0].detail["opportunistic"] is True


def test_a_grant_only_takes_gpus_nobody_booked_within_the_horizon(store):
    # one t4 GPU is booked from 10:30: free now, but not for the whole horizon
    booked = store.create("bob", "t4", 1, at(10, 30), at(11))
    grant = opportunistic(store).grant("ada", "t4", 1, HORIZON)
    assert grant.placement.node == "node-c"
    assert set(grant.placement.gpus).isdisjoint(booked.placement.gpus)

    with pytest.raises(Conflict) as refused:
        opportunistic(store).grant("carol", "t4", Fraction(1, 4), HORIZON)
    assert refused.value.message == (
        "No 0.25 GPU of pool t4 is free from now until 2030-01-07 11:15 UTC, so it cannot be "
        "used without a booking."
    )


def test_asking_again_returns_the_running_grant(store):
    first = opportunistic(store).grant("ada", "a100", 1, HORIZON)
    again = opportunistic(store).grant("ada", "a100", 1, HORIZON)
    assert again.id == first.id
    assert len(store.list(user="ada")) == 1


def test_a_grant_for_a_server_is_created_already_claimed(store):
    """One transaction creates and claims it: no moment exists in which it is unheld, so a pod
    the admission webhook admits (or another start) cannot take it first."""
    grant = opportunistic(store).grant("ada", "a100", 1, HORIZON, server="gpu")
    stored = store.get(grant.id)
    assert (grant.server, stored.server, stored.opportunistic) == ("gpu", "gpu", True)
    assert [e.kind for e in store.history(grant.id)] == ["created", "claimed"]
    assert store.history(grant.id)[1].detail == {"server": "gpu", "taken_over_from": None}
    assert running_usage(store)[grant.id].start == at(10, 5)
    with pytest.raises(Conflict) as taken:
        store.claim(grant.id, "pod:default/eager")
    assert taken.value.message == "This booking is already in use by server 'gpu'."


def test_a_running_grant_is_claimed_for_a_server_only_when_nobody_holds_it(store):
    unheld = opportunistic(store).grant("ada", "a100", 1, HORIZON)
    claimed = opportunistic(store).grant("ada", "a100", 1, HORIZON, server="gpu")
    assert (claimed.id, claimed.server) == (unheld.id, "gpu")
    # another server gets the grant back as it is: whether "gpu" still runs is the caller's check
    other = opportunistic(store).grant("ada", "a100", 1, HORIZON, server="other")
    assert (other.id, other.server) == (unheld.id, "gpu")
    assert [e.kind for e in store.history(unheld.id)] == ["created", "claimed"]
    assert len(store.list(user="ada")) == 1


def test_a_grant_respects_the_pools_a_user_may_use(make_store):
    store = make_store(default_policy={"allowed_pools": ["a100"]})
    with pytest.raises(PolicyViolation) as refused:
        opportunistic(store).grant("ada", "t4", 1, HORIZON)
    assert refused.value.message == "You may not use the GPU pool t4, not even when it is free."


def test_a_booking_that_starts_now_preempts_the_grant_in_its_way(store):
    grant = opportunistic(store).grant("ada", "t4", 2, HORIZON)  # the whole pool
    booking, preempted = opportunistic(store).create_preempting(
        "bob", "t4", 1, at(10), at(11), actor="bob"
    )
    assert [p.id for p in preempted] == [grant.id]
    released = store.get(grant.id)
    # the grant ends where the booking begins, and keeps its booked end for the reports
    assert (released.end, released.released_end) == (at(10), at(11, 15))
    assert released.release_reason == "preempted"
    assert released.state(at(10, 5)) is BookingState.ENDED
    assert booking.state(at(10, 5)) is BookingState.ACTIVE
    assert [e.kind for e in store.history(grant.id)][-1] == "reclaimed"


def test_only_grants_on_the_gpus_the_booking_needs_are_preempted(store):
    on_first = opportunistic(store).grant("ada", "t4", 1, HORIZON)
    on_second = opportunistic(store).grant("carol", "t4", 1, HORIZON)
    _, preempted = opportunistic(store).create_preempting("bob", "t4", 1, at(10, 30), at(11))
    assert len(preempted) == 1
    kept = ({on_first.id, on_second.id} - {preempted[0].id}).pop()
    assert store.get(kept).end == at(11, 15)
    # a booking from 10:30 lets the grant run to the end of the running slot
    assert preempted[0].end == at(10, 15)


def test_nothing_is_preempted_when_bookings_leave_no_room_anyway(store):
    grant = opportunistic(store).grant("ada", "t4", 1, HORIZON)
    store.create("bob", "t4", 1, at(10), at(12))
    with pytest.raises(NoCapacity):
        opportunistic(store).create_preempting("carol", "t4", 2, at(10, 15), at(11))
    assert store.get(grant.id).end == at(11, 15)


def test_a_booking_the_policy_refuses_never_preempts(make_store):
    store = make_store(default_policy={"max_gpus": 1})
    grant = opportunistic(store).grant("ada", "t4", 2, HORIZON)
    with pytest.raises(PolicyViolation):
        opportunistic(store).create_preempting("bob", "t4", 2, at(10, 15), at(11))
    assert store.get(grant.id).release_reason is None


def test_bookings_without_grants_in_the_way_are_plain_creates(store, clock):
    booking, preempted = opportunistic(store).create_preempting("bob", "a100", 2, at(10), at(11))
    assert preempted == [] and booking.amount == 2
    clock.advance(timedelta(minutes=30))
    assert opportunistic(store).largest_grantable("a100", HORIZON) == 4


def test_a_running_grant_does_not_count_against_the_users_own_limits(make_store):
    store = make_store(default_policy={"max_bookings": 1, "budget_gpu_hours": 2})
    grant = opportunistic(store).grant("ada", "a100", 1, HORIZON)  # 1.25 GPU-hours
    booking, preempted = opportunistic(store).create_preempting("ada", "t4", 1, at(11), at(13))
    assert booking.user == "ada" and preempted == []
    assert store.get(grant.id).release_reason is None
    with pytest.raises(PolicyViolation) as refused:  # real bookings still count
        opportunistic(store).create_preempting("ada", "t4", 1, at(14), at(15))
    assert refused.value.rule == "max_bookings"


def test_grants_cut_for_a_booking_that_still_does_not_fit_are_rolled_back(store):
    """Preemption and the booking are one transaction: no grant is cut for nothing."""
    grant = opportunistic(store).grant("ada", "t4", 1, HORIZON)
    store.create("bob", "t4", 1, at(10), at(12))
    lifecycle = opportunistic(store)

    def cut_the_grant_only(work, request, now):
        # frees the grant's GPU, but bob's booking still leaves no room for 2 GPUs
        return lifecycle.preempt(work, request.with_changes(amount=1), now, "carol")

    with pytest.raises(NoCapacity):
        store.create("carol", "t4", 2, at(10, 15), at(11), make_room=cut_the_grant_only)
    kept = store.get(grant.id)
    assert (kept.end, kept.release_reason) == (at(11, 15), None)
    assert [e.kind for e in store.history(grant.id)] == ["created"]
