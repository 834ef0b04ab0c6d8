"""A create that only fits by moving upcoming bookings, on every backend (issue 17, item 1).

The t4 pool is one node with two GPUs of four slices; NOW is 10:05, so a booking from 10:00 has
started and never moves.
"""

from __future__ import annotations

from fractions import Fraction
from unittest import mock

import pytest
from db_test_store import BIG, assert_one_quarter_joined, fragmented_big, on_gpu
from db_test_times import at

from jhub_gpubooking.core import replacement
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Placement
from jhub_gpubooking.core.placement import overbooked_instants


def assert_not_overbooked(store):
    assert overbooked_instants(store.pool("t4"), [b for b in store.list() if b.pool == "t4"]) == []


def test_a_whole_gpu_fits_after_one_upcoming_quarter_moves(store):
    first = store.create("alice", "t4", "1/4", at(11), at(12))
    second = on_gpu(store, store.create("bob", "t4", "1/4", at(11), at(12)), 1)
    assert (first.placement.gpus, second.placement.gpus) == ((0,), (1,))

    whole = store.create("carol", "t4", 1, at(11), at(12))

    after = {b.id: store.get(b.id) for b in (first, second)}
    # the two quarters now share one GPU, the whole GPU has the other
    assert after[first.id].placement == after[second.id].placement
    assert whole.placement == Placement("node-c", (1 - after[first.id].placement.gpus[0],), 4)
    moved = [b for b in (first, second) if after[b.id].placement != b.placement]
    assert len(moved) == 1
    (original,) = moved
    booking = after[original.id]
    # a move keeps the amount and the times, and its history keeps the old placement
    assert (booking.amount, booking.start, booking.end) == (Fraction(1, 4), at(11), at(12))
    event = store.history(booking.id)[-1]
    assert (event.kind, event.actor) == ("moved", None)
    assert event.detail == {"old_node": "node-c", "old_gpu_indices": list(original.placement.gpus),
                            "node": "node-c", "gpu_indices": list(booking.placement.gpus)}
    assert_not_overbooked(store)


def test_started_bookings_stay_and_a_refusal_moves_nothing(store):
    started = store.create("alice", "t4", "1/4", at(10), at(12))  # active at 10:05
    upcoming = on_gpu(store, store.create("bob", "t4", "1/4", at(11), at(12)), 1)
    assert started.placement.gpus == (0,)
    # the upcoming quarter joins the started one: GPU 1 is free for the whole GPU
    whole = store.create("carol", "t4", 1, at(11), at(12))
    assert whole.placement.gpus == (1,)
    assert store.get(upcoming.id).placement.gpus == (0,)
    assert store.get(started.id).placement == started.placement

    # now two started quarters on both GPUs: nothing can move, the refusal changes nothing
    store.cancel(whole.id, "carol")
    store.cancel(upcoming.id, "bob")
    other = store.create("dave", "t4", "1/4", at(10), at(12))
    other = on_gpu(store, other, 1)
    later = store.create("erin", "t4", "1/4", at(11), at(12))
    before = store.list()
    with pytest.raises(NoCapacity):
        store.create("frank", "t4", 1, at(11), at(12))
    assert store.list() == before
    assert "moved" not in [e.kind for e in store.history(later.id)]


def test_moves_reach_bookings_outside_the_requested_interval(store):
    """GPU 0 holds a started quarter; the quarter on GPU 1 runs until 14:00 and GPU 0 is full
    13-14: it can only join the started one if the 13-14 booking moves to GPU 1 (two moves,
    found by widening the read to the moved booking's interval)."""
    blocker = store.create("carol", "t4", "1/4", at(10), at(12))  # started at 10:05
    long = on_gpu(store, store.create("alice", "t4", "1/4", at(11), at(14)), 1)
    full = store.create("bob", "t4", 1, at(13), at(14))
    assert (blocker.placement.gpus, long.placement.gpus, full.placement.gpus) == (
        (0,), (1,), (0,))

    whole = store.create("dave", "t4", 1, at(11), at(12))

    assert whole.placement.gpus == (1,)
    assert store.get(long.id).placement.gpus == (0,)
    assert store.get(full.id).placement.gpus == (1,)
    assert store.get(blocker.id).placement.gpus == (0,)
    # both moves were written in one go, each with its own event
    for moved, old_gpu, new_gpu in ((long, 1, 0), (full, 0, 1)):
        event = store.history(moved.id)[-1]
        assert (event.kind, event.detail) == ("moved", {
            "old_node": "node-c", "old_gpu_indices": [old_gpu],
            "node": "node-c", "gpu_indices": [new_gpu]})
    assert_not_overbooked(store)


def test_a_create_on_a_large_pool_moves_bookings_by_the_exact_last_resort(make_store, pools):
    """A pool above the exact search's limit (17 GPUs), the bounded chain and repack given no
    budget: the whole GPU still gets in, the integer program moving one quarter, and the move
    is written with its event like any other."""
    store = make_store(pools={**pools, "big": BIG})
    quarters = fragmented_big(store)
    with mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0):
        whole = store.create("dave", "big", 1, at(11), at(12))
    assert_one_quarter_joined(store, quarters, whole)
    assert overbooked_instants(BIG, [b for b in store.list() if b.pool == "big"]) == []
    # with the last resort off, the same create is refused
    store.cancel(whole.id, "dave")
    for booking in quarters:
        with store.unit_of_work(["big"]) as work:
            work.move_all([(store.get(booking.id), booking.placement)])
    off = make_store(pools={**pools, "big": BIG}, exact_move_seconds=0)
    no_budget = mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0)
    with no_budget, pytest.raises(NoCapacity):
        off.create("dave", "big", 1, at(11), at(12))
    # the store's solver answers the program
    highs = make_store(pools={**pools, "big": BIG}, exact_move_solver="highs")
    exact = mock.patch.object(replacement, "place_exactly", wraps=replacement.place_exactly)
    with no_budget, exact as asked:
        again = highs.create("dave", "big", 1, at(11), at(12))
    assert asked.call_args.kwargs["solver"] == "highs"
    assert again.placement.node == "node-x"
