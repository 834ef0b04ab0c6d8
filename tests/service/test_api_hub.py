"""The REST API through a real JupyterHub, proxy and hub-managed service, on SQLite and PostgreSQL.

Each test books in its own time window (``windows.next()``) so tests sharing the module's Hub
never compete for capacity.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import RunningHub, sent_twice, start_booking_hub
from icalendar import Calendar
from server_databases import new_database, skip_unless_reachable
from test_service_wire_openapi import validator

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory):
    """A Hub whose booking service stores bookings in SQLite or PostgreSQL."""
    directory = tmp_path_factory.mktemp(f"hub-{request.param}")
    # the module's users write more than the rate limit's burst within seconds on a fast
    # machine (a 429 instead of the answer under test); the limit has tests of its own
    unlimited = "c.GPUBookingService.write_rate_per_minute = 0\n"
    if request.param == "sqlite":
        with start_booking_hub(directory, extra_service_config=unlimited) as running:
            yield running
        return
    skip_unless_reachable("postgresql")
    with new_database("postgresql") as url, start_booking_hub(
        directory, db_url=url, extra_service_config=unlimited
    ) as running:
        yield running


class Windows:
    """Hands out non-overlapping 3-hour windows from the day after tomorrow on: still upcoming
    when the run crosses midnight (a first window "tomorrow 00:00" taken at collection time
    was active for tests that ran after midnight)."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.day0: datetime | None = None

    def next(self, hours: int = 2) -> tuple[str, str]:
        if self.day0 is None:  # at the first booking, not at import
            self.day0 = floor_to_grid(datetime.now(timezone.utc), 24 * 60) + timedelta(days=2)
        n = next(self.counter)
        start = self.day0 + timedelta(days=n // 8, hours=(n % 8) * 3)
        return format_time(start), format_time(start + timedelta(hours=hours))


windows = Windows()


def client(hub: RunningHub, who: str) -> httpx.Client:
    """An API client for ``anonymous``, a user name, or ``spawner`` (the service's own token)."""
    if who == "anonymous":
        return hub.api()
    if who == "spawner":
        return hub.api(hub.service_token)
    return hub.api(hub.user_token(who))


def book(hub: RunningHub, who: str = "ada", **fields) -> dict:
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 1, "start": start, "end": end, **fields}
    response = client(hub, who).post("api/bookings", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def book_now(hub: RunningHub, user: str = "ada") -> dict:
    """An active booking (starting in the current slot) on the quarter-GPU pool."""
    now = datetime.now(timezone.utc)
    start = floor_to_grid(now, 15)
    body = {
        "pool": "shared",
        "gpus": 0.25,
        "start": format_time(start),
        "end": format_time(start + timedelta(hours=1)),
    }
    response = client(hub, user).post("api/bookings", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status
    return body["message"]


def test_booking_round_trip(hub):
    ada = client(hub, "ada")
    created = book(hub, note="fine-tuning")
    assert created["user"] == "ada" and created["state"] == "upcoming"
    assert created["start"].endswith("Z") and created["placement"]["node"] in {"node-a", "node-b"}
    booking_url = f"api/bookings/{created['id']}"
    assert ada.get(booking_url).json() == created
    assert created["id"] in [
        b["id"] for b in ada.get("api/bookings", params={"state": "upcoming"}).json()["bookings"]
    ]

    shorter = datetime.fromisoformat(created["end"].replace("Z", "+00:00")) - timedelta(hours=1)
    patched = ada.patch(booking_url, json={"end": format_time(shorter)})
    assert patched.status_code == 200, patched.text
    assert patched.json()["end"] == format_time(shorter)

    cancelled = ada.delete(booking_url)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert "already cancelled" in error(ada.delete(booking_url), 409)


def test_the_largest_extension_is_what_patch_accepts(hub):
    ada, bob = client(hub, "ada"), client(hub, "bob")
    booking = book(hub)
    url = f"api/bookings/{booking['id']}"
    end = datetime.fromisoformat(booking["end"].replace("Z", "+00:00"))
    # bob takes the whole pool from 30 minutes after ada's end
    gap = {"pool": "a100", "gpus": 2, "start": format_time(end + timedelta(minutes=30)),
           "end": format_time(end + timedelta(minutes=45))}
    blockers = [bob.post("api/bookings", json=gap).json() for _ in range(2)]
    try:
        assert all("id" in blocker for blocker in blockers), blockers
        offer = ada.get(f"{url}/extension")
        assert offer.status_code == 200, offer.text
        offer = offer.json()
        assert offer["booking"] == ada.get(url).json()
        assert (offer["minutes"], offer["max_end"], offer["reason"]) == (30, gap["start"], None)
        assert abs(datetime.fromisoformat(offer["now"].replace("Z", "+00:00"))
                   - datetime.now(timezone.utc)) < timedelta(minutes=1)
        beyond = format_time(end + timedelta(minutes=45))
        refusal = ada.patch(url, json={"end": beyond})
        assert refusal.status_code == 409, refusal.text
        assert ada.patch(url, json={"end": offer["max_end"]}).json()["end"] == offer["max_end"]
        none = ada.get(f"{url}/extension").json()
        assert (none["minutes"], none["max_end"], none["reason"]) == (
            0, None, refusal.json()["message"]
        )
    finally:
        # give the time back, or later tests find the pool full
        for blocker in blockers:
            if "id" in blocker:
                bob.delete(f"api/bookings/{blocker['id']}")
        ada.delete(url)


def test_unknown_and_missing_fields_are_named(hub):
    start, end = windows.next()
    ada = client(hub, "ada")
    body = {"pool": "a100", "gpus": 1, "start": start, "end": end, "color": "red", "owner": "x"}
    assert error(ada.post("api/bookings", json=body), 400).startswith(
        "Unknown field(s): color, owner;"
    )
    assert (
        error(ada.post("api/bookings", json={"pool": "a100"}), 400)
        == "Missing field(s): gpus, start, end."
    )
    assert (
        error(ada.post("api/bookings", content=b"[1]"), 400)
        == "The request body must be a JSON object."
    )


def test_refusals_are_one_clear_sentence(hub):
    ada = client(hub, "ada")
    start, end = windows.next()
    off_grid = start.replace(":00:00Z", ":07:00Z")
    message = error(
        ada.post("api/bookings", json={"pool": "a100", "gpus": 1, "start": off_grid, "end": end}),
        400,
    )
    assert "grid" in message or "15" in message
    message = error(
        ada.post("api/bookings", json={"pool": "shared", "gpus": 0.3, "start": start, "end": end}),
        400,
    )
    assert "not bookable" in message
    assert "no GPU pool named 'h100'" in error(
        ada.post("api/bookings", json={"pool": "h100", "gpus": 1, "start": start, "end": end}), 404
    )
    assert "'state' must be one of" in error(ada.get("api/bookings", params={"state": "soon"}), 400)


def test_full_capacity_is_a_409_naming_what_is_left(hub):
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 2, "start": start, "end": end}
    for user in ("ada", "bob"):
        assert client(hub, user).post("api/bookings", json=body).status_code == 201
    carol = client(hub, "carol")
    refused = carol.post("api/bookings", json={**body, "gpus": 1})
    message = error(refused, 409)
    assert message.endswith(".")
    # it names the earliest free interval of the same length: right after the full one
    later = format_time(datetime.fromisoformat(end) + timedelta(hours=2))
    assert refused.json()["next_free"] == {"start": end, "end": later}
    assert f"{later[11:16]} UTC." in message
    asked = {"gpus": "1", "minutes": 120, "after": start}
    assert carol.get("api/pools/a100/next-free", params=asked).json() == {
        "pool": "a100", "gpus": 1, "minutes": 120, "start": end, "end": later,
    }
    booked = carol.post("api/bookings", json={**body, "gpus": 1, **refused.json()["next_free"]})
    assert booked.status_code == 201, booked.text
    assert carol.delete(f"api/bookings/{booked.json()['id']}").status_code == 200


def test_a_create_sent_again_with_its_idempotency_key_answers_the_booking_it_made(hub):
    ada, bob = client(hub, "ada"), client(hub, "bob")
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 1, "start": start, "end": end}
    key = {"Idempotency-Key": "4d1c9a2e-5b7f-4e3d-8a6c-1f2e3d4c5b6a"}
    first = sent_twice(ada, "api/bookings", body, key["Idempotency-Key"])
    # another user's key is their own
    assert bob.post("api/bookings", json=body, headers=key).json()["id"] != first.json()["id"]
    message = error(ada.post("api/bookings", json={**body, "gpus": 2}, headers=key), 422)
    assert message == (
        f"This Idempotency-Key was used for booking #{first.json()['id']}, made for other GPUs "
        "or times; send a new key for a new booking.")
    assert "Idempotency-Key must be 1 to 64" in error(
        ada.post("api/bookings", json=body, headers={"Idempotency-Key": "x" * 65}), 400)


