"""Solving a binary integer program: HiGHS (scipy), CP-SAT (OR-Tools) or both, one answer shape.

:mod:`.exact_moves` builds its program once (columns, rows of ``low <= sum(c * x) <= high``, a
cost to minimise, every variable 0 or 1) and hands it here. Two solvers can answer it:

* ``"highs"``: ``scipy.optimize.milp`` (HiGHS), always installed with this package;
* ``"cpsat"``: OR-Tools' CP-SAT on one thread, installed with the ``cpsat`` extra. Its
  re-placements keep far more bookings where they are than HiGHS's within the same second
  (docs/benchmarks.md, "CP-SAT and the portfolio for the exact last resort").
* ``"portfolio"``: both at once, HiGHS in a thread of its own (both release the GIL while
  they search): the first to prove its answer (optimal or infeasible) ends the other's
  search, else the better solution found is taken. They fail on different programs: of the
  exact steps one ran out of time on in a lab-trace replay, the other decided 40-70%
  (HiGHS proves infeasibility where CP-SAT's search wanders, CP-SAT finds re-placements where
  HiGHS's LP relaxation is weak). Uses two cores while it runs.
* ``"auto"`` (the default): the portfolio when OR-Tools is importable, else HiGHS.

Neither solver is imported until a program is solved, so importing the core (the Hub imports
the spawner) loads neither.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: The names ``GPUBookingService.exact_move_solver`` accepts.
SOLVERS = ("auto", "portfolio", "cpsat", "highs")

#: One row: coefficients by column, low, high (``-inf``/``inf`` for no bound).
Row = tuple[dict[int, float], float, float]


@dataclass(frozen=True)
class Solution:
    """What a solver answered: ``status`` is "optimal", "feasible" (a solution, not proved
    best: the time ran out), "infeasible" (proved) or "unknown" (no solution, no proof);
    ``x`` the variables' values when there is a solution; ``objective`` its cost and ``bound``
    the solver's proved lower bound on any solution's cost (None when not known)."""

    status: str
    x: list[float] | None
    objective: float | None
    bound: float | None
    solver: str

    @property
    def found(self) -> bool:
        return self.x is not None


@functools.cache
def cpsat_installed() -> bool:
    """True when OR-Tools (CP-SAT) can be imported. Asked once per process: "auto" resolves at
    every exact step, under the pool's lock, and a failed import searches the whole path."""
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(solver: str) -> str:
    """The solver ``solver`` names: "auto" becomes "portfolio" or "highs"; asking for CP-SAT
    (alone or in the portfolio) without OR-Tools is an error that says how to install it."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}: use one of {', '.join(SOLVERS)}")
    if solver == "auto":
        return "portfolio" if cpsat_installed() else "highs"
    if solver in ("cpsat", "portfolio") and not cpsat_installed():
        raise ValueError(f"the {solver} solver needs OR-Tools: "
                         "pip install 'jhub-gpubooking[cpsat]'")
    return solver


def solve_binary(columns: int, rows: Sequence[Row], cost: Sequence[float],
                 at_least: Sequence[tuple[int, float]], time_limit: float,
                 solver: str = "auto", exact_gap: bool = False) -> Solution:
    """Minimise ``cost`` over binary ``columns`` subject to ``rows``; each (column, low) of
    ``at_least`` bounds that column from below. Within about ``time_limit`` seconds (model
    building included for CP-SAT); ``exact_gap`` asks HiGHS to prove the optimum exactly
    (CP-SAT always does when it has the time)."""
    name = resolve(solver)
    if name == "portfolio":
        return _portfolio(columns, rows, cost, at_least, time_limit, exact_gap)
    if name == "cpsat":
        return _cpsat(columns, rows, cost, at_least, time_limit)
    return _highs(columns, rows, cost, at_least, time_limit, exact_gap)


def _proved(solution: Solution) -> bool:
    return solution.status in ("optimal", "infeasible")


def _portfolio(columns: int, rows: Sequence[Row], cost: Sequence[float],
               at_least: Sequence[tuple[int, float]], time_limit: float,
               exact_gap: bool) -> Solution:
    stop = _Stop()
    answers: list[Solution] = []

    def highs() -> None:
        answer = _highs(columns, rows, cost, at_least, time_limit, exact_gap)
        answers.append(answer)
        if _proved(answer):
            stop.stop()

    # not a daemon: a process that exits while HiGHS still searches (CP-SAT proved first) joins
    # it, at most the time limit, rather than tearing down under a running C++ search. A daemon
    # thread was suspected of one abort at exit in CI ("terminate called without an active
    # exception"); that abort was not reproduced with either (docs/benchmarks.md)
    thread = threading.Thread(target=highs, name="exact-moves-highs", daemon=False)
    thread.start()
    cpsat = _cpsat(columns, rows, cost, at_least, time_limit, stop)
    if _proved(cpsat):
        # HiGHS cannot be interrupted: it finishes within its limit and its answer is dropped
        return cpsat
    thread.join()
    highs_answer = answers[0] if answers else Solution("unknown", None, None, None, "highs")
    if _proved(highs_answer):
        return highs_answer
    found = [answer for answer in (cpsat, highs_answer) if answer.found]
    return min(found, key=lambda answer: answer.objective) if found else cpsat


class _Stop:
    """Ends a CP-SAT search from another thread, also when asked before the search began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine = None
        self._stopped = False

    def attach(self, engine) -> bool:
        """False when the search should not start at all."""
        with self._lock:
            self._engine = engine
            return not self._stopped

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._engine is not None:
                self._engine.stop_search()


