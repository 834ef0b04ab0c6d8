"""Both dependency sets side by side on two cores: ``pytest.mark.one_set(name)`` runs a test in one;
``pytest.mark.wall_clock`` puts a test in a lane of its own.

scripts/test runs the suite in the z2jh hub image's set (pins) and the latest releases' set at the
same time and exports ``GPUB_SPLIT_SET`` (the set's name) to each. A test marked
``one_set("pins")`` or ``one_set("latest")`` is then deselected, not skipped, in the other set:

- tests that use neither the Hub, the spawner, SQLAlchemy nor tornado (pure replays, the exact
  solvers, packaging, the JupyterLab extension's own tests) run once, in the latest set;
- long walks and waits on a real clock are split: a seed, a database server or a token in each
  set, each rule still run on the real stack of both (the marks' comments name where).

Without ``GPUB_SPLIT_SET`` (one set alone, plain pytest) every test runs.

Each set also runs in two lanes at once (``GPUB_LANE``): ``pytest.mark.wall_clock`` marks a test
that spends most of its time waiting for the wall clock (a booking's end on the service's
1-minute grid, waited out on a real Hub), which scripts/test runs in a lane of its own beside
the rest (``GPUB_LANE=wall_clock``, the others ``GPUB_LANE=rest``). Those waits left a core idle
for minutes in a suite otherwise busy on the CPU. Without ``GPUB_LANE`` both kinds run.

The hook is imported by ``tests/conftest.py``; ``tests/test_one_set.py`` checks it with pytester.
"""

from __future__ import annotations

import os

import pytest

ENVIRONMENT = "GPUB_SPLIT_SET"
LANE_ENVIRONMENT = "GPUB_LANE"
WALL_CLOCK_LANE = "wall_clock"
LANES = (WALL_CLOCK_LANE, "rest")


def lane() -> str:
    """This run's lane ("" when it runs both kinds), for what both lanes of a set must keep apart
    (the e2e logs)."""
    current = os.environ.get(LANE_ENVIRONMENT, "")
    if current and current not in LANES:
        raise pytest.UsageError(f"{LANE_ENVIRONMENT}={current!r}: the lanes are {', '.join(LANES)}")
    return current


def _runs_here(item, current_set: str | None, current_lane: str) -> bool:
    marker = item.get_closest_marker("one_set")
    if current_set and marker and marker.args[0] != current_set:
        return False
    waits = item.get_closest_marker(WALL_CLOCK_LANE) is not None
    return not current_lane or waits == (current_lane == WALL_CLOCK_LANE)


def pytest_collection_modifyitems(config, items):
    current_set, current_lane = os.environ.get(ENVIRONMENT), lane()
    if not current_set and not current_lane:
        return
    keep, dropped = [], []
    for item in items:
        (keep if _runs_here(item, current_set, current_lane) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
