"""Shared fixtures: a real JupyterHub with the booking service (see hub_harness.py), the machine's
kubectl; with ``CI=true`` a missing database, browser or kubectl fails its tests (see ci_skips.py).
Tests marked ``one_set("pins")`` or ``one_set("latest")`` run in that dependency set only when
scripts/test runs both sets side by side (see one_set.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from ci_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (hooks)
from hub_harness import RunningHub, start_booking_hub
from one_set import pytest_collection_modifyitems  # noqa: F401 (hook)
from server_databases import new_database, skip_unless_reachable


@pytest.fixture(scope="module")
def booking_hub(tmp_path_factory) -> Iterator[RunningHub]:
    """A Hub with the booking service on SQLite, shared by the tests of one module."""
    with start_booking_hub(tmp_path_factory.mktemp("hub")) as hub:
        yield hub


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database URL; skips (printing why) when the server is unreachable."""
    skip_unless_reachable("postgresql")
    with new_database("postgresql") as url:
        yield url


@pytest.fixture(scope="session")
def kubectl() -> str:
    """The machine's kubectl, the real client that checks the simulated API (tests marked ``kubectl``)."""
    path = shutil.which("kubectl")
    if path is None:
        reason = "kubectl is not on PATH"
        print(reason)
        pytest.skip(reason)
    return path


def _running_private_server(unavailable, server_class) -> Iterator:
    """A private database server (private_postgres.py, private_mariadb.py), started; skips,
    printing why, when this machine cannot run one."""
    reason = unavailable()
    if reason:
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    server = server_class()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def private_postgres():
    """A private PostgreSQL server the test may stop and start (see private_postgres.py)."""
    from private_postgres import PrivatePostgres, unavailable

    yield from _running_private_server(unavailable, PrivatePostgres)


@pytest.fixture(scope="module")
def private_mariadb():
    """A private MariaDB server the test may stop and start (see private_mariadb.py)."""
    from private_mariadb import PrivateMariaDB, unavailable

    yield from _running_private_server(unavailable, PrivateMariaDB)