def test_next_free_refuses_what_cannot_be_booked(hub):
    ada = client(hub, "ada")
    assert "multiple of 15" in error(
        ada.get("api/pools/a100/next-free", params={"gpus": 1, "minutes": 20}), 400
    )
    assert "'minutes'" in error(ada.get("api/pools/a100/next-free", params={"gpus": 1}), 400)
    assert "'gpus'" in error(ada.get("api/pools/a100/next-free", params={"minutes": 60}), 400)
    assert error(ada.get("api/pools/h100/next-free", params={"gpus": 1, "minutes": 60}), 404)
    assert client(hub, "anonymous").get(
        "api/pools/a100/next-free", params={"gpus": 1, "minutes": 60}
    ).status_code == 403


def test_only_admins_book_for_others(hub):
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 1, "start": start, "end": end, "user": "ada"}
    assert "Only booking administrators" in error(
        client(hub, "bob").post("api/bookings", json=body), 403
    )
    assert client(hub, "ada").post("api/bookings", json=body).status_code == 201
    for admin in ("admin", "carol"):  # Hub admin, and member of admin_groups
        response = client(hub, admin).post("api/bookings", json=body)
        assert response.status_code == 201, response.text
        assert response.json()["user"] == "ada"


def test_other_users_bookings_stay_anonymous(hub):
    booking = book(hub, note="secret project")
    bob = client(hub, "bob")
    assert "no booking" in error(bob.get(f"api/bookings/{booking['id']}"), 404)
    assert (
        bob.patch(f"api/bookings/{booking['id']}", json={"end": booking["end"]}).status_code == 404
    )
    assert bob.delete(f"api/bookings/{booking['id']}").status_code == 404
    availability = bob.get(
        "api/pools/a100/availability", params={"start": booking["start"], "end": booking["end"]}
    )
    assert availability.status_code == 200
    assert "ada" not in availability.text and "secret" not in availability.text
    assert availability.json()["intervals"][0]["free_gpus"] <= 3
    assert booking["id"] not in [b["id"] for b in bob.get("api/bookings").json()["bookings"]]


