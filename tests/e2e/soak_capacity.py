"""What a pool of the lifecycle soak can still hold, from a snapshot (soak_invariants.py): the
checker's own fit of a waiting request, independent of the service's placement, for the
invariant that a wait that fits is booked."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING

from jhub_gpubooking.core.timegrid import floor_to_grid, parse_time

if TYPE_CHECKING:
    from soak_invariants import Snapshot


def _peak(held: list[tuple[datetime, datetime, int]], start: datetime, end: datetime) -> int:
    """The most slices ``held`` ([begin, end), slices) holds at one instant of [start, end)."""
    moments = [start, *(begin for begin, _end, _slices in held if start < begin < end)]
    return max(sum(slices for begin, finish, slices in held if begin <= moment < finish)
               for moment in moments)


Held = dict[tuple[str, int], list[tuple[datetime, datetime, int]]]  # (node, GPU) -> slices


def held_slices(snapshot: Snapshot, pool_name: str) -> Held:
    """What the pool's bookings hold at ``snapshot.now`` and later: what ended holds nothing."""
    held: Held = {}
    for booking in snapshot.bookings.values():
        placement = booking.get("placement")
        finish = parse_time(booking["end"])
        if (booking["pool"] != pool_name or booking["state"] == "cancelled" or not placement
                or finish <= snapshot.now):
            continue
        for gpu in placement["gpus"]:
            held.setdefault((placement["node"], gpu), []).append(
                (parse_time(booking["start"]), finish, placement["slices"]))
    return held


def fits_at(snapshot: Snapshot, pool_name: str, held: Held, amount: Fraction, start: datetime,
            end: datetime) -> bool:
    """Whether ``amount`` GPUs of the pool are free for [start, end) besides what is ``held``:
    a share on one GPU, whole GPUs on one node; a maintenance window blocks its node (all nodes
    without one)."""
    pool = snapshot.pools[pool_name]
    capacity = pool["slices_per_gpu"]
    blocked = {window["node"] for window in snapshot.windows.values()
               if window["pool"] == pool_name and parse_time(window["start"]) < end
               and parse_time(window["end"]) > start}
    for node, count in sorted(pool["nodes"].items()):
        if node in blocked or None in blocked:
            continue
        peaks = [_peak(held.get((node, gpu), []), start, end) for gpu in range(count)]
        if amount < 1 and any(peak + amount * capacity <= capacity for peak in peaks):
            return True
        if amount >= 1 and sum(peak == 0 for peak in peaks) >= amount:
            return True
    return False


def wait_fits(wait: dict, snapshot: Snapshot, slot: timedelta) -> bool:
    """Whether the waiting request fits at some start of its window still to come (from the
    running slot on, as a "book now" may), the pool as it stands at ``snapshot.now``."""
    minutes = slot // timedelta(minutes=1)
    start = max(parse_time(wait["start"]), floor_to_grid(snapshot.now, minutes))
    length, amount = timedelta(minutes=wait["minutes"]), Fraction(str(wait["gpus"]))
    held = held_slices(snapshot, wait["pool"])
    while start <= parse_time(wait["latest_start"]):
        if fits_at(snapshot, wait["pool"], held, amount, start, start + length):
            return True
        start += slot
    return False
