"""Room for an extension: free a booking's own GPUs after its end by moving upcoming bookings.

A booking is extended on the GPUs it holds (its pod may run there already), so an extension
fits only while nothing else takes those GPUs after the booking's end. A booking that has not
started and that no server has claimed is placed only provisionally (see :mod:`.replacement`):
when such bookings are in the way they may move to other GPUs of their pool, exactly as for a
new request: all or nothing, each keeping its amount, its times and its one node, and what is
started, claimed or a maintenance window never moves. So a student extending a running server
is not refused because a booking for later sits on their GPU while the next node is empty.

:func:`room_for_extension` is the pure rule; the database layer reads the pool and writes the
moves in the extension's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .errors import NoCapacity
from .model import Booking, MaintenanceWindow, Move, Placement, Pool
from .placement import UsageTable
from .replacement import is_movable, place_or_move


def taken_from(pool: Pool, others: Iterable[Booking], placement: Placement, start: datetime,
               end: datetime, maintenance: Iterable[MaintenanceWindow] = ()) -> datetime | None:
    """When, in [start, end), ``others`` and ``maintenance`` first leave too few slices of
    ``placement``'s GPUs for it; None if they never do. GPUs the pool no longer has are not
    looked at (the caller refuses those first)."""
    # only bookings on its node can collide: the table of a busy pool's others costs far more
    on_node = (b for b in others if b.placement is not None and b.placement.node == placement.node)
    table = UsageTable(pool, on_node, start, end, maintenance)
    own = [g for g, (node, index) in enumerate(table.gpus)
           if node == placement.node and index in placement.gpus]
    for piece in range(table.pieces):
        column = table.column(piece)
        if any(column[g] + placement.slices > pool.slices_per_gpu for g in own):
            return table.boundaries[piece]
    return None


def room_for_extension(
    pool: Pool,
    existing: Iterable[Booking],
    booking: Booking,
    end: datetime,
    now: datetime,
    maintenance: Iterable[MaintenanceWindow] = (),
    known: tuple[datetime, datetime] | None = None,
) -> tuple[Move, ...] | None:
    """The moves that let ``booking`` (placed) run on its own GPUs until ``end``: empty when
    they are free anyway, None when moving the upcoming bookings in the way does not free them.

    Each booking in the way is placed again as a request would be (:func:`.replacement.
    place_or_move`, which may move other movable bookings in turn), earliest first, around the
    extended booking; a booking moved twice is reported once, with its final placement.
    ``existing`` must hold every booking overlapping those that could move; ``known`` =
    (from, until) says it is complete only inside that interval, and bookings reaching outside
    it stay where they are.
    """
    start, placement = booking.end, booking.placement
    others = [b for b in existing if b.id != booking.id and b.pool == pool.name
              and b.holds_capacity and b.placement is not None]
    if taken_from(pool, others, placement, start, end, maintenance) is None:
        return ()
    in_way = [b for b in others if _in_the_way(b, placement, start, end, now, known)]
    moving = {id(b) for b in in_way}
    staying = [b for b in others if id(b) not in moving]
    if not in_way or taken_from(pool, staying, placement, start, end, maintenance) is not None:
        return None
    # the extended booking holds its GPUs like a started one while the others are placed
    # again: a server name makes it one that never moves (see is_movable)
    extended = booking.with_changes(end=end, server="" if booking.server is None else booking.server)
    placed = [*staying, extended]
    read_as = {b.id: b for b in others}  # each moved booking as read: its "moved" event's old place
    final: dict[int, Placement] = {}
    for blocker in sorted(in_way, key=lambda b: (b.start, b.id)):
        try:
            found = place_or_move(pool, placed, blocker.start, blocker.end, blocker.amount, now,
                                  maintenance, known=known)
        except NoCapacity:
            return None
        moved = {id(move.booking): move.placement for move in found.moves}
        placed = [b.with_changes(placement=moved[id(b)]) if id(b) in moved else b for b in placed]
        final.update({move.booking.id: move.placement for move in found.moves})
        placed.append(blocker.with_changes(placement=found.placement))
        final[blocker.id] = found.placement
    return tuple(Move(read_as[booking_id], where) for booking_id, where in final.items()
                 if where != read_as[booking_id].placement)


def _in_the_way(other: Booking, placement: Placement, start: datetime, end: datetime,
                now: datetime, known: tuple[datetime, datetime] | None) -> bool:
    """A booking that may move and holds some of ``placement``'s GPUs during [start, end)."""
    return (
        is_movable(other, now)
        and other.overlaps(start, end)
        and other.placement.node == placement.node
        and not set(other.placement.gpus).isdisjoint(placement.gpus)
        and (known is None or (known[0] <= other.start and other.end <= known[1]))
    )
