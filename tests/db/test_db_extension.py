"""largest_extension answers what change_end would accept right now, by change_end's own rules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from db_test_times import at

from jhub_gpubooking.core.errors import BookingError, Conflict, NotFound

WEEK = timedelta(days=7)
SLOT = timedelta(minutes=15)


def change_end_refusal(store, booking_id, end, **rules) -> str | None:
    """What change_end says to ``end`` (None: accepted), leaving the booking as it was."""
    before = store.get(booking_id).end
    try:
        store.change_end(booking_id, end, actor="alice", **rules)
    except BookingError as refused:
        return refused.message
    store.change_end(booking_id, before, actor="alice", is_admin=True)
    return None


def assert_agrees_with_change_end(store, booking_id, **rules):
    """The answer is the latest end change_end accepts: it accepts max_end and refuses the next
    slot with the very sentence given as the reason once the booking reaches max_end."""
    booking, max_end, reason = store.largest_extension(booking_id, WEEK, **rules)
    assert max_end is not None, reason
    assert change_end_refusal(store, booking_id, max_end, **rules) is None
    refusal = change_end_refusal(store, booking_id, max_end + SLOT, **rules)
    assert refusal is not None
    store.change_end(booking_id, max_end, actor="alice", **rules)
    assert store.largest_extension(booking_id, WEEK, **rules)[1:] == (None, refusal)
    return booking, max_end


def test_the_next_booking_on_the_same_gpu_bounds_the_extension(store):
    first = store.create("alice", "t4", 1, at(10), at(11))  # a whole T4: GPU 0
    store.create("bob", "t4", 1, at(12, 30), at(13))  # best fit: GPU 0 again
    store.create("carol", "t4", 1, at(12, 30), at(13, 30))  # GPU 1: bob cannot move there
    booking, max_end = assert_agrees_with_change_end(store, first.id)
    assert (booking.id, booking.end, max_end) == (first.id, at(11), at(12, 30))
    _, none, reason = store.largest_extension(first.id, WEEK)
    assert none is None
    assert reason == (
        "The GPU this booking holds on node-c is taken from 2030-01-07 12:30 UTC; the booking "
        "can be extended to 2030-01-07 12:30 UTC at most."
    )


def test_the_policy_length_bounds_the_extension_and_admins_reach_the_horizon(make_store):
    store = make_store(default_policy={"max_minutes": 120})
    booking = store.create("alice", "a100", 1, at(10), at(11))
    assert store.largest_extension(booking.id, WEEK)[1] == at(12)
    assert store.largest_extension(booking.id, timedelta(hours=3), is_admin=True)[1] == at(14)
    assert_agrees_with_change_end(store, booking.id)
    assert store.largest_extension(booking.id, WEEK)[2] == (
        "Bookings can be at most 2 hours long; this one is 2 hours 15 minutes."
    )


def test_a_group_policy_is_applied_for_members(make_store):
    store = make_store(default_policy={"max_minutes": 60},
                       group_policies={"long-jobs": {"max_minutes": 240}})
    booking = store.create("alice", "a100", 1, at(10), at(11), groups=("long-jobs",))
    assert store.largest_extension(booking.id, WEEK)[1:] == (
        None, "Bookings can be at most 1 hour long; this one is 1 hour 15 minutes."
    )
    assert store.largest_extension(booking.id, WEEK, groups=("long-jobs",))[1] == at(14)


def test_the_budget_bounds_the_extension(make_store):
    store = make_store(default_policy={"budget_gpu_hours": 5})
    store.create("alice", "a100", 2, at(14), at(15))  # 2 of 5 GPU-hours
    booking = store.create("alice", "a100", 1, at(10), at(11))  # 3 of 5
    _, max_end = assert_agrees_with_change_end(store, booking.id)
    assert max_end == at(13)
    assert "GPU-hours" in store.largest_extension(booking.id, WEEK)[2]


def test_no_extension_of_a_cancelled_or_unknown_booking(store):
    booking = store.create("alice", "a100", 1, at(11), at(12))
    store.cancel(booking.id, actor="alice")
    assert store.largest_extension(booking.id, WEEK)[1:] == (
        None, "This booking is cancelled and can no longer be changed."
    )
    with pytest.raises(NotFound):
        store.largest_extension(999, WEEK)


def test_a_free_gpu_is_offered_up_to_the_horizon(store):
    booking = store.create("alice", "a100", 1, at(10), at(11))
    assert store.largest_extension(booking.id, timedelta(hours=5))[1] == at(16)
    assert store.largest_extension(booking.id, timedelta(minutes=20))[1] == at(11, 15)


def gpus_of(store, booking_id):
    placement = store.get(booking_id).placement
    return placement.node, placement.gpus


def test_an_upcoming_booking_in_the_way_moves_to_another_gpu(store):
    # alice's server runs on GPU 0; bob's later booking sits there too, GPU 1 is free
    running = store.create("alice", "t4", 1, at(10), at(11))
    later = store.create("bob", "t4", 1, at(12, 30), at(13))
    assert gpus_of(store, running.id) == gpus_of(store, later.id) == ("node-c", (0,))
    assert store.largest_extension(running.id, timedelta(hours=4))[1] == at(15)

    assert store.change_end(running.id, at(13, 30), actor="alice").end == at(13, 30)
    assert gpus_of(store, running.id) == ("node-c", (0,))
    assert gpus_of(store, later.id) == ("node-c", (1,))
    moved = store.history(later.id)[-1]
    assert (moved.kind, moved.detail) == ("moved", {
        "old_node": "node-c", "old_gpu_indices": [0], "node": "node-c", "gpu_indices": [1]})
    assert [e.kind for e in store.history(running.id)][-1] == "end_changed"


def test_moving_makes_room_only_as_far_as_the_other_gpus_are_free(store):
    running = store.create("alice", "t4", 1, at(10), at(11))
    later = store.create("bob", "t4", 1, at(12, 30), at(13))
    store.create("carol", "t4", 1, at(14), at(15))
    store.create("dave", "t4", 1, at(14), at(15))  # from 14:00 both GPUs are taken
    assert store.largest_extension(running.id, WEEK)[1] == at(14)
    refusal = change_end_refusal(store, running.id, at(14, 15))
    assert refusal == (
        "The GPU this booking holds on node-c is taken from 2030-01-07 12:30 UTC; moving "
        "bookings that have not started to other GPUs makes room until 2030-01-07 14:00 UTC "
        "at most."
    )
    assert gpus_of(store, later.id) == ("node-c", (0,))  # a refusal moves nothing
    store.change_end(running.id, at(14), actor="alice")
    assert gpus_of(store, later.id) == ("node-c", (1,))
    assert store.largest_extension(running.id, WEEK)[1:] == (None, (
        "The GPU this booking holds on node-c is taken from 2030-01-07 14:00 UTC; the booking "
        "can be extended to 2030-01-07 14:00 UTC at most."
    ))


def test_a_share_of_a_gpu_in_the_way_moves_too(store):
    # quarters of a T4: alice runs on half of GPU 0, bob's three quarters follow her there
    running = store.create("alice", "t4", "1/2", at(10), at(11))
    store.create("carol", "t4", "1/4", at(10), at(12))  # the tightest fit: beside alice
    later = store.create("bob", "t4", "3/4", at(11), at(12))
    assert gpus_of(store, running.id) == gpus_of(store, later.id) == ("node-c", (0,))
    assert store.change_end(running.id, at(11, 30), actor="alice").end == at(11, 30)
    assert gpus_of(store, later.id) == ("node-c", (1,))


def test_the_first_look_reads_only_the_bookings_on_the_booking_s_node(store, monkeypatch):
    # the JupyterLab status asks every 30 s, a week ahead: the rest of the pool is not read
    from jhub_gpubooking.db import queries
    from jhub_gpubooking.db.convert import booking_from_row

    running = store.create("alice", "a100", 2, at(10), at(11))  # best fit: both GPUs of node-a
    elsewhere = [store.create(f"user{n}", "a100", 4, at(12 + 2 * n), at(13 + 2 * n))
                 for n in range(3)]  # node-b, the only node with room for four
    assert [running.placement.node, *{b.placement.node for b in elsewhere}] == [
        "node-a", "node-b"]
    loaded = []

    def read(row):
        loaded.append(row.id)
        return booking_from_row(row)

    monkeypatch.setattr(queries, "booking_from_row", read)
    _, max_end, _ = store.largest_extension(running.id, WEEK, is_admin=True)
    assert max_end == at(11) + WEEK
    assert loaded == []  # (the booking itself is read by its id) none of node-b's


def test_an_extension_into_maintenance_names_the_window(store):
    """The page does not show maintenance windows to users: the refusal says what takes the GPU."""
    booking = store.create("alice", "t4", 1, at(10), at(11))
    store.add_maintenance("t4", at(11), at(12), node="node-c", reason="firmware")
    with pytest.raises(Conflict) as refused:
        store.change_end(booking.id, at(12), actor="alice")
    assert refused.value.message == (
        "Node node-c is down for maintenance from 2030-01-07 11:00 to 12:00 UTC (firmware); the "
        "booking can be extended to 2030-01-07 11:00 UTC at most.")
    store.add_maintenance("t4", at(10, 45), at(11, 30))  # the pool's, the earlier: named
    with pytest.raises(Conflict) as refused:
        store.change_end(booking.id, at(11, 30), actor="alice")
    assert refused.value.message.startswith(
        "Pool t4 is down for maintenance from 2030-01-07 10:45 to 11:30 UTC;")
