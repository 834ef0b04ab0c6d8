"""The reservation page's tables load one page of the API's paged lists at a time, and the page
runs under its Content-Security-Policy without a single violation (real Hub, Chromium).

The module's Hub sets ``page_list_size = 2`` so three bookings already need a second page.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlparse

import pytest
from page_browser import (
    HeldRequests,
    LocalWindows,
    book_through_api,
    booking_rows,
    csp_violations,
    open_page,
    start_page_hub,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

windows = LocalWindows()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    extra = "c.ReservationPage.page_list_size = 2\n"
    with start_page_hub(tmp_path_factory.mktemp("paging-hub"), extra) as running:
        yield running


def test_tables_show_a_page_at_a_time_and_show_more_loads_the_next(hub, context):
    booked = [book_through_api(hub, "ada", "a100", 1, *windows.next())["id"] for _ in range(3)]
    violations = csp_violations(context)
    page = open_page(context, hub, "ada")
    page.wait_for_selector("#gb-my-bookings tr[data-booking-id]")
    assert booking_rows(page, "gb-my-bookings") == booked[:2]
    more = page.locator("#gb-my-bookings button.gb-more")
    assert more.inner_text() == "Show more of my bookings"
    more.click()
    page.wait_for_function(
        "() => document.querySelectorAll('#gb-my-bookings tr[data-booking-id]').length === 3"
    )
    assert booking_rows(page, "gb-my-bookings") == booked
    assert page.locator("#gb-my-bookings button.gb-more").count() == 0  # the last page
    assert violations == []


def test_admin_table_pages_through_everyones_bookings(hub, context):
    booked = [book_through_api(hub, "bob", "a100", 1, *windows.next())["id"] for _ in range(3)]
    violations = csp_violations(context)
    admin = open_page(context, hub, "admin")
    admin.wait_for_selector("#gb-all-bookings tr[data-booking-id]")
    assert len(booking_rows(admin, "gb-all-bookings")) == 2
    # every booking from the first test and this one: 6 rows after two more pages
    for shown in (4, 6):
        admin.locator("#gb-all-bookings button.gb-more").click()
        admin.wait_for_function(
            "() => document.querySelectorAll('#gb-all-bookings tr[data-booking-id]').length"
            f" === {shown}"
        )
    assert set(booked) <= set(booking_rows(admin, "gb-all-bookings"))
    assert admin.locator("#gb-all-bookings button.gb-more").count() == 0
    assert violations == []


def list_starts(urls: list[str], user: str) -> list[datetime]:
    """The ``start`` of every list of ``user``'s own bookings the page asked for, in order.

    (carol is a service admin: her page also lists everyone's bookings, after the timeline.)
    """
    queries = [parse_qs(urlparse(url).query) for url in urls if "/api/bookings?" in url]
    mine = [query for query in queries if query.get("user") == [user]]
    assert all(query["limit"] == ["2"] for query in mine), urls
    return [datetime.fromisoformat(query["start"][0].replace("Z", "+00:00")) for query in mine]


def test_past_bookings_are_fetched_only_when_asked_for(hub, context):
    start, end = windows.next()
    booking = book_through_api(hub, "carol", "a100", 1, start, end)
    cancelled = hub.api(hub.user_token("carol")).delete(f"api/bookings/{booking['id']}")
    assert cancelled.status_code == 200
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    page = open_page(context, hub, "carol")
    # the cancelled booking is hidden until the box is ticked; the page asked from this slot on
    assert page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]').count() == 0
    now = datetime.now(timezone.utc)
    assert [now - at < timedelta(minutes=20) for at in list_starts(requests, "carol")] == [True]
    ticked_at = len(requests)
    page.check("#gb-mine-show-past")
    row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
    row.wait_for()
    assert "cancelled" in row.inner_text()
    # ticking the box reaches 30 days back (older history: the calendar feed)
    now = datetime.now(timezone.utc)
    since = list_starts(requests[ticked_at:], "carol")
    month_ago = now - timedelta(days=30)
    assert [month_ago - timedelta(minutes=20) < at <= month_ago for at in since] == [True]


def test_a_double_click_on_show_more_loads_the_next_page_once(hub, context):
    """(The module's last test: the admin table test counts every booking made before it.)"""
    booked = [book_through_api(hub, "admin", "a100", 1, *windows.next())["id"] for _ in range(3)]
    page = open_page(context, hub, "admin")
    page.wait_for_selector("#gb-my-bookings tr[data-booking-id]")
    held = HeldRequests(page, "/api/bookings?user=admin")
    held.one_request_of_a_double_click(page.locator("#gb-my-bookings button.gb-more"))
    page.wait_for_selector("#gb-my-bookings tr[data-booking-id] >> nth=2")
    page.wait_for_load_state("networkidle")
    assert booking_rows(page, "gb-my-bookings") == booked  # the third once, not twice
