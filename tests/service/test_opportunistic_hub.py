"""Through a real Hub: ada runs a server on an opportunistic grant; bob's booking preempts it, the
service stops ada's server through the Hub API and ada's notices say why."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import REAL_SERVER_HUB_CONFIG, hub_server, start_booking_hub, wait_for

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

OPPORTUNISTIC = """
c.Opportunistic.opportunistic_enabled = True
c.Opportunistic.opportunistic_horizon_minutes = 60
c.Lifecycle.lifecycle_interval_seconds = 0
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_booking_hub(
        tmp_path_factory.mktemp("opportunistic-hub"),
        extra_service_config=OPPORTUNISTIC,
        extra_hub_config=REAL_SERVER_HUB_CONFIG,
    ) as running:
        yield running


def test_a_booking_preempts_an_opportunistic_server(hub):
    admin = {"Authorization": f"token {hub.admin_token}"}
    with hub.api(hub.service_token) as spawner:
        free = spawner.get("api/opportunistic").json()
        assert free["enabled"] is True
        assert {p["pool"]: p["available"] for p in free["pools"]} == {"a100": True, "shared": True}
        # the whole 'shared' pool (one GPU) for ada, as the spawner asks for it
        granted = spawner.post("api/opportunistic", json={"user": "ada", "pool": "shared"})
        assert granted.status_code == 201, granted.text
        grant = granted.json()
        assert (grant["user"], grant["opportunistic"], grant["gpus"]) == ("ada", True, 1)
        httpx.post(f"{hub.hub_api_url}/users/ada/server", headers=admin, timeout=60,
                   json={"gpu_booking_id": grant["id"]}).raise_for_status()
        wait_for(lambda: (hub_server(hub, "ada") or {}).get("ready"), "ada's server is ready", hub)
        spawner.post(f"api/bookings/{grant['id']}/claim", json={"server": ""}).raise_for_status()
        assert spawner.get("api/opportunistic").json()["pools"][1] == {
            "pool": "shared",
            "available": False,
        }

    with hub.api(hub.user_token("ada")) as ada:
        refused = ada.post("api/opportunistic", json={"user": "ada", "pool": "shared"})
        assert (refused.status_code, refused.json()["message"]) == (
            403,
            "Only the Hub's spawner or an administrator may ask for opportunistic GPUs.",
        )

    start = floor_to_grid(datetime.now(timezone.utc), 15)
    with hub.api(hub.user_token("bob")) as bob:
        booked = bob.post(
            "api/bookings",
            json={
                "pool": "shared",
                "gpus": 1,
                "start": format_time(start),
                "end": format_time(start + timedelta(hours=1)),
            },
        )
        assert booked.status_code == 201, booked.text

    wait_for(lambda: hub_server(hub, "ada") is None, "the service stopped ada's server", hub)
    with hub.api(hub.user_token("ada")) as ada:
        [notice] = ada.get("api/users/ada/notices").json()["notices"]
        assert notice["kind"] == "released"
        assert notice["message"].endswith("because a booking needed the GPU it was using.")
        assert ada.get(f"api/bookings/{grant['id']}").json()["state"] == "ended"