ANON, OTHER, OWNER, ADMIN, SPAWNER = "anonymous", "bob", "ada", "admin", "spawner"
PRINCIPALS = (ANON, OTHER, OWNER, ADMIN, SPAWNER)
# (method, path, body) -> expected status for anonymous, other user, owner, admin, Hub spawner
MATRIX = [
    ("GET", "api/pools", None, (403, 200, 200, 200, 200)),
    ("GET", "api/pools/a100/availability", None, (403, 200, 200, 200, 200)),
    ("GET", "api/bookings", None, (403, 200, 200, 200, 400)),
    ("GET", "api/bookings?user=ada", None, (403, 403, 200, 200, 200)),
    ("GET", "api/waits", None, (403, 200, 200, 200, 403)),
    ("GET", "api/waits?user=ada", None, (403, 403, 200, 200, 403)),
    ("GET", "api/bookings/{id}", None, (403, 404, 200, 200, 200)),
    ("PATCH", "api/bookings/{id}", {"end": "{end}"}, (403, 404, 200, 200, 403)),
    ("GET", "api/bookings/{id}/extension", None, (403, 404, 200, 200, 403)),
    ("POST", "api/pools/shared/claim", {"user": "ada", "server": ""}, (403, 403, 403, 200, 200)),
    ("POST", "api/bookings/{id}/claim", {"server": ""}, (403, 403, 403, 200, 200)),
    ("POST", "api/bookings/{id}/release", {"server": ""}, (403, 403, 403, 200, 200)),
    ("GET", "api/users/ada/bookings/active", None, (403, 403, 200, 200, 200)),
    ("GET", "api/users/ada/bookings.ics", None, (403, 403, 200, 200, 403)),
    ("GET", "api/users/ada/feed-token", None, (403, 403, 200, 200, 403)),
    ("POST", "api/users/ada/feed-token", None, (403, 403, 200, 200, 403)),
    ("GET", "api/maintenance", None, (403, 200, 200, 200, 200)),
    ("GET", "api/flagged", None, (403, 200, 200, 200, 403)),
    ("GET", "api/admin/flagged", None, (403, 403, 403, 200, 403)),
    ("POST", "api/maintenance", {}, (403, 403, 403, 400, 403)),
    ("DELETE", "api/maintenance/999999", None, (403, 403, 403, 404, 403)),
    ("GET", "metrics", None, (403, 403, 403, 200, 200)),
    ("GET", "feeds/not-a-token.ics", None, (404, 404, 404, 404, 404)),
]


