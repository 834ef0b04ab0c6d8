"""The next free slot against a brute-force oracle (every hour tried), and its refusal text."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_core_placement_oracle import HOURS, booked, hour, oracle_can_place, scenarios

from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, Pool
from jhub_gpubooking.core.next_free import earliest_fit, naming_next_free
from jhub_gpubooking.core.placement import place


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.integers(1, 4), st.integers(0, HOURS - 1), st.data())
def test_the_next_free_slot_is_the_first_hour_the_oracle_can_place(scenario, length, first, data):
    pool, maintenance, steps = scenario
    bookings = booked(pool, maintenance, steps)
    amount = data.draw(st.sampled_from(
        [Fraction(k, pool.slices_per_gpu) for k in range(1, pool.slices_per_gpu)]
        + [Fraction(n) for n in range(1, max(pool.nodes.values()) + 1)]
    ))
    last = HOURS  # from then on nothing is booked: the search must end there at the latest
    found = earliest_fit(pool, bookings, amount, timedelta(hours=length), hour(first), hour(last),
                         60, maintenance)
    expected = next(
        (h for h in range(first, last + 1)
         if oracle_can_place(pool, bookings, maintenance, h, h + length, amount)),
        None,
    )
    event("found later than asked" if expected not in (None, first) else "found at once")
    assert expected is not None  # the empty hours after the timeline always fit
    assert found == (hour(expected), hour(expected + length))


def test_nothing_is_found_when_no_start_fits_before_the_latest(at):
    pool = Pool(name="p", nodes={"n": 1})
    busy = Booking("ada", "p", Fraction(1), at(10), at(14),
                   place(pool, [], at(10), at(14), Fraction(1)))
    assert earliest_fit(pool, [busy], Fraction(1), timedelta(hours=1), at(10), at(13), 15) is None
    assert earliest_fit(pool, [busy], Fraction(1), timedelta(hours=1), at(10), at(14), 15) == (
        at(14), at(15)
    )
    assert earliest_fit(pool, [busy], Fraction(1), timedelta(hours=1), at(12), at(11), 15) is None


def test_the_refusal_names_the_next_free_slot(at):
    pool = Pool(name="p", nodes={"n": 1})
    existing = [Booking("ada", "p", Fraction(1), at(10), at(14),
                        place(pool, [], at(10), at(14), Fraction(1)))]
    with pytest.raises(NoCapacity) as caught:
        place(pool, existing, at(12), at(13), Fraction(1))
    refused = caught.value
    named = naming_next_free(refused, (at(14), at(15)))
    assert named.message == (
        "No p capacity for 1 GPU from 2026-11-22 12:00 to 13:00 UTC: no GPU is free then. "
        "The earliest free time of the same length is 2026-11-22 14:00 to 15:00 UTC."
    )
    assert (named.next_free, named.full_start, named.status) == ((at(14), at(15)), at(12), 409)
    assert naming_next_free(refused, None) is refused
