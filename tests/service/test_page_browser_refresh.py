"""A reservation page left open keeps itself current (real Hub, Chromium).

Students leave the page open for hours: meanwhile an admin ends a booking, the waitlist books
one, a booking made from the command line appears. The page refreshes every
``c.ReservationPage.page_refresh_seconds`` (1 s here) while it is visible, never while the user
is changing a booking in it, keeps the pages opened with "Show more", asks nothing while hidden,
says when the service cannot answer until it can again, and offers to reload when the login ran
out.

The page lists two bookings at a time here; the users take turns so that a test's new booking
is on its user's first page (or the test opens the next).
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from page_browser import (
    HeldRequests,
    LocalWindows,
    book_through_api,
    booking_rows,
    fill_booking_form,
    local_input,
    log_in,
    open_page,
    start_page_hub,
    utc,
)

from jhub_gpubooking.db.session import DATABASE_UNAVAILABLE_MESSAGE

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

windows = LocalWindows()

REFRESH_CONFIG = """
c.ReservationPage.page_refresh_seconds = 1
c.ReservationPage.page_list_size = 2
"""
# several refresh periods: what a refresh shows has had time to show
SETTLED_MS = 3_000


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_page_hub(tmp_path_factory.mktemp("refresh-hub"), REFRESH_CONFIG, refresh=True) as running:
        yield running


def row(page, booking_id: int):
    return page.locator(f'#gb-my-bookings tr[data-booking-id="{booking_id}"]')


def test_an_open_page_shows_what_changed_elsewhere(hub, context):
    ended = book_through_api(hub, "ada", "a100", 1, *windows.next())["id"]
    page = open_page(context, hub, "ada")
    expect(row(page, ended)).to_have_count(1)

    # an admin cancels ada's booking; ada books another one from the command line
    assert hub.api(hub.user_token("admin")).delete(f"api/bookings/{ended}").status_code == 200
    added = book_through_api(hub, "ada", "a100", 1, *windows.next())["id"]

    expect(row(page, added)).to_have_count(1)
    expect(row(page, ended)).to_have_count(0)
    # the timeline's line of the user's own bookings follows too
    expect(page.locator(f'.gb-mine[data-booking-id="{added}"]')).to_have_count(1)
    expect(page.locator(f'.gb-mine[data-booking-id="{ended}"]')).to_have_count(0)


def test_a_refresh_waits_while_a_new_end_is_being_typed(hub, context):
    start, end = windows.next()
    changing = book_through_api(hub, "bob", "a100", 1, start, end)["id"]
    page = open_page(context, hub, "bob")
    summary = row(page, changing).locator("summary")
    summary.click()
    typed = local_input(end + timedelta(minutes=45))
    page.fill(f"#gb-new-end-{changing}", typed)
    added = book_through_api(hub, "bob", "a100", 1, *windows.next())["id"]

    page.wait_for_timeout(SETTLED_MS)
    # nothing was redrawn under the user: the form is open with what they typed
    assert row(page, changing).locator("details").get_attribute("open") is not None
    assert page.input_value(f"#gb-new-end-{changing}") == typed
    assert row(page, added).count() == 0

    # done with it (closed, and the focus elsewhere): the page catches up
    summary.click()
    page.click("#gb-mine-heading")
    expect(row(page, added)).to_have_count(1)


def test_a_refresh_on_its_way_when_new_end_is_opened_does_not_close_it(hub, context):
    # today, before every other booking of ada's: first on her list's first page
    now = datetime.now(timezone.utc)
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0) + timedelta(hours=1)
    end = start + timedelta(hours=1)
    changing = book_through_api(hub, "ada", "a100", 1, start, end)["id"]
    page = open_page(context, hub, "ada")
    expect(row(page, changing)).to_have_count(1)
    held = HeldRequests(page, "/api/bookings?user=ada")
    held.wait_for(1)  # the next refresh is on its way
    row(page, changing).locator("summary").click()
    typed = local_input(end + timedelta(minutes=30))
    page.fill(f"#gb-new-end-{changing}", typed)
    held.release(held.routes)  # its answer comes in while the user types

    page.wait_for_timeout(SETTLED_MS)
    assert row(page, changing).locator("details").get_attribute("open") is not None
    assert page.input_value(f"#gb-new-end-{changing}") == typed


def test_a_refresh_keeps_the_pages_shown_with_show_more(hub, context):
    booked = [book_through_api(hub, "carol", "a100", 1, *windows.next())["id"] for _ in range(3)]
    page = open_page(context, hub, "carol")
    expect(page.locator("#gb-my-bookings tr[data-booking-id]")).to_have_count(2)
    page.locator("#gb-my-bookings button.gb-more").click()
    expect(page.locator("#gb-my-bookings tr[data-booking-id]")).to_have_count(3)

    added = book_through_api(hub, "carol", "a100", 1, *windows.next())["id"]
    # refilled up to the three shown: two pages of two, so the fourth shows too
    expect(row(page, added)).to_have_count(1)
    page.wait_for_timeout(SETTLED_MS)
    assert booking_rows(page, "gb-my-bookings") == [*booked, added]


def test_a_hidden_page_asks_nothing_and_catches_up_when_shown(hub, context):
    page = open_page(context, hub, "admin")
    asked = ApiRequests(page)
    held = HeldRequests(page, "/api/bookings?user=admin")
    held.wait_for(1)
    set_visibility(page, "hidden")  # while a refresh is on its way
    held.let_go()
    # that refresh finishes, its admin lists included (CI once caught them going out after
    # the tab was hidden); only what starts after it counts
    asked.wait_until_quiet()
    asked.urls.clear()
    added = book_through_api(hub, "admin", "a100", 1, *windows.next())["id"]

    page.wait_for_timeout(SETTLED_MS)
    assert asked.urls == []
    assert row(page, added).count() == 0

    set_visibility(page, "visible")
    expect(row(page, added)).to_have_count(1)


class ApiRequests:
    """The API requests ``page`` sends, and how many are still on their way."""

    def __init__(self, page):
        self.page = page
        self.urls: list[str] = []
        self.on_their_way: set = set()  # sent since this began listening, not yet answered
        self.last_sent = time.monotonic()
        page.on("request", self._sent)
        page.on("requestfinished", self._answered)
        page.on("requestfailed", self._answered)

    def _sent(self, request) -> None:
        if "/api/" in request.url:
            self.urls.append(request.url)
            self.on_their_way.add(request)
            self.last_sent = time.monotonic()

    def _answered(self, request) -> None:
        self.on_their_way.discard(request)

    def wait_until_quiet(self, quiet_seconds: float = 0.5, timeout_seconds: float = 30) -> None:
        """Until nothing is on its way and nothing went out for ``quiet_seconds`` (a refresh
        sends its requests one after another, each as soon as the one before it is answered)."""
        deadline = time.monotonic() + timeout_seconds
        while self.on_their_way or time.monotonic() - self.last_sent < quiet_seconds:
            assert time.monotonic() < deadline, f"the page kept asking: {self.urls[-5:]}"
            self.page.wait_for_timeout(100)


def set_visibility(page, state: str) -> None:
    """What the browser does when the tab is hidden or shown again (a headless tab stays visible)."""
    page.evaluate(
        """(state) => {
            Object.defineProperty(document, "visibilityState", { configurable: true, get: () => state });
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        state,
    )