def test_authorization_matrix(hub):
    booking = book_now(hub)
    failures = []
    for method, path, body, expected in MATRIX:
        path = path.replace("{id}", str(booking["id"]))
        if body is not None:
            body = {
                k: v.replace("{end}", booking["end"]) if isinstance(v, str) else v
                for k, v in body.items()
            }
        for who, status in zip(PRINCIPALS, expected):
            response = client(hub, who).request(method, path, json=body)
            if response.status_code != status:
                failures.append(
                    f"{who} {method} {path}: {response.status_code} != {status} {response.text[:120]}"
                )
    assert not failures, "\n".join(failures)


def test_owner_and_admin_cancel_but_spawner_cannot(hub):
    for who in ("ada", "admin"):
        booking = book(hub)
        assert (
            client(hub, who).delete(f"api/bookings/{booking['id']}").json()["state"] == "cancelled"
        )
    booking = book(hub)
    assert "owner or an administrator" in error(
        client(hub, SPAWNER).delete(f"api/bookings/{booking['id']}"), 403
    )


def test_claim_takes_over_from_a_server_the_hub_reports_stopped(hub):
    booking = book_now(hub, "bob")
    spawner = client(hub, SPAWNER)
    claimed = spawner.post(f"api/bookings/{booking['id']}/claim", json={"server": ""})
    assert claimed.status_code == 200 and claimed.json()["server"] == ""
    # bob has no running server in the Hub, so "" is stale and "gpu2" may take the booking over
    taken = spawner.post(f"api/bookings/{booking['id']}/claim", json={"server": "gpu2"})
    assert taken.status_code == 200, taken.text
    assert taken.json()["server"] == "gpu2"
    released = spawner.post(f"api/bookings/{booking['id']}/release", json={"server": "gpu2"})
    assert released.json()["server"] is None
    upcoming = book(hub, "bob")
    assert "cannot be used before" in error(
        spawner.post(f"api/bookings/{upcoming['id']}/claim", json={"server": ""}), 409
    )


def test_a_release_naming_another_user_leaves_the_booking_claimed(hub):
    # after a restore from a backup, ids of lost bookings are handed out again: a spawner
    # holding such an id for ada's default server must not release bob's default server
    booking = book_now(hub, "bob")
    spawner = client(hub, SPAWNER)
    assert spawner.post(f"api/bookings/{booking['id']}/claim", json={"server": ""}).status_code == 200
    path = f"api/bookings/{booking['id']}/release"
    kept = spawner.post(path, json={"user": "ada", "server": ""})
    assert kept.status_code == 200 and kept.json()["server"] == ""
    assert "'user' must be a Hub user name." in error(spawner.post(path, json={"user": "", "server": ""}), 400)
    released = spawner.post(path, json={"user": "bob", "server": ""})
    assert released.status_code == 200 and released.json()["server"] is None


