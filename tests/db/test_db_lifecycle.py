"""Lifecycle rules on a real store with a ManualClock: warn, stop at the end, reclaim."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from db_test_times import NOW, at

from jhub_gpubooking.core.lifecycle import Action, ActionKind, LifecycleRules, ReleaseReason
from jhub_gpubooking.db.lifecycle import BookingLifecycle

RULES = LifecycleRules(
    slot_minutes=15,
    end_grace=timedelta(minutes=5),
    warn_before=timedelta(minutes=10),
    no_show_after=timedelta(minutes=15),
    stopped_release_after=timedelta(minutes=30),
)


@pytest.fixture
def lifecycle(store):
    return BookingLifecycle(store, RULES)


def book(store, user="ada", start=None, end=None, gpus="1"):
    return store.create(user, "a100", gpus, start or at(10), end or at(12))


def test_unclaimed_booking_is_released_as_no_show_rounded_up_to_the_grid(store, lifecycle, clock):
    booking = book(store)  # made at 10:05 in the running slot: 15 minutes from then
    clock.set(at(10, 19))
    assert lifecycle.due(clock.now()) == []
    clock.set(at(10, 20))
    action = Action(
        ActionKind.RELEASE, booking.id, new_end=at(10, 30), reason=ReleaseReason.NO_SHOW
    )
    assert lifecycle.due(clock.now()) == [action]

    released = lifecycle.release(action, clock.now())

    assert (released.end, released.released_end, released.release_reason) == (
        at(10, 30),
        at(12),
        "no_show",
    )
    event = store.history(booking.id)[-1]
    assert (event.kind, event.detail) == (
        "reclaimed",
        {"reason": "no_show", "old_end": "2030-01-07T12:00:00Z", "new_end": "2030-01-07T10:30:00Z"},
    )
    # the released time is back in the pool: all 6 GPUs are free after 10:30
    free = store.availability("a100", at(10, 30), at(12))
    assert [interval.free_gpus for interval in free] == [6]
    assert lifecycle.due(clock.now()) == []


def test_claimed_booking_is_not_a_no_show(store, lifecycle, clock):
    booking = book(store)
    store.claim(booking.id, "")
    clock.set(at(11))
    assert lifecycle.due(clock.now()) == []


def test_stopped_server_releases_the_rest_after_the_configured_wait(store, lifecycle, clock):
    booking = book(store)
    store.claim(booking.id, "")
    clock.set(at(10, 20))
    store.release(booking.id, "")
    clock.set(at(10, 49))
    assert lifecycle.due(clock.now()) == []
    clock.set(at(10, 50))
    [action] = lifecycle.due(clock.now())
    assert action == Action(
        ActionKind.RELEASE, booking.id, new_end=at(11), reason=ReleaseReason.SERVER_STOPPED
    )
    assert lifecycle.release(action, clock.now()).end == at(11)


def test_a_claim_after_the_decision_cancels_the_release(store, lifecycle, clock):
    booking = book(store)
    clock.set(at(10, 30))
    [action] = lifecycle.due(clock.now())
    store.claim(booking.id, "")  # the user's server started meanwhile
    assert lifecycle.release(action, clock.now()) is None
    assert store.get(booking.id).end == at(12)


def test_server_is_stopped_once_after_the_end_plus_grace(store, lifecycle, clock):
    booking = book(store, end=at(11))
    store.claim(booking.id, "gpu")
    lifecycle.mark_warned(booking.id)
    clock.set(at(11, 4))
    assert lifecycle.due(clock.now()) == []
    clock.set(at(11, 5))
    assert lifecycle.due(clock.now()) == [Action(ActionKind.STOP_SERVER, booking.id)]
    lifecycle.mark_stop_requested(booking.id, "gpu")
    assert lifecycle.due(clock.now()) == []
    assert store.history(booking.id)[-1].kind == "server_stop_requested"


def test_warning_comes_once_per_end_and_again_after_an_extension(store, lifecycle, clock):
    booking = book(store, end=at(11))
    store.claim(booking.id, "")
    clock.set(at(10, 49))
    assert lifecycle.due(clock.now()) == []
    clock.set(at(10, 50))
    assert lifecycle.due(clock.now()) == [Action(ActionKind.WARN, booking.id)]
    lifecycle.mark_warned(booking.id)
    assert lifecycle.due(clock.now()) == []
    store.change_end(booking.id, at(11, 30), actor="ada")
    assert lifecycle.due(clock.now()) == []
    clock.set(at(11, 20))
    assert lifecycle.due(clock.now()) == [Action(ActionKind.WARN, booking.id)]


def test_switched_off_rules_do_nothing(store, clock):
    lifecycle = BookingLifecycle(store, LifecycleRules())
    booking = book(store, end=at(11))
    book(store, user="bob")
    store.claim(booking.id, "")
    clock.set(at(11))
    # the end (no grace) still stops the server: the pod deadline is only the backstop
    assert lifecycle.due(clock.now()) == [Action(ActionKind.STOP_SERVER, booking.id)]


def test_release_now_frees_the_remainder_for_a_reason(store, lifecycle, clock):
    booking = book(store)
    clock.set(NOW + timedelta(minutes=20))
    released = lifecycle.release_now(booking.id, "preempted", actor="bob")
    assert (released.end, released.release_reason) == (at(10, 30), "preempted")
    clock.set(at(12))
    assert lifecycle.release_now(booking.id, "preempted", actor="bob") is None


def test_a_pool_with_its_own_no_show_time_releases_on_it(store, lifecycle, clock):
    # the service-wide rule says 15 minutes; t4 says 30 and a100 keeps the default
    store.pools = {**store.pools, "t4": replace(store.pools["t4"], no_show_minutes=30)}
    clock.set(at(9))  # booked before 10:00: the no-show times count from the start
    a100 = book(store)
    t4 = store.create("bob", "t4", "1/4", at(10), at(12))
    clock.set(at(10, 16))

    assert [action.booking_id for action in lifecycle.due(clock.now())] == [a100.id]
    clock.set(at(10, 31))
    [late] = [action for action in lifecycle.due(clock.now()) if action.booking_id == t4.id]
    assert (late.new_end, late.reason) == (at(10, 45), ReleaseReason.NO_SHOW)
    released = lifecycle.release(late, clock.now())
    assert (released.end, released.release_reason) == (at(10, 45), "no_show")

    # 0 switches the rule off for that pool only, whatever the service-wide rule says
    store.pools = {**store.pools, "a100": replace(store.pools["a100"], no_show_minutes=0)}
    assert lifecycle.due(clock.now()) == []
    # a release computed under the old times is re-checked under the pool's current one
    stale = Action(ActionKind.RELEASE, a100.id, new_end=at(10, 30), reason=ReleaseReason.NO_SHOW)
    assert lifecycle.release(stale, clock.now()) is None