def _highs(columns: int, rows: Sequence[Row], cost: Sequence[float],
           at_least: Sequence[tuple[int, float]], time_limit: float,
           exact_gap: bool) -> Solution:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    data, row_index, col_index = [], [], []
    for i, (coefficients, _, _) in enumerate(rows):
        for col, coefficient in coefficients.items():
            data.append(coefficient)
            row_index.append(i)
            col_index.append(col)
    matrix = coo_array((data, (row_index, col_index)), shape=(len(rows), columns)).tocsr()
    constraints = LinearConstraint(matrix, [low for _, low, _ in rows],
                                   [high for _, _, high in rows])
    low = [0.0] * columns
    for col, bound in at_least:
        low[col] = bound
    options: dict[str, float] = {"time_limit": max(time_limit, 0.001)}
    if exact_gap:
        options["mip_rel_gap"] = 0
    result = milp([float(c) for c in cost], constraints=constraints,
                  integrality=[1] * columns, bounds=Bounds(low, 1), options=options)
    # scipy's status: 0 optimal, 1 a time or iteration limit, 2 infeasible, else unknown;
    # HiGHS keeps integers within a tolerance, and every variable here is 0 or 1
    x = None if result.x is None else [float(round(value)) for value in result.x]
    status = {0: "optimal", 2: "infeasible"}.get(result.status,
                                                 "feasible" if x is not None else "unknown")
    bound = getattr(result, "mip_dual_bound", None)
    return Solution(status, x, None if x is None else _cost(cost, x),
                    None if bound is None else float(bound), "highs")


def _cpsat(columns: int, rows: Sequence[Row], cost: Sequence[float],
           at_least: Sequence[tuple[int, float]], time_limit: float,
           stop: _Stop | None = None) -> Solution:
    from ortools.sat.python import cp_model

    began = time.perf_counter()
    model = cp_model.CpModel()
    x = [model.new_bool_var("") for _ in range(columns)]
    for col, bound in at_least:
        if bound > 0:
            model.add(x[col] >= math.ceil(bound))
    for coefficients, low, high in rows:
        cols = list(coefficients)
        weights = [_integral(coefficients[c]) for c in cols]
        expression = cp_model.LinearExpr.weighted_sum([x[c] for c in cols], weights)
        model.add_linear_constraint(
            expression,
            -cp_model.INT_MAX if low == -math.inf else _integral(math.ceil(low)),
            cp_model.INT_MAX if high == math.inf else _integral(math.floor(high)))
    objective = [(x[c], float(w)) for c, w in enumerate(cost) if w]
    if objective:
        model.minimize(cp_model.LinearExpr.weighted_sum([v for v, _ in objective],
                                                        [w for _, w in objective]))
    engine = cp_model.CpSolver()
    # one thread: the service's other requests need the other core, and one worker is
    # deterministic for a given program; building the model counts against the limit
    engine.parameters.num_workers = 1
    engine.parameters.max_time_in_seconds = max(time_limit - (time.perf_counter() - began),
                                                0.001)
    if stop is not None and not stop.attach(engine):
        return Solution("unknown", None, None, None, "cpsat")
    code = engine.solve(model)
    status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
              cp_model.INFEASIBLE: "infeasible"}.get(code, "unknown")
    if status not in ("optimal", "feasible"):
        return Solution(status, None, None, None, "cpsat")
    values = [float(engine.boolean_value(v)) for v in x]
    bound = engine.best_objective_bound if objective else 0.0
    return Solution(status, values, _cost(cost, values), bound, "cpsat")


def _cost(cost: Sequence[float], x: Sequence[float]) -> float:
    return float(sum(w * x[c] for c, w in enumerate(cost) if w))


def _integral(value: float) -> int:
    """CP-SAT's rows take integers; every row this package builds has integral ones."""
    if value != round(value):
        raise ValueError(f"CP-SAT needs integral coefficients and bounds, got {value}")
    return round(value)
