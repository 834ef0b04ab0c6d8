"""End to end on the demo (real Hub, proxy, service, spawner, simulated cluster): an admin
restores the booking database from a backup, as docs/howto/backup.md says, with the Hub stopped
and users' servers left running (z2jh's ``cleanup_servers: false``, the soak profile here).

The restore is the installed ``jhub-gpubooking`` command in a process of its own, as in the
one-off pod of the how-to. It must say whom it concerns and which servers ran on what it undid;
once the Hub runs again the service must show the backup's bookings, stop the server whose
booking is gone, record again the claim of a server whose booking the backup has unclaimed
(before the no-show rule, a minute here, releases it), and give the next booking an id that
was never given before.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from e2e_harness import Driver, running_demo

from jhub_gpubooking.core.timegrid import ceil_to_grid

pytestmark = pytest.mark.e2e

#: a safety net for a command that never ends (no timing is asserted)
COMMAND_SECONDS = 300


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


def test_a_restore_with_the_hub_stopped_takes_the_bookings_back_and_gives_no_id_twice(tmp_path):
    with running_demo(tmp_path / "restore-demo", profile="soak",
                      gated_namespaces={"restore-lab": "nobody"}) as driver:
        demo = driver.demo
        url = f"sqlite:///{demo.state_dir / 'gpubooking.sqlite'}"
        later = ceil_to_grid(datetime.now(timezone.utc), 1) + timedelta(hours=1)
        kept = driver.book("ada", "a100", 1, minutes=60, start=later)
        carols = driver.book("carol", "a100", 1, minutes=60)  # running, not started yet
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

        demo.stop_hub()
        out = admin("db", "restore", str(backup), "--db-url", url)
        assert "Bookings made since the backup, gone now (1):" in out
        assert "Bookings changed since the backup, as they were then (2):" in out
        assert "Tell 3 user(s): ada, bob, carol." in out
        running = out.split("once the hub runs again:\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
        assert sorted(line.split() for line in running) == sorted([
            [str(gone["id"]), "bob", "(default)"], [str(carols["id"]), "carol", "(default)"]])
        assert {"jupyter-bob", "jupyter-carol"} <= driver.pods().keys()  # as on z2jh

        demo.start_hub()
        driver.close()
        driver = Driver(demo)  # the old connections went to the Hub's old proxy
        try:
            restored = bookings(driver)
            assert restored.keys() == at_backup.keys() == {kept["id"], carols["id"]}
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

            # bob books again, and gets an id never given before
            again = driver.book("bob", "a100", 1, minutes=30)
            assert again["id"] > gone["id"]
            assert driver.start_server("bob", "a100").status_code in (201, 202)
            driver.wait_ready("bob")
            pod = driver.pods()["jupyter-bob"]
            assert pod["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] == str(again["id"])
            for user in ("bob", "carol"):
                driver.stop_server(user)
        finally:
            driver.close()
