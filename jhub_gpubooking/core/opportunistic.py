"""Opportunistic GPU use: short grants on capacity nobody booked, preempted when a booking needs it.

Pure decisions, no I/O. A grant covers the running slot up to a horizon and is placed only
where nothing is booked for that whole time, so it never takes capacity a booking already
holds. When a later regular booking does not fit because of grants, :func:`preemption_plan`
says which grants must end (and when) so that it fits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from .errors import NoCapacity
from .model import Booking, MaintenanceWindow, Pool
from .placement import place
from .timegrid import ceil_to_grid, floor_to_grid

#: Why a grant was released early (the lifecycle's release reason, shown in notices).
PREEMPTED = "preempted"


def grant_interval(
    now: datetime, horizon_minutes: int, slot_minutes: int
) -> tuple[datetime, datetime]:
    """[start, end) of a grant asked for at ``now``: the running slot up to the horizon."""
    start = floor_to_grid(now, slot_minutes)
    end = ceil_to_grid(now + timedelta(minutes=horizon_minutes), slot_minutes)
    return start, max(end, start + timedelta(minutes=slot_minutes))


@dataclass(frozen=True)
class Preemption:
    """One grant that must end at ``new_end`` to make room for a booking."""

    booking: Booking
    new_end: datetime


def preemption_end(grant: Booking, booking_start: datetime, now: datetime, slot_minutes: int):
    """Where a preempted grant ends: when the booking begins, and at most at the next grid
    point (its server is stopped now), never before the grant's own start."""
    return max(grant.start, min(booking_start, ceil_to_grid(now, slot_minutes)))


def preemption_plan(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    amount: Fraction,
    maintenance: Iterable[MaintenanceWindow] = (),
    *,
    now: datetime,
    slot_minutes: int,
) -> list[Preemption]:
    """The grants to end so ``amount`` fits in [start, end); empty when ending grants cannot help.

    The booking is placed as if no grant existed; only grants on the GPUs that placement uses
    are preempted, so grants elsewhere in the pool keep running.
    """
    holding = [b for b in existing if b.holds_capacity and b.overlaps(start, end)]
    grants = [b for b in holding if b.opportunistic and b.pool == pool.name]
    if not grants:
        return []
    firm = [b for b in holding if not b.opportunistic]
    try:
        placed = place(pool, firm, start, end, amount, maintenance)
    except NoCapacity:
        return []
    wanted = set(placed.gpus)
    plan = []
    for grant in grants:
        if grant.placement is None or grant.placement.node != placed.node:
            continue
        if not wanted & set(grant.placement.gpus):
            continue
        new_end = preemption_end(grant, start, now, slot_minutes)
        if new_end < grant.end:
            plan.append(Preemption(grant, new_end))
    return plan
