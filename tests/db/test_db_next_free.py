"""The next free slot read from the database, and the capacity refusal that names it."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from db_test_times import at

from jhub_gpubooking.core.errors import InvalidRequest, NoCapacity, NotFound
from jhub_gpubooking.core.model import parse_amount
from jhub_gpubooking.core.placement import fit
from jhub_gpubooking.db.next_free import next_free


def fill_a100(store, start, end) -> None:
    """Book all six GPUs of pool a100 (node-a: 2, node-b: 4)."""
    store.create("ada", "a100", 4, start, end)
    store.create("bob", "a100", 2, start, end)


def test_the_next_free_slot_starts_when_the_pool_frees(store):
    fill_a100(store, at(11), at(13))
    assert next_free(store, "a100", 1, 60, at(11)) == (at(13), at(14))
    # from now: 10:00 is the running slot, but two hours from then run into the full hours
    assert next_free(store, "a100", 1, 120) == (at(13), at(15))
    assert next_free(store, "a100", 1, 60) == (at(10), at(11))
    assert next_free(store, "t4", "1/4", 15, at(11)) == (at(11), at(11, 15))


def test_a_free_slot_beyond_the_first_looks_is_found(store):
    """The search looks a day ahead, then as far as it may: a pool full for two and a half
    days is found free by the second look, whole GPUs and fractions alike."""
    start = at(11)
    for day in range(3):  # full for two days and a half, in two-hour bookings
        for hours in range(0, 24 if day < 2 else 12, 2):
            begin = start + timedelta(days=day, hours=hours)
            fill_a100(store, begin, begin + timedelta(hours=2))
    free = start + timedelta(days=2, hours=12)
    assert next_free(store, "a100", 1, 60, at(11)) == (free, free + timedelta(hours=1))
    assert next_free(store, "a100", 4, 300, at(11)) == (free, free + timedelta(hours=5))
    assert next_free(store, "a100", 1, 60, at(11, 15)) == (free, free + timedelta(hours=1))


def brute_force_next_free(store, pool, amount, minutes, earliest, latest):
    """The first grid start from ``earliest`` to ``latest`` at which placing fits: every
    15 minutes tried, each a placement of its own."""
    length = timedelta(minutes=minutes)
    bookings, windows = store.overlapping(pool, earliest, latest + length)
    start = earliest
    while start <= latest:
        if fit(store.pool(pool), bookings, start, start + length, amount, windows) is not None:
            return start, start + length
        start += timedelta(minutes=15)
    return None


def test_the_search_read_a_stretch_at_a_time_finds_what_trying_every_start_finds(store):
    """A pool busy for four days, at random, with maintenance on one node: the search, which
    reads a day, then two, then four ... and carries bookings across those stretches, names
    what trying every start in turn names, for whole GPUs and fractions, short and long."""
    rng = random.Random(17)
    for n in range(150):
        begin = at(10, days=rng.randrange(4)) + timedelta(minutes=15 * rng.randrange(96))
        end = begin + timedelta(minutes=15 * rng.randrange(1, 33))
        for pool, amount in (("a100", rng.choice([1, 1, 2, 4])), ("t4", rng.choice(["1/4", 1]))):
            try:
                store.create(f"user-{n}", pool, amount, begin, end, is_admin=True)
            except NoCapacity:
                pass
    store.add_maintenance("a100", at(20, days=1), at(9, 50, days=2), node="node-b",
                          reason="firmware")
    latest = at(10, days=7)
    waits = []
    for pool, amount, minutes, after in [
        ("a100", 4, 300, at(11)), ("a100", 2, 120, at(23, days=1)), ("a100", 1, 60, at(11)),
        ("a100", 4, 600, at(13, days=2)), ("t4", "1/4", 45, at(11)), ("t4", 2, 240, at(11)),
        ("t4", 1, 1440, at(12)),
    ]:
        expected = brute_force_next_free(store, pool, parse_amount(amount), minutes, after,
                                         latest)
        assert expected is not None
        assert next_free(store, pool, amount, minutes, after, is_admin=True) == expected
        waits.append(expected[0] - after)
    # answers at once, within the first day and in the third stretch (after two days)
    assert min(waits) == timedelta(0) and max(waits) > timedelta(days=3)
    assert any(timedelta(0) < wait < timedelta(days=1) for wait in waits)


def test_maintenance_and_ended_bookings_count_as_they_do_for_booking(store):
    fill_a100(store, at(11), at(13))
    store.add_maintenance("a100", at(13), at(13, 40), reason="firmware")
    # the window's end is rounded up to the 15-minute grid
    assert next_free(store, "a100", 2, 60, at(11)) == (at(13, 45), at(14, 45))
    # a booking ended early ("End now") frees its GPUs for the current slot at once
    running = store.create("cy", "t4", 2, at(10), at(12))
    assert next_free(store, "t4", 2, 60) == (at(12), at(13))
    store.cancel(running.id, "cy")
    assert next_free(store, "t4", 2, 60) == (at(10), at(11))


def test_the_search_stops_where_the_policy_stops_booking(make_store):
    store = make_store(default_policy={"max_days_ahead": 1})
    fill_a100(store, at(10), at(12, days=1))
    assert next_free(store, "a100", 1, 60) is None
    assert next_free(store, "a100", 1, 60, is_admin=True) == (at(12, days=1), at(13, days=1))


def test_requests_the_store_would_refuse_are_refused(store):
    with pytest.raises(InvalidRequest, match="multiple of 15"):
        next_free(store, "a100", 1, 20)
    with pytest.raises(InvalidRequest, match="multiple of 15"):
        next_free(store, "a100", 1, 0)
    with pytest.raises(InvalidRequest):
        next_free(store, "a100", "1/3", 60)
    with pytest.raises(NotFound):
        next_free(store, "h100", 1, 60)


def test_a_capacity_refusal_names_the_next_free_slot(store):
    fill_a100(store, at(11), at(13))
    with pytest.raises(NoCapacity) as refused:
        store.create("cy", "a100", 1, at(12), at(13))
    assert refused.value.next_free == (at(13), at(14))
    assert refused.value.message.endswith(
        "The earliest free time of the same length is 2030-01-07 13:00 to 14:00 UTC."
    )
    # booking what it names succeeds
    assert store.create("cy", "a100", 1, *refused.value.next_free).start == at(13)