def test_while_the_service_cannot_answer_the_page_says_so_and_recovers(hub, context):
    page = open_page(context, hub, "admin")  # one booking so far: the new one is on the first page
    error = page.locator("#gb-load-error")
    expect(error).to_be_hidden()

    # the database goes away: every list the page reads answers 503
    def unavailable(route):
        if route.request.method != "GET":
            route.continue_()
            return
        body = {"status": 503, "message": DATABASE_UNAVAILABLE_MESSAGE}
        route.fulfill(status=503, content_type="application/json", body=json.dumps(body))

    def lists(url: str) -> bool:
        return "/api/bookings?" in url

    page.route(lists, unavailable)
    expect(error).to_have_text(f"The booking page could not refresh: {DATABASE_UNAVAILABLE_MESSAGE}")

    # a booking made meanwhile is reported as made, though the list could not be read after it
    start, end = windows.next()
    fill_booking_form(page, "a100", "1 GPU", start, end, note="during the outage")
    page.click("#gb-book-button")
    expect(page.locator("#gb-form-feedback")).to_have_class(re.compile(r"\balert-success\b"))
    expect(error).to_be_visible()

    # back: the message goes and the booking shows, without a reload
    page.unroute(lists, unavailable)
    expect(error).to_be_hidden()
    expect(page.locator("#gb-my-bookings tr", has_text="during the outage")).to_have_count(1)


