"""End to end on the demo (real Hub, proxy, service, spawner, simulated cluster): an admin
restores the booking database from a backup, as docs/howto/backup.md says, with the Hub stopped
and users' servers left running (z2jh's ``cleanup_servers: false``, the soak profile here).

The restore is the installed ``jhub-gpubooking`` command in a process of its own, as in the
one-off pod of the how-to. It must say whom it concerns and which servers ran on what it undid;
once the Hub runs again the service must show the backup's bookings, stop the server whose
booking is gone, record again the claim of a server whose booking the backup has unclaimed
(before the no-show rule, a minute here, releases it), and give the next booking an id that
was never given before. The same for pods the admission webhook admitted outside the Hub: the
one on a booking made since the backup is deleted, the one on a booking the backup has
unclaimed gets its claim back. And a server on a booking the backup has held by a pod that
ended since keeps running, with its claim recorded (CI's database-outage walks met this).
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from e2e_harness import Driver, running_demo, wait_for
from pod_commands import SLEEPER

from jhub_gpubooking.admission.review import USERNAME_KEY
from jhub_gpubooking.admission.server import STARTING
from jhub_gpubooking.core.timegrid import ceil_to_grid

pytestmark = pytest.mark.e2e

#: a safety net for a command that never ends (no timing is asserted)
COMMAND_SECONDS = 300
#: dan's namespace, gated by the service's admission webhook
LAB = "restore-lab"


def admin(*argv: str) -> str:
    command = str(Path(sys.executable).with_name("jhub-gpubooking"))
    done = subprocess.run([command, *argv], capture_output=True, text=True,
                          timeout=COMMAND_SECONDS, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def bookings(driver: Driver) -> dict[int, dict]:
    response = driver.booking.get("bookings", params={"limit": 500})
    assert response.status_code == 200, response.text
    assert not response.json().get("next_cursor")
    return {booking["id"]: booking for booking in response.json()["bookings"]}


def post_pod(driver: Driver, name: str, booking_id: int) -> httpx.Response:
    """A pod in the gated namespace on one whole L4 GPU, naming its booking."""
    pod = {"metadata": {"name": name,
                        "annotations": {"gpubooking.jupyter.org/booking-id": str(booking_id)}},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "python:3.12", "command": SLEEPER,
               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return driver.cluster.post(f"api/v1/namespaces/{LAB}/pods", json=pod)


def post_pod_after_start(driver: Driver, name: str, booking_id: int,
                         timeout: float = 60) -> httpx.Response:
    """``post_pod`` as a client does right after the service started: the webhook refuses
    pods until its first check of the running servers and pods is done (a few seconds, the
    Kubernetes client loading in a thread meanwhile) and asks for the pod again."""
    deadline = time.monotonic() + timeout
    while True:
        response = post_pod(driver, name, booking_id)
        if STARTING not in response.text or time.monotonic() > deadline:
            return response
        time.sleep(0.5)


def create_pod(driver: Driver, name: str, booking_id: int) -> None:
    response = post_pod(driver, name, booking_id)
    assert response.status_code == 201, response.text


def lab_pods(driver: Driver) -> set[str]:
    return {pod["metadata"]["name"] for pod in driver.cluster_pods()
            if pod["metadata"]["namespace"] == LAB and not pod["metadata"].get("deletionTimestamp")}


def test_a_restore_with_the_hub_stopped_takes_the_bookings_back_and_gives_no_id_twice(tmp_path):
    with running_demo(tmp_path / "restore-demo", profile="soak",
                      gated_namespaces={LAB: "dan"}) as driver:
        demo = driver.demo
        url = f"sqlite:///{demo.state_dir / 'gpubooking.sqlite'}"
        later = ceil_to_grid(datetime.now(timezone.utc), 1) + timedelta(hours=1)
        kept = driver.book("ada", "a100", 1, minutes=60, start=later)
        carols = driver.book("carol", "a100", 1, minutes=60)  # running, not started yet
        dans = driver.book("dan", "l4", 1, minutes=60)  # the same, for a pod made outside the Hub
        backup = tmp_path / "gpubooking-backup.sqlite"
        admin("db", "backup", str(backup), "--db-url", url)  # while the Hub runs
        at_backup = bookings(driver)

        # after the backup: ada cancels, bob books the running slot and starts a GPU server,
        # carol starts hers on the booking she had
        assert driver.booking.delete(f"bookings/{kept['id']}").status_code == 200
        gone = driver.book("bob", "a100", 1, minutes=30)
        for user in ("bob", "carol"):
            assert driver.start_server(user, "a100").status_code in (201, 202)
        for user in ("bob", "carol"):
            driver.wait_ready(user)
        assert driver.get_booking(carols["id"])["server"] == ""
        # and dan runs a pod on the booking he had, and another on one booked since
        dans_since = driver.book("dan", "l4", 1, minutes=30)
        create_pod(driver, "on-kept", dans["id"])
        create_pod(driver, "on-since", dans_since["id"])
        assert driver.get_booking(dans["id"])["server"] == f"pod:{LAB}/on-kept"

        demo.stop_hub()
        out = admin("db", "restore", str(backup), "--db-url", url)
        assert "Bookings made since the backup, gone now (2):" in out
        assert "Bookings changed since the backup, as they were then (3):" in out
        assert "Tell 4 user(s): ada, bob, carol, dan." in out
        running = out.split("in their namespace):\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
        assert sorted(line.split() for line in running) == sorted([
            [str(gone["id"]), "bob", "(default)"], [str(carols["id"]), "carol", "(default)"],
            [str(dans_since["id"]), "dan", f"pod:{LAB}/on-since"],
            [str(dans["id"]), "dan", f"pod:{LAB}/on-kept"]])
        assert {"jupyter-bob", "jupyter-carol"} <= driver.pods().keys()  # as on z2jh

        demo.start_hub()
        driver.close()
        driver = Driver(demo)  # the old connections went to the Hub's old proxy
        try:
            restored = bookings(driver)
            assert restored.keys() == at_backup.keys() == {kept["id"], carols["id"], dans["id"]}
            assert restored[kept["id"]]["state"] == "upcoming"
            response = driver.booking.get(f"bookings/{gone['id']}")
            assert response.status_code == 404, response.text

            # the service stops bob's server (its booking is gone) and gives carol's server
            # its claim back, so her booking is neither released as a no-show nor unwatched
            driver.wait_stopped("bob")
            assert "jupyter-bob" not in driver.pods()
            carol = driver.get_booking(carols["id"])
            assert (carol["server"], carol["state"]) == ("", "active")
            assert carol["end"] == carols["end"]
            assert driver.server_model("carol")["ready"]
            # and dan's pods likewise: the one on the booking that is gone is deleted
            wait_for(lambda: "on-since" not in lab_pods(driver), "the deletion of on-since",
                     timeout=60)
            assert lab_pods(driver) == {"on-kept"}
            dan = driver.get_booking(dans["id"])
            assert (dan["server"], dan["state"], dan["end"]) == (
                f"pod:{LAB}/on-kept", "active", dans["end"])

            # bob books again, and gets an id never given before
            again = driver.book("bob", "a100", 1, minutes=30)
            assert again["id"] > gone["id"]
            assert driver.start_server("bob", "a100").status_code in (201, 202)
            driver.wait_ready("bob")
            pod = driver.pods()["jupyter-bob"]
            assert pod["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] == str(again["id"])
            for user in ("bob", "carol"):
                driver.stop_server(user)
            assert driver.cluster.delete(f"api/v1/namespaces/{LAB}/pods/on-kept").status_code == 200
        finally:
            driver.close()


def test_a_server_on_a_booking_the_backup_has_held_by_an_ended_pod_keeps_running(tmp_path):
    """After the backup dan's pod on his booking ended and he started a GPU server on it; the
    restore gives the booking back held by that pod. The service releases the claim of the pod
    that is gone and records the server's, instead of stopping the server for a booking "in
    use by a pod", and a new pod on the booking is refused while the server runs on it."""
    with running_demo(tmp_path / "restore-pod-demo", profile="soak",
                      gated_namespaces={LAB: "dan"}) as driver:
        demo = driver.demo
        url = f"sqlite:///{demo.state_dir / 'gpubooking.sqlite'}"
        dans = driver.book("dan", "l4", 1, minutes=60)
        create_pod(driver, "before", dans["id"])
        assert driver.get_booking(dans["id"])["server"] == f"pod:{LAB}/before"
        backup = tmp_path / "gpubooking-backup.sqlite"
        admin("db", "backup", str(backup), "--db-url", url)

        assert driver.cluster.delete(f"api/v1/namespaces/{LAB}/pods/before").status_code == 200
        wait_for(lambda: driver.get_booking(dans["id"])["server"] is None,
                 "the release of the ended pod's claim")
        assert driver.start_server("dan", "l4").status_code in (201, 202)
        driver.wait_ready("dan")
        assert driver.get_booking(dans["id"])["server"] == ""

        demo.stop_hub()
        out = admin("db", "restore", str(backup), "--db-url", url)
        assert "Bookings changed since the backup, as they were then (1):" in out
        demo.start_hub()
        driver.close()
        driver = Driver(demo)  # the old connections went to the Hub's old proxy
        try:
            # the first tick releases the pod's claim, then records the server's (or, without
            # the fix, stops the server): wait for either end, not for the moment between
            wait_for(lambda: (driver.get_booking(dans["id"])["server"] == ""
                              or driver.server_model("dan") is None),
                     "the service's first check")
            dan = driver.get_booking(dans["id"])
            assert (dan["server"], dan["state"]) == ("", "active")
            assert driver.server_model("dan")["ready"] and "jupyter-dan" in driver.pods()
            response = post_pod_after_start(driver, "beside", dans["id"])
            assert response.status_code == 403, response.text
            assert "one booking admits one pod at a time" in response.json()["message"]
            # the webhook's verdict is in the hub pod's log, on a line like the Hub's own
            verdict = next(line for line in (demo.log_dir / "hub.log").read_text().splitlines()
                           if f"Denied pod {LAB}/beside: " in line)
            assert verdict.startswith("[I ") and " jhub_gpubooking.admission.server " in verdict
            driver.stop_server("dan")
        finally:
            driver.close()


