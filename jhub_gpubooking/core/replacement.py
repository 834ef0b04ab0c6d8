"""Placement is provisional until start: let a request in by moving upcoming bookings.

:func:`.placement.place` keeps every existing placement where it is, so a pool can refuse a
request although the GPUs are free in total, only spread badly (fragmentation). A booking that
has not started and that no server has claimed (:func:`is_movable`) has no pod on its GPUs yet,
so it may move to other GPUs of its pool, keeping its amount, its times and its one node.
:func:`place_or_move` places the request, moving as few such bookings as it can; a started,
claimed or opportunistic booking and a maintenance window never move.

The search is an *ejection chain*: put the booking being placed (first the request) on some
GPUs, take the movable bookings in the way off them, and place those in turn, never moving a
booking twice. Trying every placement and every inclusion-minimal set of bookings to take off
is complete: if some re-placement of the movable bookings admits the request, following it
step by step is one branch of the search. Deepening the number of bookings allowed to move
(1, 2, ...) makes the first answer one that moves the fewest.

*Exact* when the instance is small (at most :data:`EXACT_MOVABLE` movable bookings in play on
a pool of at most :data:`EXACT_GPUS` GPUs):
nothing is cut, so a refusal means no re-placement exists (tests check this against a brute
force; a safety valve of :data:`EXACT_EXPANSIONS` steps is never reached there). *Bounded*
on larger ones: at most :data:`BOUNDED_MOVES` bookings move, each step tries only its
:data:`BOUNDED_BRANCHES` cheapest places, whole-GPU bookings only the cheapest GPUs of each
node, and the search stops after :data:`BOUNDED_EXPANSIONS` steps, so a create stays fast on a
large, busy pool; a refusal then means "found nothing within those bounds".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from itertools import combinations

from .model import Booking, BookingState, MaintenanceWindow, Placement, Pool
from .placement import fit, place
from .timegrid import as_utc

#: Up to this many movable bookings in play, on a pool of at most EXACT_GPUS GPUs, the search
#: is exhaustive (no bound is applied).
EXACT_MOVABLE = 12
EXACT_GPUS = 16
#: On larger instances: at most this many bookings move for one request ...
BOUNDED_MOVES = 3
#: ... the search expands at most this many placements ...
BOUNDED_EXPANSIONS = 40
#: ... a GPU's minimal sets of bookings to move off are enumerated only among this many ...
BOUNDED_SUBSET_POOL = 8
#: ... each placement tries at most this many places to go (the cheapest first) ...
BOUNDED_BRANCHES = 10
#: ... and a whole-GPU booking tries every set of GPUs of a node only up to this many sets,
#: else the GPUs of the node with the fewest bookings to move.
COMBINATION_LIMIT = 8
#: A safety valve even for exact searches, so no request can hold a pool's lock for long
#: (far above what the small instances the tests compare with a brute force ever need).
EXACT_EXPANSIONS = 2_000


@dataclass(frozen=True)
class Move:
    """``booking`` (with its old placement) goes to ``placement``."""

    booking: Booking
    placement: Placement


@dataclass(frozen=True)
class Replacement:
    """Where the request goes, and the bookings moved to make room (empty: none moved)."""

    placement: Placement
    moves: tuple[Move, ...] = ()


def is_movable(booking: Booking, now: datetime) -> bool:
    """The one rule for which bookings may move: upcoming at ``now``, placed, not claimed by a
    server and not an opportunistic grant (those are in use now)."""
    return (
        booking.placement is not None
        and booking.server is None
        and not booking.opportunistic
        and booking.state(now) is BookingState.UPCOMING
    )


def place_or_move(
    pool: Pool,
    existing: Iterable[Booking],
    start: datetime,
    end: datetime,
    amount: Fraction,
    now: datetime,
    maintenance: Iterable[MaintenanceWindow] = (),
    known: tuple[datetime, datetime] | None = None,
) -> Replacement:
    """Place ``amount`` GPUs of ``pool`` for [start, end), moving upcoming bookings if needed.

    Without moves this is :func:`.placement.place` (best fit). Otherwise the fewest movable
    bookings (see :func:`is_movable` at ``now``) are moved; a moved booking may collide only
    with what ``existing`` holds, so ``existing`` must hold every booking overlapping the
    bookings that could move. ``known`` = (from, until) says ``existing`` is complete only
    inside that interval: bookings reaching outside it stay where they are. Raises the
    :class:`NoCapacity` of the plain placement when nothing is found.
    """
    existing = list(existing)
    maintenance = list(maintenance)
    start, end = as_utc(start), as_utc(end)
    # the plain placement needs only what overlaps the request (``existing`` may be far more)
    during = [b for b in existing if b.start < end and start < b.end]
    placed = fit(pool, during, start, end, amount, maintenance)
    if placed is not None:
        return Replacement(placed)
    search = _Search(pool, existing, maintenance, start, end, Fraction(amount), as_utc(now),
                     known)
    found = search.run()
    if found is None:
        place(pool, during, start, end, amount, maintenance)  # raises the refusal
        raise AssertionError("place() placed what fit() could not")
    return found


class _Hold:
    """Something holding slices on GPUs over [begin, end) (times as POSIX seconds)."""

    __slots__ = ("begin", "booking", "end", "gpus", "movable", "slices", "width")

    def __init__(self, begin: float, end: float, slices: int, width: int,
                 gpus: tuple[int, ...] | None, movable: bool, booking: Booking | None):
        self.begin, self.end, self.slices, self.width = begin, end, slices, width
        self.gpus, self.movable, self.booking = gpus, movable, booking


class _OutOfBudget(Exception):
    pass


class _Search:
    """One ejection-chain search; see the module docstring."""

    def __init__(self, pool: Pool, existing: list[Booking], maintenance: list[MaintenanceWindow],
                 start: datetime, end: datetime, amount: Fraction, now: datetime,
                 known: tuple[datetime, datetime] | None):
        self.pool = pool
        self.capacity = pool.slices_per_gpu
        self.gpus = [(node, i) for node, count in pool.nodes.items() for i in range(count)]
        position = {gpu: g for g, gpu in enumerate(self.gpus)}
        self.node_gpus: dict[str, list[int]] = {}
        for g, (node, _) in enumerate(self.gpus):
            self.node_gpus.setdefault(node, []).append(g)
        self.on_gpu: list[set[int]] = [set() for _ in self.gpus]
        slices = pool.amount_to_slices(amount)
        width = int(amount) if amount >= 1 else 1
        self.holds = [_Hold(start.timestamp(), end.timestamp(), slices if amount < 1
                            else self.capacity, width, None, False, None)]
        # times as POSIX seconds: comparing floats is what the search does most
        low, high = (known[0].timestamp(), known[1].timestamp()) if known else (None, None)
        now_seconds, start_seconds = now.timestamp(), start.timestamp()
        for booking in existing:
            placed = booking.placement
            if booking.pool != pool.name or not booking.holds_capacity or placed is None:
                continue
            begin, finish = booking.start.timestamp(), booking.end.timestamp()
            # over before the request and before anything movable starts: holds nothing any
            # more. A "book now" request starts at its slot's beginning, before now, so a
            # booking ended early since then still collides with it.
            if finish <= min(now_seconds, start_seconds) or begin >= finish:
                continue
            gpus = tuple(position[(placed.node, i)] for i in placed.gpus
                         if (placed.node, i) in position)
            movable = (is_movable(booking, now) and len(gpus) == len(placed.gpus)
                       and (low is None or (low <= begin and finish <= high)))
            self._add(_Hold(begin, finish, placed.slices, len(placed.gpus), gpus, movable,
                            booking))
        for window in maintenance:
            if window.pool != pool.name:
                continue
            gpus = tuple(g for g, (node, _) in enumerate(self.gpus) if window.covers(node))
            self._add(_Hold(window.start.timestamp(), window.end.timestamp(), self.capacity,
                            len(gpus), gpus, False, None))
        # only bookings that share time with the request, or with one that could move for it,
        # can be in play; counting them decides exact or bounded
        movable_count = sum(1 for h in self.holds if h.movable)
        self.exact = movable_count <= EXACT_MOVABLE and len(self.gpus) <= EXACT_GPUS
        self.max_moves = movable_count if self.exact else BOUNDED_MOVES
        self.budget = EXACT_EXPANSIONS if self.exact else BOUNDED_EXPANSIONS
        self.expansions = 0
        self.cut_by_moves = False  # did the limit on moves cut a branch of this round?
        self.placed_in_search: set[int] = set()
        self.original = {h: hold.gpus for h, hold in enumerate(self.holds)}

    def _add(self, hold: _Hold) -> None:
        self.holds.append(hold)
        for g in hold.gpus:
            self.on_gpu[g].add(len(self.holds) - 1)

    # ------------------------------------------------------------------ the search

    def run(self) -> Replacement | None:
        """The placement with the fewest moves, or None."""
        try:
            for allowed in range(1, self.max_moves + 1):
                self.cut_by_moves = False
                moved: set[int] = set()
                if self._extend([0], moved, allowed):
                    return self._result()
                if not self.cut_by_moves:
                    return None  # nothing was cut by the limit: more moves cannot help
        except _OutOfBudget:
            pass
        return None

    def _extend(self, unplaced: list[int], moved: set[int], allowed: int) -> bool:
        if not unplaced:
            return True
        if self.expansions >= self.budget:
            raise _OutOfBudget
        self.expansions += 1
        # the biggest booking first: it has the fewest places to go
        u = max(unplaced, key=lambda h: (self.holds[h].width * self.holds[h].slices,
                                         self.holds[h].end - self.holds[h].begin, -h))
        rest = [h for h in unplaced if h != u]
        room = allowed - len(moved)
        for gpus, ejected in self._options(u, room):
            self._put(u, gpus)
            self.placed_in_search.add(u)
            for h in ejected:
                self._take_off(h)
            moved |= ejected
            if self._extend(rest + sorted(ejected), moved, allowed):
                return True
            moved -= ejected
            for h in ejected:
                self._put(h, self.original[h])
            self.placed_in_search.discard(u)
            self._take_off(u)
        return False

    def _put(self, h: int, gpus: tuple[int, ...]) -> None:
        self.holds[h].gpus = gpus
        for g in gpus:
            self.on_gpu[g].add(h)

    def _take_off(self, h: int) -> None:
        for g in self.holds[h].gpus:
            self.on_gpu[g].discard(h)
        self.holds[h].gpus = None

    def _result(self) -> Replacement:
        moves = []
        for h, hold in enumerate(self.holds):
            if h and hold.gpus != self.original[h]:
                moves.append(Move(hold.booking, self._placement(hold)))
        return Replacement(self._placement(self.holds[0]), tuple(moves))

    def _placement(self, hold: _Hold) -> Placement:
        node = self.gpus[hold.gpus[0]][0]
        return Placement(node, tuple(sorted(self.gpus[g][1] for g in hold.gpus)), hold.slices)

    # ------------------------------------------------------------------ where a hold can go

    def _options(self, u: int, room: int) -> Iterator[tuple[tuple[int, ...], set[int]]]:
        """(GPUs, bookings to take off them) for ``u``: fewest taken off first, then best fit."""
        hold = self.holds[u]
        found: list[tuple[tuple, tuple[int, ...], set[int]]] = []
        if hold.slices < self.capacity:
            for g in range(len(self.gpus)):
                for ejected, left in self._gpu_ejections(g, hold, room):
                    found.append(((len(ejected), left, g), (g,), ejected))
        else:
            for gpus in self.node_gpus.values():
                for chosen, ejected, free_left in self._node_options(gpus, hold, room):
                    found.append(((len(ejected), free_left, gpus[0]), chosen, ejected))
        found.sort(key=lambda option: option[0])
        if not self.exact:
            found = found[:BOUNDED_BRANCHES]
        for _, gpus, ejected in found:
            yield gpus, ejected

    def _overlapping(self, g: int, hold: _Hold) -> list[int]:
        begin, end = hold.begin, hold.end
        holds = self.holds
        return [h for h in self.on_gpu[g] if holds[h].begin < end and holds[h].end > begin]

    def _ejectable(self, h: int) -> bool:
        return self.holds[h].movable and h not in self.placed_in_search

    def _peak(self, members: Iterable[int], hold: _Hold) -> int:
        """Peak slices the holds ``members`` use together during ``hold``'s interval."""
        changes = []
        for h in members:
            other = self.holds[h]
            changes.append((max(other.begin, hold.begin), other.slices))
            changes.append((min(other.end, hold.end), -other.slices))
        changes.sort()  # at equal times the negative change (an end) comes first
        peak = running = 0
        for _, change in changes:
            running += change
            peak = max(peak, running)
        return peak

    def _gpu_ejections(self, g: int, hold: _Hold, room: int) -> list[tuple[set[int], int]]:
        """The inclusion-minimal sets of bookings to take off GPU ``g`` so that ``hold`` fits,
        with the slices left over at the peak (only sets of at most ``room``)."""
        limit = self.capacity - hold.slices
        overlapping = self._overlapping(g, hold)
        peak = self._peak(overlapping, hold)
        if peak <= limit:
            return [(set(), limit - peak)]
        fixed = [h for h in overlapping if not self._ejectable(h)]
        if self._peak(fixed, hold) > limit:
            return []
        candidates = [h for h in overlapping if self._ejectable(h)]
        if not self.exact and len(candidates) > BOUNDED_SUBSET_POOL:
            # the longest overlaps free the most time; a bounded search looks at those only
            candidates.sort(key=lambda h: min(self.holds[h].end, hold.end)
                            - max(self.holds[h].begin, hold.begin), reverse=True)
            candidates = candidates[:BOUNDED_SUBSET_POOL]
        minimal: list[tuple[set[int], int]] = []
        for size in range(1, min(room, len(candidates)) + 1):
            for subset in combinations(candidates, size):
                chosen = set(subset)
                if any(found <= chosen for found, _ in minimal):
                    continue
                left = self._peak([h for h in overlapping if h not in chosen], hold)
                if left <= limit:
                    minimal.append((chosen, limit - left))
        if len(candidates) > room:
            self.cut_by_moves = True
        return minimal

    def _node_options(self, gpus: list[int], hold: _Hold, room: int):
        """(GPUs, bookings taken off, GPUs left free on the node) for a whole-GPU ``hold``:
        every GPU it takes must be empty during its interval."""
        costs: dict[int, set[int]] = {}
        for g in gpus:
            overlapping = self._overlapping(g, hold)
            if all(self._ejectable(h) for h in overlapping):
                costs[g] = set(overlapping)
        if len(costs) < hold.width:
            return
        usable = sorted(costs, key=lambda g: (len(costs[g]), g))
        choices: Iterable[tuple[int, ...]]
        if self.exact or _combinations_count(len(usable), hold.width) <= COMBINATION_LIMIT:
            choices = combinations(usable, hold.width)
        else:
            choices = [tuple(usable[:hold.width])]
        for chosen in choices:
            ejected = set().union(*(costs[g] for g in chosen))
            if len(ejected) > room:
                self.cut_by_moves = True
                continue
            free_left = sum(1 for g in usable if not costs[g] and g not in chosen)
            yield tuple(sorted(chosen)), ejected, free_left


def _combinations_count(n: int, k: int) -> int:
    count = 1
    for i in range(k):
        count = count * (n - i) // (i + 1)
    return count
