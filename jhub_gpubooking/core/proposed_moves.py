"""A re-placement found away from the pool's lock, checked again under it before it is written.

When the exact last resort of :func:`.replacement.place_or_move` runs out of its time, a create
holds the pool's lock, so it cannot search for long: every other create, claim and cancel of
the pool waits meanwhile, and past the database timeout they fail. The service therefore
searches again for longer *without* the lock, on the pool as it was read then
(``GPUBookingService.exact_move_retry_seconds``). What that finds is a proposal only: by the
time the create holds the lock again, bookings may have been made, cancelled, claimed, started
or moved. :func:`still_holds` says whether it can be written as it is; if not, the create
searches again under the lock as any create does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction

from .exact_moves import check_replacement
from .model import Booking, MaintenanceWindow, Move, Placement, Replacement
from .replacement import is_movable


def still_holds(pool, existing: Sequence[Booking], proposal: Replacement, start: datetime,
                end: datetime, amount: Fraction, now: datetime,
                maintenance: Sequence[MaintenanceWindow] = ()) -> Replacement | None:
    """``proposal`` (a placement of ``amount`` GPUs for [start, end) and the moves that make
    room for it) re-based on ``existing``, the pool as it is now, or None when it no longer
    holds: a booking it moves is gone, changed or no longer movable at ``now``, or the result
    would overbook a GPU or meet a maintenance window. ``existing`` must hold every booking
    overlapping the request and the bookings the proposal moves."""
    current = {booking.id: booking for booking in existing if booking.id is not None}
    moves = []
    for move in proposal.moves:
        booking = current.get(move.booking.id)
        if booking is None or not is_movable(booking, now) or _changed(booking, move.booking):
            return None
        moves.append(Move(booking, move.placement))
    moving = {move.booking.id for move in moves}
    staying = [b for b in existing if b.id not in moving]
    rebased = Replacement(proposal.placement, tuple(moves))
    problem = check_replacement(pool, staying, [move.booking for move in moves], rebased,
                                start, end, amount, maintenance)
    return rebased if problem is None else None


def _changed(now: Booking, then: Booking) -> bool:
    return (now.start, now.end, _where(now.placement)) != (then.start, then.end,
                                                            _where(then.placement))


def _where(placement: Placement | None) -> tuple | None:
    if placement is None:
        return None
    return placement.node, tuple(sorted(placement.gpus)), placement.slices
