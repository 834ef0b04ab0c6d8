"""The waitlist's pure rules: fair order, what interval freed capacity gives a wait, expiry."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.waitlist import (
    Wait,
    WaitState,
    booked_note,
    expires_at,
    fair_order,
    fitting_interval,
    interval_to_try,
    is_expired,
    search_bounds,
    wait_to_json,
)

T0 = datetime(2030, 1, 7, 10, 0, tzinfo=timezone.utc)
POOL = Pool(name="a100", nodes={"node-a": 2})


def t(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def wait(wait_id: int, priority: int = 0, joined: int = 0, start: int = 60, minutes: int = 60,
         latest: int | None = None, amount: int = 1) -> Wait:
    return Wait(user=f"u{wait_id}", pool="a100", amount=Fraction(amount), start=t(start),
                length=timedelta(minutes=minutes),
                latest_start=t(start if latest is None else latest), priority=priority,
                created=t(joined), id=wait_id)


def booked(start: int, end: int, gpus: tuple[int, ...] = (0, 1)) -> Booking:
    return Booking(user="x", pool="a100", amount=Fraction(len(gpus)), start=t(start), end=t(end),
                   placement=Placement("node-a", gpus, 1), id=100 + start)


def test_fair_order_is_priority_then_first_come_first_served():
    waits = [wait(1, joined=5), wait(2, priority=1, joined=9), wait(3, joined=1),
             wait(4, joined=5), wait(5, priority=1, joined=2)]
    assert [w.id for w in fair_order(waits)] == [5, 2, 3, 1, 4]


def test_a_wait_for_one_interval_gets_it_only_when_it_is_free():
    exact = wait(1, start=60, minutes=60)
    assert fitting_interval(exact, POOL, [booked(60, 120)], [], T0, 15) is None
    assert fitting_interval(exact, POOL, [booked(60, 120, (0,))], [], T0, 15) == (t(60), t(120))
    assert fitting_interval(exact, POOL, [], [], T0, 15) == (t(60), t(120))


def test_a_window_wait_gets_the_first_free_interval_in_its_window():
    window = wait(1, start=60, minutes=60, latest=180)  # any hour from 11:00, ending by 14:00
    full = [booked(0, 150)]
    assert fitting_interval(window, POOL, full, [], T0, 15) == (t(150), t(210))
    # the window ends before anything is free long enough
    assert fitting_interval(window, POOL, [booked(0, 200)], [], T0, 15) is None
    # maintenance counts like a booking
    block = MaintenanceWindow(pool="a100", start=t(150), end=t(175), reason="x")
    assert fitting_interval(window, POOL, full, [block], T0, 15) == (t(180), t(240))


def test_a_started_window_searches_from_the_running_slot():
    window = wait(1, start=0, minutes=60, latest=120)
    now = t(37)
    assert search_bounds(window, now, 15) == (t(30), t(120))
    assert fitting_interval(window, POOL, [], [], now, 15) == (t(30), t(90))


def test_a_wait_expires_when_the_slot_of_its_latest_start_has_ended():
    exact = wait(1, start=60)
    assert expires_at(exact, 15) == t(75)
    assert not is_expired(exact, t(74), 15)
    assert search_bounds(exact, t(74), 15) == (t(60), t(60))
    assert is_expired(exact, t(75), 15)
    assert search_bounds(exact, t(75), 15) is None
    assert fitting_interval(exact, POOL, [], [], t(75), 15) is None


def test_the_json_and_the_note_of_the_booking():
    window = wait(7, start=60, minutes=90, latest=120).with_changes(
        state=WaitState.BOOKED, booking_id=3, updated=t(5), amount=Fraction(1, 2))
    assert wait_to_json(window) == {
        "id": 7, "user": "u7", "pool": "a100", "gpus": 0.5,
        "start": "2030-01-07T11:00:00Z", "end": "2030-01-07T12:30:00Z",
        "window_end": "2030-01-07T13:30:00Z", "latest_start": "2030-01-07T12:00:00Z",
        "minutes": 90, "priority": 0, "state": "booked", "booking_id": 3, "note": "",
        "created": "2030-01-07T10:00:00Z", "updated": "2030-01-07T10:05:00Z",
    }
    assert booked_note(window) == "Booked from the waitlist (wait #7)."
    assert booked_note(window.with_changes(note="thesis")) == "thesis"


def test_a_spread_out_pool_is_worth_a_try_a_full_one_is_not():
    two_nodes = Pool(name="a100", nodes={"node-a": 2, "node-b": 2})
    spread = [booked(60, 120, (0,)),
              booked(60, 120, (1,)).with_changes(placement=Placement("node-b", (1,), 1), id=7)]
    wants_two = wait(1, start=60, amount=2)
    # no node has two free GPUs, but two are free in total: moving one booking would let it in
    assert fitting_interval(wants_two, two_nodes, spread, [], T0, 15) is None
    assert interval_to_try(wants_two, two_nodes, spread, [], T0, 15) == (t(60), t(120))
    full = [*spread, booked(60, 120, (1,)).with_changes(id=8)]  # node-a full, one GPU left
    assert interval_to_try(wants_two, two_nodes, full, [], T0, 15) is None
    # what fits plainly is tried as found, a window's later interval included
    window = wait(2, start=60, latest=120, amount=2)
    assert interval_to_try(window, two_nodes, full, [], T0, 15) == (t(120), t(180))
    assert interval_to_try(wait(3, start=0), two_nodes, [], [], t(20), 15) is None  # expired
