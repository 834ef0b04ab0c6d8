"""End to end: the booking lifecycle rules on the demo (real Hub, service, spawner, simulated
cluster), with the rules on a fast clock: one tick a second, one-minute warn/no-show/release.

The slow rules (no-show, stopped-server release: a minute each) are set up by the first test
and checked by the last, so their waits overlap with the other tests.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from e2e_harness import running_demo, wait_for

# the module's rules wait on real minutes, overlapping (tests/one_set.py: the wall-clock lane)
pytestmark = [pytest.mark.e2e, pytest.mark.wall_clock]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    with running_demo(tmp_path_factory.mktemp("e2e-lifecycle"), profile="lifecycle") as client:
        yield client


def notices(driver, user: str) -> list[dict]:
    response = driver.booking.get(f"users/{user}/notices")
    assert response.status_code == 200, response.text
    return response.json()["notices"]


PENDING: dict[str, dict] = {}


def test_unused_bookings_are_set_up_to_be_reclaimed(driver):
    # nobody ever starts a server on this one: a no-show
    PENDING["no_show"] = driver.book("frank", "a100", 0.25, minutes=30)
    # this one's server runs, then stops for good: the rest goes back to the pool
    PENDING["stopped"] = driver.book("gina", "a100", 0.25, minutes=30)
    assert driver.start_server("gina", "a100").status_code in (201, 202)
    driver.wait_ready("gina")
    driver.stop_server("gina")
    assert driver.get_booking(PENDING["stopped"]["id"])["server"] is None


def test_opportunistic_use_runs_at_low_priority_and_yields_to_a_booking(driver):
    # bob has no L4 booking, but an L4 is free now: he gets it opportunistically
    assert driver.start_server("bob", "l4").status_code in (201, 202)
    driver.wait_ready("bob")
    pod = driver.pods()["jupyter-bob"]
    assert pod["spec"]["priorityClassName"] == "gpu-opportunistic"
    grant_id = int(pod["metadata"]["annotations"]["gpubooking.jupyter.org/booking-id"])
    grant = driver.get_booking(grant_id)
    assert grant["opportunistic"] is True and grant["server"] == ""

    # alice books both L4 GPUs from now: bob's grant yields, his server is stopped with notice
    booking = driver.book("alice", "l4", 2, minutes=30)
    assert booking["placement"]["gpus"] == [0, 1]
    driver.wait_stopped("bob", timeout=60)
    assert driver.get_booking(grant_id)["release_reason"] == "preempted"
    assert any(n["booking_id"] == grant_id for n in notices(driver, "bob"))


# a minute of a real clock: with both dependency sets side by side, the latest set runs it and the
# hub image's set runs the same rule in test_e2e_gpu_servers.py (tests/one_set.py)
@pytest.mark.one_set("latest")
def test_the_service_stops_a_server_when_its_booking_ends_and_warns_before(driver):
    now = datetime.now(timezone.utc)
    start = now.replace(second=0, microsecond=0)
    # end within 1-2 minutes; the first minute before the end is the warning window
    minutes = 2 if (start + timedelta(minutes=1) - now).total_seconds() < 40 else 1
    booking = driver.book("erin", "a100", 0.5, minutes=minutes, start=start)
    assert driver.start_server("erin", "a100").status_code in (201, 202)
    driver.wait_ready("erin")
    pod = driver.pods()["jupyter-erin"]
    assert pod["spec"]["activeDeadlineSeconds"] == 24 * 3600  # the far backstop

    warning = wait_for(
        lambda: [n for n in notices(driver, "erin")
                 if n["booking_id"] == booking["id"] and n["kind"] == "ending_soon"],
        timeout=150, what="the ending-soon warning",
    )
    assert warning[0]["message"].startswith(f"Your booking #{booking['id']} in pool a100 ends at ")
    end = datetime.fromisoformat(booking["end"].replace("Z", "+00:00"))
    driver.wait_stopped("erin", timeout=(end - datetime.now(timezone.utc)).total_seconds() + 45)
    assert datetime.now(timezone.utc) >= end
    assert "jupyter-erin" not in driver.pods()  # stopped by the Hub, not failed by a deadline


def test_no_shows_and_stopped_servers_give_their_time_back(driver):
    def released(key: str):
        booking = driver.get_booking(PENDING[key]["id"])
        return booking if booking["release_reason"] else None

    no_show = wait_for(lambda: released("no_show"), timeout=150, what="the no-show release")
    assert no_show["release_reason"] == "no_show"
    assert no_show["end"] < PENDING["no_show"]["end"]  # the rest went back to the pool

    stopped = wait_for(lambda: released("stopped"), timeout=150, what="the stopped-server release")
    assert stopped["release_reason"] == "server_stopped"
    assert stopped["end"] < PENDING["stopped"]["end"]

    report = driver.booking.get("admin/report", params={
        "start": PENDING["no_show"]["start"], "end": PENDING["no_show"]["end"], "by": "user",
    })
    assert report.status_code == 200, report.text
    assert "frank" in report.text and "gina" in report.text
