"""Quick second clicks (real Hub, Chromium).

Loads of one view that overlap, answered out of order: the page shows the newest load's
answer, whatever arrives last. Each test holds the page's requests at the browser
(``page.route``) and lets the newer load's answers through first, as a slow answer to a quick
second click would arrive. Without the page's ``NewestLoad`` checks, the older answer was drawn
over the newer one: a booking listed twice, a timeline or a report of a choice no longer
selected.

A double click on an action sends one request (``oneAtATime``): before, it made two
maintenance windows, or two calendar links of which the page could show the revoked one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from page_browser import (
    PAGE_POOLS,
    HeldRequests,
    LocalWindows,
    LostFirstAnswer,
    book_through_api,
    booking_rows,
    local_input,
    open_page,
    start_page_hub,
    utc,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

windows = LocalWindows()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_page_hub(tmp_path_factory.mktemp("overlap-hub")) as running:
        yield running


def test_a_late_answer_of_an_earlier_list_is_not_mixed_into_the_table(hub, context):
    """Ticking and unticking "Show ended and cancelled" quickly loads the list twice."""
    kept = book_through_api(hub, "ada", "a100", 1, *windows.next())["id"]
    page = open_page(context, hub, "ada")
    page.wait_for_selector(f'#gb-my-bookings tr[data-booking-id="{kept}"]')
    held = HeldRequests(page, "/api/bookings?user=ada")
    page.check("#gb-mine-show-past")
    page.uncheck("#gb-mine-show-past")
    held.wait_for(2)
    past, upcoming = held.routes
    held.release([upcoming])
    page.wait_for_selector(f'#gb-my-bookings tr[data-booking-id="{kept}"]')
    held.release([past])
    page.wait_for_load_state("networkidle")
    assert booking_rows(page, "gb-my-bookings") == [kept]


def test_the_timeline_shows_the_range_chosen_last(hub, context):
    page = open_page(context, hub, "ada")
    assert page.input_value("#gb-range") == "7"
    # three days first (ticks every 6 hours): the timeline draws again only what differs from
    # what it shows, so the seven days answered below must differ from it
    page.select_option("#gb-range", "3")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#gb-timeline .gb-tick')].some((t) => t.textContent.includes(':'))"
    )
    held = HeldRequests(page, "/availability?")
    page.select_option("#gb-range", "1")
    held.wait_for(len(PAGE_POOLS))
    page.select_option("#gb-range", "7")
    held.wait_for(2 * len(PAGE_POOLS))
    one_day, seven_days = held.routes[: len(PAGE_POOLS)], held.routes[len(PAGE_POOLS) :]
    page.eval_on_selector("#gb-timeline .gb-axis", "axis => axis.dataset.drawnBefore = 'yes'")
    held.release(seven_days)
    page.wait_for_selector("#gb-timeline .gb-axis:not([data-drawn-before])")
    held.release(one_day)
    page.wait_for_load_state("networkidle")
    # seven days: a tick a day at midnight (one 24-hour view has a tick every 2 hours)
    ticks = page.locator("#gb-timeline .gb-axis .gb-tick").all_inner_texts()
    assert 6 <= len(ticks) <= 7 and not any(":" in tick for tick in ticks), ticks


def test_the_usage_report_shows_the_grouping_chosen_last(hub, context):
    page = open_page(context, hub, "admin")
    page.wait_for_selector("#gb-report th")
    held = HeldRequests(page, "/api/admin/report?by=")
    page.select_option("#gb-report-by", "pool")
    held.wait_for(1)
    page.select_option("#gb-report-by", "group")
    held.wait_for(2)
    by_pool, by_group = held.routes
    held.release([by_group])
    page.wait_for_function(
        "() => document.querySelector('#gb-report th')?.textContent === 'group'"
    )
    held.release([by_pool])
    page.wait_for_load_state("networkidle")
    assert page.locator("#gb-report th").first.inner_text() == "group"
    assert page.get_attribute("#gb-report-csv", "href").endswith("by=group&format=csv")


def test_a_double_click_on_create_link_makes_one_calendar_link(hub, context):
    page = open_page(context, hub, "carol")
    page.wait_for_function(
        "() => document.querySelector('#gb-feed-create').textContent === 'Create link'"
    )
    held = HeldRequests(page, "/feed-token", method="POST")
    held.one_request_of_a_double_click(page.locator("#gb-feed-create"))
    page.wait_for_function("() => document.querySelector('#gb-feed-url').value.includes('/feeds/')")
    with hub.api() as anonymous:
        assert anonymous.get(page.input_value("#gb-feed-url")).status_code == 200


def test_a_double_click_on_withdraw_withdraws_once_and_says_so(hub, context):
    start, end = windows.next()
    for _ in range(2):  # both a100 nodes taken
        book_through_api(hub, "bob", "a100", 2, start, end)
    body = {"pool": "a100", "gpus": 1, "start": utc(start), "end": utc(end)}
    wait = hub.api(hub.user_token("carol")).post("api/waits", json=body).json()
    assert wait["state"] == "waiting", wait
    page = open_page(context, hub, "carol")
    withdraw = page.get_by_role("button", name=f"Withdraw wait {wait['id']}")
    HeldRequests(page, f"/api/waits/{wait['id']}", method="DELETE").one_request_of_a_double_click(withdraw)
    page.locator("#gb-my-waits li").first.wait_for(state="detached")
    page.wait_for_load_state("networkidle")
    # the success stays: no second request's "can no longer be withdrawn" over it
    assert page.locator("#gb-mine-feedback").inner_text() == f"Wait {wait['id']} is withdrawn."


def test_a_double_click_on_start_now_starts_the_booking_once_and_says_so(hub, context):
    now = datetime.now(timezone.utc)
    later = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    later += timedelta(hours=3)  # later today: the free GPUs are offered to it
    booking = book_through_api(hub, "bob", "a100", 1, later, later + timedelta(hours=1))
    page = open_page(context, hub, "bob")
    start_now = page.get_by_role("button", name=f"Start booking {booking['id']} now")
    held = HeldRequests(page, f"/api/bookings/{booking['id']}/start-early", method="POST")
    held.one_request_of_a_double_click(start_now)
    page.locator('#gb-notices [data-kind="start_early"]').wait_for(state="detached")
    page.wait_for_load_state("networkidle")
    # the success stays: no second request's "cannot start early" over it
    assert page.locator("#gb-mine-feedback").inner_text().startswith(f"Booking {booking['id']} now runs")
    hub.api(hub.user_token("bob")).delete(f"api/bookings/{booking['id']}").raise_for_status()


def admin_page_with_a_window_filled_in(context, hub, reason: str):
    """The admin's page, its maintenance form filled in for the next window of a100."""
    start, end = windows.next()
    page = open_page(context, hub, "admin")
    page.select_option("#gb-mw-pool", "a100")
    page.fill("#gb-mw-start", local_input(start))
    page.fill("#gb-mw-end", local_input(end))
    page.fill("#gb-mw-reason", reason)
    return page


