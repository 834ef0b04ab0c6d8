"""Through a real Hub: group budgets shared by members, the budget API, and recurring series
restricted to series_groups (members or admins), created and cancelled as a whole."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hub_harness import sent_twice, start_booking_hub

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time

PLANNING_CONFIG = """
c.Budgets.group_budgets = {"students": {"gpu_hours": 2, "period": "month"}}
c.RecurringSeries.series_groups = ["gpu-admins"]
c.RecurringSeries.series_max_occurrences = 4
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_booking_hub(
        tmp_path_factory.mktemp("planning-hub"), extra_service_config=PLANNING_CONFIG
    ) as running:
        yield running


def slot(hours_ahead: int, length_hours: int = 1) -> dict:
    start = ceil_to_grid(datetime.now(timezone.utc), 15) + timedelta(hours=hours_ahead)
    return {"start": format_time(start), "end": format_time(start + timedelta(hours=length_hours))}


def test_group_members_share_a_budget_and_see_it(hub):
    with hub.api(hub.user_token("ada")) as ada:
        created = ada.post("api/bookings", json={"pool": "a100", "gpus": 1, **slot(1, 2)})
        assert created.status_code == 201, created.text
        budget = ada.get("api/users/ada/budget")
        assert budget.status_code == 200, budget.text
        [group] = budget.json()["budgets"]
        assert (group["scope"], group["name"], group["remaining_gpu_hours"]) == (
            "group", "students", 0.0
        )
    with hub.api(hub.user_token("bob")) as bob:
        refused = bob.post("api/bookings", json={"pool": "a100", "gpus": 1, **slot(1)})
        assert refused.status_code == 403
        message = refused.json()["message"]
        assert message.startswith("The group students has 0 of 2 GPU-hours left ")
        assert "; this booking needs 1. It refills on " in message
        assert bob.get("api/users/ada/budget").status_code == 403
    with hub.api(hub.user_token("admin")) as admin:
        # an admin reading someone's budget: the service asks the Hub for the user's groups
        assert [b["name"] for b in admin.get("api/users/bob/budget").json()["budgets"]] == [
            "students"
        ]


def test_series_are_for_series_groups_and_cancel_as_a_whole(hub):
    series = {"pool": "shared", "gpus": "1/4", "repeat": "daily", "count": 3, **slot(30)}
    with hub.api(hub.user_token("bob")) as bob:
        refused = bob.post("api/series", json=series)
        assert (refused.status_code, refused.json()["message"]) == (
            403,
            "Only members of gpu-admins or administrators may book recurring series.",
        )
    with hub.api(hub.user_token("carol")) as carol:
        nowhere = carol.post("api/series", json={**series, "time_zone": "Mars/Olympus"})
        assert (nowhere.status_code, nowhere.json()["message"]) == (
            400, "'time_zone' must be a time zone name such as Europe/Berlin, not 'Mars/Olympus'."
        )
        too_long = carol.post("api/series", json={**series, "count": 5})
        assert too_long.status_code == 400
        assert "at most 4 occurrences" in too_long.json()["message"]
        created = carol.post("api/series", json={**series, "time_zone": "Europe/Berlin"})
        assert created.status_code == 201, created.text
        body = created.json()
        assert [b["series_id"] for b in body["bookings"]] == [body["id"]] * 3
        whole_gpu = carol.post("api/series", json={**series, "gpus": 1, "user": "carol"})
        assert whole_gpu.status_code == 409
        assert len(whole_gpu.json()["occurrences"]) == 3
        cancelled = carol.delete(f"api/series/{body['id']}")
        assert [b["state"] for b in cancelled.json()["bookings"]] == ["cancelled"] * 3
    with hub.api(hub.user_token("ada")) as ada:
        assert ada.get(f"api/series/{body['id']}").status_code == 404


def test_a_series_sent_again_with_its_idempotency_key_answers_the_series_it_booked(hub):
    series = {"pool": "shared", "gpus": "1/4", "repeat": "weekly", "count": 2, **slot(40)}
    key = {"Idempotency-Key": "8f7e6d5c-4b3a-4291-8807-f6e5d4c3b2a1"}
    with hub.api(hub.user_token("carol")) as carol:
        first = sent_twice(carol, "api/series", series, key["Idempotency-Key"])
        other = carol.post("api/series", json={**series, "count": 3}, headers=key)
        assert (other.status_code, other.json()["message"]) == (422, (
            f"This Idempotency-Key was used for series #{first.json()['id']}, made for other "
            "GPUs or times; send a new key for a new series."))
        mine = carol.get("api/bookings").json()["bookings"]
        assert len([b for b in mine if b["series_id"] == first.json()["id"]]) == 2
