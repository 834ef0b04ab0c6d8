"""Placing bookings on GPUs over time, and telling people what is still free.

With the existing placements fixed, the question "does this request fit?" has an exact answer:

* a fraction of ``k`` slices fits GPU ``g`` iff the *peak* usage of ``g`` over [start, end) plus
  ``k`` is at most the slices per GPU;
* ``n`` whole GPUs fit a node iff ``n`` of its GPUs have zero peak usage over [start, end).

So the module cuts the requested interval at every booking/maintenance boundary inside it,
counts the slices each GPU uses in every piece (a difference array per GPU, so building the
table is O(B log B + G·B)) and reads peaks off that table. Among the GPUs or nodes that fit it
picks the *best fit*: the tightest partly used GPU for a fraction and the fullest node for whole
GPUs, so untouched GPUs and nodes stay free for large whole-GPU bookings.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from itertools import accumulate
from operator import eq
from typing import Any

from .errors import InvalidRequest, NoCapacity
from .model import Booking, MaintenanceWindow, Placement, Pool, format_amount
from .timegrid import as_utc, span_text

#: A GPU of a pool, addressed as (node name, index on the node).
GpuKey = tuple[str, int]


@dataclass(frozen=True)
class AvailabilityInterval:
    """What is free during [start, end): total free GPUs and the most one booking can get."""

    start: datetime
    end: datetime
    free_gpus: Fraction
    largest_bookable: Fraction


@dataclass(frozen=True)
class Overbooking:
    """A GPU holding more slices than it has during [start, end) (an audit finding)."""

    start: datetime
    end: datetime
    node: str
    gpu: int
    used_slices: int
    capacity_slices: int


#: What a usage table needs of a booking or a maintenance window: it holds ``slices`` of each
#: GPU ``indices`` of ``node`` during [begin, end), as (begin, end, node, indices, slices).
#: Times are datetimes, or any other ordered type the same throughout one table (the next-free
#: search uses whole microseconds: it reads thousands and compares them often).
Held = tuple[Any, Any, str, Sequence[int], int]


def held(
    pool: Pool, bookings: Iterable[Booking], maintenance: Iterable[MaintenanceWindow] = ()
) -> Iterator[Held]:
    """What ``bookings`` and ``maintenance`` hold of ``pool`` (the one rule for what holds
    capacity: a placed booking that is not cancelled, and a window on every GPU it covers)."""
    for booking in bookings:
        placement = booking.placement
        if booking.pool != pool.name or not booking.holds_capacity or placement is None:
            continue
        yield (as_utc(booking.start), as_utc(booking.end), placement.node, placement.gpus,
               placement.slices)
    for window in maintenance:
        if window.pool != pool.name:
            continue
        begin, finish = as_utc(window.start), as_utc(window.end)
        for node, count in pool.nodes.items():
            if window.covers(node):
                yield begin, finish, node, range(count), pool.slices_per_gpu


class UsageTable:
    """Slices in use on every GPU of a pool in each piece of [start, end).

    ``boundaries`` are the sorted cut points (first ``start``, last ``end``); piece ``j`` is
    [boundaries[j], boundaries[j+1]) and ``usage[g][j]`` the slices GPU ``gpus[g]`` uses then.
    Maintenance counts as every slice of the covered GPUs in use.
    """

    def __init__(
        self,
        pool: Pool,
        bookings: Iterable[Booking],
        start: datetime,
        end: datetime,
        maintenance: Iterable[MaintenanceWindow] = (),
    ):
        self._fill(pool, held(pool, bookings, maintenance), start, end)

    @classmethod
    def of_held(cls, pool: Pool, holding: Iterable[Held], start: Any, end: Any) -> UsageTable:
        """The table of what ``holding`` holds (see :data:`Held`), in its times' own unit."""
        table = cls.__new__(cls)
        table._fill(pool, holding, start, end)
        return table

    def _fill(self, pool: Pool, holding: Iterable[Held], start: Any, end: Any) -> None:
        self.pool = pool
        self.start = start
        self.end = end
        self.gpus: Sequence[GpuKey] = pool.gpu_keys
        # a GPU's position is its node's first position plus its index on the node
        first, offset = {}, 0
        for node, count in pool.nodes.items():
            first[node] = (offset, count)
            offset += count
        holds = []
        cuts = {start, end}
        positions: dict[tuple[str, Sequence[int]], list[int]] = {}
        for begin, finish, node, indices, slices in holding:
            if begin < start:
                begin = start
            if finish > end:
                finish = end
            if begin >= finish:
                continue
            # the same few GPU sets recur in thousands of bookings
            key = (node, indices)
            gpu_positions = positions.get(key)
            if gpu_positions is None:
                # GPUs the pool no longer has (e.g. a node removed from config) cannot collide
                base, count = first.get(node, (0, 0))
                gpu_positions = positions[key] = [base + i for i in indices if 0 <= i < count]
            holds.append((begin, finish, gpu_positions, slices))
            cuts.add(begin)
            cuts.add(finish)
        self.boundaries: list[Any] = sorted(cuts)
        piece_of = {when: j for j, when in enumerate(self.boundaries)}

        pieces = len(self.boundaries) - 1
        changes = [[0] * (pieces + 1) for _ in self.gpus]
        for begin, finish, gpu_positions, slices in holds:
            began, ended = piece_of[begin], piece_of[finish]
            for g in gpu_positions:
                row = changes[g]
                row[began] += slices
                row[ended] -= slices
        # running sums in C: a next-free search builds one table over weeks of bookings
        self.usage: list[list[int]] = [
            list(accumulate(gpu_changes[:pieces])) for gpu_changes in changes
        ]

    @property
    def pieces(self) -> int:
        return len(self.boundaries) - 1

    def peaks(self, first: int, stop: int) -> list[int]:
        """Peak usage of every GPU over pieces ``first`` .. ``stop - 1``."""
        return [max(row[first:stop], default=0) for row in self.usage]

    def column(self, piece: int) -> list[int]:
        return [row[piece] for row in self.usage]

    def fits_during(self, amount: Fraction) -> Callable[[Any, Any], bool]:
        """A test of whether ``amount`` fits somewhere during an interval inside the table's
        range: ``fit(...) is not None`` for it, in time linear in the pool's GPUs, for a caller
        that tries many intervals (the next-free search)."""
        whole = amount >= 1
        # the most a GPU may already use: none for whole GPUs, else room for the slices
        most = 0 if whole else self.pool.slices_per_gpu - self.pool.amount_to_slices(amount)
        # per GPU, how many pieces before each one are too full (running counts, in C), then
        # turned into one tuple over all GPUs per boundary: a GPU is free from boundary
        # ``first`` to ``stop`` iff its two counts are equal, compared for all GPUs in C
        too_full = [[0, *accumulate(map(most.__lt__, row))] for row in self.usage]
        counts = list(zip(*too_full)) or [()] * (self.pieces + 1)
        spans, offset = [], 0
        for count in self.pool.nodes.values():
            spans.append((offset, offset + count))
            offset += count
        wanted = int(amount)
        boundaries = self.boundaries

        def fits(start: Any, end: Any) -> bool:
            first = bisect_right(boundaries, start) - 1
            stop = bisect_left(boundaries, end)
            free = list(map(eq, counts[first], counts[stop]))
            if not whole:
                return True in free
            return any(sum(free[low:high]) >= wanted for low, high in spans)

        return fits


