"""Re-placing upcoming bookings exactly: an integer program, solved by HiGHS, CP-SAT or both.

:mod:`.replacement`'s chain and repack are bounded on a large pool, so they can refuse a
request that some re-placement of the upcoming bookings would let in. This module decides
that question exactly (up to a time limit) with one integer linear program, the one rule for
"where can these bookings go" that the benchmarks' offline optimum and their check of
avoidable refusals build on too (:func:`build_model`):

* every *demand* (a booking that may move, or the request) takes ``slices`` of ``width`` GPUs
  for its fixed [start, end): ``a[r]`` = 1 when it is placed;
* one GPU (``width`` 1): ``sum_g x[r, g] = a[r]``;
* ``width`` whole GPUs on one node: ``y[r, n]`` picks the node, ``sum_{g in n} x[r, g] =
  width * y[r, n]`` and ``sum_n y[r, n] = a[r]``;
* no GPU holds more slices than it has at any moment: the use of a GPU only grows at a start,
  so one row per GPU and start (of a demand, of what stays, of a maintenance window) checks
  every moment; what stays (``held``) only takes capacity away, and ``x[r, g]`` exists only
  where what stays leaves ``r`` its slices all its interval (a node only with ``width`` such
  GPUs): the same program, with the columns a solver would fix to 0 anyway left out.

:func:`place_exactly` fixes every ``a`` to 1 and minimises the bookings that leave their GPUs
(a time-limited incumbent is taken as it is), then checks the answer with the core's own audit
(:func:`.placement.overbooked_instants`, :func:`.placement.maintenance_collisions`) before
returning it. The solver (:mod:`.ilp_solvers`: by default HiGHS and CP-SAT at once when
OR-Tools is installed, else HiGHS from scipy) is imported only when a model is solved, so
importing this module (the Hub imports the spawner, which imports the core) imports neither.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from .ilp_solvers import Solution, solve_binary
from .model import Booking, MaintenanceWindow, Move, Placement, Pool, Replacement
from .placement import Held, Overbooking, held, maintenance_collisions, overbooked_instants
from .timegrid import as_utc

#: Seconds the solver may spend on one create's re-placement by default (the service's
#: ``GPUBookingService.exact_move_seconds``; the pool's lock is held meanwhile).
DEFAULT_SECONDS = 1.0
#: Seconds it may go on by default when that ran out, without the pool's lock (the service's
#: ``GPUBookingService.exact_move_retry_seconds``, see :mod:`.proposed_moves`).
DEFAULT_RETRY_SECONDS = 10.0


class RanOut(Exception):
    """The solver's time ran out before it found a re-placement or proved that none exists."""


@dataclass(frozen=True)
class Demand:
    """Something to place: ``slices`` on each of ``width`` GPUs of one node for [start, end)."""

    start: datetime
    end: datetime
    slices: int
    width: int

    @classmethod
    def of_amount(cls, pool: Pool, start: datetime, end: datetime, amount: Fraction) -> Demand:
        """A request for ``amount`` GPUs of ``pool`` (the pool's own slice rule)."""
        amount = Fraction(amount)
        slices = pool.amount_to_slices(amount)  # also refuses amounts the pool cannot give
        if amount >= 1:
            return cls(as_utc(start), as_utc(end), pool.slices_per_gpu, int(amount))
        return cls(as_utc(start), as_utc(end), slices, 1)

    @classmethod
    def of_booking(cls, booking: Booking) -> Demand:
        """A placed booking as it holds now: its slices on as many GPUs as it has."""
        placed = booking.placement
        return cls(as_utc(booking.start), as_utc(booking.end), placed.slices, len(placed.gpus))


