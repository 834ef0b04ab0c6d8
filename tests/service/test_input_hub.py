"""Hostile and careless input against the real Hub, proxy and service (issue 16, items 3-8).

Every bad input is a JSON 4xx naming what is wrong, never a 5xx; lists are paged; writes are
rate-limited per user; the feed link is minted only by an XSRF-guarded POST; a revoked token
stops working within the service's auth cache age.

The module's Hub is configured for these tests: a 2-second auth cache (so revocation is quick
to observe) and a write burst of 40 a user with a refill of 1 a minute, which only bob, the
rate-limit test's user, ever exhausts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from hub_harness import RunningHub, start_booking_hub

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

pytestmark = pytest.mark.e2e

AUTH_CACHE_SECONDS = 2
WRITE_BURST = 40
HUGE_ID = "9" * 5000  # more digits than Python converts to int at all


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    extra = f"""
        c.GPUBookingService.auth_cache_seconds = {AUTH_CACHE_SECONDS}
        c.GPUBookingService.write_burst = {WRITE_BURST}
        c.GPUBookingService.write_rate_per_minute = 1
    """
    with start_booking_hub(tmp_path_factory.mktemp("input-hub"), extra_service_config=extra) as hub:
        yield hub


_slots = itertools.count()


def next_window(hours: int = 2) -> tuple[str, str]:
    """Non-overlapping windows from the day after tomorrow on (inside the test Hub's 60-day
    horizon; never starting within minutes, even when a run crosses midnight)."""
    day0 = floor_to_grid(datetime.now(timezone.utc), 24 * 60) + timedelta(days=2)
    start = day0 + timedelta(hours=3 * next(_slots))
    return format_time(start), format_time(start + timedelta(hours=hours))


def as_user(hub: RunningHub, name: str) -> httpx.Client:
    return hub.api(hub.user_token(name))


def json_refusal(response: httpx.Response) -> dict:
    """The body of a refusal, checked to be the service's JSON error shape."""
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:200]
    body = response.json()
    assert set(body) == {"status", "message"} and body["status"] == response.status_code
    return body


# (who, method, path, body, expected status, words the message must contain)
BAD_INPUTS = [
    ("ada", "POST", "api/bookings", "[" * 100_000 + "]" * 100_000, 400, "nested too deeply"),
    ("ada", "POST", "api/series", "{\"a\":" * 50_000 + "1" + "}" * 50_000, 400,
     "nested too deeply"),
    ("ada", "GET", "api/pools/a100/availability?start=9999-12-31T23:59:59Z", None, 400,
     "years 2000 to 2199"),
    ("ada", "GET", "api/pools/a100/availability?end=9999-12-31T23:45:00Z", None, 400,
     "years 2000 to 2199"),
    ("ada", "GET", "api/bookings?start=0001-01-01T00:00:00%2B01:00", None, 400,
     "years 2000 to 2199"),
    ("ada", "POST", "api/bookings", {"pool": "a100", "gpus": 1, "start": "{start}",
                                     "end": "9999-12-31T23:45:00Z"}, 400, "years 2000 to 2199"),
    ("ada", "GET", f"api/bookings/{HUGE_ID}", None, 404, "no booking"),
    ("ada", "PATCH", f"api/bookings/{HUGE_ID}", {"end": "{end}"}, 404, "no booking"),
    ("ada", "DELETE", f"api/bookings/{HUGE_ID}", None, 404, "no booking"),
    ("admin", "POST", f"api/bookings/{HUGE_ID}/claim", {"server": ""}, 404, "no booking"),
    ("admin", "DELETE", f"api/maintenance/{HUGE_ID}", None, 404, "no maintenance window"),
    ("ada", "GET", f"api/series/{HUGE_ID}", None, 404, "no booking series"),
    ("admin", "POST", "api/maintenance", {"pool": "a100", "node": ["node-a"], "start": "{start}",
                                          "end": "{end}"}, 400, "'node' must be the name"),
    ("admin", "POST", "api/maintenance", {"pool": "a100", "node": {"x": 1}, "start": "{start}",
                                          "end": "{end}"}, 400, "'node' must be the name"),
    ("ada", "POST", "api/bookings", {"pool": "shared", "gpus": 0.2501, "start": "{start}",
                                     "end": "{end}"}, 400, "nearest bookable amounts are 0.25 and 0.5"),
    ("ada", "POST", "api/bookings", {"pool": "shared", "gpus": "0.3333", "start": "{start}",
                                     "end": "{end}"}, 400, "nearest bookable amounts are 0.25 and 0.5"),
    ("ada", "POST", "api/bookings", {"pool": "a100", "gpus": 1.5, "start": "{start}",
                                     "end": "{end}"}, 400, "nearest bookable amounts are 1 and 2"),
    ("ada", "POST", "api/bookings", {"pool": "a100", "gpus": "1" * 5000 + "/3", "start": "{start}",
                                     "end": "{end}"}, 400, "'gpus' must be a number"),
    ("ada", "POST", "api/series", {"pool": "shared", "gpus": 0.2501, "start": "{start}",
                                   "end": "{end}", "repeat": "weekly", "count": 2}, 400,
     "nearest bookable amounts are 0.25 and 0.5"),
    ("ada", "POST", "api/bookings", {"pool": "a100", "gpus": 1, "start": 1700000000,
                                     "end": "{end}"}, 400, "'start' must be an ISO 8601 time"),
    ("ada", "GET", "api/bookings?limit=0", None, 400, "'limit' must be a whole number from 1 to 500"),
    ("ada", "GET", "api/bookings?limit=501", None, 400, "from 1 to 500"),
    ("ada", "GET", f"api/bookings?limit={HUGE_ID}", None, 400, "from 1 to 500"),
    ("ada", "GET", "api/maintenance?limit=-1", None, 400, "from 1 to 500"),
    ("ada", "GET", "api/bookings?cursor=not-a-cursor", None, 400, "'cursor' must be the next_cursor"),
    ("ada", "GET", "api/maintenance?cursor=" + "A" * 4000, None, 400, "'cursor' must be"),
    ("admin", "GET", "api/users/no-such-user/budget", None, 404, "no user named 'no-such-user'"),
]


