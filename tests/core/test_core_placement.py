"""Example tests of placement: the best-fit choices, refusals and availability, spelled out."""

from __future__ import annotations

from fractions import Fraction

import pytest

from jhub_gpubooking.core.errors import InvalidRequest, NoCapacity
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.placement import (
    AvailabilityInterval,
    Overbooking,
    availability,
    largest_bookable,
    maintenance_collisions,
    overbooked_instants,
    place,
)


def quarter_pool(**nodes: int) -> Pool:
    return Pool(name="a100", display_name="A100", nodes=nodes, slices_per_gpu=4)


def _placed(at, amount, placement):
    """A 10:00-12:00 booking of ``amount`` at ``placement``."""
    return Booking("alice", "a100", Fraction(amount), at(10), at(12), placement)


# ---------------------------------------------------------------- best fit


def test_a_fraction_goes_to_the_partly_used_gpu(at, booking):
    pool = quarter_pool(a=2)
    existing = [booking(10, 12, "0.25", "a", 1, slices=1)]
    assert place(pool, existing, at(10), at(12), Fraction(1, 2)) == Placement("a", (1,), 2)


def test_a_fraction_goes_to_the_gpu_it_fills_most_tightly(at, booking):
    pool = quarter_pool(a=3)
    existing = [
        booking(10, 12, "0.25", "a", 0, slices=1),
        booking(10, 12, "0.5", "a", 1, slices=2),
    ]
    # 0.5 more fills GPU 1 exactly; GPU 0 would keep a useless quarter
    assert place(pool, existing, at(10), at(12), Fraction(1, 2)) == Placement("a", (1,), 2)


def test_a_fraction_keeps_the_node_with_most_free_gpus_whole(at):
    pool = quarter_pool(big=4, small=2)
    placed = place(pool, [], at(10), at(12), Fraction(1, 4))
    assert placed == Placement("small", (0,), 1)


def test_a_fraction_counts_peak_use_over_the_whole_interval(at, booking):
    pool = quarter_pool(a=2)
    # GPU 0 is 3/4 used in the first hour only, GPU 1 half used in the second hour only
    existing = [
        booking(10, 11, "0.75", "a", 0, slices=3),
        booking(11, 12, "0.5", "a", 1, slices=2),
    ]
    assert place(pool, existing, at(10), at(12), Fraction(1, 2)) == Placement("a", (1,), 2)
    assert place(pool, existing, at(10), at(12), Fraction(1, 4)) == Placement("a", (0,), 1)


def test_whole_gpus_go_to_the_fullest_node_that_fits(at, booking):
    pool = quarter_pool(a=4, b=4)
    existing = [booking(9, 13, 2, "a", (0, 1), slices=4)]
    assert place(pool, existing, at(10), at(12), Fraction(2)) == Placement("a", (2, 3), 4)


def test_whole_gpus_skip_gpus_shared_by_a_fraction(at, booking):
    pool = quarter_pool(a=3)
    existing = [booking(11, 12, "0.25", "a", 1, slices=1)]
    assert place(pool, existing, at(10), at(12), Fraction(2)) == Placement("a", (0, 2), 4)


def test_whole_gpu_bookings_still_fit_after_fractions_were_packed(at):
    pool = quarter_pool(big=4, small=2)
    existing = []
    for amount in ("0.25", "0.5", "0.25", "0.5"):
        placement = place(pool, existing, at(10), at(12), Fraction(amount))
        existing.append(_placed(at, amount, placement))
    assert {b.placement.node for b in existing} == {"small"}
    assert place(pool, existing, at(10), at(12), Fraction(4)) == Placement("big", (0, 1, 2, 3), 4)


def test_bookings_that_cannot_hold_capacity_are_ignored(at, booking):
    pool = quarter_pool(a=1)
    existing = [
        booking(10, 12, 1, "a", 0, slices=4, pool="t4"),
        booking(10, 12, 1, "a", 0, slices=4, status="cancelled"),
        booking(8, 10, 1, "a", 0, slices=4),  # ends when the request starts
        booking(12, 14, 1, "a", 0, slices=4),  # starts when the request ends
        booking(10, 12, 1, "gone", 0, slices=4),  # node removed from the pool
        booking(10, 12, 1, None),  # never placed
    ]
    assert place(pool, existing, at(10), at(12), Fraction(1)) == Placement("a", (0,), 4)