def test_a_double_click_on_create_makes_one_maintenance_window(hub, context):
    page = admin_page_with_a_window_filled_in(context, hub, "double click")
    held = HeldRequests(page, "/api/maintenance", method="POST")
    held.one_request_of_a_double_click(page.locator("#gb-mw-create"))
    page.wait_for_function(
        "() => document.querySelector('#gb-admin-feedback').textContent.includes('is created')"
    )
    listed = hub.api(hub.user_token("admin")).get("api/maintenance").json()["windows"]
    assert [w["reason"] for w in listed].count("double click") == 1
    # the form's button is enabled again once the page has refreshed
    page.wait_for_function("() => !document.querySelector('#gb-mw-create').disabled")


def test_a_maintenance_window_sent_again_after_its_answer_was_lost_is_added_once(hub, context):
    """The service adds the window, its answer never reaches the page, and the admin submits
    again: the same Idempotency-Key answers the window added (before: a second window)."""
    page = admin_page_with_a_window_filled_in(context, hub, "lost answer")
    lost = LostFirstAnswer(page, r".*/api/maintenance$")
    page.click("#gb-mw-create")
    page.locator("#gb-admin-feedback.alert-danger").wait_for()
    assert lost.statuses == [201]
    page.wait_for_function("() => !document.querySelector('#gb-mw-create').disabled")
    page.click("#gb-mw-create")  # tried again
    page.wait_for_function(
        "() => document.querySelector('#gb-admin-feedback').textContent.includes('is created')"
    )
    listed = [w for w in hub.api(hub.user_token("admin")).get("api/maintenance").json()["windows"]
              if w["reason"] == "lost answer"]
    assert len(listed) == 1
    assert page.locator("#gb-admin-feedback").inner_text().startswith(
        f"Maintenance window {listed[0]['id']} is created")
    assert len(lost.keys) == 2 and lost.keys[0] == lost.keys[1] and lost.keys[0]
