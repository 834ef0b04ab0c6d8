"""Placement against a brute-force oracle on small pools (hypothesis).

The oracle knows nothing about peaks or best fit: it tries every possible placement and checks
every hour of the request, on pools of at most 2 nodes x 3 GPUs with 1, 2 or 4 slices per GPU.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from itertools import combinations, pairwise

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool, format_amount
from jhub_gpubooking.core.placement import (
    availability,
    fit,
    largest_bookable,
    overbooked_instants,
    place,
)

HOURS = 8  # the timeline of every example: hours 0..8 of one day
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
core_settings = settings(max_examples=200, deadline=None)


def hour(h: int) -> datetime:
    return DAY + timedelta(hours=h)


def hour_of(when: datetime) -> int:
    return int((when - DAY) / timedelta(hours=1))


# ---------------------------------------------------------------- the oracle


def bookable_amounts(pool: Pool) -> list[Fraction]:
    fractions = [Fraction(k, pool.slices_per_gpu) for k in range(1, pool.slices_per_gpu)]
    return fractions + [Fraction(n) for n in range(1, max(pool.nodes.values()) + 1)]


def used_at(pool, bookings, maintenance, h) -> dict[tuple[str, int], int]:
    """Slices in use on each GPU during hour ``h`` (maintenance = every slice)."""
    used = {(node, i): 0 for node, count in pool.nodes.items() for i in range(count)}
    moment = hour(h)
    for b in bookings:
        if b.pool == pool.name and b.holds_capacity and b.start <= moment < b.end:
            for i in b.placement.gpus:
                used[(b.placement.node, i)] += b.placement.slices
    for node, i in used:
        # overlapping windows block a GPU once, not twice
        if any(w.pool == pool.name and w.start <= moment < w.end and w.covers(node)
               for w in maintenance):
            used[(node, i)] += pool.slices_per_gpu
    return used


def candidates(pool: Pool, amount: Fraction) -> list[Placement]:
    """Every placement the amount could take, regardless of what is in use."""
    if amount < 1:
        slices = int(amount * pool.slices_per_gpu)
        return [
            Placement(node, (i,), slices) for node, count in pool.nodes.items()
            for i in range(count)
        ]
    return [
        Placement(node, gpus, pool.slices_per_gpu)
        for node, count in pool.nodes.items()
        for gpus in combinations(range(count), int(amount))
    ]


def fits(pool, bookings, maintenance, start, end, placement) -> bool:
    for h in range(start, end):
        used = used_at(pool, bookings, maintenance, h)
        if any(used[(placement.node, i)] + placement.slices > pool.slices_per_gpu
               for i in placement.gpus):
            return False
    return True


def oracle_can_place(pool, bookings, maintenance, start, end, amount) -> bool:
    return any(
        fits(pool, bookings, maintenance, start, end, p) for p in candidates(pool, amount)
    )


def oracle_largest(pool, bookings, maintenance, start, end) -> Fraction:
    placeable = [
        amount for amount in bookable_amounts(pool)
        if oracle_can_place(pool, bookings, maintenance, start, end, amount)
    ]
    return max(placeable, default=Fraction(0))


def assert_never_overbooked(pool, bookings, maintenance) -> None:
    for h in range(HOURS):
        used = used_at(pool, bookings, maintenance, h)
        assert all(slices <= pool.slices_per_gpu for slices in used.values()), (h, used)


# ---------------------------------------------------------------- strategies


@st.composite
def pools(draw) -> Pool:
    node_count = draw(st.integers(1, 2))
    nodes = {f"n{k}": draw(st.integers(1, 3)) for k in range(node_count)}
    return Pool(name="p", nodes=nodes, slices_per_gpu=draw(st.sampled_from([1, 2, 4])))


@st.composite
def intervals(draw) -> tuple[int, int]:
    start = draw(st.integers(0, HOURS - 1))
    return start, draw(st.integers(start + 1, HOURS))


@st.composite
def scenarios(draw):
    """A pool, maintenance windows, and a sequence of booking / cancelling steps."""
    pool = draw(pools())
    maintenance = []
    for _ in range(draw(st.integers(0, 2))):
        start, end = draw(intervals())
        node = draw(st.sampled_from([None, *pool.nodes]))
        maintenance.append(MaintenanceWindow(pool.name, hour(start), hour(end), node=node))
    steps = draw(st.lists(
        st.one_of(
            st.tuples(st.just("book"), intervals(), st.sampled_from(bookable_amounts(pool))),
            st.tuples(st.just("cancel"), st.integers(0, 30)),
        ),
        min_size=1, max_size=14,
    ))
    return pool, maintenance, steps


# ---------------------------------------------------------------- properties

def booked(pool, maintenance, steps) -> list[Booking]:
    """The bookings a scenario's "book" steps leave (refused ones skipped)."""
    bookings: list[Booking] = []
    for step in steps:
        if step[0] == "book":
            _, (start, end), amount = step
            try:
                placement = place(pool, bookings, hour(start), hour(end), amount, maintenance)
            except NoCapacity:
                continue
            bookings.append(Booking("alice", pool.name, amount, hour(start), hour(end), placement))
    return bookings



