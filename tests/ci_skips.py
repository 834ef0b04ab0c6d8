"""With ``CI=true``, a test skipped because a database, the browser or kubectl is missing fails instead.

Locally such tests skip (saying why), so a laptop without PostgreSQL can still run the rest; in CI the
same skip would hide that part of the suite, so it counts as a failure. A skip counts when the test
carries one of ``REQUIRED_MARKERS`` or its reason names one of those tools (fixture and module-level
skips included, e.g. ``importorskip("playwright…")``). Every other skip stays a skip.

The hooks are imported by ``tests/conftest.py``; ``tests/test_ci_skips.py`` checks them with pytester.
"""

from __future__ import annotations

import os
import re

import pytest

REQUIRED_MARKERS = ("postgres", "mysql", "browser", "kubectl")
# what the skips of those tests say: "PostgreSQL … is unreachable", "mysql server at … unreachable",
# "Chromium is not installed", "could not import 'playwright…'", "kubectl is not on PATH"
REQUIRED_REASON = re.compile(r"postgres|mariadb|mysql|database.*unreachable|chromium|playwright|kubectl",
                             re.IGNORECASE)


def ci_enabled() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _skip_reason(longrepr) -> str:
    """The reason of a skip report: its longrepr is ``(path, lineno, "Skipped: reason")``."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def required_skip(markers: set[str], reason: str) -> bool:
    """True when a skip with this reason, of a test with these markers, must fail in CI."""
    return bool(markers & set(REQUIRED_MARKERS)) or bool(REQUIRED_REASON.search(reason))


def _fail(report, reason: str) -> None:
    report.outcome = "failed"
    report.longrepr = (f"CI=true: this test needs a service CI must provide, so its skip is a failure: "
                       f"{reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and ci_enabled()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    if required_skip({marker.name for marker in item.iter_markers()}, reason):
        _fail(report, reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and ci_enabled()):
        return
    reason = _skip_reason(report.longrepr)
    if required_skip(set(), reason):  # a module skipped at import has no markers yet
        _fail(report, reason)
