"""Through a real Hub: the service stops a user's server when its booking ends, and the admin
report counts the time the server ran."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import REAL_SERVER_HUB_CONFIG, hub_server, start_booking_hub, wait_for

from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid, format_time

FAST_LIFECYCLE = """
c.GPUBookingService.slot_minutes = 1
c.Lifecycle.lifecycle_interval_seconds = 1
c.Lifecycle.end_grace_seconds = 0
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_booking_hub(
        tmp_path_factory.mktemp("lifecycle-hub"),
        extra_service_config=FAST_LIFECYCLE,
        extra_hub_config=REAL_SERVER_HUB_CONFIG,
    ) as running:
        yield running


@pytest.mark.wall_clock
def test_server_is_stopped_at_the_end_of_its_booking_and_reported_as_used(hub):
    admin = {"Authorization": f"token {hub.admin_token}"}
    now = datetime.now(timezone.utc)
    start = floor_to_grid(now, 1)
    end = ceil_to_grid(now + timedelta(seconds=20), 1)
    with hub.api(hub.user_token("ada")) as ada:
        created = ada.post(
            "api/bookings",
            json={"pool": "a100", "gpus": 1, "start": format_time(start), "end": format_time(end)},
        )
        assert created.status_code == 201, created.text
        booking_id = created.json()["id"]
    httpx.post(f"{hub.hub_api_url}/users/ada/server", headers=admin, timeout=60,
               json={"gpu_booking_id": booking_id}).raise_for_status()
    wait_for(lambda: (hub_server(hub, "ada") or {}).get("ready"), "ada's server is ready", hub)
    with hub.api(hub.service_token) as spawner:
        spawner.post(f"api/bookings/{booking_id}/claim", json={"server": ""}).raise_for_status()

    wait_for(lambda: hub_server(hub, "ada") is None, "the service stopped ada's server", hub)
    assert datetime.now(timezone.utc) >= end

    with hub.api(hub.user_token("carol")) as carol:  # a booking admin (gpu-admins group)
        history = carol.get(f"api/bookings/{booking_id}").json()
        # the service's stop leaves the claim to the spawner's release (this harness's spawner
        # releases nothing); the claim then expires once the Hub reports the server stopped,
        # which the service checks every tick (a second here), so it may be gone already
        if history["server"] is not None:
            assert history["server"] == ""
        expired = (f"Claim of booking {booking_id} by server '' of ada expired: the Hub reports "
                   "that server stopped")
        wait_for(lambda: expired in hub.service_log(), "the claim expired", hub)
        period = {"start": format_time(start), "end": format_time(end + timedelta(minutes=1))}
        report = carol.get("api/admin/report", params={**period, "by": "user"})
        assert report.status_code == 200, report.text
        [row] = report.json()["rows"]
        hours = (end - start).total_seconds() / 3600
        assert row["key"] == "ada"
        assert row["booked_gpu_hours"] == pytest.approx(hours, abs=1e-4)
        assert 0 < row["used_gpu_hours"] <= row["booked_gpu_hours"]
        assert row["used_gpu_hours"] + row["idle_gpu_hours"] == pytest.approx(hours, abs=2e-4)
        csv = carol.get("api/admin/report", params={**period, "format": "csv"})
        assert csv.headers["content-type"].startswith("text/csv")
        assert csv.text.splitlines()[1].startswith("ada,1,0,")
    with hub.api(hub.user_token("ada")) as ada:
        refused = ada.get("api/admin/report")
        assert (refused.status_code, refused.json()["message"]) == (
            403,
            "Only booking administrators may do this.",
        )
