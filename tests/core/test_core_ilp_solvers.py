"""The two solvers of the exact re-placement answer the same programs the same way (status,
optimum, the bounds of each row kept), and the choice between them says what is missing."""

from __future__ import annotations

import math

import pytest

from jhub_gpubooking.core import ilp_solvers
from jhub_gpubooking.core.ilp_solvers import cpsat_installed, resolve, solve_binary

SOLVERS = ["cpsat", "highs"]

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
def test_both_solvers_find_the_same_optimum(solver):
    found = solve_binary(**KNAPSACK, at_least=[], time_limit=30, solver=solver)
    assert (found.status, found.x, found.objective, found.bound, found.solver) == (
        "optimal", [1.0, 0.0, 1.0], -6.0, -6.0, solver)


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


def test_auto_is_cpsat_when_installed_else_highs(monkeypatch):
    assert resolve("auto") == "cpsat"
    assert resolve("highs") == "highs"
    monkeypatch.setattr(ilp_solvers, "cpsat_installed", lambda: False)
    assert resolve("auto") == "highs"
    with pytest.raises(ValueError, match=r"pip install 'jhub-gpubooking\[cpsat\]'"):
        resolve("cpsat")
    with pytest.raises(ValueError, match="unknown solver 'gurobi'"):
        resolve("gurobi")
