"""An admin changes ``slot_minutes`` (here from 15 to 30) while bookings exist: nothing made on
the old grid is lost or stuck. The bookings keep their times and places and can still be
claimed, extended, ended and cancelled; each change lands on the new grid (a refusal names
the nearest times on it), and new requests and the next free slot go around them on it."""

from __future__ import annotations

import pytest
from db_test_times import at

from jhub_gpubooking.core.errors import InvalidRequest, NoCapacity


def test_bookings_made_on_the_old_grid_keep_working_on_the_new_one(make_store, clock):
    clock.set(at(9, 50))
    old = make_store(slot_minutes=15)
    running = old.create("alice", "a100", 1, at(9, 45), at(11, 15))
    later = old.create("bob", "a100", 1, at(11, 15), at(12, 45))
    gone = old.create("carol", "a100", 1, at(14, 15), at(14, 45))

    clock.set(at(10, 5))  # the service restarted with the new grid
    new = make_store(slot_minutes=30)
    assert [(b.start, b.end) for b in map(new.get, (running.id, later.id))] == [
        (at(9, 45), at(11, 15)), (at(11, 15), at(12, 45))]
    assert new.claim(running.id, "").server == ""
    # a new end off the new grid is refused with the times on it; one on it is taken
    with pytest.raises(InvalidRequest, match=r"not on the 30-minute booking grid; choose e\.g\. "
                                             r"2030-01-07 11:30 UTC or 2030-01-07 12:00 UTC\."):
        new.change_end(running.id, at(11, 45), actor="alice")
    assert new.change_end(running.id, at(11, 30), actor="alice").end == at(11, 30)
    assert new.cancel(gone.id, actor="carol").status == "cancelled"

    # the rest of the pool at 12:00-13:00; bob's end at 12:45, off the new grid, frees his GPU
    # for the first half hour on the grid after it
    new.create("dave", "a100", 4, at(12), at(13))
    new.create("erin", "a100", 1, at(12), at(13))
    with pytest.raises(NoCapacity) as refused:
        new.create("frank", "a100", 1, at(12), at(12, 30))
    assert refused.value.next_free == (at(13), at(13, 30))

    # ending the running one now frees the rest of it at once, as on any grid
    assert new.cancel(running.id, actor="alice").end == at(10, 5)