def _free_whole_by_node(gpus: Sequence[GpuKey], peaks: Sequence[int]) -> dict[str, list[int]]:
    free: dict[str, list[int]] = {}
    for (node, index), peak in zip(gpus, peaks):
        free.setdefault(node, [])
        if peak == 0:
            free[node].append(index)
    return free


def _largest_for(pool: Pool, gpus: Sequence[GpuKey], peaks: Sequence[int]) -> Fraction:
    """The largest amount one booking could get given these per-GPU peaks."""
    most_whole = max((len(free) for free in _free_whole_by_node(gpus, peaks).values()), default=0)
    if most_whole:
        return Fraction(most_whole)
    slices = pool.slices_per_gpu
    most_slices = max((slices - peak for peak in peaks), default=0)
    return Fraction(max(most_slices, 0), slices)


def _best_fit(
    pool: Pool, gpus: Sequence[GpuKey], peaks: Sequence[int], amount: Fraction, slices: int
) -> Placement | None:
    """The best-fitting placement for ``amount`` given per-GPU peaks, or None if none fits."""
    capacity = pool.slices_per_gpu
    node_order = {node: rank for rank, node in enumerate(pool.nodes)}
    free_whole = _free_whole_by_node(gpus, peaks)
    node_load: dict[str, int] = {}
    for (node, _), peak in zip(gpus, peaks):
        node_load[node] = node_load.get(node, 0) + peak

    if amount < 1:
        fitting = [
            (capacity - peak - slices, len(free_whole[node]), -node_load[node], node_order[node],
             node, i)
            for (node, i), peak in zip(gpus, peaks)
            if peak + slices <= capacity
        ]
        if not fitting:
            return None
        # least slices left over first, then the node with the fewest untouched GPUs
        *_, node, index = min(fitting)
        return Placement(node, (index,), slices)

    wanted = int(amount)
    fitting_nodes = [
        (len(free), -node_load[node], node_order[node], node)
        for node, free in free_whole.items()
        if len(free) >= wanted
    ]
    if not fitting_nodes:
        return None
    *_, node = min(fitting_nodes)  # the fullest node that still fits keeps big nodes free
    return Placement(node, tuple(free_whole[node][:wanted]), capacity)


