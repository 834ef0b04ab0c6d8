"""End to end on the demo (real Hub, proxy, service, spawner, simulated cluster): a GPU start
asked for right after the Hub (and with it the booking service) restarted, as users do when a
z2jh upgrade has just restarted the hub pod; and one asked while the Hub starts a crashed
service again.

Until the service's first check has compared the running servers and pods with its bookings
(it needs the Hub's API and the Kubernetes API, and loads the Kubernetes client first: seconds
on a busy hub pod), it answers claims "just started" with ``Retry-After``; the spawner asks
again and the server starts. Before, the claim waited inside the service for that check, the
spawner's request timed out after ``booking_request_timeout`` and the start was refused with
"The GPU booking service cannot be reached".

Here the Kubernetes API is paused (SIGSTOP) across the restart, so the first check surely
outlasts the spawner's request timeout (2 s in the e2e config), then resumed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest
from e2e_harness import SIGCONT, SIGSTOP, Driver, running_demo

pytestmark = pytest.mark.e2e

#: how long the Kubernetes API stays paused after the start is asked for: longer than a few
#: of the service's Retry-After (2 s) and than the spawner's request timeout (2 s)
PAUSED_SECONDS = 6
WAIT_LINE = "waits 2 s for the booking service: "
#: the spawn page's line while nothing listens where the service should
UNREACHABLE_WAIT = ("The GPU booking service is not answering (it may be restarting); asking "
                    "again in 1 s.")


def test_a_gpu_start_right_after_the_hub_restarted_waits_for_the_services_first_check(tmp_path):
    with running_demo(tmp_path / "restart-demo", profile="soak",
                      gated_namespaces={"restart-lab": "dan"}) as driver:
        demo = driver.demo
        hub_log = demo.log_dir / "hub.log"
        earlier = hub_log.stat().st_size  # the log folder is kept from run to run
        booking = driver.book("ada", "a100", 1, minutes=60)
        cluster = demo.cluster.pid
        os.kill(cluster, SIGSTOP)
        try:
            demo.restart_hub()
            driver.close()
            driver = Driver(demo)  # the old connections went to the Hub's old proxy
            # the soak profile answers a start at once (202) and goes on in the background
            response = driver.start_server("ada", "a100")
            assert response.status_code in (201, 202), response.text
            time.sleep(PAUSED_SECONDS)
            model = driver.server_model("ada")
            assert model is not None and model["pending"] == "spawn", model
        finally:
            os.kill(cluster, SIGCONT)
        try:
            driver.wait_ready("ada")
            assert driver.get_booking(booking["id"])["server"] == ""
            pod = driver.pods()["jupyter-ada"]
            assert pod["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] == str(booking["id"])
            with open(hub_log, "rb") as log:
                log.seek(earlier)
                this_run = log.read().decode(errors="replace")
            assert WAIT_LINE in this_run
            assert "refused, service down" not in this_run  # the spawner's line before the fix
            driver.stop_server("ada")
        finally:
            driver.close()


def test_a_gpu_start_while_the_hub_restarts_a_crashed_service_waits_and_starts(tmp_path):
    """The service is killed (an OOM kill, a crash); the Hub notices and starts it again (its
    poll of the process: every second in the soak profile, 30 s by default). A GPU start asked
    at once meets a closed port, then a service that has just started: the spawner asks again,
    the spawn page says why it waits, and the server starts on its booking. Before, the start
    was refused with "The GPU booking service cannot be reached"."""
    with running_demo(tmp_path / "crash-demo", profile="soak",
                      gated_namespaces={"crash-lab": "bob"}) as driver:
        booking = driver.book("bob", "a100", 1, minutes=60)
        killed = driver.signal_service(signal.SIGKILL)
        # meanwhile the Hub's proxy answers for the service with the Hub's error page, which
        # the reservation page tells from the service's own JSON errors (common.js)
        proxied = driver.booking.get("pools")
        assert (proxied.status_code, proxied.headers["content-type"].split(";")[0]) == (
            503, "text/html")
        response = driver.start_server("bob", "a100")
        assert response.status_code == 202, response.text  # the soak profile answers at once
        events = driver.spawn_progress("bob")
        assert events is not None and events[-1].get("ready"), events
        assert UNREACHABLE_WAIT in [event.get("message") for event in events]
        assert driver.service_pid() != killed
        assert driver.get_booking(booking["id"])["server"] == ""
        pod = driver.pods()["jupyter-bob"]
        assert pod["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] == str(booking["id"])
        driver.stop_server("bob")


def test_a_start_the_hub_forgot_in_a_restore_keeps_its_booking_until_its_pod_is_gone(tmp_path):
    """The Hub stops while a GPU start is under way (its pod made, not yet ready), and the
    booking database is restored from before the booking moved and started: back unclaimed,
    placed where it was. While the restarted Hub checks that server, its pod runs on the
    booking, so another server's start must not take it (a second pod on one booking, on GPUs
    the database counts as free): the service records the claim, and the server goes once its
    pod does (the Hub's check gives up on it, or the service stops it, placed elsewhere). Found
    by the PostgreSQL walk, seed 1 (CI of stop 57)."""
    with running_demo(tmp_path / "forgotten-start-demo", profile="soak",
                      gated_namespaces={"forgotten-lab": "dan"}) as driver:
        demo = driver.demo
        booking = driver.book("ada", "a100", 1, minutes=60)
        response = driver.start_server("ada", "a100", "gpu")
        assert response.status_code == 202, response.text  # the soak profile answers at once
        deadline = time.monotonic() + 60
        while "jupyter-ada--gpu" not in driver.pods():
            assert time.monotonic() < deadline, "the start made no pod"
            time.sleep(0.05)
        demo.stop_hub()  # the start is under way: its pod stays, not yet ready
        driver.close()
        # what a restore of a backup taken before the booking moved gives back
        placed = booking["placement"]
        elsewhere = "gpu-a100-2" if placed["node"] == "gpu-a100-1" else "gpu-a100-1"
        with sqlite3.connect(demo.state_dir / "gpubooking.sqlite") as database:
            database.execute("UPDATE bookings SET node = ?, server = NULL, claimed_at = NULL "
                             "WHERE id = ?", (elsewhere, booking["id"]))
        demo.start_hub()
        driver = Driver(demo)
        try:
            assert (driver.server_model("ada", "gpu") or {}).get("pending") == "check"
            deadline = time.monotonic() + 60
            while driver.get_booking(booking["id"])["server"] != "gpu":
                assert time.monotonic() < deadline, "the service recorded no claim"
                time.sleep(0.5)
            # the student starts their default server on the same booking meanwhile
            if "jupyter-ada--gpu" in driver.pods():
                # JupyterHub 6 answers 201 for a start that failed before it answered
                assert driver.start_server("ada", "a100").status_code in (201, 202)
                events = driver.spawn_progress("ada")
                assert events is not None and events[-1].get("failed"), events
                assert "already used by server 'gpu'" in events[-1]["message"]
            # the pod goes, and so does the claim
            deadline = time.monotonic() + 120
            while "jupyter-ada--gpu" in driver.pods() or driver.server_model("ada", "gpu"):
                assert time.monotonic() < deadline, "the forgotten start's pod runs on"
                time.sleep(1)
            while driver.get_booking(booking["id"])["server"] is not None:
                assert time.monotonic() < deadline, "the claim outlived the server"
                time.sleep(1)
            # now the booking starts a server where the database places it
            assert driver.start_server("ada", "a100").status_code in (201, 202)
            driver.wait_ready("ada")
            assert [name for name in driver.pods() if name.startswith("jupyter-ada")] == [
                "jupyter-ada"]
            selector = driver.pods()["jupyter-ada"]["spec"]["nodeSelector"]
            assert selector["kubernetes.io/hostname"] == elsewhere
            driver.stop_server("ada")
        finally:
            driver.close()