@pytest.mark.parametrize(
    "who, method, path, body, status, words",
    BAD_INPUTS,
    ids=[f"{m} {p[:50]} {json.dumps(b)[:30] if b else ''}" for _, m, p, b, _, _ in BAD_INPUTS],
)
def test_bad_input_is_a_json_4xx_naming_the_problem(hub, who, method, path, body, status, words):
    start, end = next_window()
    content = json.dumps(body).replace("{start}", start).replace("{end}", end) if isinstance(body, dict) else body
    response = as_user(hub, who).request(
        method, path, content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text[:300]
    assert words in json_refusal(response)["message"]


def test_lists_are_paged_with_a_cursor_until_the_last_page(hub):
    ada = as_user(hub, "ada")
    created = []
    for _ in range(5):
        start, end = next_window()
        response = ada.post("api/bookings", json={"pool": "a100", "gpus": 1, "start": start,
                                                  "end": end, "note": "paging"})
        assert response.status_code == 201, response.text
        created.append(response.json()["id"])
    seen, pages, cursor = [], [], None
    while True:
        params = {"user": "ada", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = ada.get("api/bookings", params=params).json()
        pages.append(len(page["bookings"]))
        seen += [b["id"] for b in page["bookings"] if b["note"] == "paging"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == created  # in start order, each once
    assert all(size == 2 for size in pages[:-1]) and 1 <= pages[-1] <= 2
    # without a limit, one page of up to 100 holds them all
    everything = ada.get("api/bookings", params={"user": "ada"}).json()
    assert everything["next_cursor"] is None
    assert set(created) <= {b["id"] for b in everything["bookings"]}


def test_maintenance_list_is_paged_too(hub):
    admin = as_user(hub, "admin")
    ids = []
    for _ in range(3):
        start, end = next_window()
        response = admin.post("api/maintenance", json={"pool": "a100", "start": start, "end": end,
                                                       "reason": "paging"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    first = admin.get("api/maintenance", params={"limit": 2}).json()
    assert len(first["windows"]) == 2 and first["next_cursor"]
    rest = admin.get("api/maintenance", params={"limit": 500, "cursor": first["next_cursor"]})
    listed = [w["id"] for w in first["windows"] + rest.json()["windows"]]
    assert rest.json()["next_cursor"] is None
    assert [i for i in listed if i in ids] == ids and len(listed) == len(set(listed))
    for window_id in ids:
        assert admin.delete(f"api/maintenance/{window_id}").status_code == 204


def test_feed_token_is_minted_only_by_a_post_with_the_xsrf_token(hub):
    with contextlib.closing(hub.login_session("carol")) as session:
        # a cross-site GET (cookie only) cannot mint or burn the link
        state = session.get("api/users/carol/feed-token")
        assert state.status_code == 200 and state.json() == {"user": "carol", "exists": False}
        assert "'_xsrf'" in json_refusal(session.post("api/users/carol/feed-token"))["message"]
        forged = session.post("api/users/carol/feed-token", headers={"X-XSRFToken": "forged"})
        assert forged.status_code == 403
        assert session.get("api/users/carol/feed-token").json()["exists"] is False
        minted = session.post("api/users/carol/feed-token", headers=hub.xsrf_headers(session))
        assert minted.status_code == 200, minted.text
        link = minted.json()["url"]
        assert httpx.get(link).status_code == 200
        assert session.get("api/users/carol/feed-token").json()["exists"] is True
        assert httpx.get(link).status_code == 200  # reading the state left the link alone


def test_writes_over_the_rate_are_429_with_retry_after_and_reads_still_work(hub):
    bob = as_user(hub, "bob")
    answers = [bob.delete("api/bookings/999999") for _ in range(WRITE_BURST + 2)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:WRITE_BURST] == [404] * WRITE_BURST
    # the refill is 1 a minute: at most one more write can have trickled in meanwhile
    limited = [answer for answer in answers[WRITE_BURST:] if answer.status_code == 429]
    assert limited, statuses[WRITE_BURST:]
    refusal = json_refusal(limited[-1])
    assert "Too many changes" in refusal["message"]
    retry_after = int(limited[-1].headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert f"try again in {retry_after} seconds" in refusal["message"]
    assert bob.get("api/bookings").status_code == 200  # reads are not limited
    # other users are limited separately, and the Hub's spawner is never limited
    assert as_user(hub, "ada").delete("api/bookings/999999").status_code == 404
    spawner = hub.api(hub.service_token)
    assert {spawner.delete("api/bookings/999999").status_code for _ in range(WRITE_BURST + 5)} == {
        404
    }


def test_a_revoked_token_stops_working_within_the_auth_cache_age(hub):
    created = httpx.post(
        f"{hub.hub_api_url}/users/ada/tokens",
        headers={"Authorization": f"token {hub.admin_token}"},
        json={"note": "revocation test"},
    )
    created.raise_for_status()
    token, token_id = created.json()["token"], created.json()["id"]
    with hub.api(token) as client:
        assert client.get("api/pools").status_code == 200  # now cached by the service
        revoked = httpx.delete(
            f"{hub.hub_api_url}/users/ada/tokens/{token_id}",
            headers={"Authorization": f"token {hub.admin_token}"},
        )
        assert revoked.status_code == 204
        time.sleep(AUTH_CACHE_SECONDS + 1)
        after = client.get("api/pools")
        assert after.status_code == 403, after.text
        assert "Authentication required" in json_refusal(after)["message"]


def test_calendars_reach_back_half_a_year_only(hub):
    from sqlalchemy import create_engine, update
    from sqlalchemy.orm import Session

    from jhub_gpubooking.db.models import BookingRow
    from jhub_gpubooking.service.feeds import FEED_HISTORY_DAYS

    ada = as_user(hub, "ada")
    ids = []
    for _ in range(2):
        start, end = next_window()
        response = ada.post("api/bookings", json={"pool": "a100", "gpus": 1, "start": start,
                                                  "end": end, "note": "history"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    # move them into the past, one just inside and one just outside the calendar's reach
    now = floor_to_grid(datetime.now(timezone.utc), 15)
    engine = create_engine(f"sqlite:///{hub.directory / 'bookings.sqlite'}")
    with Session(engine) as session, session.begin():
        for booking_id, days in zip(ids, (FEED_HISTORY_DAYS - 1, FEED_HISTORY_DAYS + 1)):
            end = now - timedelta(days=days)
            session.execute(
                update(BookingRow)
                .where(BookingRow.id == booking_id)
                .values(start=end - timedelta(hours=1), end=end)
            )
    engine.dispose()
    calendar = ada.get("api/users/ada/bookings.ics")
    assert calendar.status_code == 200
    assert f"booking-{ids[0]}@" in calendar.text and f"booking-{ids[1]}@" not in calendar.text
    # the API still lists both
    listed = ada.get("api/bookings", params={"user": "ada", "limit": 500}).json()["bookings"]
    assert set(ids) <= {b["id"] for b in listed}
