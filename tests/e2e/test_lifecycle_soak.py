"""The proof of issue 13: a seeded random walk of >= 500 user and admin actions on the demo
(real Hub, proxy, service, spawner, simulated cluster running real single-user servers), with
the booking invariants checked after every step (see soak.py and soak_invariants.py), a
restore of the booking database from one of the walk's backups included (soak_restore.py).

CI runs one seed on SQLite, and a shorter walk with the service on PostgreSQL and on MariaDB,
the databases of production (other isolation, other locks), each a private server that the
walk also stops for a few seconds now and then. With both dependency sets side by side
(scripts/test), the SQLite and MariaDB walks run in the hub image's set and the PostgreSQL walk
in the latest set (pytest.mark.one_set, tests/one_set.py); one set alone runs all three. ``SOAK_SEED``,
``SOAK_ACTIONS`` and ``SOAK_SERVER_ACTIONS`` run others, or longer (docs: testing).
"""

from __future__ import annotations

import os

import pytest
from e2e_harness import E2E_LOGS
from soak import SoakResult, run_soak
from soak_backup import SCHEDULED_CHECK
from soak_resends import RESENT_CHECK
from soak_series import SERIES_CHECK

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("SOAK_SEED", "1"))
ACTIONS = int(os.environ.get("SOAK_ACTIONS", "500"))
SERVER_ACTIONS = int(os.environ.get("SOAK_SERVER_ACTIONS", "250"))


def assert_walked(result: SoakResult, actions: int) -> None:
    print("\n" + result.table())
    assert result.steps == actions
    # the walk really exercised the rules it checks, restarts included
    assert result.actions["restart hub"] >= 1 and result.actions["restart service"] >= 1
    assert result.actions["backup"] >= 1 and result.actions["restore"] == 1
    assert all(result.checks[name] > 0 for name in (
        "one pod per booking", "no GPU pod without an active booking",
        "servers stop only when their booking ends", "no instant overbooked",
        "pod claims end with their pod", "accounting identity",
        "maintenance windows stay free", "nothing is lost", "no booking id given twice",
        SCHEDULED_CHECK, RESENT_CHECK, SERIES_CHECK))
    # pods made outside the Hub were admitted on their owner's booking, not only refused
    assert result.webhook["admitted"] > 0


# a safety net for a hung stack, far above what the walk takes (no timing is asserted)
@pytest.mark.one_set("pins")
@pytest.mark.timeout(300 + ACTIONS * 3)
def test_a_seeded_walk_keeps_every_booking_invariant(tmp_path):
    # the logs outlive pytest's temporary folders, like those of the other e2e tests
    result = run_soak(tmp_path, SEED, ACTIONS, log_dir=E2E_LOGS / f"soak-seed-{SEED}")
    assert_walked(result, ACTIONS)


# a private server the walk stops and starts (database outages, soak_outage.py)
@pytest.mark.parametrize("server", [
    pytest.param("private_postgres", marks=[pytest.mark.postgres, pytest.mark.one_set("latest")]),
    pytest.param("private_mariadb", marks=[pytest.mark.mysql, pytest.mark.one_set("pins")])])
@pytest.mark.timeout(300 + SERVER_ACTIONS * 3)
def test_the_walk_keeps_them_on_a_database_server_through_its_outages(tmp_path, server, request):
    database = request.getfixturevalue(server)
    result = run_soak(tmp_path, SEED, SERVER_ACTIONS, database=database,
                      log_dir=E2E_LOGS / f"soak-seed-{SEED}-{server}")
    assert_walked(result, SERVER_ACTIONS)
    assert result.actions["database outage"] >= 1
