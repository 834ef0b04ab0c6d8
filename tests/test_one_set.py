"""The split of the suite between the dependency sets run side by side (one_set.py)."""

from __future__ import annotations

import pytest
from one_set import ENVIRONMENT

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
'''


@pytest.fixture
def suite(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    one_set(name): one set\n")
    pytester.makeconftest("from one_set import pytest_collection_modifyitems")
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_alone_a_set_runs_every_test(suite, monkeypatch):
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    suite.runpytest().assert_outcomes(passed=5)


@pytest.mark.parametrize(("current", "ran"), [
    ("pins", ["test_pins_only", "test_walk[1]", "test_everywhere"]),
    ("latest", ["test_latest_only", "test_walk[1]", "test_walk[2]", "test_everywhere"]),
])
def test_side_by_side_a_test_runs_in_the_set_it_names_and_is_deselected_in_the_other(
        suite, monkeypatch, current, ran):
    monkeypatch.setenv(ENVIRONMENT, current)
    result = suite.runpytest("-v")
    result.assert_outcomes(passed=len(ran), deselected=5 - len(ran))
    passed = {line.split("::")[1].split(" ")[0] for line in result.outlines if " PASSED" in line}
    assert passed == set(ran)
