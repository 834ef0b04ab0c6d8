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

When that bounded chain finds nothing, a second, equally bounded phase *repacks*: for each
of a few places the request could take (a GPU, or GPUs of a node, with the least movable
booked time in the way), the request goes there and the movable bookings are put back one by
one, each where it was if that is still free, else where it fits best, else where it fits once
smaller bookings already put back are taken off again (they go back to the queue). It is
tried in a few orders: first only the bookings in the request's way move, then all of them
earliest first (what colours intervals optimally), largest first. This moves many bookings
at once where needed, which the chain's move limit forbids (the quarters in the way of a
request for a whole node, each pushing smaller ones along), so it does not minimise the
moves; a refusal still means "found nothing within the bounds". Its budget
(:data:`REPACK_GPU_STEPS`) counts GPUs looked at, so a create stays cheap on a pool of any
size. Last, when the caller allows it time (``exact_seconds``), the integer program of
:mod:`.exact_moves` decides the large instance exactly, moving as few bookings as HiGHS finds
in that time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from fractions import Fraction
from itertools import combinations

from .errors import NoCapacity
from .exact_moves import RanOut, place_exactly
from .model import Booking, BookingState, MaintenanceWindow, Move, Placement, Pool, Replacement
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
#: Repacking (large instances, when the chain found nothing): at most this many places of the
#: request are tried, those with the least movable booked time in the way first ...
REPACK_TARGETS = 8
#: ... and the whole phase looks at most at this many GPUs (over all its steps), so a create
#: stays cheap however large and busy the pool.
REPACK_GPU_STEPS = 12_000


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
    exact_seconds: float = 0,
    exact_solver: str = "auto",
) -> Replacement:
    """Place ``amount`` GPUs of ``pool`` for [start, end), moving upcoming bookings if needed.

    Without moves this is :func:`.placement.place` (best fit). Otherwise movable bookings (see
    :func:`is_movable` at ``now``) are moved: the fewest on a small instance, the fewest the
    bounded chain finds, else as the repacking leaves them (module docstring). When those
    bounded phases find nothing on a large instance and ``exact_seconds`` > 0, the last resort
    is the exact integer program of :mod:`.exact_moves` (``exact_solver``, at most about that
    many seconds), unless the request would not fit even with every movable booking gone. A moved
    booking may collide only with what ``existing`` holds, so ``existing`` must hold every
    booking overlapping the bookings that could move. ``known`` = (from, until) says
    ``existing`` is complete only inside that interval: bookings reaching outside it stay
    where they are. Raises the :class:`NoCapacity` of the plain placement when nothing is
    found, with ``search_ran_out`` set when the exact last resort ran out of its time.
    """
    existing = list(existing)
    maintenance = list(maintenance)
    start, end = as_utc(start), as_utc(end)
    # the plain placement needs only what overlaps the request (``existing`` may be far more)
    during = [b for b in existing if b.overlaps(start, end)]
    placed = fit(pool, during, start, end, amount, maintenance)
    if placed is not None:
        return Replacement(placed)
    search = _Search(pool, existing, maintenance, start, end, Fraction(amount), as_utc(now),
                     known)
    found = search.run()
    ran_out = False
    # an exact search that ran its course proved no re-placement exists; else ask the program
    if found is None and not search.proved_none and exact_seconds > 0:
        try:
            found = _place_exactly(search, existing, maintenance, start, end, Fraction(amount),
                                   exact_seconds, exact_solver)
        except RanOut:
            ran_out = True
    if found is None:
        try:
            place(pool, during, start, end, amount, maintenance)
        except NoCapacity as refused:
            refused.search_ran_out = ran_out
            raise
        raise AssertionError("place() placed what fit() could not")
    return found