def test_the_pod_of_a_start_the_hub_forgot_is_deleted_before_another_pod_takes_its_booking(
        tmp_path):
    """A start still pending when the Hub stopped leaves a pod the Hub does not have when it
    comes back (CI's database-outage walks met it after a restore, its booking back
    unclaimed): nobody can use that pod, and a new pod on its booking would run beside it. The
    service's first check deletes it before the webhook admits a pod on the booking, and leaves
    the pod of a server the Hub has alone."""
    with running_demo(tmp_path / "forgotten-demo", profile="soak",
                      gated_namespaces={LAB: "dan"}) as driver:
        demo = driver.demo
        dans = driver.book("dan", "l4", 1, minutes=60)
        driver.book("carol", "a100", 1, minutes=60)
        assert driver.start_server("carol", "a100").status_code in (201, 202)
        driver.wait_ready("carol")

        # what a start pending at the Hub's stop leaves: KubeSpawner's pod of dan's default
        # server, with the spawner's booking label, which the Hub does not have when it is back.
        # Made while the webhook runs (it admits pods of the Hub's namespace unchanged), and
        # named a Hub server's only once the Hub is down
        forgotten = {"metadata": {
            "name": "jupyter-dan", "labels": {"gpubooking.jupyter.org/booking-id": str(dans["id"])}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "notebook", "image": "jupyterhub/singleuser:5", "command": SLEEPER,
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        pods = f"api/v1/namespaces/{demo.namespace}/pods"
        response = driver.cluster.post(pods, json=forgotten)
        assert response.status_code == 201, response.text
        demo.stop_hub()
        response = driver.cluster.patch(
            f"{pods}/jupyter-dan", json={"metadata": {"annotations": {USERNAME_KEY: "dan"}}},
            headers={"Content-Type": "application/merge-patch+json"})
        assert response.status_code == 200, response.text
        demo.start_hub()
        driver.close()
        driver = Driver(demo)  # the old connections went to the Hub's old proxy
        try:
            # the webhook admits a pod on dan's booking only after the first check
            response = post_pod_after_start(driver, "beside", dans["id"])
            assert response.status_code == 201, response.text
            pod = driver.pods().get("jupyter-dan")
            assert pod is None or pod["metadata"].get("deletionTimestamp"), pod
            assert driver.get_booking(dans["id"])["server"] == f"pod:{LAB}/beside"
            assert (f"Deleted pod {demo.namespace}/jupyter-dan of server '' of dan on booking "
                    f"{dans['id']}: the Hub does not have that server"
                    ) in (demo.log_dir / "hub.log").read_text()  # the service logs there too
            # carol's server, which the Hub has, runs on
            assert driver.server_model("carol")["ready"]
            assert not driver.pods()["jupyter-carol"]["metadata"].get("deletionTimestamp")
            driver.stop_server("carol")
            assert driver.cluster.delete(f"api/v1/namespaces/{LAB}/pods/beside").status_code == 200
        finally:
            driver.close()