def test_when_the_login_runs_out_the_page_says_so_and_reloads_through_the_login(hub, context):
    page = open_page(context, hub, "bob")
    context.clear_cookies()  # the Hub's login and the service's run out while the page is open
    error = page.locator("#gb-load-error")
    expect(error).to_contain_text("The booking page could not refresh: Authentication required")

    page.get_by_role("link", name="Reload the page").click()
    page.wait_for_url(re.compile(re.escape(f"{hub.public_url}{hub.hub_prefix}login")))
    log_in(page, hub, "bob")
    page.wait_for_timeout(SETTLED_MS)
    expect(error).to_be_hidden()


def test_a_refresh_that_finds_nothing_new_draws_nothing_again(hub, context):
    # bob's booking later today (first on his list) and his wait for a window the admin fills
    today = datetime.now(timezone.utc).replace(second=0, microsecond=0) + timedelta(hours=3)
    today -= timedelta(minutes=today.minute % 15)
    booked = book_through_api(hub, "bob", "a100", 1, today, today + timedelta(hours=1))["id"]
    start, end = windows.next()
    for _ in range(2):  # both a100 nodes
        book_through_api(hub, "admin", "a100", 2, start, end)
    body = {"pool": "a100", "gpus": 1, "start": utc(start), "end": utc(end)}
    wait = hub.api(hub.user_token("bob")).post("api/waits", json=body).json()
    assert wait["state"] == "waiting", wait

    page = open_page(context, hub, "bob")
    cancel = page.get_by_role("button", name=re.compile(rf"^Cancel booking {booked} "))
    withdraw = page.get_by_role("button", name=f"Withdraw wait {wait['id']}")
    segment = page.locator(".gb-pool-row[data-pool] .gb-seg").first
    for shown in (cancel, withdraw, segment):
        shown.evaluate("(node) => { node.gbDrawnBefore = true; }")
    withdraw.focus()  # a keyboard user about to press it
    slot_before = floor_slot()
    asked = ApiRequests(page)
    # three whole refreshes: one runs at a time, so the fourth begins after the third drew
    until_refreshes(page, asked, "bob", 4)

    # the very elements are still there: a press whose mouse-up came now would still reach them
    assert cancel.evaluate("(node) => node.gbDrawnBefore === true")
    assert withdraw.evaluate("(node) => node.gbDrawnBefore === true && node === document.activeElement")
    if floor_slot() == slot_before:  # the timeline moves on with each new slot
        assert segment.evaluate("(node) => node.gbDrawnBefore === true")

    # something new in "My bookings": that table is drawn again, the waits (unchanged) are not
    added = book_through_api(hub, "bob", "a100", 1, today + timedelta(hours=1), today + timedelta(hours=2))["id"]
    expect(row(page, added)).to_have_count(1)
    assert cancel.evaluate("(node) => node.gbDrawnBefore === undefined")
    assert withdraw.evaluate("(node) => node.gbDrawnBefore === true")


def test_the_admin_tables_are_drawn_again_only_when_they_changed(hub, context):
    book_through_api(hub, "ada", "a100", 1, *windows.next())
    page = open_page(context, hub, "admin")
    first = page.locator("#gb-all-bookings tr[data-booking-id]").first
    expect(first).to_be_visible()
    shown = int(first.get_attribute("data-booking-id"))
    force = first.get_by_role("button").first  # "Force end now" or "Force cancel"
    force.evaluate("(node) => { node.gbDrawnBefore = true; }")
    asked = ApiRequests(page)
    until_refreshes(page, asked, "admin", 4)
    assert force.evaluate("(node) => node.gbDrawnBefore === true")

    # that booking ends elsewhere: the table is drawn again without it
    assert hub.api(hub.user_token("admin")).delete(f"api/bookings/{shown}").status_code == 200
    expect(page.locator(f'#gb-all-bookings tr[data-booking-id="{shown}"]')).to_have_count(0)


def until_refreshes(page, asked: ApiRequests, user: str, count: int, timeout_seconds: float = 30) -> None:
    """Until ``count`` refreshes have asked for ``user``'s bookings since ``asked`` began."""
    deadline = time.monotonic() + timeout_seconds
    while sum(f"/api/bookings?user={user}" in url for url in asked.urls) < count:
        assert time.monotonic() < deadline, f"the page stopped refreshing: {asked.urls[-5:]}"
        page.wait_for_timeout(100)


def floor_slot() -> datetime:
    now = datetime.now(timezone.utc)
    return now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