@dataclass
class MoveModel:
    """The columns and rows of the integer program of the module docstring.

    ``columns`` name each variable: ("a", r), ("y", r, node), ("x", r, g) or ("stay", r);
    ``rows`` are (coefficients by column, low, high); ``admit[r]`` is the column of ``a[r]``;
    ``x_of[r]`` maps GPU position -> column of ``x[r, g]``.
    """

    pool: Pool
    demands: Sequence[Demand]
    gpus: list[tuple[str, int]]
    position: dict[tuple[str, int], int]
    columns: list[tuple] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)
    admit: list[int] = field(default_factory=list)
    x_of: list[dict[int, int]] = field(default_factory=list)

    def column(self, key: tuple) -> int:
        self.columns.append(key)
        return len(self.columns) - 1

    def solve(self, cost: Sequence[float], placed_at_least: float, time_limit: float,
              exact_gap: bool = False, solver: str = "auto") -> Solution:
        """Minimise ``cost``, every ``a`` at least ``placed_at_least`` (1: all placed), every
        variable binary, with ``solver`` (see :mod:`.ilp_solvers`)."""
        return solve_binary(len(self.columns), self.rows, cost,
                            [(a, placed_at_least) for a in self.admit], time_limit,
                            solver=solver, exact_gap=exact_gap)

    def placements(self, values: Sequence[float]) -> dict[int, Placement]:
        """Demand index -> its placement in a solution (placed demands only)."""
        chosen: dict[int, Placement] = {}
        for r, demand in enumerate(self.demands):
            if values[self.admit[r]] < 0.5:
                continue
            on = sorted(self.gpus[g] for g, col in self.x_of[r].items() if values[col] > 0.5)
            chosen[r] = Placement(on[0][0], tuple(index for _, index in on), demand.slices)
        return chosen


def build_model(pool: Pool, demands: Sequence[Demand], holding: Iterable[Held] = ()) -> MoveModel:
    """The integer program of the module docstring for ``demands`` next to what ``holding``
    holds (see :func:`.placement.held`: bookings that stay and maintenance windows)."""
    gpus = list(pool.gpu_keys)
    position = {gpu: g for g, gpu in enumerate(gpus)}
    model = MoveModel(pool, demands, gpus, position)
    fixed = _fixed_by_gpu(model, holding)
    room = _Room(pool.slices_per_gpu, fixed)
    for demand in demands:
        a = model.column(("a", len(model.admit)))
        r = len(model.admit)
        model.admit.append(a)
        # only GPUs where what stays leaves the demand room all its interval get a column:
        # the others could never take it, and every column the solver need not branch on counts
        usable = [g for g in range(len(gpus))
                  if room.least(g, demand.start, demand.end) >= demand.slices]
        xs: dict[int, int] = {}
        if demand.width == 1:
            for g in usable:
                xs[g] = model.column(("x", r, g))
            model.rows.append(({**{col: 1.0 for col in xs.values()}, a: -1.0}, 0, 0))
        else:
            picks = {}
            for node in pool.nodes:
                on_node = [g for g in usable if gpus[g][0] == node]
                if len(on_node) < demand.width:
                    continue
                y = model.column(("y", r, node))
                picks[y] = 1.0
                columns = {g: model.column(("x", r, g)) for g in on_node}
                xs.update(columns)
                model.rows.append(({**{col: 1.0 for col in columns.values()},
                                    y: -float(demand.width)}, 0, 0))
            model.rows.append(({**picks, a: -1.0}, 0, 0))
        model.x_of.append(xs)
    _capacity_rows(model, fixed, room)
    return model


def _fixed_by_gpu(model: MoveModel,
                  holding: Iterable[Held]) -> list[list[tuple[datetime, datetime, int]]]:
    """(begin, end, slices) of what ``holding`` holds on each GPU while some demand runs."""
    fixed: list[list[tuple[datetime, datetime, int]]] = [[] for _ in model.gpus]
    demands = model.demands
    if not demands:
        return fixed
    first = min(d.start for d in demands)
    last = max(d.end for d in demands)
    for begin, finish, node, indices, slices in holding:
        if finish <= first or begin >= last or begin >= finish:
            continue
        for index in indices:
            g = model.position.get((node, index))
            if g is not None:
                fixed[g].append((begin, finish, slices))
    return fixed


