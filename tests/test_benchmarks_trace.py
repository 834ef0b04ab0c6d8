"""The lab trace's pure parts (issue 17): the waitlist and the no-show time in the replay, moving
upcoming bookings, the refusals no move can avoid, the targets object, and the offline optimum's
ILP against a brute force on tiny instances."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from benchmarks.lab_trace import TARGETS, judge_targets, measure, reused_gpu_hours
from benchmarks.trace_optimum import Item, brute_force, feasible, fits_with_moves, options, solve
from benchmarks.trace_replay import (
    Replay,
    best_fit,
    blocked_by_started,
    re_placing,
    replay,
)
from benchmarks.tracegen import Request, Trace, TraceShape, generate
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.core.timegrid import ceil_to_grid

# runs in one dependency set when both run side by side: it does not use the Hub, the spawner,
# SQLAlchemy or tornado (pytest.mark.one_set, tests/one_set.py); in pins, whose run has fewer of
# the CPU's minutes than latest's once the wall-clock waits have a lane of their own
pytestmark = pytest.mark.one_set("pins")

T0 = datetime(2026, 9, 7, 9, 0, tzinfo=timezone.utc)
ONE_GPU = Pool(name="one", nodes={"n1": 1})
TWO_GPUS = Pool(name="two", nodes={"n1": 2})


def hours(h: float) -> datetime:
    return T0 + timedelta(hours=h)


def request(request_id: int, made: float, start: float, end: float, amount=1, **kw) -> Request:
    return Request(id=request_id, user=f"user-{request_id}", group="g", made_at=hours(made),
                   start=hours(start), end=hours(end), amount=Fraction(amount),
                   no_show=kw.pop("no_show", False), **kw)


def trace_of(pool: Pool, *requests: Request) -> Trace:
    return Trace(TraceShape(users=len(requests), weeks=1), pool, list(requests))


def booking(booking_id: int, gpu: int, start: float, end: float) -> Booking:
    return Booking(user="u", pool="two", amount=Fraction(1), start=hours(start), end=hours(end),
                   placement=Placement("n1", (gpu,), 1), id=booking_id)


# ---------------------------------------------------------------- the waitlist, the no-show time

# one GPU: a no-show holds it 09:00 to 15:00 the next day; two users who want 2 h of it from
# 09:00 wait for it (nothing is free within their 24-hour windows)
NO_SHOW_AND_TWO_WAITS = trace_of(
    ONE_GPU,
    request(1, -1, 0, 30, no_show=True),
    request(2, -0.5, 0, 2, joins_waitlist=True),
    request(3, -0.25, 0, 2, joins_waitlist=True),
)


def test_a_released_no_show_books_the_waiting_requests_first_come_first_served():
    outcome = replay(NO_SHOW_AND_TWO_WAITS, Replay("w", attempts=1, no_show_minutes=15))

    assert (outcome.waited, outcome.from_waitlist, outcome.refused_requests) == (2, 2, 0)
    admitted = {i: (b.start, b.end) for i, b in outcome.admitted.items()}
    assert admitted == {
        1: (hours(0), hours(0.25)),  # released 15 minutes after its start
        2: (hours(0.25), hours(2.25)),  # the first to wait gets the freed GPU at once
        3: (hours(2.25), hours(4.25)),  # the second the first interval of its length after that
    }
    # of the no-show's 30 booked GPU-hours, the two waits use 4
    assert reused_gpu_hours(ONE_GPU, outcome) == 4
    numbers = measure(NO_SHOW_AND_TWO_WAITS, outcome)
    assert (numbers["no_show_reclaimed"], numbers["booked_from_waitlist"]) == (4 / 30, 2)


def test_the_replay_releases_no_shows_after_its_no_show_time():
    for minutes in (10, 15, 30):
        outcome = replay(NO_SHOW_AND_TWO_WAITS, Replay("w", attempts=1, no_show_minutes=minutes))
        freed = hours(0) + timedelta(minutes=minutes)
        assert outcome.admitted[1].end == freed
        # the first wait starts at the first grid point the released booking no longer holds
        assert outcome.admitted[2].start == ceil_to_grid(freed, 15)


def test_the_waitlist_books_at_once_what_is_free_in_the_window():
    # the no-show holds the GPU only until 13:00: the waits get 13:00 and 15:00 when they join
    short = trace_of(ONE_GPU, request(1, -1, 0, 4, no_show=True), *NO_SHOW_AND_TWO_WAITS.requests[1:])
    outcome = replay(short, Replay("w", attempts=1, no_show_minutes=None))

    assert (outcome.waited, outcome.from_waitlist) == (2, 2)
    assert [outcome.admitted[i].start for i in (2, 3)] == [hours(4), hours(6)]


def test_without_the_waitlist_or_without_joining_it_the_requests_stay_refused():
    no_waitlist = replay(NO_SHOW_AND_TWO_WAITS, Replay("w", attempts=1, waitlist=False))
    never_released = replay(NO_SHOW_AND_TWO_WAITS, Replay("w", attempts=1, no_show_minutes=None))
    not_joining = trace_of(ONE_GPU, *(
        Request(**{**r.__dict__, "joins_waitlist": False}) for r in NO_SHOW_AND_TWO_WAITS.requests))

    assert (no_waitlist.refused_requests, no_waitlist.waited) == (2, 0)
    # nothing frees the GPU within the waits' windows: they expire unserved
    assert (never_released.waited, never_released.from_waitlist) == (2, 0)
    assert never_released.refused_requests == 2
    assert replay(not_joining, Replay("w", attempts=1)).refused_requests == 2


def test_the_waitlist_draw_leaves_the_rest_of_the_trace_unchanged():
    shape = TraceShape(users=5, weeks=1)
    with_waits = generate(shape, seed=7)
    without = generate(TraceShape(users=5, weeks=1, waitlist_share=0.0), seed=7)

    strip = [{**r.__dict__, "joins_waitlist": None} for r in with_waits.requests]
    assert strip == [{**r.__dict__, "joins_waitlist": None} for r in without.requests]
    assert not any(r.joins_waitlist for r in without.requests)
    assert any(r.joins_waitlist for r in with_waits.requests)


# ---------------------------------------------------------------- start early

# one GPU: a no-show holds it 09:00 to 13:00; user 2 booked it 14:00 to 16:00, user 3 from
# 19:00 to 20:00 (more than 8 hours after the release)
NO_SHOW_AND_LATER_BOOKINGS = (
    request(1, -2, 0, 4, no_show=True),
    request(2, -1.5, 5, 7, starts_early=True),
    request(3, -1, 10, 11, starts_early=True),
)


def test_a_released_no_show_is_offered_to_the_next_booking_whose_user_starts_early():
    trace = trace_of(ONE_GPU, *NO_SHOW_AND_LATER_BOOKINGS)
    outcome = replay(trace, Replay("s", attempts=1, start_early_hours=8))

    assert (outcome.start_early_offers, outcome.started_early) == (1, 1)
    admitted = {i: (b.start, b.end) for i, b in outcome.admitted.items()}
    assert admitted == {
        1: (hours(0), hours(0.25)),
        2: (hours(0.25), hours(2.25)),  # starts when the no-show is released, same length
        3: (hours(10), hours(11)),  # beyond the 8 hours: not offered
    }
    # the moved booking uses 2 of the no-show's 4 GPU-hours
    assert measure(trace, outcome)["no_show_reclaimed"] == 2 / 4


def test_a_user_who_declines_keeps_the_booking_and_is_not_asked_again():
    declining = [Request(**{**r.__dict__, "starts_early": False})
                 for r in NO_SHOW_AND_LATER_BOOKINGS]
    outcome = replay(trace_of(ONE_GPU, *declining), Replay("s", attempts=1, start_early_hours=8))
    without = replay(trace_of(ONE_GPU, *NO_SHOW_AND_LATER_BOOKINGS), Replay("s", attempts=1))

    assert (outcome.start_early_offers, outcome.started_early) == (1, 0)
    assert outcome.admitted[2].start == without.admitted[2].start == hours(5)
    assert without.start_early_offers == 0


def test_a_booking_started_early_stops_early_from_its_new_start_and_frees_its_old_time():
    # user 2 uses half of the booking; user 5 holds the GPU from 16:00 on, so user 4, who
    # asks for 15:00 to 16:00, waits: the early start frees it
    stopper = request(2, -1.5, 5, 7, starts_early=True, used_share=0.5)
    holder = request(5, -1.2, 7, 40)
    waiting = request(4, -1, 6, 7, joins_waitlist=True)
    trace = trace_of(ONE_GPU, NO_SHOW_AND_LATER_BOOKINGS[0], stopper, holder, waiting)
    outcome = replay(trace, Replay("s", attempts=1, start_early_hours=8))

    assert (outcome.admitted[2].start, outcome.admitted[2].end) == (hours(0.25), hours(1.25))
    assert (outcome.admitted[4].start, outcome.admitted[4].end) == (hours(6), hours(7))
    assert (outcome.waited, outcome.from_waitlist, outcome.refused_requests) == (1, 1, 0)


def test_the_start_early_draw_leaves_the_rest_of_the_trace_unchanged_and_skips_no_shows():
    shape = TraceShape(users=5, weeks=1)
    early = generate(shape, seed=7)
    never = generate(TraceShape(users=5, weeks=1, start_early_share=0.0), seed=7)

    strip = [{**r.__dict__, "starts_early": None} for r in early.requests]
    assert strip == [{**r.__dict__, "starts_early": None} for r in never.requests]
    assert any(r.starts_early for r in early.requests)
    assert not any(r.starts_early for r in never.requests)
    assert not any(r.starts_early and r.no_show for r in early.requests)


# ---------------------------------------------------------------- moving upcoming bookings


def test_re_placing_moves_an_upcoming_booking_where_best_fit_refuses():
    # GPU 0 is busy 0-2 h (started), GPU 1 from 3 h (upcoming): 1-4 h fits neither as placed
    existing = [booking(1, 0, 0, 2), booking(2, 1, 3, 5)]
    now = hours(0.5)

    with pytest.raises(NoCapacity):
        best_fit(TWO_GPUS, existing, hours(1), hours(4), Fraction(1), now)
    placed, moves = re_placing(TWO_GPUS, existing, hours(1), hours(4), Fraction(1), now)
    assert (placed, moves) == (Placement("n1", (1,), 1), ((2, Placement("n1", (0,), 1)),))
    # the exact check agrees: the upcoming booking and the request fit next to the started one
    started, upcoming = existing
    items = [Item(2, upcoming.start, upcoming.end, Fraction(1))]
    assert fits_with_moves(TWO_GPUS, [started], [*items, Item(-1, hours(1), hours(4), 1)])
    assert not fits_with_moves(TWO_GPUS, [started], [*items, Item(-1, hours(1), hours(4), 2)])
    assert not fits_with_moves(TWO_GPUS, existing, [Item(-1, hours(1), hours(4), 1)])
    # only started bookings in the way: no move helps two GPUs, one GPU is not blocked
    assert blocked_by_started(TWO_GPUS, existing, hours(1), hours(4), Fraction(2), now)
    assert not blocked_by_started(TWO_GPUS, existing, hours(1), hours(4), Fraction(1), now)


def test_every_replay_of_a_generated_trace_keeps_every_gpu_within_its_slices():
    trace = generate(TraceShape(users=6, weeks=1), seed=3)
    for how in (Replay("re-placing", re_placing), Replay("best fit", best_fit),
                Replay("whole", re_placing, whole_gpus=True, no_show_minutes=10),
                Replay("start early", re_placing, start_early_hours=8)):
        outcome = replay(trace, how)
        assert overbooked_instants(trace.pool, list(outcome.admitted.values())) == []
        numbers = measure(trace, outcome)
        assert numbers["admitted_requests"] + numbers["refused_requests"] == len(trace.requests)
        assert 0 <= numbers["fragmentation_refusals_blocked_by_started"] <= \
            numbers["fragmentation_refusals"]


# ---------------------------------------------------------------- the targets object


def test_targets_name_each_measure_once_with_every_seed_and_a_verdict():
    by_seed = {
        1: dict.fromkeys(TARGETS, 1.0) | {"fragmentation_refusals_avoidable": 0},
        2: dict.fromkeys(TARGETS, 0.95) | {"fragmentation_refusals_avoidable": 3},
    }
    targets = judge_targets(by_seed)

    assert list(targets) == [
        "share_of_time_resolved_bound", "fragmentation_refusals_avoidable",
        "fragmentation_refusals_blocked_by_started", "no_show_reclaimed", "jain",
        "whole_gpu_gain",
    ]
    share = targets["share_of_time_resolved_bound"]
    assert share == {"seeds": {"1": 1.0, "2": 0.95}, "target": 0.98, "compare": ">=",
                     "worst": 0.95, "met": False}
    assert targets["fragmentation_refusals_avoidable"]["worst"] == 3
    assert targets["jain"]["met"] is True  # 0.95 >= 0.9 on both seeds
    assert targets["fragmentation_refusals_blocked_by_started"]["met"] is None


# ---------------------------------------------------------------- the offline optimum


def random_items(rng: random.Random, count: int) -> list[Item]:
    items = []
    for n in range(count):
        start = rng.randrange(0, 5)
        items.append(Item(n + 1, hours(start), hours(start + rng.randrange(1, 4)),
                          rng.choice([Fraction(1, 2), Fraction(1), Fraction(2)])))
    return items


@pytest.mark.parametrize("seed", range(6))
def test_the_ilp_admits_exactly_what_the_brute_force_finds(seed):
    pool = Pool(name="t", nodes={"a": 2, "b": 1}, slices_per_gpu=2)
    items = random_items(random.Random(seed), 5)

    best = solve(pool, items, time_limit=60)

    assert best.optimal and best.value == brute_force(pool, items)
    assert feasible(pool, items, best.placements)
    assert best.value == sum((i.value for i in items if i.id in best.placements), Fraction(0))


def test_the_ilp_places_whole_gpus_on_one_node_and_fractions_on_one_gpu():
    pool = Pool(name="t", nodes={"a": 2, "b": 2}, slices_per_gpu=4)
    # two 2-GPU bookings and two quarters at once: the 2-GPU ones need a node each
    items = [Item(1, hours(0), hours(2), Fraction(2)), Item(2, hours(0), hours(2), Fraction(2)),
             Item(3, hours(1), hours(3), Fraction(1, 4))]

    best = solve(pool, items)

    assert best.value == 8  # the quarter cannot fit while both nodes are full
    assert {best.placements[1].node, best.placements[2].node} == {"a", "b"}
    assert all(len(best.placements[i].gpus) == 2 for i in (1, 2))
    assert len(list(options(pool, items[0]))) == 2  # one pair of GPUs on each node