def _place_exactly(search: _Search, existing: list[Booking],
                   maintenance: list[MaintenanceWindow], start: datetime, end: datetime,
                   amount: Fraction, seconds: float, solver: str) -> Replacement | None:
    """The exact last resort, with the search's own split into what may move and what stays
    (``is_movable`` and ``known``); skipped when only what stays is in the way."""
    movable = [hold.booking for hold in search.holds[1:] if hold.movable]
    moving = {id(booking) for booking in movable}
    staying = [b for b in existing if id(b) not in moving]
    if fit(search.pool, [b for b in staying if b.overlaps(start, end)], start, end,
           amount, maintenance) is None:
        return None
    return place_exactly(search.pool, staying, movable, start, end, amount, maintenance,
                         time_limit=seconds, solver=solver)


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
        self.gpus = pool.gpu_keys
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
        #: set by run(): an exhaustive search found no re-placement (so none exists)
        self.proved_none = False
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
                    # nothing was cut by the limit: more moves cannot help
                    self.proved_none = self.exact
                    return None
        except _OutOfBudget:
            pass
        if not self.exact:
            return self._repack_all()
        self.proved_none = self.expansions < self.budget
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
        for g in self.holds[h].gpus or ():
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

    # ------------------------------------------------------------------ repacking

    def _repack_all(self) -> Replacement | None:
        """The second phase of the module docstring."""
        movable = [h for h, hold in enumerate(self.holds) if hold.movable]
        self._reset(movable)
        self.gpu_steps = 0
        holds = self.holds
        orders = (
            # earliest first: what colours intervals with the fewest colours, one slot each
            sorted(movable, key=lambda h: (holds[h].begin, h)),
            # the most slice-seconds first, then the most slices: big ones have few places
            sorted(movable, key=lambda h: (-self._mass((h,)), h)),
            sorted(movable, key=lambda h: (-holds[h].width * holds[h].slices, holds[h].begin, h)),
        )
        targets = sorted(self._targets())[:REPACK_TARGETS]
        # first, at each place, only the bookings in the request's way move (pushing others
        # along as they need); then all of them may move, in each order
        attempts = []
        for _, gpus in targets:
            in_way = {h for g in gpus for h in self._overlapping(g, holds[0])
                      if holds[h].movable}
            attempts.append((gpus, sorted(in_way, key=self._size, reverse=True), in_way))
        attempts += [(gpus, order, movable) for _, gpus in targets for order in orders]
        try:
            for gpus, queue, taken_off in attempts:
                found = self._attempt(gpus, queue, taken_off, movable)
                if found is not None:
                    return found
        except _OutOfBudget:
            pass
        return None

    def _attempt(self, gpus: tuple[int, ...], queue: list[int], taken_off: Iterable[int],
                 movable: list[int]) -> Replacement | None:
        """The request on ``gpus``, ``taken_off`` off the pool and put back in ``queue``
        order (:meth:`_repack`); the pool is as it was again afterwards."""
        taken_off = set(taken_off)
        for h in taken_off:
            self._take_off(h)
        self._put(0, gpus)
        try:
            if self._repack(queue, set(movable) - taken_off):
                return self._result()
            return None
        finally:
            self._reset(movable)

    def _reset(self, movable: list[int]) -> None:
        """The request off the pool, every movable booking back where it was."""
        self._take_off(0)
        for h in movable:
            if self.holds[h].gpus != self.original[h]:
                self._take_off(h)
                self._put(h, self.original[h])
        self.placed_in_search.clear()

    def _mass(self, holds: Iterable[int]) -> float:
        """Slice-seconds of ``holds``: how much has to find room elsewhere."""
        return sum(self.holds[h].width * self.holds[h].slices
                   * (self.holds[h].end - self.holds[h].begin) for h in holds)

    def _targets(self) -> Iterator[tuple[tuple, tuple[int, ...]]]:
        """(cost, GPUs) of each place of the request where no booking that stays is in the
        way: every GPU for a fraction, the GPUs of each node with the least movable time in
        the way for whole GPUs; cost: slice-seconds of movable bookings in the way."""
        hold = self.holds[0]
        if hold.slices < self.capacity:
            limit = self.capacity - hold.slices
            for g in range(len(self.gpus)):
                overlapping = self._overlapping(g, hold)
                if self._peak([h for h in overlapping if not self._ejectable(h)], hold) <= limit:
                    yield (self._mass(h for h in overlapping if self._ejectable(h)), g), (g,)
            return
        for gpus in self.node_gpus.values():
            costs: dict[int, float] = {}
            for g in gpus:
                overlapping = self._overlapping(g, hold)
                if all(self._ejectable(h) for h in overlapping):
                    costs[g] = self._mass(overlapping)
            if len(costs) >= hold.width:
                chosen = sorted(costs, key=lambda g: (costs[g], g))[:hold.width]
                yield (sum(costs[g] for g in chosen), gpus[0]), tuple(sorted(chosen))

    def _repack(self, queue: list[int], placed: set[int]) -> bool:
        """Put the bookings of ``queue`` back in turn, with the request already placed: each
        where it was if that is still free, else where it fits best, else where it fits once
        smaller bookings already put back are taken off again (they go back to the queue;
        only ever smaller ones, so this ends). ``placed``: the movable bookings still on the
        pool."""
        queue = list(queue)
        while queue:
            h = queue.pop(0)
            own = self.original[h]
            self._spend(len(own))
            where = own if self._fits_on(h, own) else self._best_free_place(h)
            if where is None:
                evicting = self._evicting_place(h, placed)
                if evicting is None:
                    return False
                where, evicted = evicting
                for e in evicted:
                    self._take_off(e)
                    placed.discard(e)
                queue[0:0] = sorted(evicted, key=self._size, reverse=True)
            self._put(h, where)
            placed.add(h)
        return True

    def _spend(self, gpus: int) -> None:
        self.gpu_steps += gpus
        if self.gpu_steps > REPACK_GPU_STEPS:
            raise _OutOfBudget

    def _size(self, h: int) -> tuple:
        """A strict order of holds by slices held, then length (evictions follow it down)."""
        hold = self.holds[h]
        return (hold.width * hold.slices, hold.end - hold.begin, -h)

    def _fits_on(self, h: int, gpus: tuple[int, ...]) -> bool:
        hold = self.holds[h]
        if hold.slices < self.capacity:
            return self._peak(self._overlapping(gpus[0], hold), hold) + hold.slices <= self.capacity
        return not any(self._overlapping(g, hold) for g in gpus)

    def _best_free_place(self, h: int) -> tuple[int, ...] | None:
        """Where ``h`` fits as the pool stands: the fullest GPU with room (a fraction), the
        node with the fewest idle GPUs left over (whole GPUs)."""
        hold = self.holds[h]
        self._spend(len(self.gpus))
        best: tuple | None = None
        if hold.slices < self.capacity:
            limit = self.capacity - hold.slices
            for g in range(len(self.gpus)):
                peak = self._peak(self._overlapping(g, hold), hold)
                if peak <= limit and (best is None or limit - peak < best[0]):
                    best = (limit - peak, (g,))
        else:
            for gpus in self.node_gpus.values():
                idle = [g for g in gpus if not self._overlapping(g, hold)]
                spare = len(idle) - hold.width
                if spare >= 0 and (best is None or spare < best[0]):
                    best = (spare, tuple(idle[:hold.width]))
        return None if best is None else best[1]

    def _evicting_place(self, h: int, placed: set[int]):
        """(GPUs, bookings to take off them) where ``h`` fits once some smaller bookings in
        ``placed`` are taken off again: the fewest slice-seconds of them; None if nowhere."""
        hold = self.holds[h]
        size = self._size(h)
        self._spend(len(self.gpus))

        def evictable(other: int) -> bool:
            return other in placed and self._size(other) < size

        best = None
        if hold.slices < self.capacity:
            limit = self.capacity - hold.slices
            for g in range(len(self.gpus)):
                overlapping = self._overlapping(g, hold)
                if self._peak([o for o in overlapping if not evictable(o)], hold) > limit:
                    continue
                # those that must stay first, then the evictable ones by slice-seconds: the
                # largest are taken off first
                staying = sorted(overlapping, key=lambda o: (evictable(o), self._mass((o,))))
                evicted = set()
                while self._peak(staying, hold) > limit:
                    evicted.add(staying.pop())
                if best is None or self._mass(evicted) < best[0]:
                    best = (self._mass(evicted), (g,), evicted)
        else:
            for gpus in self.node_gpus.values():
                costs = {}
                for g in gpus:
                    overlapping = self._overlapping(g, hold)
                    if all(evictable(o) for o in overlapping):
                        costs[g] = set(overlapping)
                if len(costs) < hold.width:
                    continue
                chosen = sorted(costs, key=lambda g: (self._mass(costs[g]), g))[:hold.width]
                evicted = set().union(*(costs[g] for g in chosen))
                if best is None or self._mass(evicted) < best[0]:
                    best = (self._mass(evicted), tuple(sorted(chosen)), evicted)
        return None if best is None else best[1:]

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