def test_pool_claim_answers_pool_and_booking_or_the_reason(hub):
    booking = book_now(hub, "bob")
    spawner = client(hub, SPAWNER)
    body = {"user": "bob", "server": "gpu3", "booking": booking["id"]}
    claimed = spawner.post("api/pools/shared/claim", json=body)
    assert claimed.status_code == 200, claimed.text
    answer = claimed.json()
    assert set(answer) == {"pool", "booking"}
    pools = client(hub, SPAWNER).get("api/pools").json()
    assert answer["pool"] == next(pool for pool in pools if pool["name"] == "shared")
    assert (answer["booking"]["id"], answer["booking"]["server"]) == (booking["id"], "gpu3")
    assert answer["booking"]["placement"] == booking["placement"]
    spawner.post(f"api/bookings/{booking['id']}/release", json={"server": "gpu3"})

    not_booked = spawner.post("api/pools/shared/claim", json={"user": "dora", "server": ""})
    assert not_booked.status_code == 403
    assert (not_booked.json()["reason"], not_booked.json()["pool"]["name"]) == (
        "not_booked", "shared"
    )
    unknown = spawner.post("api/pools/h100/claim", json={"user": "bob", "server": ""})
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "pool_unknown")
    assert "'booking' must be" in error(
        spawner.post("api/pools/shared/claim", json={**body, "booking": True}), 400
    )


def test_cookie_writes_need_the_xsrf_token(hub):
    session = hub.login_session("ada")
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 1, "start": start, "end": end}
    assert session.get("api/bookings").status_code == 200
    assert "'_xsrf'" in error(session.post("api/bookings", json=body), 403)
    forged = session.post("api/bookings", json=body, headers={"X-XSRFToken": "forged"})
    assert forged.status_code == 403
    created = session.post("api/bookings", json=body, headers=hub.xsrf_headers(session))
    assert created.status_code == 201, created.text
    assert created.json()["user"] == "ada"


def test_groups_reach_the_service_through_oauth(hub):
    """carol is an admin only through her group, which the OAuth token must carry."""
    booking = book(hub)
    session = hub.login_session("carol")
    listed = session.get("api/bookings", params={"user": "ada"})
    assert listed.status_code == 200, listed.text
    assert booking["id"] in [b["id"] for b in listed.json()["bookings"]]


def test_calendar_and_secret_feed(hub):
    booking = book(hub, note="calendar check")
    ada = client(hub, "ada")
    calendar = Calendar.from_ical(ada.get("api/users/ada/bookings.ics").content)
    uids = [str(event["uid"]) for event in calendar.walk("VEVENT")]
    assert f"booking-{booking['id']}@gpu-booking" in uids

    link = ada.post("api/users/ada/feed-token").json()
    assert link["url"] == f"{hub.service_url}feeds/{link['token']}.ics"
    feed = httpx.get(link["url"])  # no credentials at all: the token is the capability
    assert feed.status_code == 200 and feed.headers["content-type"].startswith("text/calendar")
    assert f"booking-{booking['id']}@gpu-booking" in feed.text
    # reading the state neither shows nor replaces the link
    assert ada.get("api/users/ada/feed-token").json() == {"user": "ada", "exists": True}
    assert httpx.get(link["url"]).status_code == 200

    ada.post("api/users/ada/feed-token")
    assert httpx.get(link["url"]).status_code == 404