class _Room:
    """Slices left on each GPU by what stays: at a moment, and the least over an interval.

    Per GPU a step function: ``cuts[g]`` the sorted moments its use changes, ``used[g][j]``
    the slices in use from ``cuts[g][j]`` to the next cut (0 before the first)."""

    def __init__(self, capacity: int, fixed: list[list[tuple[datetime, datetime, int]]]):
        self.capacity = capacity
        self.cuts: list[list[datetime]] = []
        self.used: list[list[int]] = []
        for holds in fixed:
            change: dict[datetime, int] = {}
            for begin, finish, slices in holds:
                change[begin] = change.get(begin, 0) + slices
                change[finish] = change.get(finish, 0) - slices
            cuts = sorted(change)
            used, running = [0], 0
            for moment in cuts:
                running += change[moment]
                used.append(running)
            self.cuts.append(cuts)
            self.used.append(used)

    def at(self, g: int, moment: datetime) -> int:
        # a GPU already over its slices (data from before a config change) takes nothing
        return max(0, self.capacity - self.used[g][bisect_right(self.cuts[g], moment)])

    def least(self, g: int, start: datetime, end: datetime) -> int:
        """The room at the fullest moment of [start, end)."""
        cuts = self.cuts[g]
        first, stop = bisect_right(cuts, start), bisect_left(cuts, end)
        return max(0, self.capacity - max(self.used[g][first:stop + 1]))


def _capacity_rows(model: MoveModel, fixed: list[list[tuple[datetime, datetime, int]]],
                   room: _Room) -> None:
    """One row per GPU and moment something starts on it while a demand runs."""
    demands = model.demands
    if not demands:
        return
    first = min(d.start for d in demands)
    last = max(d.end for d in demands)
    by_start = sorted(range(len(demands)), key=lambda r: demands[r].start)
    starts = [demands[r].start for r in by_start]

    def running(moment: datetime) -> list[int]:
        # demands started by ``moment`` (a prefix in start order) and not yet ended
        return [r for r in by_start[:bisect_right(starts, moment)] if demands[r].end > moment]

    cache: dict[datetime, list[int]] = {}
    demand_starts = set(starts)
    for g, holds in enumerate(fixed):
        moments = demand_starts | {begin for begin, _, _ in holds if first <= begin < last}
        for moment in sorted(moments):
            members = cache.get(moment)
            if members is None:
                members = cache[moment] = running(moment)
            in_row = [(model.x_of[r][g], demands[r].slices) for r in members
                      if g in model.x_of[r]]
            if not in_row:
                continue
            left = room.at(g, moment)
            if sum(slices for _, slices in in_row) > left:
                model.rows.append(({col: float(slices) for col, slices in in_row},
                                   float("-inf"), float(left)))


def place_exactly(
    pool: Pool,
    staying: Sequence[Booking],
    movable: Sequence[Booking],
    start: datetime,
    end: datetime,
    amount: Fraction,
    maintenance: Sequence[MaintenanceWindow] = (),
    time_limit: float = DEFAULT_SECONDS,
    solver: str = "auto",
) -> Replacement | None:
    """Place ``amount`` GPUs for [start, end), moving bookings of ``movable`` (each keeping
    its slices, GPU count, times and one node) as few as the solver finds within ``time_limit``
    seconds (``solver``: see :mod:`.ilp_solvers`); ``staying`` bookings and ``maintenance``
    keep their capacity. None when no re-placement exists; :class:`RanOut` raised when the time
    ran out before the solver found one or proved there is none. The answer is audited before
    it is returned (a finding raises: it would be a bug in the model)."""
    start, end = as_utc(start), as_utc(end)
    gpus = set(pool.gpu_keys)
    # a booking on GPUs the pool no longer has (a node taken out of config) stays put
    placeable = [b for b in movable
                 if all((b.placement.node, i) in gpus for i in b.placement.gpus)]
    in_play = _in_play(placeable, start, end)
    moving = {id(b) for b in in_play}
    staying = [*staying, *(b for b in movable if id(b) not in moving)]
    movable = in_play
    request = Demand.of_amount(pool, start, end, amount)
    demands = [*(Demand.of_booking(b) for b in movable), request]
    low = min(d.start for d in demands)
    high = max(d.end for d in demands)
    staying = [b for b in staying if b.overlaps(low, high)]
    maintenance = [w for w in maintenance if w.overlaps(low, high)]
    model = build_model(pool, demands, held(pool, staying, maintenance))
    if not all(model.x_of):
        return None  # what stays leaves one of them no GPU at all: nothing to solve
    # keeping a booking where it is earns 1: the objective counts the bookings that move
    cost = [0.0] * len(model.columns)
    for r, booking in enumerate(movable):
        current = [model.x_of[r].get(model.position[(booking.placement.node, i)])
                   for i in booking.placement.gpus]
        if None in current:
            continue  # what stays leaves it no room where it is: it moves whatever happens
        if len(current) == 1:
            cost[current[0]] = -1.0
            continue
        stay = model.column(("stay", r))
        cost.append(-1.0)
        for col in current:
            model.rows.append(({stay: 1.0, col: -1.0}, float("-inf"), 0.0))
    result = model.solve(cost, 1, time_limit, solver=solver)
    if result.x is None:
        if result.status == "infeasible":
            return None
        raise RanOut(f"no re-placement found or ruled out in {time_limit:g} s")
    placed = model.placements(result.x)
    moves = tuple(Move(booking, placed[r]) for r, booking in enumerate(movable)
                  if _moved(booking.placement, placed[r]))
    found = Replacement(placed[len(movable)], moves)
    problem = check_replacement(pool, staying, movable, found, start, end, amount, maintenance)
    if problem is not None:
        raise AssertionError(f"the exact re-placement {problem}")
    return found


