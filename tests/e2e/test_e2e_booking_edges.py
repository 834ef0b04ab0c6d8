"""End to end on the demo (real Hub, proxy, service, spawner, simulated cluster), one focused
test per edge of issue 13: what users do to a booking while its server runs.

The lifecycle rules run on a fast clock (a tick a second, a one-minute grid, no grace).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from e2e_harness import Driver, start_demo

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time, parse_time

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    demo = start_demo(tmp_path_factory.mktemp("e2e-edges"), profile="lifecycle")
    client = Driver(demo)
    try:
        yield client
    finally:
        client.close()
        demo.stop()


def now() -> datetime:
    return datetime.now(timezone.utc)


def sleep_until(when: datetime) -> None:
    time.sleep(max(0.0, (when - now()).total_seconds()))


def change_end(driver, booking_id: int, end: datetime) -> dict:
    response = driver.booking.patch(f"bookings/{booking_id}", json={"end": format_time(end)})
    assert response.status_code == 200, response.text
    return response.json()


def test_extending_a_running_booking_keeps_its_server_past_the_old_end(driver):
    start = now().replace(second=0, microsecond=0)
    # the booking ends 1-2 minutes from now, at least 40 s away so the server is up before
    minutes = 2 if (start + timedelta(minutes=1) - now()).total_seconds() < 40 else 1
    booking = driver.book("hana", "a100", 0.5, minutes=minutes, start=start)
    old_end = parse_time(booking["end"])
    assert driver.start_server("hana", "a100").status_code in (201, 202)
    driver.wait_ready("hana")
    # the pod's deadline is the far backstop of this Hub's config, not the booking's end
    assert driver.pods()["jupyter-hana"]["spec"]["activeDeadlineSeconds"] == 24 * 3600

    extended = change_end(driver, booking["id"], old_end + timedelta(minutes=3))
    assert extended["state"] == "active" and extended["server"] == ""

    sleep_until(old_end + timedelta(seconds=15))  # a stop at the old end would have happened
    assert driver.server_model("hana")["ready"]
    assert "jupyter-hana" in driver.pods()
    assert driver.get_booking(booking["id"])["server"] == ""

    # shortening still stops the server, at the new end
    shortened_end = ceil_to_grid(now() + timedelta(seconds=5), 1)
    change_end(driver, booking["id"], shortened_end)
    driver.wait_stopped("hana", timeout=(shortened_end - now()).total_seconds() + 45)
    assert now() >= shortened_end
    assert "jupyter-hana" not in driver.pods()
