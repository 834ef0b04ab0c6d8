"""The store's queries for the admission webhook on every backend: active bookings of a set of
users in one query, and the bookings held by ``pod:`` holders with their claim time."""

from __future__ import annotations

from datetime import timedelta

from db_test_times import NOW, at

from jhub_gpubooking.db.models import BookingRow


def test_active_for_users_returns_only_active_bookings_of_those_users(store):
    ada = store.create("ada", "a100", 1, at(10), at(11))
    bob = store.create("bob", "a100", 1, at(10), at(12))
    store.create("cy", "a100", 1, at(10), at(11))
    store.create("ada", "a100", 1, at(13), at(14))  # upcoming
    store.create("bob", "t4", "1/4", at(12), at(13))  # upcoming
    assert [b.id for b in store.active_for_users({"ada", "bob"})] == [ada.id, bob.id]
    assert store.active_for_users(set()) == []


def test_held_by_prefix_lists_pod_holders_with_their_claim_time(store, clock):
    pod = store.create("ada", "a100", 1, at(10), at(11))
    hub = store.create("bob", "a100", 1, at(10), at(11))
    odd = store.create("cy", "a100", 1, at(10), at(11))
    store.claim(hub.id, "")
    store.claim(odd.id, "pod_like%")  # a Hub server name that only looks like a pattern
    clock.advance(timedelta(minutes=3))
    store.claim(pod.id, "pod:alice-jobs/train")
    [(held, claimed_at)] = store.held_by_prefix("pod:")
    assert (held.id, held.server, claimed_at) == (pod.id, "pod:alice-jobs/train",
                                                  NOW + timedelta(minutes=3))
    assert [b.id for b, _ in store.held_by_prefix("pod_")] == [odd.id]
    store.release(pod.id, "pod:alice-jobs/train")
    assert store.held_by_prefix("pod:") == []


def test_held_by_prefix_keeps_cancelled_bookings_whose_pod_may_still_run(store):
    held = store.create("ada", "a100", 1, at(10), at(11))
    store.claim(held.id, "pod:alice-jobs/train")
    with store.unit_of_work() as work:  # cancelled as "End now" at its start does
        work.session.get(BookingRow, held.id).status = "cancelled"
    [(booking, _)] = store.held_by_prefix("pod:")
    assert (booking.id, booking.status) == (held.id, "cancelled")
