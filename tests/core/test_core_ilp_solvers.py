"""The two solvers of the exact re-placement answer the same programs the same way (status,
optimum, the bounds of each row kept), and the choice between them says what is missing."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from jhub_gpubooking.core import ilp_solvers
from jhub_gpubooking.core.ilp_solvers import cpsat_installed, resolve, solve_binary

SOLVERS = ["cpsat", "highs", "portfolio"]

#: Three items of sizes 2, 3, 4 and a bin of 6: at most one row, exactly one of the first two.
KNAPSACK = dict(
    columns=3,
    rows=[({0: 2.0, 1: 3.0, 2: 4.0}, -math.inf, 6.0), ({0: 1.0, 1: 1.0}, 1.0, 1.0)],
    cost=[-2.0, -3.0, -4.0],
)


def test_the_test_sets_install_or_tools():
    # CI must not quietly test HiGHS twice: the test extra installs the cpsat extra
    assert cpsat_installed(), "OR-Tools is missing: pip install -e '.[test]'"


@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_finds_the_same_optimum(solver):
    found = solve_binary(**KNAPSACK, at_least=[], time_limit=30, solver=solver)
    assert (found.status, found.x, found.objective, found.bound) == (
        "optimal", [1.0, 0.0, 1.0], -6.0, -6.0)
    # the portfolio answers with whichever proved it first
    assert found.solver in ({solver} if solver != "portfolio" else {"cpsat", "highs"})


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_lower_bound_on_a_column_is_kept(solver):
    found = solve_binary(**KNAPSACK, at_least=[(1, 1.0)], time_limit=30, solver=solver)
    assert (found.status, found.x, found.objective) == ("optimal", [0.0, 1.0, 0.0], -3.0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_an_infeasible_program_is_proved_so(solver):
    found = solve_binary(**KNAPSACK, at_least=[(1, 1.0), (2, 1.0)], time_limit=30,
                         solver=solver)
    assert (found.status, found.x, found.found, found.objective) == (
        "infeasible", None, False, None)


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_program_without_cost_is_a_feasibility_question(solver):
    found = solve_binary(3, KNAPSACK["rows"], [0.0] * 3, [(2, 1.0)], 30, solver=solver)
    assert found.status == "optimal" and found.objective == 0.0
    assert found.x[2] == 1.0 and found.x[0] + found.x[1] == 1.0
    assert 2 * found.x[0] + 3 * found.x[1] + 4 * found.x[2] <= 6


def test_cpsat_refuses_a_fractional_row_rather_than_rounding_it():
    with pytest.raises(ValueError, match="integral"):
        solve_binary(1, [({0: 0.5}, 0.0, 1.0)], [1.0], [], 30, solver="cpsat")


def test_auto_is_the_portfolio_when_or_tools_is_installed_else_highs(monkeypatch):
    assert resolve("auto") == "portfolio"
    assert resolve("highs") == "highs"
    monkeypatch.setattr(ilp_solvers, "cpsat_installed", lambda: False)
    assert resolve("auto") == "highs"
    for solver in ("cpsat", "portfolio"):
        with pytest.raises(ValueError, match=r"pip install 'jhub-gpubooking\[cpsat\]'"):
            resolve(solver)
    with pytest.raises(ValueError, match="unknown solver 'gurobi'"):
        resolve("gurobi")


def test_the_portfolio_ends_cp_sats_search_when_highs_proves_first(monkeypatch):
    searching, stopped = threading.Event(), threading.Event()

    class Engine:
        def stop_search(self):
            stopped.set()

    def cpsat(columns, rows, cost, at_least, time_limit, stop):
        assert stop.attach(Engine())
        searching.set()
        assert stopped.wait(30), "HiGHS's proof did not end CP-SAT's search"
        return ilp_solvers.Solution("unknown", None, None, None, "cpsat")

    proof = ilp_solvers.Solution("infeasible", None, None, None, "highs")

    def highs(*args):
        assert searching.wait(30)
        return proof

    monkeypatch.setattr(ilp_solvers, "_cpsat", cpsat)
    monkeypatch.setattr(ilp_solvers, "_highs", highs)
    assert solve_binary(**KNAPSACK, at_least=[], time_limit=30, solver="portfolio") == proof


def test_a_search_stopped_before_it_began_does_not_start():
    stop = ilp_solvers._Stop()
    stop.stop()
    assert not stop.attach(object())


def test_without_a_proof_the_portfolio_takes_the_better_solution(monkeypatch):
    worse = ilp_solvers.Solution("feasible", [1.0, 0.0, 0.0], -2.0, -6.0, "highs")
    better = ilp_solvers.Solution("feasible", [1.0, 0.0, 1.0], -6.0, -7.0, "cpsat")
    monkeypatch.setattr(ilp_solvers, "_highs", lambda *args: worse)
    monkeypatch.setattr(ilp_solvers, "_cpsat", lambda *args: better)
    assert solve_binary(**KNAPSACK, at_least=[], time_limit=30, solver="portfolio") == better
    monkeypatch.setattr(ilp_solvers, "_cpsat",
                        lambda *args: ilp_solvers.Solution("unknown", None, None, None, "cpsat"))
    assert solve_binary(**KNAPSACK, at_least=[], time_limit=30, solver="portfolio") == worse


#: A process whose CP-SAT "proves" at once while HiGHS still searches a market-split program
#: (four equality rows of random weights over 40 binaries: no proof within the 1 s limit), then
#: exits: HiGHS's end is printed by the wrapper, so the output tells whether exit waited for it.
EXIT_WHILE_HIGHS_SEARCHES = textwrap.dedent("""
    import random
    from jhub_gpubooking.core import ilp_solvers
    proof = ilp_solvers.Solution("infeasible", None, None, None, "cpsat")
    ilp_solvers._cpsat = lambda *args: proof
    search = ilp_solvers._highs
    def highs(*args):
        answer = search(*args)
        print("highs finished:", answer.status, flush=True)
        return answer
    ilp_solvers._highs = highs
    rng = random.Random(7)
    rows = []
    for _ in range(4):
        weights = {c: float(rng.randrange(100)) for c in range(40)}
        half = float(sum(weights.values()) // 2)
        rows.append((weights, half, half))
    answer = ilp_solvers.solve_binary(40, rows, [0.0] * 40, [], 1.0, solver="portfolio")
    print("portfolio answered:", answer.solver, flush=True)
""")


def test_a_process_exiting_while_highs_searches_waits_for_it():
    # the HiGHS thread is not a daemon: exit joins it instead of tearing down under its search
    completed = subprocess.run([sys.executable, "-c", EXIT_WHILE_HIGHS_SEARCHES],
                               cwd=Path(__file__).parents[2], capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    answered, finished = completed.stdout.splitlines()
    assert answered == "portfolio answered: cpsat"
    assert finished.startswith("highs finished:")