def test_maintenance_reports_colliding_bookings(hub):
    booking = book(hub)
    admin = client(hub, ADMIN)
    body = {
        "pool": "a100",
        "node": booking["placement"]["node"],
        "start": booking["start"],
        "end": booking["end"],
        "reason": "driver update",
    }
    # sent again with its Idempotency-Key (the answer was lost): one window, the same answer
    window = sent_twice(admin, "api/maintenance", body, "window-1").json()
    assert [b["id"] for b in window["colliding_bookings"]] == [booking["id"]]
    listed = client(hub, "bob").get("api/maintenance").json()["windows"]
    assert [w["id"] for w in listed if w["reason"] == "driver update"] == [window["id"]]
    assert error(admin.post("api/maintenance", json={**body, "reason": "another reason"},
                            headers={"Idempotency-Key": "window-1"}), 422) == (
        f"This Idempotency-Key was used for maintenance window #{window['id']}, made for other "
        "GPUs or times; send a new key for a new maintenance window.")
    assert error(admin.post("api/maintenance", json={**body, "node": "gpu-z"}), 400) == (
        "Pool a100 has no node named 'gpu-z'.")
    # ada learns it from her notices, until the window is removed
    [notice] = [n for n in client(hub, "ada").get("api/users/ada/notices").json()["notices"]
                if n["kind"] == "maintenance"]
    assert validator("Notice").is_valid(notice)
    assert (notice["booking_id"], notice["at"]) == (booking["id"], booking["start"])
    assert notice["message"].startswith(f"Node {body['node']} is down for maintenance")
    assert f"(driver update), which overlaps your booking #{booking['id']}" in notice["message"]
    assert admin.delete(f"api/maintenance/{window['id']}").status_code == 204
    assert not [n for n in client(hub, "ada").get("api/users/ada/notices").json()["notices"]
                if n["kind"] == "maintenance"]
    assert "no maintenance window" in error(admin.delete(f"api/maintenance/{window['id']}"), 404)


def test_metrics_count_bookings_and_requests(hub):
    book(hub)
    text = client(hub, ADMIN).get("metrics").text
    assert 'gpubooking_bookings{state="upcoming"}' in text
    assert 'gpubooking_booked_gpus{pool="a100"}' in text
    assert 'gpubooking_requests_total{method="POST",route="api/bookings",status="201"}' in text
    assert (
        'gpubooking_request_duration_seconds_bucket{le="0.005",method="POST",route="api/bookings",status="201"}'
        in text
    )


def test_flagged_bookings_answer_an_object_even_when_empty(hub):
    """Without cluster inventory nothing is ever flagged; the routes still answer the documented shape."""
    assert client(hub, OWNER).get("api/flagged").json() == {"flagged": []}
    assert client(hub, ADMIN).get("api/admin/flagged").json() == {"flagged": []}


def test_a_refused_request_waits_and_is_booked_when_a_booking_is_cancelled(hub):
    start, end = windows.next()
    body = {"pool": "a100", "gpus": 2, "start": start, "end": end}
    blocking = [client(hub, user).post("api/bookings", json=body).json() for user in ("ada", "carol")]
    bob = client(hub, "bob")
    assert bob.post("api/bookings", json=body).status_code == 409
    # sent again (its answer was lost): the same wait, not a second one
    wait = sent_twice(bob, "api/waits", {**body, "note": "waiting"}, "wait-1").json()
    assert "used for wait" in error(
        bob.post("api/waits", json={**body, "gpus": 1}, headers={"Idempotency-Key": "wait-1"}),
        422)
    assert (wait["state"], wait["latest_start"], wait["minutes"]) == ("waiting", start, 120)
    assert client(hub, "ada").get(f"api/waits/{wait['id']}").status_code == 404
    assert client(hub, "ada").delete(f"api/bookings/{blocking[0]['id']}").status_code == 200
    # the cancel served the waitlist before it answered
    booked = bob.get(f"api/waits/{wait['id']}").json()
    assert booked["state"] == "booked"
    booking = bob.get(f"api/bookings/{booked['booking_id']}").json()
    assert (booking["user"], booking["start"], booking["end"]) == ("bob", start, end)
    listed = bob.get("api/waits", params={"state": "booked"}).json()["waits"]
    assert [w["id"] for w in listed] == [wait["id"]]
    kinds = {n["kind"]: n for n in bob.get("api/users/bob/notices").json()["notices"]}
    assert kinds["wait_booked"]["booking_id"] == booking["id"]
    calendar = Calendar.from_ical(bob.get("api/users/bob/bookings.ics").content)
    assert f"booking-{booking['id']}@gpu-booking" in [str(e["uid"]) for e in calendar.walk("VEVENT")]
    assert "no longer be withdrawn" in error(bob.delete(f"api/waits/{wait['id']}"), 409)
    for done in (booking["id"], blocking[1]["id"]):
        assert client(hub, "admin").delete(f"api/bookings/{done}").status_code == 200