@core_settings
@given(scenarios())
def test_placement_agrees_with_the_brute_force_oracle(scenario):
    pool, maintenance, steps = scenario
    # a booking of another pool on the same node names must never count
    bookings: list[Booking] = [
        Booking("bob", "other", Fraction(1), hour(0), hour(HOURS),
                Placement(next(iter(pool.nodes)), (0,), pool.slices_per_gpu))
    ]
    for step in steps:
        if step[0] == "cancel":
            if len(bookings) > 1:
                index = 1 + step[1] % (len(bookings) - 1)
                bookings[index] = bookings[index].with_changes(status="cancelled")
            continue
        _, (start, end), amount = step
        possible = oracle_can_place(pool, bookings, maintenance, start, end, amount)
        largest = largest_bookable(pool, bookings, hour(start), hour(end), maintenance)
        assert largest == oracle_largest(pool, bookings, maintenance, start, end)
        assert (amount <= largest) == possible
        fitted = fit(pool, bookings, hour(start), hour(end), amount, maintenance)
        try:
            placement = place(pool, bookings, hour(start), hour(end), amount, maintenance)
        except NoCapacity as refusal:
            event("a request was refused")
            assert not possible, "refused although the oracle found a placement"
            assert fitted is None
            full_start, full_end = hour_of(refusal.full_start), hour_of(refusal.full_end)
            assert start <= full_start < full_end <= end
            assert not oracle_can_place(pool, bookings, maintenance, full_start, full_end, amount)
            assert refusal.largest_bookable == oracle_largest(
                pool, bookings, maintenance, full_start, full_end
            )
            assert refusal.message.startswith(f"No p capacity for {format_amount(amount)} GPU")
            continue
        event("a request was placed")
        assert possible
        assert fitted == placement
        assert placement in candidates(pool, amount)
        bookings.append(Booking("alice", pool.name, amount, hour(start), hour(end), placement))
        assert_never_overbooked(pool, bookings, maintenance)
        assert overbooked_instants(pool, bookings) == []


@core_settings
@given(scenarios(), intervals())
def test_availability_matches_every_hour(scenario, window):
    pool, maintenance, steps = scenario
    bookings = booked(pool, maintenance, steps)

    start, end = window
    intervals_found = availability(pool, bookings, hour(start), hour(end), maintenance)
    assert intervals_found[0].start == hour(start) and intervals_found[-1].end == hour(end)
    for before, after in pairwise(intervals_found):
        assert before.end == after.start
        assert (before.free_gpus, before.largest_bookable) != (
            after.free_gpus, after.largest_bookable
        ), "equal neighbours must be merged"
    for interval in intervals_found:
        for h in range(hour_of(interval.start), hour_of(interval.end)):
            used = used_at(pool, bookings, maintenance, h)
            free = sum(max(pool.slices_per_gpu - u, 0) for u in used.values())
            assert interval.free_gpus == Fraction(free, pool.slices_per_gpu)
            assert interval.largest_bookable == oracle_largest(
                pool, bookings, maintenance, h, h + 1
            )


@core_settings
@given(pools(), st.data())
def test_overbooked_instants_finds_every_overfull_hour(pool, data):
    """Arbitrary (even impossible) placements: the audit must report exactly the overfull hours."""
    gpus = [(node, i) for node, count in pool.nodes.items() for i in range(count)]
    bookings = []
    for _ in range(data.draw(st.integers(0, 6))):
        node, i = data.draw(st.sampled_from(gpus))
        start, end = data.draw(intervals())
        slices = data.draw(st.integers(1, pool.slices_per_gpu))
        bookings.append(Booking("u", pool.name, Fraction(slices, pool.slices_per_gpu),
                                hour(start), hour(end), Placement(node, (i,), slices)))
    reported = {
        (h, finding.node, finding.gpu, finding.used_slices)
        for finding in overbooked_instants(pool, bookings)
        for h in range(hour_of(finding.start), hour_of(finding.end))
    }
    expected = {
        (h, node, i, used)
        for h in range(HOURS)
        for (node, i), used in used_at(pool, bookings, [], h).items()
        if used > pool.slices_per_gpu
    }
    assert reported == expected


@pytest.mark.parametrize("slices_per_gpu", [1, 2, 4])
def test_oracle_amounts_are_the_pools_bookable_amounts(slices_per_gpu):
    """Guard the oracle itself: it must try exactly what the pool accepts."""
    pool = Pool(name="p", nodes={"n0": 3}, slices_per_gpu=slices_per_gpu)
    for amount in bookable_amounts(pool):
        assert pool.amount_to_slices(amount) == amount * slices_per_gpu