def test_a_node_maintenance_window_blocks_only_that_node(at):
    pool = quarter_pool(a=1, b=1)
    window = MaintenanceWindow("a100", at(11), at(13), node="a")
    assert place(pool, [], at(10), at(12), Fraction(1), [window]) == Placement("b", (0,), 4)


# ---------------------------------------------------------------- refusals


def test_refusal_names_the_full_hour_and_what_is_left(at, booking):
    pool = quarter_pool(a=1)
    existing = [booking(14, 15, "0.75", "a", 0, slices=3)]
    with pytest.raises(NoCapacity) as refused:
        place(pool, existing, at(14), at(15), Fraction(1, 2))
    assert refused.value.message == (
        "No A100 capacity for 0.5 GPU from 2026-11-22 14:00 to 15:00 UTC: "
        "at most 0.25 GPU is free then."
    )
    assert (refused.value.full_start, refused.value.full_end) == (at(14), at(15))
    assert refused.value.largest_bookable == Fraction(1, 4)
    assert refused.value.status == 409


def test_refusal_names_the_maintenance_in_the_full_interval(at):
    """Users do not see maintenance windows on the page: the refusal says why nothing is free."""
    pool = quarter_pool(a=1, b=1)
    windows = [MaintenanceWindow("a100", at(11), at(13), node="a", reason="firmware"),
               MaintenanceWindow("a100", at(10), at(16), node="b"),
               MaintenanceWindow("a100", at(17), at(18))]  # after the full interval: not named
    with pytest.raises(NoCapacity) as refused:
        place(pool, [], at(11), at(12), Fraction(1), windows)
    assert refused.value.message == (
        "No A100 capacity for 1 GPU from 2026-11-22 11:00 to 12:00 UTC: no GPU is free then. "
        "Node b is down for maintenance from 2026-11-22 10:00 to 16:00 UTC. Node a is down for "
        "maintenance from 2026-11-22 11:00 to 13:00 UTC (firmware).")


def test_refusal_names_the_first_full_interval_of_a_long_request(at, booking):
    pool = quarter_pool(a=1)
    existing = [
        booking(12, 13, "0.75", "a", 0, slices=3),
        booking(13, 13.5, "1", "a", 0, slices=4),
        booking(15, 16, "1", "a", 0, slices=4),
    ]
    with pytest.raises(NoCapacity) as refused:
        place(pool, existing, at(10), at(18), Fraction(1, 2))
    # 12:00-13:30 is full for half a GPU throughout; 15:00 comes later
    assert (refused.value.full_start, refused.value.full_end) == (at(12), at(13, 30))
    assert refused.value.largest_bookable == 0
    assert refused.value.message == (
        "No A100 capacity for 0.5 GPU from 2026-11-22 12:00 to 13:30 UTC: no GPU is free then."
    )


def test_refusal_when_every_hour_has_room_but_no_gpu_has_room_throughout(at, booking):
    pool = quarter_pool(a=2)
    existing = [
        booking(10, 11, 1, "a", 0, slices=4),
        booking(11, 12, 1, "a", 1, slices=4),
    ]
    with pytest.raises(NoCapacity) as refused:
        place(pool, existing, at(10), at(12), Fraction(1, 2))
    assert (refused.value.full_start, refused.value.full_end) == (at(10), at(12))
    assert refused.value.largest_bookable == 0


def test_refusal_of_whole_gpus_says_one_node(at, booking):
    pool = quarter_pool(a=2, b=2)
    existing = [booking(0, 48, 1, "a", 0, slices=4), booking(0, 48, 1, "b", 1, slices=4)]
    with pytest.raises(NoCapacity) as refused:
        place(pool, existing, at(23), at(25), Fraction(2))
    assert refused.value.message == (
        "No A100 capacity for 2 GPUs from 2026-11-22 23:00 to 2026-11-23 01:00 UTC: "
        "at most 1 GPU is free on one node then."
    )


def test_pool_wide_maintenance_refuses_everything(at):
    pool = quarter_pool(a=2)
    window = MaintenanceWindow("a100", at(9), at(11))
    with pytest.raises(NoCapacity) as refused:
        place(pool, [], at(10), at(12), Fraction(1, 4), [window])
    assert (refused.value.full_start, refused.value.full_end) == (at(10), at(11))


