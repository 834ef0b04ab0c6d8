"""Through a real Hub (c.HubServers): a running server whose booking the database does not have,
or cannot give it, is stopped; one on its own active booking without a claim gets its claim
recorded again. The servers are started straight on the Hub API naming a booking id, as a
restore of the booking database leaves them (the spawner's claim is not made), and the
placement GPUBookingSpawner keeps in the state."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import REAL_SERVER_HUB_CONFIG, hub_server, start_booking_hub, wait_for

from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY, SERVER_STATE_PLACEMENT_KEY
from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid, format_time

CHECK_EVERY_SECOND = """
c.GPUBookingService.slot_minutes = 1
c.Lifecycle.lifecycle_interval_seconds = 1
c.HubServers.check_interval_minutes = 0.01
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_booking_hub(
        tmp_path_factory.mktemp("hub-servers"),
        extra_service_config=CHECK_EVERY_SECOND,
        extra_hub_config=REAL_SERVER_HUB_CONFIG,
    ) as running:
        yield running


def book_now(hub, user: str, pool: str = "a100", gpus: float = 1) -> dict:
    now = datetime.now(timezone.utc)
    times = {"start": format_time(floor_to_grid(now, 1)),
             "end": format_time(ceil_to_grid(now + timedelta(hours=1), 1))}
    with hub.api(hub.user_token(user)) as client:
        created = client.post("api/bookings", json={"pool": pool, "gpus": gpus, **times})
    assert created.status_code == 201, created.text
    return created.json()


def start_on(hub, user: str, booking_id: int, placement: dict | None = None) -> None:
    """Start ``user``'s default server with a state naming ``booking_id`` (and the
    ``placement`` its pod was made for); the Hub answers at once, the server is pending until
    it is up."""
    httpx.post(f"{hub.hub_api_url}/users/{user}/server", timeout=60,
               headers={"Authorization": f"token {hub.admin_token}"},
               json={SERVER_STATE_BOOKING_KEY: booking_id,
                     SERVER_STATE_PLACEMENT_KEY: placement}).raise_for_status()
    assert hub_server(hub, user) is not None


def booking_json(hub, booking_id: int) -> dict:
    with hub.api(hub.user_token("carol")) as carol:  # a booking admin
        response = carol.get(f"api/bookings/{booking_id}")
    assert response.status_code == 200, response.text
    return response.json()


def mismatches(hub) -> dict[str, float]:
    with hub.api(hub.service_token) as service:
        text = service.get("metrics").text
    prefix = 'gpubooking_hub_server_mismatches_total{finding="'
    return {line[len(prefix):].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


def test_a_server_on_a_booking_the_database_does_not_have_is_stopped(hub):
    gone = book_now(hub, "ada")["id"] + 1000
    start_on(hub, "ada", gone)
    wait_for(lambda: hub_server(hub, "ada") is None, "the service stopped ada's server", hub)
    assert (f"Stopping server '' of ada: booking {gone} is not in the booking database"
            in hub.service_log())
    assert mismatches(hub).get("gone") == 1


def test_a_server_on_another_users_booking_is_stopped(hub):
    bobs = book_now(hub, "bob")
    start_on(hub, "admin", bobs["id"])
    wait_for(lambda: hub_server(hub, "admin") is None, "the service stopped admin's server", hub)
    assert f"Stopping server '' of admin: booking {bobs['id']} is bob's" in hub.service_log()
    assert booking_json(hub, bobs["id"])["server"] is None  # bob's booking is left as it was


def test_a_server_on_its_own_unclaimed_booking_gets_its_claim_back(hub):
    carols = book_now(hub, "carol")
    assert carols["server"] is None
    start_on(hub, "carol", carols["id"])
    wait_for(lambda: booking_json(hub, carols["id"])["server"] == "",
             "the service recorded the claim of carol's booking", hub)
    assert (hub_server(hub, "carol") or {}).get("ready")  # still running
    assert (f"Recorded the claim of booking {carols['id']} by server '' of carol, which runs on "
            "it: " in hub.service_log())
    assert mismatches(hub).get("unclaimed") == 1
    # once claimed, the booking is the lifecycle's: the next rounds (one a tick) find nothing
    time.sleep(3)
    assert mismatches(hub).get("unclaimed") == 1
    httpx.delete(f"{hub.hub_api_url}/users/carol/server", timeout=60,
                 headers={"Authorization": f"token {hub.admin_token}"})


def test_a_server_on_its_own_unclaimed_booking_placed_elsewhere_is_stopped(hub):
    """A restore gave the booking back where it was placed before it moved and started: the
    database counts the GPUs the server's pod holds as free, so the claim is not recorded."""
    bobs = book_now(hub, "bob", pool="shared", gpus=0.25)  # the A100s are the other tests'
    placed = bobs["placement"]
    elsewhere = {"node": placed["node"], "gpus": [gpu + 1 for gpu in placed["gpus"]]}
    start_on(hub, "bob", bobs["id"], elsewhere)
    wait_for(lambda: hub_server(hub, "bob") is None, "the service stopped bob's server", hub)
    gpu = placed["gpus"][0]
    assert (f"Stopping server '' of bob: booking {bobs['id']} is placed on {placed['node']} GPU "
            f"{gpu}, the server's pod was made for {placed['node']} GPU {gpu + 1}"
            in hub.service_log())
    assert booking_json(hub, bobs["id"])["server"] is None
    assert mismatches(hub).get("other_placement") == 1
    # made for the booking's placement, the claim is recorded as for any unclaimed booking
    start_on(hub, "bob", bobs["id"], {"node": placed["node"], "gpus": placed["gpus"]})
    wait_for(lambda: booking_json(hub, bobs["id"])["server"] == "",
             "the service recorded the claim of bob's booking", hub)
    httpx.delete(f"{hub.hub_api_url}/users/bob/server", timeout=60,
                 headers={"Authorization": f"token {hub.admin_token}"})


def test_a_server_on_the_booking_of_a_user_the_hub_no_longer_has_runs_on(hub):
    """Renamed in the Hub before `users rename` moved the bookings: the server is not stopped."""
    admin = {"Authorization": f"token {hub.admin_token}"}
    httpx.post(f"{hub.hub_api_url}/users/dan", headers=admin, timeout=60).raise_for_status()
    dans = book_now(hub, "dan")
    httpx.delete(f"{hub.hub_api_url}/users/dan", headers=admin, timeout=60).raise_for_status()
    start_on(hub, "admin", dans["id"])
    said = (f"Not stopping server '' of admin on booking {dans['id']} of dan, whom the Hub no "
            "longer has (renamed in the Hub? `jhub-gpubooking users rename dan admin`")
    wait_for(lambda: said in hub.service_log(), "the service found admin's server", hub)
    assert (hub_server(hub, "admin") or {}).get("ready")
    httpx.delete(f"{hub.hub_api_url}/users/admin/server", headers=admin, timeout=60)
