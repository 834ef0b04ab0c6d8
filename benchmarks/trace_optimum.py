"""The exact offline optimum of a one-week, two-node slice of the lab trace (an ILP).

A scheduler that knew the whole week in advance could choose which requests to admit, each at
the time it asks for, and where to put it, to admit the most GPU-hours. That is an integer
program, solved exactly by HiGHS (``scipy.optimize.milp``); its rows are the core's own
(:func:`jhub_gpubooking.core.exact_moves.build_model`, which the service's last-resort
re-placement solves too):

* ``a[r]`` = 1 when request ``r`` is admitted; the objective is the sum of its GPU-hours;
* a fraction sits on one GPU: ``sum_g x[r, g] = a[r]``;
* ``w`` whole GPUs sit on one node: ``y[r, n]`` picks the node, ``sum_{g in n} x[r, g] =
  w * y[r, n]`` and ``sum_n y[r, n] = a[r]``;
* no GPU holds more slices than it has at any request's start (the moments the set of running
  bookings grows): ``sum_{r running} slices[r] * x[r, g] <= S``; whole GPUs count ``S`` each.

The slice is a trace of the same distributions (:mod:`.tracegen`) on two 4-GPU nodes with a
third of the users, for one week; requests for more GPUs than a node has are left out. The
online schedulers replay the same requests under the optimum's rules (each request at its
asked time, one attempt, no waitlist, no releases), so the numbers compare like with like.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from jhub_gpubooking.core.exact_moves import Demand, MoveModel, build_model
from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.core.placement import held, overbooked_instants

from .common import markdown_table
from .trace_replay import Replay, best_fit, re_placing, replay
from .tracegen import Trace, TraceShape, generate

SLICE_POOL = Pool(name="a100-slice", slices_per_gpu=4, backend="hami",
                  nodes={"gpu-c": 4, "gpu-d": 4})
#: The optimum's rules for the online schedulers: asked times, one attempt, nothing released.
AS_ASKED = {"attempts": 1, "waitlist": False, "no_show_minutes": None, "early_stops": False}


@dataclass(frozen=True)
class Item:
    """A request the optimum may admit: fixed times, an amount, its worth in GPU-hours."""

    id: int
    start: datetime
    end: datetime
    amount: Fraction

    @property
    def value(self) -> Fraction:
        return self.amount * Fraction(int((self.end - self.start).total_seconds()), 3600)


@dataclass(frozen=True)
class Optimum:
    value: Fraction  # GPU-hours admitted by the best solution found
    placements: dict[int, Placement]
    optimal: bool  # proven optimal (else the time limit stopped the solver)
    upper_bound: float  # the solver's bound: no solution admits more
    seconds: float


def _bookings(pool: Pool, items: Sequence[Item], placements: dict[int, Placement]) -> list[Booking]:
    by_id = {item.id: item for item in items}
    return [Booking(user="u", pool=pool.name, amount=by_id[i].amount, start=by_id[i].start,
                    end=by_id[i].end, placement=placement, id=i)
            for i, placement in placements.items()]


def feasible(pool: Pool, items: Sequence[Item], placements: dict[int, Placement]) -> bool:
    """No GPU holds more slices than it has at any moment (the core's own audit)."""
    return not overbooked_instants(pool, _bookings(pool, items, placements))


def options(pool: Pool, item: Item) -> Iterator[Placement]:
    """Every placement of ``item`` in ``pool``: one GPU for a fraction, any GPUs of one node
    for whole GPUs."""
    slices = pool.amount_to_slices(item.amount)
    if item.amount < 1:
        for node, index in pool.gpu_keys:
            yield Placement(node, (index,), slices)
        return
    for node, count in pool.nodes.items():
        for gpus in itertools.combinations(range(count), int(item.amount)):
            yield Placement(node, gpus, pool.slices_per_gpu)


def brute_force(pool: Pool, items: Sequence[Item]) -> Fraction:
    """The optimum by trying every choice (refuse, or each placement) of every item: tiny
    instances only, to check the ILP."""
    best = Fraction(0)
    choices = [[None, *options(pool, item)] for item in items]
    for chosen in itertools.product(*choices):
        placements = {item.id: p for item, p in zip(items, chosen) if p is not None}
        value = sum((item.value for item in items if item.id in placements), Fraction(0))
        if value > best and feasible(pool, items, placements):
            best = value
    return best


def _model(pool: Pool, items: Sequence[Item], fixed: Sequence[Booking] = ()) -> MoveModel:
    """The core's integer program (:func:`jhub_gpubooking.core.exact_moves.build_model`, the
    rows of the module docstring) for ``items``; ``fixed`` bookings keep their placements and
    only take slices away from the GPUs they hold."""
    demands = [Demand.of_amount(pool, item.start, item.end, item.amount) for item in items]
    return build_model(pool, demands, held(pool, fixed))


def fits_with_moves(pool: Pool, fixed: Sequence[Booking], items: Sequence[Item],
                    time_limit: float = 60) -> bool | None:
    """Can every item be placed at its times next to the ``fixed`` bookings? An exact
    feasibility ILP (None when the solver hit its time limit before deciding)."""
    model = _model(pool, items, fixed)
    result = model.solve([0.0] * len(model.columns), 1, time_limit)
    if result.found:
        return True
    if result.status == "infeasible":
        return False
    return None


def solve(pool: Pool, items: Sequence[Item], time_limit: float = 600) -> Optimum:
    """The ILP of the module docstring, solved by HiGHS."""
    began = time.perf_counter()
    model = _model(pool, items)
    cost = [0.0] * len(model.columns)
    for r, a in enumerate(model.admit):
        cost[a] = -float(items[r].value)
    # HiGHS, as measured so far: its proved bound is the offline optimum's own report
    result = model.solve(cost, 0, time_limit, exact_gap=True, solver="highs")
    if result.x is None:
        raise RuntimeError(f"HiGHS found no solution ({result.status})")
    placements = {items[r].id: placement
                  for r, placement in model.placements(result.x).items()}
    if not feasible(pool, items, placements):
        raise RuntimeError("the ILP's solution overbooks a GPU")
    value = sum((item.value for item in items if item.id in placements), Fraction(0))
    bound = float(value) if result.bound is None else -result.bound
    return Optimum(value, placements, result.status == "optimal", max(bound, float(value)),
                   time.perf_counter() - began)


#: ``--tiny``: two 2-GPU nodes at a third of the load, so the smoke test solves in a second.
TINY_SLICE_POOL = Pool(name="a100-tiny", slices_per_gpu=4, backend="hami",
                       nodes={"gpu-c": 2, "gpu-d": 2})


def slice_trace(seed: int, tiny: bool = False) -> Trace:
    """One week of a third of the lab's users on two 4-GPU nodes (same distributions)."""
    shape = TraceShape(users=3, weeks=1, load=0.3) if tiny else TraceShape(users=16, weeks=1)
    pool = TINY_SLICE_POOL if tiny else SLICE_POOL
    trace = generate(shape, seed=seed, pool=pool)
    largest = max(pool.nodes.values())
    return Trace(shape, pool, [r for r in trace.requests if r.amount <= largest], trace.groups)


def optimum_report(seed: int, tiny: bool = False, time_limit: float = 600) -> dict:
    """Solve the slice of ``seed``, replay the online schedulers on it, print the comparison."""
    trace = slice_trace(seed, tiny)
    items = [Item(r.id, r.start, r.end, r.amount) for r in trace.requests]
    demand = sum((item.value for item in items), Fraction(0))
    best = solve(trace.pool, items, time_limit)
    online = {}
    for how in (Replay("best fit, as asked", best_fit, **AS_ASKED),
                Replay("re-placing, as asked", re_placing, **AS_ASKED)):
        outcome = replay(trace, how)
        admitted = sum((r.gpu_hours for r in trace.requests if r.id in outcome.admitted),
                       Fraction(0))
        online[how.name] = float(admitted)
    rows = [["offline optimum (ILP)" + ("" if best.optimal else ", time limit"),
             round(float(best.value), 2), 1.0, len(best.placements)]]
    for name, admitted in online.items():
        rows.append([name, round(admitted, 2), admitted / float(best.value) if best.value else 1.0,
                     ""])
    print(f"\nOffline optimum, seed {seed}: one week, two nodes of "
          f"{max(trace.pool.nodes.values())} GPUs in quarters, "
          f"{len(items)} requests, demand {float(demand):,.1f} GPU-h; HiGHS "
          f"{'proved it optimal' if best.optimal else 'stopped at its time limit'} in "
          f"{best.seconds:.1f} s (upper bound {best.upper_bound:,.2f} GPU-h)\n")
    print(markdown_table(["scheduler", "admitted GPU-h", "of optimum", "admitted requests"], rows))
    return {
        "seed": seed, "requests": len(items), "demand_gpu_hours": float(demand),
        "optimum_gpu_hours": float(best.value), "optimal": best.optimal,
        "upper_bound_gpu_hours": best.upper_bound, "solver_seconds": best.seconds,
        "online_gpu_hours": online,
        "online_share_of_optimum": {name: admitted / float(best.value) if best.value else 1.0
                                    for name, admitted in online.items()},
    }
