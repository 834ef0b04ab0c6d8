"""The reservation page in a real browser (Debian's Chromium through Playwright) on a real Hub.

Each test books in its own window, so tests sharing the Hub never compete for capacity (helpers
and the browser's zone: page_browser.py).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from page_browser import (
    BROWSER_ZONE,
    LocalWindows,
    LostFirstAnswer,
    api_bookings,
    book_through_api,
    csp_violations,
    fill_booking_form,
    local_input,
    open_page,
    screenshot,
    shown_sentence,
    start_page_hub,
    utc,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")

windows = LocalWindows()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_page_hub(tmp_path_factory.mktemp("page-hub")) as running:
        yield running


def test_user_books_a_share_and_sees_it_on_the_timeline_and_in_my_bookings(hub, context):
    page = open_page(context, hub, "ada")
    assert page.locator("#logout").get_attribute("href") == f"{hub.hub_prefix}logout"
    assert page.get_by_role("link", name="Home").get_attribute("href") == f"{hub.hub_prefix}home"
    assert page.locator("#gb-time-zone").inner_text() == BROWSER_ZONE
    assert page.locator("#gb-admin").count() == 0
    page.select_option("#gb-pool", "shared")
    assert page.locator("#gb-amount option").all_inner_texts() == [
        "1/4 GPU",
        "1/2 GPU",
        "3/4 GPU",
        "1 GPU",
    ]

    start, end = windows.next()
    fill_booking_form(page, "shared", "1/2 GPU", start, end, note="fine-tuning")
    page.click("#gb-book-button")
    feedback = page.locator("#gb-form-feedback.alert-success")
    feedback.wait_for()
    assert feedback.inner_text().startswith("Booked 1/2 GPU in L40S shared")

    # the browser's local 08:00 Berlin reached the API as UTC
    [booking] = [b for b in api_bookings(hub, "ada").values() if b["note"] == "fine-tuning"]
    assert (booking["start"], booking["end"], booking["gpus"]) == (utc(start), utc(end), 0.5)

    row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
    row.wait_for()
    assert row.locator("time").first.get_attribute("datetime") == utc(start)
    assert "1/2 GPU" in row.inner_text() and "upcoming" in row.inner_text()
    # upcoming and unclaimed: it may still move to let another request in
    assert booking["placement_provisional"] is True
    assert "provisional, GPU assigned at start" in row.inner_text()

    shared_row = page.locator('.gb-pool-row[data-pool="shared"]')
    assert shared_row.locator(f'.gb-mine[data-booking-id="{booking["id"]}"]').count() == 1
    segment = shared_row.locator(f'.gb-seg[data-start="{utc(start)}"]')
    assert segment.get_attribute("data-free") == "0.5"
    segment.focus()
    assert "1/2 of 1 GPU free" in page.locator("#gb-timeline-detail").inner_text()

    # a shorter view zooms in: the same stretch, wider, with hour marks on the axis
    width_in_week = segment.bounding_box()["width"]
    page.select_option("#gb-range", "3")
    page.wait_for_function(
        "() => !document.querySelector('.gb-axis').textContent.includes('"
        + (start + timedelta(days=3)).strftime("%-d %b")
        + "')"
    )
    zoomed = shared_row.locator(f'.gb-seg[data-start="{utc(start)}"]')
    assert zoomed.bounding_box()["width"] > 2 * width_in_week
    assert re.search(r"\b(0[0-9]|1[0-9]|2[0-3]):00\b", page.locator(".gb-axis").inner_text())
    screenshot(page, "reservation-page")


def test_timeline_stretch_fills_the_form_and_arrow_keys_move_along_the_bar(hub, context):
    page = open_page(context, hub, "ada")
    first = page.locator('.gb-pool-row[data-pool="a100"] .gb-seg').first
    first.focus()
    first.press("Enter")
    assert page.locator("#gb-pool").input_value() == "a100"
    assert page.evaluate("document.activeElement.id") == "gb-amount"
    book_through_api(hub, "bob", "a100", 1, *windows.next())
    page.reload()
    segments = page.locator('.gb-pool-row[data-pool="a100"] .gb-seg')
    segments.first.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.start") == segments.nth(1).get_attribute(
        "data-start"
    )


def test_refusal_is_explained_in_place_with_the_api_message(hub, context):
    start, end = windows.next()
    book_through_api(hub, "bob", "shared", 0.75, start, end)
    refused = hub.api(hub.user_token("ada")).post(
        "api/bookings", json={"pool": "shared", "gpus": 0.5, "start": utc(start), "end": utc(end)}
    )
    assert refused.status_code == 409

    page = open_page(context, hub, "ada")
    fill_booking_form(page, "shared", "1/2 GPU", start, end)
    page.click("#gb-book-button")
    alert = page.locator("#gb-form-feedback.alert-danger")
    alert.wait_for()
    # the API's sentence, its UTC times in the browser's zone as the page shows times
    assert alert.inner_text() == shown_sentence(page, refused.json()["message"], BROWSER_ZONE)
    assert "UTC" not in alert.inner_text()
    assert (alert.get_attribute("role"), alert.get_attribute("aria-live")) == ("alert", "assertive")
    screenshot(page, "refusal-in-place")


def test_capacity_refusal_offers_the_next_free_interval_and_books_it_in_one_click(hub, context):
    start, end = windows.next()
    book_through_api(hub, "bob", "shared", 0.75, start, end)
    body = {"pool": "shared", "gpus": 0.5, "start": utc(start), "end": utc(end)}
    refused = hub.api(hub.user_token("ada")).post("api/bookings", json=body)
    assert refused.status_code == 409
    free = refused.json()["next_free"]
    violations = csp_violations(context)

    page = open_page(context, hub, "ada")
    assert page.locator("#gb-next-free-button").count() == 0
    fill_booking_form(page, "shared", "1/2 GPU", start, end, note="one click")
    page.click("#gb-book-button")
    offer = page.locator("#gb-next-free-button")
    offer.wait_for()
    # the refusal's message stays as the API wrote it; the offer sits beside it
    assert page.locator("#gb-form-feedback.alert-danger").inner_text() == shown_sentence(
        page, refused.json()["message"], BROWSER_ZONE)
    label = offer.inner_text()
    zone = ZoneInfo(BROWSER_ZONE)
    free_start, free_end = (datetime.fromisoformat(free[key].replace("Z", "+00:00")).astimezone(zone)
                            for key in ("start", "end"))
    assert label.startswith("Book ") and label.endswith(" instead")
    # shown in the browser's zone, not in UTC
    assert f"{free_start:%H:%M}" in label and f"{free_end:%H:%M}" in label
    screenshot(page, "refusal-next-free")

    offer.click()
    feedback = page.locator("#gb-form-feedback.alert-success")
    feedback.wait_for()
    assert feedback.inner_text().startswith("Booked 1/2 GPU in L40S shared")
    [booking] = [b for b in api_bookings(hub, "ada").values() if b["note"] == "one click"]
    assert (booking["start"], booking["end"], booking["gpus"]) == (free["start"], free["end"], 0.5)
    assert page.locator("#gb-next-free-button").count() == 0
    # the form then shows what was booked (filled once the page has refreshed its lists)
    playwright_api.expect(page.locator("#gb-start")).to_have_value(local_input(free_start))
    assert violations == []


def test_a_refused_user_joins_the_waitlist_and_sees_the_wait_booked(hub, context):
    start, end = windows.next()
    # a100 (the test before books 'shared' right after its own window): both nodes taken
    blocking, _ = (book_through_api(hub, "bob", "a100", 2, start, end) for _ in range(2))
    violations = csp_violations(context)
    page = open_page(context, hub, "ada")
    fill_booking_form(page, "a100", "1 GPU", start, end)
    page.click("#gb-book-button")
    page.locator("#gb-form-feedback.alert-danger").wait_for()
    page.click("#gb-join-waitlist")
    page.locator("#gb-form-feedback.alert-success", has_text="You are on the waitlist").wait_for()
    [wait] = hub.api(hub.user_token("ada")).get("api/waits").json()["waits"]
    listed = page.locator(f'#gb-my-waits li[data-wait-id="{wait["id"]}"]')
    listed.wait_for()
    assert "1 GPU in A100 80GB" in listed.inner_text()
    assert hub.api(hub.user_token("bob")).delete(f"api/bookings/{blocking['id']}").status_code == 200
    page.reload()
    notice = page.locator('#gb-notices [data-kind="wait_booked"]')
    notice.wait_for()
    booking_id = hub.api(hub.user_token("ada")).get(f"api/waits/{wait['id']}").json()["booking_id"]
    assert f"booking #{booking_id}" in notice.inner_text()
    page.locator(f'#gb-my-bookings tr[data-booking-id="{booking_id}"]').wait_for()
    assert page.locator("#gb-my-waits li").count() == 0
    assert violations == []


def test_user_extends_by_a_slot_picks_a_new_end_and_cancels(hub, context):
    start, end = windows.next()
    booking = book_through_api(hub, "ada", "a100", 1, start, end)
    page = open_page(context, hub, "ada")
    mine = page.locator("#gb-mine-feedback")

    page.get_by_role("button", name=f"Extend booking {booking['id']} by 15 minutes").click()
    page.wait_for_function(
        "() => document.querySelector('#gb-mine-feedback').textContent.includes('now ends')"
    )
    assert api_bookings(hub, "ada")[booking["id"]]["end"] == utc(end + timedelta(minutes=15))

    new_end = end + timedelta(minutes=45)
    row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
    row.locator("summary").click()
    page.get_by_label(f"New end of booking {booking['id']}").fill(local_input(new_end))
    row.get_by_role("button", name="Save").click()
    row.locator(f'time[datetime="{utc(new_end)}"]').wait_for()
    assert api_bookings(hub, "ada")[booking["id"]]["end"] == utc(new_end)

    row.get_by_role("button", name=re.compile(f"^Cancel booking {booking['id']} ")).click()
    page.wait_for_function(
        "() => document.querySelector('#gb-mine-feedback').textContent.includes('is cancelled')"
    )
    assert mine.inner_text() == f"Booking {booking['id']} is cancelled."
    assert api_bookings(hub, "ada")[booking["id"]]["state"] == "cancelled"
    # cancelled bookings are hidden unless asked for (the list is read again after the message)
    playwright_api.expect(row).to_have_count(0)
    page.check("#gb-mine-show-past")
    assert "cancelled" in row.inner_text()


def test_end_now_ends_an_active_booking_at_once(hub, context):
    now = datetime.now(timezone.utc)
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    booking = book_through_api(hub, "bob", "shared", "0.25", start, start + timedelta(hours=1))
    page = open_page(context, hub, "bob")
    row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
    row.wait_for()
    assert "provisional" not in row.inner_text()  # started: its placement is final
    row.get_by_role("button", name=re.compile(f"^End now booking {booking['id']} ")).click()
    page.wait_for_function(
        "() => document.querySelector('#gb-mine-feedback').textContent.includes('has ended')"
    )
    ended = api_bookings(hub, "bob")[booking["id"]]
    assert (ended["state"], ended["release_reason"]) == ("ended", "ended")
    assert datetime.fromisoformat(ended["end"].replace("Z", "+00:00")) <= datetime.now(timezone.utc)


def test_calendar_link_is_created_on_request_shown_once_and_can_be_reset(hub, context):
    feed_state = hub.api(hub.user_token("bob")).get("api/users/bob/feed-token")
    page = open_page(context, hub, "bob")
    create = page.locator("#gb-feed-create")
    page.wait_for_function("() => document.querySelector('#gb-feed-create').textContent === 'Create link'")
    # visiting the page created no link
    assert feed_state.json() == {"user": "bob", "exists": False}
    assert hub.api(hub.user_token("bob")).get("api/users/bob/feed-token").json()["exists"] is False
    assert page.locator("#gb-feed-url").input_value() == ""
    create.click()
    page.wait_for_function("() => document.querySelector('#gb-feed-url').value.includes('/feeds/')")
    first_link = page.locator("#gb-feed-url").input_value()
    assert first_link.startswith(f"{hub.service_url}feeds/")
    page.reload()
    page.wait_for_function("() => document.querySelector('#gb-feed-create').textContent === 'Reset link'")
    assert page.locator("#gb-feed-url").input_value() == ""
    create.click()
    page.wait_for_function("() => document.querySelector('#gb-feed-url').value.includes('/feeds/')")
    new_link = page.locator("#gb-feed-url").input_value()
    assert new_link != first_link
    with hub.api() as anonymous:
        assert anonymous.get(new_link).status_code == 200
        assert anonymous.get(first_link).status_code == 404


def test_admin_sees_all_bookings_and_blocks_a_node_for_maintenance(hub, context):
    start, end = windows.next()
    bobs = book_through_api(hub, "bob", "a100", 2, start, end)
    node = bobs["placement"]["node"]
    page = open_page(context, hub, "carol")  # a booking admin through the gpu-admins group
    all_row = page.locator(f'#gb-all-bookings tr[data-booking-id="{bobs["id"]}"]')
    all_row.wait_for()
    assert all_row.locator("td").first.inner_text() == "bob"

    page.select_option("#gb-mw-pool", "a100")
    page.select_option("#gb-mw-node", node)
    page.fill("#gb-mw-start", local_input(start - timedelta(hours=1)))
    page.fill("#gb-mw-end", local_input(end))
    page.fill("#gb-mw-reason", "driver update")
    page.click("#gb-mw-create")
    collision = page.locator(f'#gb-collisions tr[data-booking-id="{bobs["id"]}"]')
    collision.wait_for()
    assert "overlap" in page.locator("#gb-admin-feedback").inner_text()
    windows_now = hub.api(hub.user_token("carol")).get("api/maintenance").json()["windows"]
    [created] = [w for w in windows_now if w["reason"] == "driver update"]
    assert (created["pool"], created["node"], created["end"]) == ("a100", node, utc(end))
    assert page.locator(f'#gb-maintenance-list tr[data-window-id="{created["id"]}"]').count() == 1
    screenshot(page, "admin-maintenance")

    collision.get_by_role("button", name=re.compile("^Force cancel")).click()
    page.wait_for_function(
        "() => document.querySelector('#gb-admin-feedback').textContent.includes('is cancelled')"
    )
    assert api_bookings(hub, "bob")[bobs["id"]]["state"] == "cancelled"

    page.get_by_role("button", name=f"Delete maintenance window {created['id']}").click()
    page.wait_for_function(
        "() => document.querySelector('#gb-admin-feedback').textContent.includes('is deleted')"
    )
    remaining = hub.api(hub.user_token("carol")).get("api/maintenance").json()["windows"]
    assert created["id"] not in [w["id"] for w in remaining]


def test_page_follows_the_hubs_dark_theme(hub, browser):
    # the Hub's own darkmode.js (loaded from the Hub prefix) applies the browser's preference
    dark = browser.new_context(
        timezone_id=BROWSER_ZONE,
        locale="en-GB",
        color_scheme="dark",
        viewport={"width": 1280, "height": 900},
    )
    try:
        page = open_page(dark, hub, "ada")
        assert page.evaluate("document.documentElement.dataset.bsTheme") == "dark"
        screenshot(page, "reservation-page-dark")
    finally:
        dark.close()


def test_ending_booking_shows_a_notice_and_admins_see_holders_and_the_report(hub, context, browser):
    now = datetime.now(timezone.utc)
    slot_start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    left = (slot_start + timedelta(minutes=15) - now).total_seconds()
    if left < 120:  # the booking must not end while the page loads: use the next slot
        time.sleep(left + 1)
        slot_start += timedelta(minutes=15)
    booking = book_through_api(
        hub, "ada", "a100", 1, slot_start, slot_start + timedelta(minutes=15)
    )
    page = open_page(context, hub, "ada")
    notice = page.locator(f'#gb-notices [data-booking-id="{booking["id"]}"]')
    notice.wait_for()
    assert notice.get_attribute("data-kind") == "ending_soon"
    # its end in the browser's zone, as the page shows times (the service writes UTC)
    assert "ends at" in notice.inner_text() and "UTC" not in notice.inner_text()

    admin_context = browser.new_context(timezone_id=BROWSER_ZONE, locale="en-GB")
    admin_page = open_page(admin_context, hub, "carol")
    holder = admin_page.locator("#gb-holders td", has_text="not running")
    holder.first.wait_for()
    admin_page.locator("#gb-report tbody tr").first.wait_for()
    users = admin_page.locator("#gb-report tbody tr td:first-child").all_inner_texts()
    assert "ada" in users and users[-1] == "total"
    admin_page.select_option("#gb-report-by", "pool")
    admin_page.wait_for_function(
        "() => document.querySelector('#gb-report-csv').href.includes('by=pool&format=csv')"
    )
    screenshot(admin_page, "admin-usage")
    admin_context.close()


def test_free_gpus_are_offered_to_a_booking_later_today_which_starts_now_in_one_click(hub, context):
    now = datetime.now(timezone.utc)
    later = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    later += timedelta(hours=3)
    booking = book_through_api(hub, "bob", "a100", 1, later, later + timedelta(hours=1))
    page = open_page(context, hub, "bob")
    notice = page.locator(f'#gb-notices [data-kind="start_early"][data-booking-id="{booking["id"]}"]')
    notice.wait_for()
    assert "GPUs are free now" in notice.inner_text()
    notice.get_by_role("button", name=f"Start booking {booking['id']} now").click()
    page.wait_for_function(
        "() => document.querySelector('#gb-mine-feedback').textContent.includes('now runs')"
    )
    started = api_bookings(hub, "bob")[booking["id"]]
    assert started["state"] == "active"
    assert started["end"] < utc(later)  # the same hour, from now on
    notice.wait_for(state="detached")  # the page reads the notices again: no offer is left
    hub.api(hub.user_token("bob")).delete(f"api/bookings/{booking['id']}").raise_for_status()


def test_a_booking_sent_again_after_its_answer_was_lost_is_made_once(hub, context):
    page = open_page(context, hub, "ada")
    start, end = windows.next()
    fill_booking_form(page, "a100", "1 GPU", start, end, note="answer lost")
    lost = LostFirstAnswer(page, r".*/api/bookings$")
    page.click("#gb-book-button")
    alert = page.locator("#gb-form-feedback.alert-danger")
    alert.wait_for()
    assert alert.inner_text() == (
        "The booking service could not be reached; check the connection and try again.")
    assert lost.statuses == [201]
    made = [b for b in api_bookings(hub, "ada").values() if b["note"] == "answer lost"]
    assert len(made) == 1

    page.click("#gb-book-button")  # the student tries again, as the page says
    page.locator("#gb-form-feedback.alert-success").wait_for()
    again = [b for b in api_bookings(hub, "ada").values() if b["note"] == "answer lost"]
    assert again == made  # the booking the first click made, not a second one


def test_a_service_the_proxy_cannot_reach_is_said_so_and_trying_again_books_once(hub, context):
    """While the service restarts (after a crash, until the Hub starts it again) the Hub's proxy
    answers the page's requests itself: a 503 error page, not the service's JSON. The page says
    the service is not answering and to try again (reloading would show that error page), and
    trying again books once."""
    page = open_page(context, hub, "ada")
    start, end = windows.next()
    fill_booking_form(page, "a100", "1 GPU", start, end, note="proxy 503")
    answered: list[int] = []

    def proxy_error_first(route):
        if route.request.method != "POST" or answered:
            route.continue_()
            return
        answered.append(503)
        route.fulfill(status=503, content_type="text/html",
                      body="<html><body><h1>503 : Service Unavailable</h1></body></html>")

    page.route(re.compile(r".*/api/bookings$"), proxy_error_first)
    page.click("#gb-book-button")
    alert = page.locator("#gb-form-feedback.alert-danger")
    alert.wait_for()
    assert alert.inner_text() == ("The booking service is not answering right now (it may be "
                                  "restarting); try again in a few seconds.")
    assert not [b for b in api_bookings(hub, "ada").values() if b["note"] == "proxy 503"]

    page.click("#gb-book-button")
    page.locator("#gb-form-feedback.alert-success").wait_for()
    assert len([b for b in api_bookings(hub, "ada").values() if b["note"] == "proxy 503"]) == 1
