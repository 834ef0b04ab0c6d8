"""End to end on the demo (real Hub, proxy, service, spawner, simulated cluster), one focused
test per edge of issue 13: what users do to a booking while its server runs.

The lifecycle rules run on a fast clock (a tick a second, a one-minute grid, no grace).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from e2e_harness import running_demo

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time, parse_time

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    with running_demo(tmp_path_factory.mktemp("e2e-edges"), profile="lifecycle") as client:
        yield client


def now() -> datetime:
    return datetime.now(timezone.utc)


def sleep_until(when: datetime) -> None:
    time.sleep(max(0.0, (when - now()).total_seconds()))


def change_end(driver, booking_id: int, end: datetime) -> dict:
    response = driver.booking.patch(f"bookings/{booking_id}", json={"end": format_time(end)})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.wall_clock
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


def end_now(driver, booking_id: int) -> dict:
    response = driver.booking.delete(f"bookings/{booking_id}")
    assert response.status_code == 200, response.text
    return response.json()


def pod_booking_id(driver, user: str) -> int:
    pod = driver.pods()[f"jupyter-{user}"]
    return int(pod["metadata"]["annotations"]["gpubooking.jupyter.org/booking-id"])


def test_end_now_ends_the_booking_and_its_server_at_once_and_frees_the_gpus(driver):
    # the sequence: book now 0.25, end it, book now 0.5, start: the pod gets the 0.5.
    # Times are stored in whole seconds and a booking ended in the second it began used no
    # time, so it is cancelled; book at least a second into the slot to end it instead
    sleep_until(now().replace(second=0, microsecond=0) + timedelta(seconds=2))
    first = driver.book("ivan", "a100", 0.25, minutes=30)
    ended = end_now(driver, first["id"])
    assert (ended["state"], ended["release_reason"]) == ("ended", "ended")
    second = driver.book("ivan", "a100", 0.5, minutes=30)
    assert driver.start_server("ivan", "a100").status_code in (201, 202)
    driver.wait_ready("ivan")
    assert pod_booking_id(driver, "ivan") == second["id"]
    assert driver.get_booking(first["id"])["server"] is None

    # ending the running booking stops its server now, with a notice, long before its end
    end_now(driver, second["id"])
    driver.wait_stopped("ivan", timeout=60)
    assert now() < parse_time(second["end"]) - timedelta(minutes=20)
    notices = driver.booking.get("users/ivan/notices").json()["notices"]
    assert any(n["booking_id"] == second["id"] and n["kind"] == "ended" for n in notices)
    # the rest of its time is free at once: someone else books the whole pool (both nodes,
    # 4 GPUs each) in the running slot, the ended share's GPU included
    whole = [driver.book("judy", "a100", 4, minutes=30) for _ in range(2)]
    assert {b["placement"]["node"] for b in whole} == {"gpu-a100-1", "gpu-a100-2"}
    for booking in whole:
        end_now(driver, booking["id"])


def test_the_server_takes_the_booking_chosen_among_several(driver):
    short = driver.book("kim", "a100", 0.25, minutes=20)
    long = driver.book("kim", "a100", 0.25, minutes=40)
    driver.ensure_user("kim")
    response = driver.hub.post("users/kim/server", json={"profile": "a100", "gpu_booking": str(short["id"])})
    assert response.status_code in (201, 202), response.text
    driver.wait_ready("kim")
    assert pod_booking_id(driver, "kim") == short["id"]
    driver.stop_server("kim")
    # without a choice: the one that runs longest
    assert driver.start_server("kim", "a100").status_code in (201, 202)
    driver.wait_ready("kim")
    assert pod_booking_id(driver, "kim") == long["id"]
    driver.stop_server("kim")


# waits out a booking on a real clock: with both dependency sets side by side, the hub image's set
# runs it (tests/one_set.py)
@pytest.mark.one_set("pins")
@pytest.mark.wall_clock
def test_a_stale_claim_expires_and_the_end_stops_no_other_server(driver):
    start = now().replace(second=0, microsecond=0)
    minutes = 2 if (start + timedelta(minutes=1) - now()).total_seconds() < 40 else 1
    booking = driver.book("lena", "a100", 0.25, minutes=minutes, start=start)
    # lena's default server runs a CPU profile; a late claim (as after a spawner's timeout)
    # binds the booking to that server name anyway
    assert driver.start_server("lena", "cpu").status_code in (201, 202)
    driver.wait_ready("lena")
    claimed = driver.booking.post(f"bookings/{booking['id']}/claim", json={"server": ""})
    assert claimed.status_code == 200, claimed.text

    # the Hub shows that server running without this booking: the claim expires
    deadline = time.monotonic() + 30
    while driver.get_booking(booking["id"])["server"] is not None:
        assert time.monotonic() < deadline, "the stale claim did not expire"
        time.sleep(1)
    sleep_until(parse_time(booking["end"]) + timedelta(seconds=10))
    assert driver.server_model("lena")["ready"]  # the booking's end stopped nothing
    driver.stop_server("lena")
