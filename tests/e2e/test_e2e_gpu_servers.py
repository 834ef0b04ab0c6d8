"""End to end: the real Hub starts GPU servers through GPUBookingSpawner only with a booking.

Real processes throughout: jupyterhub, configurable-http-proxy, the booking service as a
hub-managed service, and jupyterhub-singleuser pods run by the simulated cluster's kubelet.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from e2e_harness import SIGCONT, SIGSTOP, SIGTERM

pytestmark = pytest.mark.e2e

#: the e2e config's GPUBookingSpawner.booking_request_timeout (tests/e2e/hub_config.py)
REQUEST_TIMEOUT = 2


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_booked_gpu_server_gets_exactly_the_booked_share(driver):
    booking = driver.book("alice", "a100", 0.5)
    response = driver.start_server("alice", "a100")
    assert response.status_code in (201, 202), response.text
    driver.wait_ready("alice")

    pod = driver.pods()["jupyter-alice"]
    container = pod["spec"]["containers"][0]
    gpu_share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "50"}
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert {name: limits[name] for name in gpu_share} == gpu_share
    assert {name: requests[name] for name in gpu_share} == gpu_share
    node = booking["placement"]["node"]
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == node
    annotations = pod["metadata"]["annotations"]
    assert annotations["gpubooking.jupyter.org/booking-id"] == str(booking["id"])
    # pinned to the booked GPU by its UUID (the demo's pool lists them, as nvidia-smi -L does)
    [gpu] = booking["placement"]["gpus"]
    assert annotations["nvidia.com/use-gpuuuid"] == f"GPU-{node[-1]}{gpu}a10000-0000-4000-8000-000000000000"
    assert annotations["gpubooking.jupyter.org/end"] == booking["end"]
    assert pod["metadata"]["labels"]["component"] == "singleuser-server"  # KubeSpawner's own, kept
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["GPU_BOOKING_ID"] == str(booking["id"]) and env["GPU_BOOKING_END"] == booking["end"]
    # no deadline at the booking's end: an extension must not kill the server (the service
    # stops it at the end instead)
    assert "activeDeadlineSeconds" not in pod["spec"]

    # the single-user server itself answers through the proxy
    status = driver.proxy.get("/user/alice/api/status")
    assert status.status_code == 200, status.text
    assert driver.get_booking(booking["id"])["server"] == ""

    driver.stop_server("alice")
    assert "jupyter-alice" not in driver.pods()
    assert driver.get_booking(booking["id"])["server"] is None  # released for the next start


def test_without_a_booking_gpu_is_refused_and_cpu_starts(driver):
    refused = driver.start_server("bob", "l4")
    assert refused.status_code >= 400, refused.text
    message = refused.json()["message"]
    assert "booking" in message.lower() and "Traceback" not in message and "<" not in message
    assert driver.server_model("bob") is None
    assert not [name for name in driver.pods() if name.startswith("jupyter-bob")]

    started = driver.start_server("bob", "cpu")
    assert started.status_code in (201, 202), started.text
    driver.wait_ready("bob")
    pod = driver.pods()["jupyter-bob"]
    assert not any("nvidia.com" in name for name in pod["spec"]["containers"][0]["resources"]["limits"])
    driver.stop_server("bob")


def test_one_booking_serves_one_server_at_a_time(driver):
    booking = driver.book("carol", "l4", 1)
    assert driver.start_server("carol", "l4", server="first").status_code in (201, 202)
    driver.wait_ready("carol", "first")

    second = driver.start_server("carol", "l4", server="second")
    assert second.status_code >= 400, second.text
    assert "first" in second.json()["message"]
    assert driver.server_model("carol", "second") is None

    # once the first server stops, the booking is free for another server
    driver.stop_server("carol", "first")
    assert driver.start_server("carol", "l4", server="second").status_code in (201, 202)
    driver.wait_ready("carol", "second")
    assert driver.get_booking(booking["id"])["server"] == "second"
    driver.stop_server("carol", "second")


def test_a_stalled_service_delays_gpu_not_cpu_starts_and_bookings_survive_a_restart(driver):
    """A service that does not answer (stopped with SIGSTOP: a stall, a hung process) does not
    stop CPU starts; a GPU start asked meanwhile waits for it, asking again after each request
    timeout, and starts once it answers. (One whose stall outlasts the spawner's retry time is
    refused: test_e2e_database_outage.py.)"""
    booking = driver.book("dave", "a100", 0.25)
    paused = driver.signal_service(SIGSTOP)
    resumed = threading.Timer(3 * REQUEST_TIMEOUT, driver.signal_service, (SIGCONT,))
    try:
        cpu = driver.start_server("dave", "cpu", server="notes")
        assert cpu.status_code in (201, 202), cpu.text
        driver.wait_ready("dave", "notes")
        resumed.start()
        gpu = driver.start_server("dave", "a100")
        assert gpu.status_code in (201, 202), gpu.text
        driver.wait_ready("dave")
    finally:
        resumed.cancel()
        resumed.join()
        driver.signal_service(SIGCONT)  # whether or not the timer had
    assert driver.get_booking(booking["id"])["server"] == ""
    driver.stop_server("dave")
    driver.stop_server("dave", "notes")

    # the Hub restarts its managed service; the bookings are in its database, not its memory
    driver.signal_service(SIGTERM)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if driver.service_pid() != paused and driver.booking.get("pools").status_code == 200:
                break
        except AssertionError:
            pass  # between the old process and the new one
        time.sleep(1)
    else:
        pytest.fail("the Hub did not restart the booking service within 90 s")
    assert driver.get_booking(booking["id"])["state"] == "active"
    assert driver.start_server("dave", "a100").status_code in (201, 202)
    driver.wait_ready("dave")
    driver.stop_server("dave")


# minutes of a real clock: with both dependency sets side by side, the hub image's set runs it
# (the latest set runs the same rule in tests/service/test_lifecycle_hub.py; tests/one_set.py)
@pytest.mark.one_set("pins")
@pytest.mark.wall_clock
def test_booking_end_stops_the_server_and_the_hub_sees_it_stopped(driver):
    # on the tests' 1-minute grid, a booking can end within a minute or two; the pod has no
    # deadline: the service stops the server end_grace_seconds (60) after the end, at its next
    # tick (every 30 s in this profile)
    now = datetime.now(timezone.utc)
    start = now.replace(second=0, microsecond=0)
    minutes = 1 if (start + timedelta(minutes=1) - now).total_seconds() > 25 else 2
    booking = driver.book("erin", "l4", 1, minutes=minutes, start=start)
    assert driver.start_server("erin", "l4").status_code in (201, 202)
    driver.wait_ready("erin")
    assert "activeDeadlineSeconds" not in driver.pods()["jupyter-erin"]["spec"]

    end = parse_utc(booking["end"])
    timeout = (end - datetime.now(timezone.utc)).total_seconds() + 60 + 30 + 45
    driver.wait_stopped("erin", timeout=timeout)
    assert datetime.now(timezone.utc) >= end  # not before the booking's end
    assert "jupyter-erin" not in driver.pods()  # stopped through the Hub, the pod deleted