@pytest.mark.parametrize(
    "amount, message",
    [
        ("0.3", ("Pool A100 shares each GPU in 4 slice(s); 0.3 GPU is not bookable here; "
                "the nearest bookable amounts are 0.25 and 0.5.")),
        ("0.2501", ("Pool A100 shares each GPU in 4 slice(s); 0.2501 GPU is not bookable here; "
                   "the nearest bookable amounts are 0.25 and 0.5.")),
        ("0.01", ("Pool A100 shares each GPU in 4 slice(s); 0.01 GPU is not bookable here; "
                 "the nearest bookable amount is 0.25.")),
        ("3", ("Pool A100 has at most 2 GPU(s) on one node; a booking of 3 GPUs cannot be "
              "placed on a single node.")),
        ("1.5", ("1.5 GPUs cannot be booked: more than one GPU must be a whole number "
                "(a fraction always sits on a single GPU); the nearest bookable amounts are "
                "1 and 2.")),
    ],
)
def test_amounts_the_pool_cannot_give_are_invalid(at, amount, message):
    with pytest.raises(InvalidRequest) as refused:
        place(quarter_pool(a=2), [], at(10), at(11), Fraction(amount))
    assert refused.value.message == message


def test_an_empty_interval_is_invalid(at):
    with pytest.raises(InvalidRequest) as refused:
        place(quarter_pool(a=1), [], at(11), at(11), Fraction(1))
    assert refused.value.message == "The end time must be after the start time."


# ---------------------------------------------------------------- availability


def test_availability_is_merged_where_nothing_changes(at, booking):
    pool = quarter_pool(a=2)
    existing = [
        booking(9, 11, "0.25", "a", 0, slices=1),
        booking(11, 12, "0.25", "a", 1, slices=1),  # same totals as before 11:00
        booking(12, 13, 1, "a", 0, slices=4),
    ]
    assert availability(pool, existing, at(10), at(14)) == [
        AvailabilityInterval(at(10), at(12), Fraction(7, 4), Fraction(1)),
        AvailabilityInterval(at(12), at(13), Fraction(1), Fraction(1)),
        AvailabilityInterval(at(13), at(14), Fraction(2), Fraction(2)),
    ]


def test_availability_offers_the_best_single_gpu_when_none_is_whole(at, booking):
    pool = quarter_pool(a=2)
    existing = [
        booking(10, 11, "0.75", "a", 0, slices=3),
        booking(10, 11, "0.5", "a", 1, slices=2),
    ]
    assert availability(pool, existing, at(10), at(11)) == [
        AvailabilityInterval(at(10), at(11), Fraction(3, 4), Fraction(1, 2)),
    ]


def test_largest_bookable_covers_the_whole_interval(at, booking):
    pool = quarter_pool(a=2, b=1)
    existing = [booking(10, 11, 1, "a", 0, slices=4), booking(12, 13, "0.25", "b", 0, slices=1)]
    assert largest_bookable(pool, existing, at(11), at(12)) == 2
    assert largest_bookable(pool, existing, at(10), at(12)) == 1
    assert largest_bookable(pool, existing, at(10), at(13)) == 1
    full = [*existing, booking(10, 13, 1, "a", 1, slices=4)]
    assert largest_bookable(pool, full, at(10), at(13)) == Fraction(3, 4)


# ---------------------------------------------------------------- audits and maintenance


def test_overbooked_instants_reports_each_overfull_gpu_stretch(at, booking):
    pool = quarter_pool(a=2)
    bookings = [
        booking(10, 12, "0.75", "a", 0, slices=3),
        booking(11, 13, "0.5", "a", 0, slices=2),
        booking(10, 13, 1, "a", 1, slices=4),
        booking(10, 13, 1, "a", 1, slices=4, status="cancelled"),
    ]
    assert overbooked_instants(pool, bookings) == [Overbooking(at(11), at(12), "a", 0, 5, 4)]


def test_maintenance_collisions_on_one_node(at, booking):
    on_a = booking(10, 12, 1, "a", 0, slices=4)
    on_b = booking(10, 12, 1, "b", 0, slices=4)
    unplaced = booking(10, 12, 1, None)
    other_pool = booking(10, 12, 1, "a", 0, slices=1, pool="t4")
    cancelled = booking(10, 12, 1, "a", 0, slices=4, status="cancelled")
    after = booking(13, 14, 1, "a", 0, slices=4)
    window = MaintenanceWindow("a100", at(11), at(13), node="a")
    everything = [on_a, on_b, unplaced, other_pool, cancelled, after]
    assert maintenance_collisions(window, everything) == [on_a, unplaced]
    pool_wide = MaintenanceWindow("a100", at(11), at(13))
    assert maintenance_collisions(pool_wide, everything) == [on_a, on_b, unplaced]