def _check_interval(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    start, end = as_utc(start), as_utc(end)
    if end <= start:
        raise InvalidRequest("The end time must be after the start time.")
    return start, end


def place(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    amount: Fraction,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> Placement:
    """Best-fit placement of ``amount`` GPUs in ``pool`` for [start, end).

    ``existing`` may hold bookings of other pools, cancelled or non-overlapping ones; they are
    ignored. Raises :class:`NoCapacity` naming the first full interval when nothing fits.
    """
    start, end = _check_interval(start, end)
    amount = Fraction(amount)
    slices = pool.amount_to_slices(amount)
    maintenance = tuple(maintenance)
    table = UsageTable(pool, existing, start, end, maintenance)
    placement = _best_fit(pool, table.gpus, table.peaks(0, table.pieces), amount, slices)
    if placement is None:
        raise _no_capacity(pool, table, amount, slices, maintenance)
    return placement


def fit(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    amount: Fraction,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> Placement | None:
    """What :func:`place` answers, but None instead of the refusal when nothing fits (for a
    caller that tries something else first: the refusal's text costs a search of its own)."""
    start, end = _check_interval(start, end)
    amount = Fraction(amount)
    table = UsageTable(pool, existing, start, end, maintenance)
    return _best_fit(pool, table.gpus, table.peaks(0, table.pieces), amount,
                     pool.amount_to_slices(amount))


def _no_capacity(pool: Pool, table: UsageTable, amount: Fraction, slices: int,
                 maintenance: Sequence[MaintenanceWindow] = ()) -> NoCapacity:
    """The refusal for a request that fits nowhere: the earliest-ending full interval, and the
    maintenance windows in it (users do not see those on the page)."""

    def fits(peaks: list[int]) -> bool:
        return _best_fit(pool, table.gpus, peaks, amount, slices) is not None

    # first piece at which [start, that piece] can no longer hold the request ...
    running = [0] * len(table.gpus)
    stop = table.pieces
    for piece in range(table.pieces):
        running = [max(a, b) for a, b in zip(running, table.column(piece))]
        if not fits(running):
            stop = piece + 1
            break
    # ... then the latest start that is still too full up to there ...
    running = [0] * len(table.gpus)
    first = 0
    for piece in range(stop - 1, -1, -1):
        running = [max(a, b) for a, b in zip(running, table.column(piece))]
        if not fits(running):
            first = piece
            break
    # ... and stretched over the following pieces that are each full on their own
    while stop < table.pieces and not fits(table.column(stop)):
        stop += 1

    full_start, full_end = table.boundaries[first], table.boundaries[stop]
    largest = _largest_for(pool, table.gpus, table.peaks(first, stop))
    where = " on one node" if amount > 1 and len(pool.nodes) > 1 else ""
    if largest:
        verb = "are" if largest > 1 else "is"
        still_free = f"at most {_gpus(largest)} {verb} free{where} then"
    else:
        still_free = "no GPU is free then"
    message = (
        f"No {pool.display_name} capacity for {_gpus(amount)} "
        f"from {span_text(full_start, full_end)}: {still_free}."
    )
    down = sorted((w for w in maintenance if w.overlaps(full_start, full_end)),
                  key=lambda w: (w.start, w.node or ""))
    message += "".join(f" {window.describe()}." for window in down)
    return NoCapacity(message, full_start, full_end, largest)


def _gpus(amount: Fraction) -> str:
    return f"{format_amount(amount)} GPU{'s' if amount > 1 else ''}"


def availability(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> list[AvailabilityInterval]:
    """Free GPUs and the largest bookable amount through [start, end), merged where equal."""
    start, end = _check_interval(start, end)
    table = UsageTable(pool, existing, start, end, maintenance)
    capacity = pool.slices_per_gpu
    intervals: list[AvailabilityInterval] = []
    for piece in range(table.pieces):
        usage = table.column(piece)
        free = Fraction(sum(max(capacity - used, 0) for used in usage), capacity)
        largest = _largest_for(pool, table.gpus, usage)
        piece_start, piece_end = table.boundaries[piece], table.boundaries[piece + 1]
        previous = intervals[-1] if intervals else None
        if previous and (previous.free_gpus, previous.largest_bookable) == (free, largest):
            intervals[-1] = AvailabilityInterval(previous.start, piece_end, free, largest)
        else:
            intervals.append(AvailabilityInterval(piece_start, piece_end, free, largest))
    return intervals


def largest_bookable(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> Fraction:
    """The most GPUs one booking could get for the whole of [start, end) (0 if nothing)."""
    start, end = _check_interval(start, end)
    table = UsageTable(pool, existing, start, end, maintenance)
    return _largest_for(pool, table.gpus, table.peaks(0, table.pieces))


def overbooked_instants(pool: Pool, bookings: Iterable[Booking]) -> list[Overbooking]:
    """Every stretch of time during which a GPU of ``pool`` holds more than its slices."""
    holding = [
        b for b in bookings
        if b.pool == pool.name and b.holds_capacity and b.placement is not None
        and b.start < b.end
    ]
    if not holding:
        return []
    start = min(as_utc(b.start) for b in holding)
    end = max(as_utc(b.end) for b in holding)
    table = UsageTable(pool, holding, start, end)
    capacity = pool.slices_per_gpu
    found: list[Overbooking] = []
    for (node, index), row in zip(table.gpus, table.usage):
        for piece, used in enumerate(row):
            if used <= capacity:
                continue
            piece_start, piece_end = table.boundaries[piece], table.boundaries[piece + 1]
            last = found[-1] if found else None
            if last and (last.node, last.gpu, last.used_slices, last.end) == (
                node, index, used, piece_start
            ):
                found[-1] = Overbooking(last.start, piece_end, node, index, used, capacity)
            else:
                found.append(Overbooking(piece_start, piece_end, node, index, used, capacity))
    return found


def maintenance_collisions(window: MaintenanceWindow, bookings: Iterable[Booking]) -> list[Booking]:
    """Bookings still holding capacity that a maintenance window would hit.

    A booking without a recorded placement might sit on any node, so it counts as hit.
    """
    return [
        booking
        for booking in bookings
        if booking.pool == window.pool
        and booking.holds_capacity
        and booking.overlaps(window.start, window.end)
        and (booking.placement is None or window.covers(booking.placement.node))
    ]
