"""The exact re-placement (an integer program; CP-SAT and HiGHS) against the brute-force
oracle, and as ``place_or_move``'s last resort on pools above the exact search's limit
(issue 17, item 1).

On the small scenarios of :mod:`test_core_replacement` the oracle tries every placement of
every movable booking: the program must admit exactly what the oracle admits, moving as few
bookings. On 17-24-GPU pools, with the bounded chain and repack given no budget, every create
that the program's own feasibility question admits must get in through ``place_or_move``, and
every answer keeps the rules (only upcoming, unclaimed bookings move, each keeping its amount,
times and one node; nothing overbooked, maintenance respected). Every test runs with each
solver (the test sets install OR-Tools). No test asserts a time.
"""

from __future__ import annotations

from fractions import Fraction
from unittest import mock

import pytest
from hypothesis import event, given, settings, target
from test_core_replacement import (
    NOW,
    POOL,
    assert_as_the_oracle,
    assert_sound,
    hour,
    large_pools,
    quarter,
    scenarios,
)

from jhub_gpubooking.core import exact_moves, replacement
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.exact_moves import Demand, build_model, place_exactly
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.placement import held
from jhub_gpubooking.core.replacement import is_movable, place_or_move

# runs in one dependency set when both run side by side: it does not use the Hub, the spawner,
# SQLAlchemy or tornado (pytest.mark.one_set, tests/one_set.py)
pytestmark = pytest.mark.one_set("latest")

#: Far more than any of these tiny programs needs: the answers below are the solver's optimum.
GENEROUS_SECONDS = 60
exact_settings = settings(max_examples=300, deadline=None)
each_solver = pytest.mark.parametrize("solver", ["cpsat", "highs", "portfolio"])


def split(bookings: list[Booking]) -> tuple[list[Booking], list[Booking]]:
    """(staying, movable) at NOW."""
    return ([b for b in bookings if not is_movable(b, NOW)],
            [b for b in bookings if is_movable(b, NOW)])


@each_solver
@exact_settings
@given(scenarios())
def test_the_program_admits_what_the_oracle_admits_moving_as_few(solver, scenario):
    pool, maintenance, bookings, request = scenario
    start, end, amount = request
    staying, movable = split(bookings)
    found = place_exactly(pool, staying, movable, hour(start), hour(end), amount, maintenance,
                          GENEROUS_SECONDS, solver)
    assert_as_the_oracle(pool, maintenance, bookings, request, found)


def program_admits(pool, maintenance, bookings, request, solver) -> bool:
    """The feasibility question alone (no objective): can the request and every movable
    booking be placed next to what stays?"""
    start, end, amount = request
    staying, movable = split(bookings)
    demands = [*(Demand.of_booking(b) for b in movable),
               Demand.of_amount(pool, hour(start), hour(end), amount)]
    model = build_model(pool, demands, held(pool, staying, maintenance))
    return model.solve([0.0] * len(model.columns), 1, GENEROUS_SECONDS, solver=solver).found


@each_solver
@exact_settings
@given(scenarios(pools=large_pools, most=40))
def test_on_large_pools_the_last_resort_admits_whatever_the_program_admits(solver, scenario):
    pool, maintenance, bookings, request = scenario
    start, end, amount = request
    # no budget for the bounded chain nor the repack: only best fit and the exact step
    with mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0):
        try:
            found = place_or_move(pool, bookings, hour(start), hour(end), amount, NOW,
                                  maintenance, exact_seconds=GENEROUS_SECONDS,
                                  exact_solver=solver)
        except NoCapacity:
            event("refused")
            assert not program_admits(pool, maintenance, bookings, request, solver)
            return
    event("placed with moves" if found.moves else "placed as the pool stood")
    target(len(found.moves))
    assert_sound(pool, maintenance, bookings, request, found)


def fragmented_large_pool() -> tuple[Pool, list[Booking]]:
    """Three nodes of 8 GPUs; every GPU of n0 holds one upcoming quarter 3-5, every other GPU
    two: a request for all of n0 gets in only if the eight quarters move."""
    pool = Pool(name="p", nodes={f"n{k}": 8 for k in range(3)}, slices_per_gpu=4)
    bookings = []
    for k in range(3):
        for i in range(8):
            for copy in range(1 if k == 0 else 2):
                bookings.append(Booking(f"u{k}{i}{copy}", "p", Fraction(1, 4), hour(3),
                                        hour(5), Placement(f"n{k}", (i,), 1),
                                        id=len(bookings) + 1))
    return pool, bookings


@each_solver
def test_the_last_resort_moves_only_what_is_in_the_way(solver):
    pool, bookings = fragmented_large_pool()
    with mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0):
        found = place_or_move(pool, bookings, hour(3), hour(4), Fraction(8), NOW,
                              exact_seconds=GENEROUS_SECONDS, exact_solver=solver)
        # 0 turns the last resort off: the same create is refused
        try:
            place_or_move(pool, bookings, hour(3), hour(4), Fraction(8), NOW, exact_seconds=0)
        except NoCapacity:
            pass
        else:
            raise AssertionError("the exact step ran with exact_seconds=0")
    assert len(found.moves) == 8
    # n0 is taken whole (the other nodes have no GPU free for long enough)
    assert found.placement == Placement("n0", tuple(range(8)), 4)
    assert {move.booking.placement.node for move in found.moves} == {"n0"}
    for move in found.moves:
        assert move.placement.node != "n0" and move.placement.slices == 1


