"""Room for an extension: upcoming bookings on the extended booking's GPUs move elsewhere.

The rule is checked against a brute-force oracle on the small pools of the re-placement tests
(test_core_replacement.py): an answer is always sound (only movable bookings move, each keeping
its amount, times and one node, the extended booking keeps its GPUs, nothing is overbooked),
and an extension that fits without moves moves nothing. The rule places the bookings in the way
one at a time, so it may refuse where some joint re-placement exists: how often is counted
(``hypothesis`` statistics), not failed, and stays rare.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import event, given
from hypothesis import strategies as st
from test_core_replacement import (
    HOURS,
    NOW,
    NOW_HOUR,
    candidates,
    core_settings,
    hour,
    hours_of,
    overbooked,
    scenarios,
)

from jhub_gpubooking.core.extension_room import room_for_extension
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.replacement import is_movable


@st.composite
def extensions(draw):
    """A scenario of the re-placement tests, one of its bookings not yet over and a new end."""
    pool, maintenance, bookings, _ = draw(scenarios())
    extendable = [b for b in bookings if NOW_HOUR < hours_of(b)[1] < HOURS]
    if not extendable:
        extendable = [Booking("x", pool.name, Fraction(1, pool.slices_per_gpu), hour(NOW_HOUR - 1),
                              hour(NOW_HOUR + 1), Placement(next(iter(pool.nodes)), (0,), 1),
                              id=99, server="")]
        if overbooked(pool, [(*hours_of(b), b.placement) for b in [*bookings, *extendable]],
                      maintenance):
            bookings, maintenance = [], []
        bookings = [*bookings, *extendable]
    booking = draw(st.sampled_from(extendable))
    end = draw(st.integers(hours_of(booking)[1] + 1, HOURS))
    if draw(st.booleans()):
        # mostly an upcoming booking right after it on its GPUs, in the extension's way
        start = hours_of(booking)[1]
        follower = Booking("y", pool.name, booking.amount, hour(start),
                           hour(draw(st.integers(start + 1, HOURS))), booking.placement, id=98)
        placed = [(*hours_of(b), b.placement) for b in [*bookings, follower]]
        if not overbooked(pool, placed, maintenance):
            bookings = [*bookings, follower]
    return pool, maintenance, bookings, booking, end


def oracle_has_room(pool, maintenance, bookings, booking, end: int) -> bool:
    """Whether some placement of the movable bookings (not the extended one) lets ``booking``
    run on its own GPUs until ``end``."""
    start = hours_of(booking)[0]
    fixed = [(*hours_of(b), b.placement) for b in bookings
             if b.id != booking.id and not is_movable(b, NOW)]
    fixed.append((start, end, booking.placement))
    movable = [b for b in bookings if b.id != booking.id and is_movable(b, NOW)]

    def search(index: int, chosen: list) -> bool:
        if overbooked(pool, fixed + chosen, maintenance):
            return False
        if index == len(movable):
            return True
        other = movable[index]
        return any(search(index + 1, [*chosen, (*hours_of(other), where)])
                   for where in candidates(pool, other.amount))

    return search(0, [])


@core_settings
@given(extensions())
def test_the_room_found_is_sound_and_only_rarely_missed(extension):
    pool, maintenance, bookings, booking, end = extension
    moves = room_for_extension(pool, bookings, booking, hour(end), NOW, maintenance)
    has_room = oracle_has_room(pool, maintenance, bookings, booking, end)
    if moves is None:
        event("refused, and the oracle finds room" if has_room else "refused, no room exists")
        return
    assert has_room
    event(f"room with {len(moves)} moves")
    moved = {move.booking.id: move.placement for move in moves}
    assert len(moved) == len(moves) and booking.id not in moved
    by_id = {b.id: b for b in bookings}
    for move in moves:
        assert move.booking == by_id[move.booking.id]
        assert is_movable(move.booking, NOW)
        assert move.placement != move.booking.placement
        assert move.placement in candidates(pool, move.booking.amount)
    after = [(*hours_of(b), moved.get(b.id, b.placement)) for b in bookings if b.id != booking.id]
    assert not overbooked(pool, [*after, (hours_of(booking)[0], end, booking.placement)],
                          maintenance)
    if not moves:  # free anyway: the plain check agrees
        assert not overbooked(pool, [(*hours_of(b), b.placement) for b in bookings
                                     if b.id != booking.id]
                              + [(hours_of(booking)[0], end, booking.placement)], maintenance)


POOL = Pool(name="p", nodes={"n0": 2}, slices_per_gpu=1)


def whole(user: str, gpu: int, start: float, end: float, **changes) -> Booking:
    return Booking(user, "p", Fraction(1), hour(start), hour(end), Placement("n0", (gpu,), 1),
                   id=ord(user), **changes)


def test_a_claimed_booking_or_maintenance_in_the_way_never_moves():
    running = whole("a", 0, 1, 3, server="")
    # upcoming and claimed cannot happen for a server, but a claim is what pins a booking
    assert room_for_extension(POOL, [running, whole("b", 0, 4, 5, server="")], running,
                              hour(5), NOW) is None
    window = MaintenanceWindow("p", hour(4), hour(5), node="n0")
    assert room_for_extension(POOL, [running], running, hour(5), NOW, [window]) is None


def test_what_reaches_outside_the_read_interval_stays():
    running = whole("a", 0, 1, 3, server="")
    later = whole("b", 0, 4, 7)
    assert room_for_extension(POOL, [running, later], running, hour(5), NOW)[0].booking == later
    known = (hour(1), hour(6))
    assert room_for_extension(POOL, [running, later], running, hour(5), NOW, known=known) is None


def test_an_extension_that_fits_moves_nothing_and_the_booking_keeps_its_gpus():
    running = whole("a", 0, 1, 3, server="")
    elsewhere = whole("b", 1, 3, 6)
    assert room_for_extension(POOL, [running, elsewhere], running, hour(5), NOW) == ()
    in_the_way = whole("c", 0, 3, 4)
    # GPU 1 is taken from 3: c cannot go there, and a never leaves GPU 0
    assert room_for_extension(POOL, [running, elsewhere, in_the_way], running,
                              hour(4), NOW) is None
