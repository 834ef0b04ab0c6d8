"""place_or_move for a "book now" request, which starts at its slot's beginning, before now: a
booking that ended early since then still holds its GPU during the request (found by the lab
trace replay, issue 17)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.core.replacement import place_or_move

SLOT = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
POOL = Pool(name="p", nodes={"n": 2})


def minutes(m: float) -> datetime:
    return SLOT + timedelta(minutes=m)


def test_a_booking_ended_early_in_the_current_slot_is_not_booked_over():
    # ended early at 14:02 ("End now"), and an upcoming booking on the other GPU from 14:30
    ended = Booking("ada", "p", Fraction(1), minutes(-60), minutes(2), Placement("n", (0,), 1),
                    id=1)
    upcoming = Booking("bob", "p", Fraction(1), minutes(30), minutes(120),
                       Placement("n", (1,), 1), id=2)
    now = minutes(5)

    found = place_or_move(POOL, [ended, upcoming], SLOT, minutes(60), Fraction(1), now)

    # the request cannot take GPU 0 before 14:02: the upcoming booking moves there instead
    assert found.placement == Placement("n", (1,), 1)
    assert [(move.booking.id, move.placement) for move in found.moves] == [
        (2, Placement("n", (0,), 1))
    ]
    request = Booking("carl", "p", Fraction(1), SLOT, minutes(60), found.placement, id=3)
    moved = upcoming.with_changes(placement=found.moves[0].placement)
    assert overbooked_instants(POOL, [ended, moved, request]) == []