def _in_play(movable: Sequence[Booking], start: datetime, end: datetime) -> list[Booking]:
    """The movable bookings whose times are linked to the request's by a chain of overlapping
    ones: moving any other cannot make room for it (nothing it overlaps moves)."""
    low, high = start, end
    pending = sorted(movable, key=lambda b: b.start)
    linked: list[Booking] = []
    grew = True
    while grew:
        grew = False
        rest = []
        for booking in pending:
            if booking.overlaps(low, high):
                linked.append(booking)
                low, high = min(low, booking.start), max(high, booking.end)
                grew = True
            else:
                rest.append(booking)
        pending = rest
    return linked


def _moved(old: Placement, new: Placement) -> bool:
    return (old.node, tuple(sorted(old.gpus))) != (new.node, tuple(sorted(new.gpus)))


def check_replacement(pool: Pool, staying: Sequence[Booking], movable: Sequence[Booking],
                      found: Replacement, start: datetime, end: datetime, amount: Fraction,
                      maintenance: Sequence[MaintenanceWindow]) -> str | None:
    """What is wrong with re-placing ``found``'s moves (bookings of ``movable``) and placing the
    request there, next to ``staying`` and ``maintenance``, by the core's own checks: a GPU
    holding more than before somewhere, something placed or moved meeting a maintenance
    window, a placement resized. None when nothing is; the answer of the solver is checked so,
    and so is a re-placement found earlier, before it is written."""
    request = Booking(user="", pool=pool.name, amount=Fraction(amount), start=start, end=end,
                      placement=found.placement)
    new = {id(move.booking): move.placement for move in found.moves}
    moved = [b.with_changes(placement=new[id(b)]) for b in movable if id(b) in new]
    after = [b for b in movable if id(b) not in new] + moved
    before = overbooked_instants(pool, [*staying, *movable])
    if not _no_worse(overbooked_instants(pool, [*staying, *after, request]), before):
        return "overbooks a GPU"
    if any(maintenance_collisions(window, [request, *moved]) for window in maintenance):
        return "meets a maintenance window"
    for move in found.moves:
        booking, placement = move.booking, move.placement
        if (placement.slices, len(placement.gpus)) != (booking.placement.slices,
                                                       len(booking.placement.gpus)):
            return "resizes a booking"
    return None


def _no_worse(after: list[Overbooking], before: list[Overbooking]) -> bool:
    """Every GPU over its slices afterwards was so before, at least as much, all that time (a
    pool's data can already be overbooked, e.g. after its slices per GPU were lowered)."""
    for found in after:
        covered = sum(
            (min(old.end, found.end) - max(old.start, found.start)).total_seconds()
            for old in before
            if (old.node, old.gpu) == (found.node, found.gpu)
            and old.used_slices >= found.used_slices
            and old.start < found.end and found.start < old.end
        )
        if covered < (found.end - found.start).total_seconds():
            return False
    return True
