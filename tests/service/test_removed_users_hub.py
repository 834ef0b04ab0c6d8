"""Through a real Hub and proxy: an admin deletes a student from the Hub, and the service frees
what the student had booked, withdraws their wait and revokes their calendar link, leaving
everyone else's bookings and the student's history alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import start_booking_hub, wait_for

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time, parse_time

pytestmark = pytest.mark.e2e

REMOVE_AT_ONCE = """
c.Lifecycle.lifecycle_interval_seconds = 1
c.RemovedUsers.check_interval_minutes = 0.01
c.RemovedUsers.grace_hours = 0
"""


def book(client: httpx.Client, pool: str, gpus, start: datetime, hours: int = 2) -> int:
    answer = client.post("api/bookings", json={
        "pool": pool, "gpus": gpus, "start": format_time(start),
        "end": format_time(start + timedelta(hours=hours))})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_a_student_deleted_from_the_hub_leaves_no_booking_wait_or_link_behind(tmp_path):
    start = ceil_to_grid(datetime.now(timezone.utc) + timedelta(days=1), 60)
    with start_booking_hub(tmp_path / "hub", extra_service_config=REMOVE_AT_ONCE) as hub:
        with hub.api(hub.user_token("bob")) as bob, hub.api(hub.user_token("ada")) as ada:
            gone = book(bob, "a100", 2, start)
            kept = book(ada, "a100", 2, start)
            wait = bob.post("api/waits", json={
                "pool": "a100", "gpus": 1, "start": format_time(start),
                "end": format_time(start + timedelta(hours=1))})
            assert wait.status_code == 201, wait.text
            link = bob.post("api/users/bob/feed-token").json()["url"]
            assert httpx.get(link).status_code == 200

        admin = {"Authorization": f"token {hub.admin_token}"}
        httpx.delete(f"{hub.hub_api_url}/users/bob", headers=admin).raise_for_status()

        with hub.api(hub.user_token("carol")) as carol:  # a booking admin (gpu-admins group)
            def state(booking_id):
                return carol.get(f"api/bookings/{booking_id}").json()["state"]

            wait_for(lambda: state(gone) == "cancelled", "bob's booking is cancelled", hub)
            assert state(kept) == "upcoming"
            waits = carol.get("api/waits", params={"user": "bob"}).json()
            assert [w["state"] for w in waits["waits"]] == ["withdrawn"]
            # the GPUs are free again: ada books what bob had
            with hub.api(hub.user_token("ada")) as ada:
                book(ada, "a100", 2, start)
        assert httpx.get(link).status_code == 404
        assert ("User bob was deleted from the Hub: 1 booking(s) cancelled or ended, 1 wait(s) "
                "withdrawn, calendar link revoked.") in hub.service_log()


LIST_WITHIN_THE_GRACE = """
c.Lifecycle.lifecycle_interval_seconds = 1
c.RemovedUsers.check_interval_minutes = 0.01
c.RemovedUsers.grace_hours = 1
"""


def test_admins_see_who_is_missing_from_the_hub_and_what_goes_when(tmp_path):
    start = ceil_to_grid(datetime.now(timezone.utc) + timedelta(days=1), 60)
    with start_booking_hub(tmp_path / "hub", extra_service_config=LIST_WITHIN_THE_GRACE) as hub:
        with hub.api(hub.user_token("bob")) as bob:
            booking = book(bob, "a100", 2, start)
            bob.post("api/users/bob/feed-token").raise_for_status()
        admin = {"Authorization": f"token {hub.admin_token}"}
        httpx.delete(f"{hub.hub_api_url}/users/bob", headers=admin).raise_for_status()

        with hub.api(hub.user_token("carol")) as carol, hub.api(hub.user_token("ada")) as ada:
            def listed() -> list[dict]:
                answer = carol.get("api/admin/missing-users")
                assert answer.status_code == 200, answer.text
                return answer.json()["users"]

            wait_for(lambda: listed() != [], "bob is listed as missing", hub)
            [entry] = listed()
            since = parse_time(entry["missing_since"])
            assert entry == {
                "user": "bob", "missing_since": entry["missing_since"],
                "removal_due": format_time(since + timedelta(hours=1)),
                "bookings": [booking], "waits": [], "calendar_link": True,
            }
            assert carol.get("api/admin/missing-users").json()["grace_hours"] == 1
            assert ada.get("api/admin/missing-users").status_code == 403  # admins only

            # added back within the grace: the next round forgets that bob was missing
            httpx.post(f"{hub.hub_api_url}/users/bob", headers=admin).raise_for_status()
            wait_for(lambda: listed() == [], "bob is no longer listed", hub)
            assert carol.get(f"api/bookings/{booking}").json()["state"] == "upcoming"


def test_an_admin_booking_for_a_user_the_hub_lacks_is_refused_not_taken_off_later(tmp_path):
    """A booking for a user the Hub does not have (a typo, or someone who never logged in)
    would be cancelled by the check of deleted users after its grace: the admin hears it at
    once, for a single booking and for a series; booking for a user the Hub has still works."""
    start = ceil_to_grid(datetime.now(timezone.utc) + timedelta(days=1), 60)
    times = {"start": format_time(start), "end": format_time(start + timedelta(hours=1))}
    with start_booking_hub(tmp_path / "hub") as hub, hub.api(hub.user_token("carol")) as carol:
        # carol is a booking admin (gpu-admins group)
        typo = carol.post("api/bookings", json={"pool": "a100", "gpus": 1, "user": "adaa",
                                                **times})
        assert typo.status_code == 404, typo.text
        assert typo.json()["message"] == (
            "The Hub has no user named 'adaa'. Check the spelling; someone who has never "
            "logged in can be added on the Hub's admin page first.")
        series = carol.post("api/series", json={"pool": "a100", "gpus": 1, "user": "adaa",
                                                "repeat": "weekly", "count": 2, **times})
        assert series.status_code == 404, series.text
        assert carol.get("api/bookings", params={"user": "adaa"}).json()["bookings"] == []

        made = carol.post("api/bookings", json={"pool": "a100", "gpus": 1, "user": "ada",
                                                **times})
        assert made.status_code == 201, made.text
        assert made.json()["user"] == "ada"
