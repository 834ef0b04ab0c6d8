"""The CI skip policy (ci_skips.py): with CI=true a missing database, browser or kubectl fails the run."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
import pytest

@pytest.mark.postgres
def test_postgres_marker():
    pytest.skip("whatever the reason")

def test_database_unreachable_reason():
    pytest.skip("mysql server at mysql+pymysql://root@127.0.0.1:3306/test unreachable: refused")

@pytest.fixture
def browser():
    pytest.skip("Chromium is not installed at /usr/bin/chromium")

def test_browser_fixture(browser):
    pass

@pytest.mark.kubectl
@pytest.mark.skipif(True, reason="no kubectl here")
def test_kubectl_skipif():
    pass

def test_unrelated_skip():
    pytest.skip("jhub_gpubooking.spawner is not written yet")

@pytest.mark.postgres
@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_passes():
    pass
'''
MODULE_SKIPPED_AT_IMPORT = '''
import pytest
pytest.importorskip("playwright_that_is_not_installed_anywhere")

def test_never_collected():
    pass
'''


@pytest.fixture
def suite(pytester):
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n"
                     "markers =\n    postgres\n    mysql\n    browser\n    kubectl\n")
    pytester.makeconftest("from ci_skips import pytest_make_collect_report, pytest_runtest_makereport")
    pytester.makepyfile(test_suite=SUITE, test_browser_module=MODULE_SKIPPED_AT_IMPORT)
    return pytester


def test_locally_they_are_skips(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest("-ra")
    result.assert_outcomes(passed=1, skipped=6, xfailed=1)
    assert result.ret == 0


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_with_ci_true_they_fail_and_other_skips_stay_skips(suite, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    # a module skipped at import becomes a collection error, which alone stops the session
    result = suite.runpytest("-ra", "--continue-on-collection-errors")
    # skips in a test body fail it; skips in setup (fixtures, skipif) and at import are errors
    result.assert_outcomes(passed=1, skipped=1, failed=2, errors=3, xfailed=1)
    assert result.ret == 1
    for line in [
        "FAILED test_suite.py::test_postgres_marker - CI=true: this test needs a service CI must provide, "
        "so its skip is a failure: whatever the reason",
        "FAILED test_suite.py::test_database_unreachable_reason - CI=true*unreachable: refused",
        "ERROR test_suite.py::test_browser_fixture - CI=true*Chromium is not installed*",
        "ERROR test_suite.py::test_kubectl_skipif - CI=true*no kubectl here",
        "ERROR test_browser_module.py - CI=true*could not import 'playwright_that_is_not_installed_anywhere'*",
        "SKIPPED*jhub_gpubooking.spawner is not written yet",
    ]:
        result.stdout.fnmatch_lines([line])


def test_ci_false_keeps_skips(suite, monkeypatch):
    monkeypatch.setenv("CI", "false")
    suite.runpytest().assert_outcomes(passed=1, skipped=6, xfailed=1)