def test_a_booking_later_today_is_offered_the_free_gpus_now_and_starts_early(hub):
    """a100 is free now (the other tests book it from the day after tomorrow): ada's booking in
    two hours is offered an early start in her notices, and taking it moves the booking."""

    later = floor_to_grid(datetime.now(timezone.utc), 15) + timedelta(hours=2)
    ada = client(hub, "ada")
    created = ada.post("api/bookings", json={"pool": "a100", "gpus": 1, "start": format_time(later),
                                             "end": format_time(later + timedelta(hours=1))})
    assert created.status_code == 201, created.text
    booking = created.json()
    notices = ada.get("api/users/ada/notices").json()["notices"]
    [offer] = [n for n in notices if n["kind"] == "start_early"]
    assert offer["booking_id"] == booking["id"] and validator("Notice").is_valid(offer)
    assert offer["at"] < booking["start"]

    path = f"api/bookings/{booking['id']}/start-early"
    assert client(hub, "bob").post(path).status_code == 404
    moved = ada.post(path)
    assert moved.status_code == 200, moved.text
    started = moved.json()
    assert started["start"] < booking["start"] and started["state"] == "active"
    length = datetime.fromisoformat(started["end"]) - datetime.fromisoformat(started["start"])
    assert length == timedelta(hours=1)
    assert "cannot start early" in error(ada.post(path), 409)
    assert not [n for n in ada.get("api/users/ada/notices").json()["notices"]
                if n["kind"] == "start_early"]
    assert client(hub, "admin").delete(f"api/bookings/{booking['id']}").status_code == 200


def _clock(when: str) -> str:
    """An API time as the notices write it."""
    return datetime.fromisoformat(when.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def test_an_ended_bookings_notice_says_who_ended_it_and_names_only_a_server_it_had(hub):
    """An administrator's force end is not the user's own "End now", and a booking no server
    ever held stopped no server."""
    start = floor_to_grid(datetime.now(timezone.utc), 15)
    body = {"pool": "a100", "gpus": 1, "start": format_time(start),
            "end": format_time(start + timedelta(hours=1))}
    carol = client(hub, "carol")
    by_admin, by_owner = (carol.post("api/bookings", json=body).json() for _ in range(2))
    claimed = client(hub, SPAWNER).post(f"api/bookings/{by_owner['id']}/claim",
                                       json={"server": "gpu"})
    assert claimed.status_code == 200, claimed.text
    ended_by_admin = client(hub, ADMIN).delete(f"api/bookings/{by_admin['id']}").json()
    ended_by_owner = carol.delete(f"api/bookings/{by_owner['id']}").json()
    assert ended_by_admin["release_reason"] == ended_by_owner["release_reason"] == "ended"

    messages = {n["booking_id"]: n["message"] for n in carol.get("api/users/carol/notices").json()[
        "notices"] if n["kind"] == "ended"}
    assert messages == {
        by_admin["id"]: f"Your booking #{by_admin['id']} in pool a100 was ended at "
        f"{_clock(ended_by_admin['end'])} by an administrator; the rest of its time is free for "
        "others.",
        by_owner["id"]: f"Your booking #{by_owner['id']} in pool a100 was ended at "
        f"{_clock(ended_by_owner['end'])} (End now); its server was stopped and the rest of its "
        "time is free for others.",
    }


def test_a_maintenance_window_already_over_is_refused(hub):
    end = floor_to_grid(datetime.now(timezone.utc), 15) - timedelta(hours=1)
    body = {"pool": "a100", "start": format_time(end - timedelta(hours=2)), "end": format_time(end)}
    admin = client(hub, ADMIN)
    assert error(admin.post("api/maintenance", json=body), 400) == (
        f"This maintenance window ends at {end:%Y-%m-%d %H:%M} UTC, which has already passed: a "
        "window must end in the future.")
    listed = admin.get("api/maintenance", params={"start": body["start"]}).json()["windows"]
    assert [w for w in listed if w["end"] == body["end"]] == []
