"""The split of the suite between the dependency sets run side by side, and between each set's
two lanes (one_set.py)."""

from __future__ import annotations

import pytest
from one_set import ENVIRONMENT, LANE_ENVIRONMENT

pytest_plugins = ["pytester"]

SUITE = '''
import pytest

@pytest.mark.one_set("pins")
def test_pins_only():
    pass

@pytest.mark.one_set("latest")
def test_latest_only():
    pass

@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.one_set("latest"))])
def test_walk(seed):
    pass

def test_everywhere():
    pass

@pytest.mark.wall_clock
@pytest.mark.one_set("latest")
def test_waits_for_an_end():
    pass
'''

EVERY_TEST = 6


@pytest.fixture
def suite(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    one_set(name): one set\n    wall_clock: waits\n")
    pytester.makeconftest("from one_set import pytest_collection_modifyitems")
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def passed(result) -> set[str]:
    return {line.split("::")[1].split(" ")[0] for line in result.outlines if " PASSED" in line}


def test_alone_a_set_runs_every_test(suite, monkeypatch):
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    monkeypatch.delenv(LANE_ENVIRONMENT, raising=False)
    suite.runpytest().assert_outcomes(passed=EVERY_TEST)


@pytest.mark.parametrize(("current", "ran"), [
    ("pins", ["test_pins_only", "test_walk[1]", "test_everywhere"]),
    ("latest", ["test_latest_only", "test_walk[1]", "test_walk[2]", "test_everywhere",
                "test_waits_for_an_end"]),
])
def test_side_by_side_a_test_runs_in_the_set_it_names_and_is_deselected_in_the_other(
        suite, monkeypatch, current, ran):
    monkeypatch.setenv(ENVIRONMENT, current)
    monkeypatch.delenv(LANE_ENVIRONMENT, raising=False)
    result = suite.runpytest("-v")
    result.assert_outcomes(passed=len(ran), deselected=EVERY_TEST - len(ran))
    assert passed(result) == set(ran)


@pytest.mark.parametrize(("current_set", "lane", "ran"), [
    ("", "wall_clock", ["test_waits_for_an_end"]),
    ("", "rest", ["test_pins_only", "test_latest_only", "test_walk[1]", "test_walk[2]",
                  "test_everywhere"]),
    ("latest", "wall_clock", ["test_waits_for_an_end"]),
    ("pins", "wall_clock", []),
    ("pins", "rest", ["test_pins_only", "test_walk[1]", "test_everywhere"]),
])
def test_a_lane_runs_the_wall_clock_tests_or_the_rest_of_its_set(
        suite, monkeypatch, current_set, lane, ran):
    monkeypatch.setenv(ENVIRONMENT, current_set)
    monkeypatch.setenv(LANE_ENVIRONMENT, lane)
    result = suite.runpytest("-v")
    result.assert_outcomes(passed=len(ran), deselected=EVERY_TEST - len(ran))
    assert passed(result) == set(ran)


def test_an_unknown_lane_is_an_error(suite, monkeypatch):
    monkeypatch.setenv(LANE_ENVIRONMENT, "fast")
    result = suite.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*GPUB_LANE='fast': the lanes are wall_clock, rest*"])
