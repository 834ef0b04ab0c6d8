"""The booking service's PostgreSQL goes down mid-run and comes back, under the real Hub, proxy,
GPUBookingSpawner and simulated cluster.

While it is down: the API answers 503 in its JSON error shape with ``Retry-After`` within 5 s;
a GPU start waits, asking again after each ``Retry-After`` (the spawn page says why), and is
refused with the spawner's "cannot be reached" sentence once ``booking_request_retry_timeout``
(20 s in the e2e config) is up, while a CPU server starts; the lifecycle loop keeps ticking. A
GPU start asked during the outage starts once the database is back. Within 5 s of the database
being back, booking and GPU starts work again in the same service process, with no booking
lost or duplicated.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from e2e_harness import Driver, running_demo

from jhub_gpubooking.chooser import SERVICE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.db.session import DATABASE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.service.base import RETRY_AFTER_SECONDS

#: What the issue promises: no request waits longer, and recovery takes no longer.
PROMISED_SECONDS = 5
#: the spawn page's line while the spawner waits for the service's database
WAIT_LINE = ("The GPU booking service cannot reach its database or the Hub right now; asking "
             f"again in {RETRY_AFTER_SECONDS} s.")
#: the spawner's line in the hub log for each such wait
SPAWNER_WAIT = f"GPU start of erin waits {RETRY_AFTER_SECONDS} s for the booking service"


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

    back_soon = None
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

        # the Hub answers after its slow_spawn_timeout (10 s), the start going on; the spawn
        # page then follows the spawner's waits to its refusal
        refused = driver.start_server("erin", "a100")
        assert refused.status_code == 202, refused.text
        events = driver.spawn_progress("erin")
        assert events is not None
        assert WAIT_LINE in [event.get("message") for event in events]
        assert events[-1]["failed"] and SERVICE_UNAVAILABLE_MESSAGE in events[-1]["message"]
        # the Hub forgets the failed start moments after the page's stream says it failed
        driver.wait_stopped("erin", timeout=30)

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
        # asked during the outage, a start goes on once the database is back
        waits_before = log_text().count(SPAWNER_WAIT)
        back_soon = threading.Timer(3, private_postgres.start)
        back_soon.start()
        waited = driver.start_server("erin", "a100")
        assert waited.status_code in (201, 202), waited.text
        events = driver.spawn_progress("erin")  # ready at once if the Hub answered 201
        assert events is not None and events[-1].get("ready"), events
        assert log_text().count(SPAWNER_WAIT) > waits_before
        assert driver.get_booking(booking["id"])["server"] == ""
        driver.stop_server("erin")
    finally:
        if back_soon is not None:
            back_soon.cancel()
            back_soon.join()  # if it was starting the server already
        if not private_postgres.running:
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
    assert "Lifecycle tick failed" not in log
    # the only tracebacks: the Hub's own for the start refused after it had answered (tornado
    # logs the failure of a spawn it stopped waiting for at slow_spawn_timeout)
    assert log.count("Traceback") == log.count("finish_user_spawn() done")
