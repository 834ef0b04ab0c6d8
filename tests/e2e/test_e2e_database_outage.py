"""The booking service's PostgreSQL goes down mid-run and comes back, under the real Hub, proxy,
GPUBookingSpawner and simulated cluster.

While it is down: the API answers 503 in its JSON error shape with ``Retry-After`` within 5 s,
the Hub's spawner refuses GPU starts with its "cannot be reached" sentence while a CPU server
starts, and the lifecycle loop keeps ticking. Within 5 s of the database being back, booking
and GPU starts work again in the same service process, with no booking lost or duplicated.
"""

from __future__ import annotations

import time

import httpx
import pytest
from e2e_harness import Driver, running_demo

from jhub_gpubooking.chooser import SERVICE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.db.session import DATABASE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.service.base import RETRY_AFTER_SECONDS

#: What the issue promises: no request waits longer, and recovery takes no longer.
PROMISED_SECONDS = 5


@pytest.fixture(scope="module")
def outage_driver(tmp_path_factory, private_postgres):
    with running_demo(tmp_path_factory.mktemp("e2e-db-outage"),
                      db_url=private_postgres.url) as driver:
        yield driver


def bookings_of(driver: Driver, user: str, client: httpx.Client | None = None) -> httpx.Response:
    return (client or driver.booking).get("bookings", params={"user": user})


def test_outage_refuses_quickly_gpu_only_and_recovers_without_losing_bookings(
    outage_driver, private_postgres
):
    driver = outage_driver
    booking = driver.book("erin", "a100", 1)
    service = driver.service_pid()
    hub_log = driver.demo.log_dir / "hub.log"  # appended to by every run: read what is new
    start = hub_log.stat().st_size

    def log_text() -> str:
        with open(hub_log, "rb") as log:
            log.seek(start)
            return log.read().decode(errors="replace")

    skipped = "Lifecycle tick skipped, database unavailable"
    assert skipped not in log_text()

    private_postgres.stop()
    try:
        # a client that gives up after the promised time: a hang fails the test
        quick = httpx.Client(
            base_url=driver.booking.base_url,
            headers=driver.booking.headers,
            timeout=PROMISED_SECONDS,
        )
        with quick:
            for response in (
                bookings_of(driver, "erin", quick),
                quick.post(
                    "bookings",
                    json={
                        "user": "erin",
                        "pool": "l4",
                        "gpus": 1,
                        "start": booking["start"],
                        "end": booking["end"],
                    },
                ),
            ):
                assert response.status_code == 503, response.text
                assert response.json() == {"status": 503, "message": DATABASE_UNAVAILABLE_MESSAGE}
                assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)

        refused = driver.start_server("erin", "a100")
        assert refused.status_code >= 400, refused.text
        assert SERVICE_UNAVAILABLE_MESSAGE in refused.json()["message"]
        assert driver.server_model("erin") is None

        cpu = driver.start_server("erin", "cpu", server="notes")
        assert cpu.status_code in (201, 202), cpu.text
        driver.wait_ready("erin", "notes")
        driver.stop_server("erin", "notes")

        # the lifecycle loop met the outage (a tick a second) and is still running
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if skipped in log_text():
                break
            time.sleep(0.5)
        else:
            pytest.fail("no lifecycle tick met the outage")
    finally:
        private_postgres.start()

    back = time.monotonic()
    while True:
        listed = bookings_of(driver, "erin")
        if listed.status_code == 200:
            break
        assert time.monotonic() - back < PROMISED_SECONDS, listed.text
        time.sleep(0.2)
    assert driver.service_pid() == service  # it survived; nothing was restarted
    assert [b["id"] for b in listed.json()["bookings"]] == [booking["id"]]

    second = driver.book("erin", "l4", 1)
    listed = bookings_of(driver, "erin").json()["bookings"]
    assert sorted(b["id"] for b in listed) == sorted([booking["id"], second["id"]])

    started = driver.start_server("erin", "a100")
    assert started.status_code in (201, 202), started.text
    driver.wait_ready("erin")
    assert driver.get_booking(booking["id"])["server"] == ""
    driver.stop_server("erin")
    # the lifecycle loop ticks successfully again (a tick a second, none skipped any more)
    skipped_after = log_text().count(skipped)
    time.sleep(3)
    log = log_text()
    assert log.count(skipped) == skipped_after
    assert "Lifecycle tick failed" not in log and "Traceback" not in log