def test_the_last_resort_is_skipped_when_only_started_bookings_are_in_the_way():
    pool = Pool(name="p", nodes={f"n{k}": 8 for k in range(3)}, slices_per_gpu=4)
    # every GPU holds a started quarter: no whole GPU is free, whatever moves
    bookings = [Booking(f"u{k}{i}", "p", Fraction(1, 4), hour(1), hour(5),
                        Placement(f"n{k}", (i,), 1), id=8 * k + i + 1)
                for k in range(3) for i in range(8)]
    bookings += [Booking(f"v{k}", "p", Fraction(1, 4), hour(3), hour(5),
                         Placement(f"n{k}", (0,), 1), id=100 + k) for k in range(3)]
    with mock.patch.object(replacement, "place_exactly",
                           side_effect=AssertionError("the exact step ran")):
        try:
            place_or_move(pool, bookings, hour(3), hour(4), Fraction(1), NOW,
                          exact_seconds=GENEROUS_SECONDS)
        except NoCapacity:
            pass
        else:
            raise AssertionError("a whole GPU was placed where started quarters fill every GPU")


@each_solver
def test_maintenance_and_the_known_interval_bound_the_program(solver):
    """A whole GPU of n0 needs one of the two quarters to join the other; n1 is under
    maintenance. The quarter reaching past the known interval stays; the other moves."""
    maintenance = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
    bookings = [quarter("a", "n0", 0, 3, 7), quarter("b", "n0", 1, 3, 5)]
    found = place_exactly(POOL, [bookings[0]], [bookings[1]], hour(4), hour(6), Fraction(1),
                          maintenance, GENEROUS_SECONDS, solver)
    assert [move.booking.user for move in found.moves] == ["b"]
    assert found.moves[0].placement == Placement("n0", (0,), 1)
    assert found.placement == Placement("n0", (1,), 4)
    # with n0 under maintenance too, nothing fits
    everywhere = [MaintenanceWindow("p", hour(0), hour(8))]
    assert place_exactly(POOL, [], bookings, hour(4), hour(6), Fraction(1), everywhere,
                         GENEROUS_SECONDS, solver) is None


@each_solver
def test_a_gpu_already_over_its_slices_takes_nothing_more(solver):
    """Five started quarters on GPU 0 of n0 (say the pool had more slices when they were
    booked) and an upcoming quarter there too: the quarter moves off it, next to the request,
    and the audit accepts a GPU that is less overbooked than before."""
    maintenance = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
    started = [quarter(user, "n0", 0, 1, 5) for user in "abcde"]
    upcoming = quarter("f", "n0", 0, 3, 5)
    found = place_exactly(POOL, started, [upcoming], hour(3), hour(4), Fraction(1, 2),
                          maintenance, GENEROUS_SECONDS, solver)
    assert found.placement == Placement("n0", (1,), 2)
    assert [(move.booking.user, move.placement) for move in found.moves] == [
        ("f", Placement("n0", (1,), 1))]


def test_the_program_has_no_column_where_what_stays_leaves_no_room():
    """What stays is known before solving: a GPU it leaves too full during a demand's whole
    interval gets no column for that demand (no solver need branch on it), a node without
    enough such GPUs no pick for a whole-GPU demand, and a demand with no room anywhere is
    refused without a solve."""
    pool = Pool(name="p", nodes={"n0": 2, "n1": 2}, slices_per_gpu=4)
    # n0/0 holds three quarters 2-6, n0/1 a whole GPU 3-4, n1/0 two quarters 5-6
    staying = [quarter(user, "n0", 0, 2, 6) for user in "abc"]
    staying += [Booking("d", "p", Fraction(1), hour(3), hour(4), Placement("n0", (1,), 4),
                        id=10),
                Booking("e", "p", Fraction(1, 2), hour(5), hour(6), Placement("n1", (0,), 2),
                        id=11)]
    half = Demand.of_amount(pool, hour(1), hour(5), Fraction(1, 2))
    quarter_late = Demand.of_amount(pool, hour(5), hour(6), Fraction(1, 4))
    two = Demand.of_amount(pool, hour(3), hour(6), Fraction(2))
    model = build_model(pool, [half, quarter_late, two], held(pool, staying))
    names = [model.gpus[g] for g in sorted(model.x_of[0])]
    assert names == [("n1", 0), ("n1", 1)]  # n0/0 keeps one quarter free, n0/1 none at 3
    assert [model.gpus[g] for g in sorted(model.x_of[1])] == [("n0", 0), ("n0", 1), ("n1", 0),
                                                               ("n1", 1)]
    assert sorted(model.gpus[g] for g in model.x_of[2]) == []  # no node has 2 GPUs free 3-6
    assert not any(key[0] == "y" for key in model.columns)
    found = place_exactly(pool, staying, [], hour(3), hour(6), Fraction(2),
                          time_limit=GENEROUS_SECONDS)
    assert found is None


def test_importing_the_core_imports_no_solver():
    """The Hub imports the spawner, which imports the core: a solver is loaded only to solve."""
    import subprocess
    import sys

    code = ("import sys, jhub_gpubooking.spawner, jhub_gpubooking.core.exact_moves; "
            "print('scipy' in sys.modules or 'ortools' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
    assert exact_moves.DEFAULT_SECONDS > 0
