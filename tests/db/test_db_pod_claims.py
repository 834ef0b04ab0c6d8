"""The store's queries for the admission webhook on every backend: active bookings of a set of
users in one query, the bookings held by ``pod:`` holders with their claim time, and what a
claim in one pool locks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from db_test_times import NOW, at
from server_databases import SERVERS

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


@pytest.mark.parametrize("db_url", SERVERS,
                         indirect=True)
def test_a_claim_in_one_pool_waits_for_nothing_of_the_users_other_pools(store):
    """A server's start claims under its pool's lock. It used to lock the user's active
    bookings too, through the user's index, which on MariaDB took the index entries of the
    user's bookings in other pools: an *End now* there (holding that pool and the row, then
    changing the row's end in that index) deadlocked with it (the concurrent write walk, seed
    54). Here the other pool's booking is held locked as that End now held it: the claim must
    not wait for it."""
    from concurrent.futures import ThreadPoolExecutor

    from jhub_gpubooking.db.claims import claim_first

    other = store.create("ada", "a100", 1, at(10), at(12))
    store.create("ada", "t4", "1/2", at(10), at(12))
    # a busy t4 ahead, so the user's index is the one to read ada's bookings in t4 through
    with store.unit_of_work() as work:
        for day in range(1, 201):
            start = at(10, days=day)
            work.session.add(BookingRow(
                user=f"u{day}", pool="t4", slices=1, amount_num=1, amount_den=4, start=start,
                end=start + timedelta(hours=1), status="booked", note="", node="node-c",
                gpu_indices=[0], slices_per_gpu_held=1, created=NOW, updated=NOW))
    with store.unit_of_work() as held, ThreadPoolExecutor(1) as thread:
        held.lock_booking(other.id)
        claim = thread.submit(claim_first, store, "ada", "t4", "ada/", list)
        claimed, candidates = claim.result(timeout=10)
        held.cancel(held.lock_booking(other.id), "ada")
    assert (claimed.pool, claimed.server, len(candidates)) == ("t4", "ada/", 1)
    assert store.get(other.id).end == store.now().replace(microsecond=0)
