"""Start early: which upcoming bookings are offered capacity free now, and where they would go."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.start_early import (
    may_start_early,
    start_early_candidates,
    start_early_interval,
)

T0 = datetime(2030, 1, 7, 10, 0, tzinfo=timezone.utc)
POOL = Pool(name="a100", nodes={"node-a": 2}, slices_per_gpu=4)
EIGHT_HOURS = timedelta(hours=8)


def t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def booked(booking_id: int, start: int, end: int, gpu: int = 0, quarters: int = 4,
           **changes) -> Booking:
    return Booking(user=f"u{booking_id}", pool="a100", amount=Fraction(quarters, 4),
                   start=t(start), end=t(end), placement=Placement("node-a", (gpu,), quarters),
                   id=booking_id, **changes)


def test_only_upcoming_ordinary_bookings_within_the_horizon_are_offered_soonest_first():
    later = booked(1, 300, 360)
    sooner = booked(2, 120, 180)
    same_start_older = booked(3, 120, 150, gpu=1)
    beyond = booked(4, 8 * 60 + 15, 9 * 60)
    running = booked(5, -30, 60)
    cancelled = booked(6, 60, 120, status="cancelled")
    grant = booked(7, 60, 120, opportunistic=True)
    in_series = booked(8, 60, 120, series_id=1)
    other_pool = booked(9, 60, 120).with_changes(pool="h100")
    now = t(0)

    offered = start_early_candidates(
        [later, sooner, same_start_older, beyond, running, cancelled, grant, in_series,
         other_pool], "a100", now, EIGHT_HOURS)
    assert [b.id for b in offered] == [2, 3, 1]
    assert may_start_early(booked(10, 8 * 60, 9 * 60), now, EIGHT_HOURS)  # the horizon's edge


def test_an_early_start_keeps_the_length_from_the_running_slot_on_any_gpu_that_fits():
    # GPU 0 is busy until 11:00, GPU 1 is free: the 14:00-15:30 booking on GPU 0 can start now
    busy = booked(1, -60, 60, gpu=0)
    late = booked(2, 240, 330, gpu=0)

    found = start_early_interval(POOL, late, [busy, late], t(7), 15)
    assert found == (t(0), t(90), Placement("node-a", (1,), 4))


def test_capacity_freed_at_the_next_grid_point_is_offered_from_there():
    # a no-show released at 10:07 ends at 10:15 (the next grid point): the GPU is free from then
    released = booked(1, -15, 15, gpu=0)
    other = booked(2, -60, 600, gpu=1)
    late = booked(3, 120, 180, gpu=1, quarters=2)

    assert start_early_interval(POOL, late, [released, other], t(7), 15) == (
        t(15), t(75), Placement("node-a", (0,), 2))


def test_no_early_start_when_it_does_not_fit_or_would_not_be_earlier():
    full = [booked(1, -60, 600, gpu=0), booked(2, -60, 30, gpu=1, quarters=3)]
    half = booked(3, 60, 120, gpu=1, quarters=2)
    # a quarter is free on GPU 1 until 10:30, not the half the booking holds
    assert start_early_interval(POOL, half, full, t(0), 15) is None
    # a booking starting in the running slot cannot start any earlier
    running = booked(4, 0, 60, gpu=1, quarters=1)
    assert start_early_interval(POOL, running, [], t(7), 15) is None
    # one starting in the next slot gets the rest of the running slot, like a "book now"
    next_slot = booked(5, 15, 75, gpu=1, quarters=1)
    assert start_early_interval(POOL, next_slot, [], t(7), 15) == (
        t(0), t(60), Placement("node-a", (0,), 1))


def test_a_maintenance_window_keeps_an_early_start_out():
    window = MaintenanceWindow(pool="a100", start=t(30), end=t(60), reason="driver update")
    late = booked(1, 120, 180)

    assert start_early_interval(POOL, late, [], t(0), 15, [window]) is None
    assert start_early_interval(POOL, late, [], t(0), 15) == (
        t(0), t(60), Placement("node-a", (0,), 4))
