"""Both dependency sets side by side on two cores: ``pytest.mark.one_set(name)`` runs a test in one.

scripts/test runs the suite in the z2jh hub image's set (pins) and the latest releases' set at the
same time and exports ``GPUB_SPLIT_SET`` (the set's name) to each. A test marked
``one_set("pins")`` or ``one_set("latest")`` is then deselected, not skipped, in the other set:

- tests that use neither the Hub, the spawner, SQLAlchemy nor tornado (pure replays, the exact
  solvers, packaging, the JupyterLab extension's own tests) run once, in the latest set;
- long walks and waits on a real clock are split: a seed, a database server or a token in each
  set, each rule still run on the real stack of both (the marks' comments name where).

Without ``GPUB_SPLIT_SET`` (one set alone, plain pytest) every test runs. The hook is imported by
``tests/conftest.py``; ``tests/test_one_set.py`` checks it with pytester.
"""

from __future__ import annotations

import os

ENVIRONMENT = "GPUB_SPLIT_SET"


def pytest_collection_modifyitems(config, items):
    current = os.environ.get(ENVIRONMENT)
    if not current:
        return
    keep, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("one_set")
        (dropped if marker and marker.args[0] != current else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
