"""A re-placement found without the pool's lock is written only if it still holds, and a
refusal says when the exact search ran out of time rather than proving there is no way
(issue 17, item 1; the store's side is in tests/db/test_db_longer_search.py)."""

from __future__ import annotations

from fractions import Fraction
from unittest import mock

import pytest
from test_core_replacement import NOW, POOL, hour, quarter

from jhub_gpubooking.core import exact_moves, replacement
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.ilp_solvers import Solution
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Move, Placement, Replacement
from jhub_gpubooking.core.proposed_moves import still_holds

#: n1 is under maintenance: a whole GPU of n0 fits only when one quarter joins the other.
MAINTENANCE = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
WHOLE = (hour(3), hour(5), Fraction(1))


def situation() -> tuple[list[Booking], Replacement]:
    bookings = [quarter("a", "n0", 0, 3, 5), quarter("b", "n0", 1, 3, 5)]
    proposal = exact_moves.place_exactly(POOL, [], bookings, *WHOLE, MAINTENANCE, 60, "highs")
    assert len(proposal.moves) == 1
    return bookings, proposal


def holds(bookings: list[Booking], proposal: Replacement) -> Replacement | None:
    return still_holds(POOL, bookings, proposal, *WHOLE, NOW, MAINTENANCE)


def test_a_proposal_on_the_pool_it_was_found_on_holds():
    bookings, proposal = situation()
    assert holds(bookings, proposal) == proposal


def test_a_proposal_is_re_based_on_the_bookings_as_read_now():
    bookings, proposal = situation()
    # read again: equal bookings, other objects (with a note changed that does not matter)
    again = [b.with_changes(note="read again") for b in bookings]
    rebased = holds(again, proposal)
    (move,) = rebased.moves
    assert move.booking.note == "read again"
    assert (rebased.placement, move.placement) == (proposal.placement,
                                                    proposal.moves[0].placement)


@pytest.mark.parametrize("change", ["cancelled", "moved", "claimed", "shortened"])
def test_a_proposal_moving_a_booking_that_changed_does_not_hold(change):
    bookings, proposal = situation()
    moved = proposal.moves[0].booking
    others = [b for b in bookings if b.id != moved.id]
    changed = {
        "cancelled": [],
        "moved": [moved.with_changes(placement=Placement("n0", (1 - moved.placement.gpus[0],),
                                                         1))],
        "claimed": [moved.with_changes(server="")],
        "shortened": [moved.with_changes(end=hour(4))],
    }[change]
    assert holds([*others, *changed], proposal) is None


def test_a_proposal_does_not_hold_when_a_new_booking_takes_its_room():
    bookings, proposal = situation()
    gpu = proposal.placement.gpus[0]
    newcomer = Booking("n", "p", Fraction(1, 2), hour(4), hour(6),
                       Placement("n0", (gpu,), 2), id=99)
    assert holds([*bookings, newcomer], proposal) is None
    # nor a move onto a GPU under maintenance now
    stray = Replacement(proposal.placement,
                        (Move(proposal.moves[0].booking, Placement("n1", (0,), 1)),))
    assert holds(bookings, stray) is None


def test_the_exact_step_says_when_it_ran_out_of_time():
    bookings, _ = situation()
    unknown = Solution("unknown", None, None, None, "highs")
    with mock.patch.object(exact_moves, "solve_binary", return_value=unknown), \
            pytest.raises(exact_moves.RanOut):
        exact_moves.place_exactly(POOL, [], bookings, *WHOLE, MAINTENANCE, 0.1, "highs")
    infeasible = Solution("infeasible", None, None, None, "highs")
    with mock.patch.object(exact_moves, "solve_binary", return_value=infeasible):
        assert exact_moves.place_exactly(POOL, [], bookings, *WHOLE, MAINTENANCE, 0.1,
                                         "highs") is None


def test_a_refusal_after_the_exact_step_ran_out_says_so():
    """On a pool above the exhaustive chain's limit, with no budget for the bounded phases."""
    big = POOL.__class__(name="p", nodes={"n0": 2, "n1": 15}, slices_per_gpu=4)
    bookings = [quarter("a", "n0", 0, 3, 5), quarter("b", "n0", 1, 3, 5),
                Booking("c", "p", Fraction(15), hour(3), hour(5),
                        Placement("n1", tuple(range(15)), 4), id=3)]
    no_budget = mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0)
    ran_out = mock.patch.object(replacement, "place_exactly",
                                side_effect=exact_moves.RanOut("hard"))
    with no_budget, ran_out, pytest.raises(NoCapacity) as refused:
        replacement.place_or_move(big, bookings, *WHOLE, NOW, exact_seconds=1)
    assert refused.value.search_ran_out
    with no_budget, mock.patch.object(replacement, "place_exactly", return_value=None), \
            pytest.raises(NoCapacity) as proved:
        replacement.place_or_move(big, bookings, *WHOLE, NOW, exact_seconds=1)
    assert not proved.value.search_ran_out
    # and given the time, the program lets it in
    with no_budget:
        found = replacement.place_or_move(big, bookings, *WHOLE, NOW, exact_seconds=60)
    assert found.placement.node == "n0"
