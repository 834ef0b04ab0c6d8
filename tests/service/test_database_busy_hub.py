"""Through a real Hub and proxy: a database that cannot take a change answers 503 in the API's
JSON error shape with ``Retry-After`` (never a 500, never a hang), and nothing is lost.

The service uses SQLite here; another process (the admin CLI, say) holds SQLite's write lock
for longer than the service's ``db_timeout_seconds``. PostgreSQL outages through the Hub and its
spawner are in ``tests/e2e/test_e2e_database_outage.py``.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from hub_harness import start_booking_hub

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time
from jhub_gpubooking.db.session import BUSY_MESSAGE
from jhub_gpubooking.service.base import RETRY_AFTER_SECONDS


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_booking_hub(
        tmp_path_factory.mktemp("busy-hub"),
        extra_service_config="c.GPUBookingService.db_timeout_seconds = 1\n",
    ) as running:
        yield running


def booking_body(hour: int) -> dict:
    start = ceil_to_grid(datetime.now(timezone.utc), 15) + timedelta(hours=hour)
    return {
        "pool": "a100",
        "gpus": 1,
        "start": format_time(start),
        "end": format_time(start + timedelta(hours=1)),
    }


def test_a_held_write_lock_is_a_503_with_retry_after_and_nothing_is_lost(hub):
    with hub.api(hub.user_token("ada")) as ada:
        first = ada.post("api/bookings", json=booking_body(1))
        assert first.status_code == 201, first.text

        holder = sqlite3.connect(hub.directory / "bookings.sqlite", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            refused = ada.post("api/bookings", json=booking_body(2))
            assert refused.status_code == 503, refused.text
            assert refused.json() == {"status": 503, "message": BUSY_MESSAGE}
            assert refused.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            # reading goes on while the lock is held
            listed = ada.get("api/bookings")
            assert listed.status_code == 200, listed.text
            assert [b["id"] for b in listed.json()["bookings"]] == [first.json()["id"]]
        finally:
            holder.execute("ROLLBACK")
            holder.close()

        again = ada.post("api/bookings", json=booking_body(2))
        assert again.status_code == 201, again.text
        listed = ada.get("api/bookings").json()["bookings"]
        assert [b["id"] for b in listed] == [first.json()["id"], again.json()["id"]]
    log = hub.service_log()
    assert "answered 503, database unavailable" in log
    assert "Traceback" not in log
